# Fuzzing (issue 15): every Go fuzz target under services/ and hubapi/ (the parsers of outside input: policy
# files, Hub replies, API queries and bodies, agent snapshots, DCGM text, cgroup files, the profiles config),
# each for FUZZTIME, one at a time (go test -fuzz takes one target). The committed corpus under each package's
# testdata/fuzz/FuzzX runs as ordinary tests in `make unit` too.

FUZZTIME  ?= 6s
# Narrow the run: FUZZ_MATCH='FuzzQuery|FuzzConfig'.
FUZZ_MATCH ?= .

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 6s) each; FUZZ_MATCH=regexp picks targets.
	@start=$$(date +%s); n=0; \
	targets=$$(grep -rl --include='*_test.go' '^func Fuzz' services hubapi | sort); \
	for file in $$targets; do \
	  dir=./$$(dirname $$file); \
	  for name in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' $$file); do \
	    echo "$$name" | grep -qE '$(FUZZ_MATCH)' || continue; \
	    echo "==> fuzz $$dir $$name ($(FUZZTIME))"; \
	    for try in 1 2; do \
	      log=$$($(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$dir 2>&1) && { { echo "$$log" | grep -vE '^fuzz: elapsed' || true; }; break; }; \
	      echo "$$log" | grep -vE '^fuzz: elapsed' || true; \
	      if [ $$try = 1 ] && echo "$$log" | grep -q 'context deadline exceeded' && ! echo "$$log" | grep -qE 'Failing input written|panic:'; then \
	        echo "==> $$name: a bare 'context deadline exceeded' at the -fuzztime boundary, no input written: Go's fuzz coordinator race (go.dev/issue/75804, fixed in Go 1.27); once more"; \
	        continue; \
	      fi; \
	      if echo "$$log" | grep -q 'Failing input written'; then \
	        echo "FAILED: $$name in $$dir; the failing input is in $$dir/testdata/fuzz/$$name/: fix the code, keep the input"; \
	      else \
	        echo "FAILED: $$name in $$dir did not run to a finding (no failing input written): the error is above (a build failure, a full disk, a crash of go test)"; \
	      fi; exit 1; \
	    done; \
	    n=$$((n+1)); \
	  done; \
	done; \
	echo "==> fuzz: $$n targets passed in $$(( $$(date +%s) - start ))s"

TEST_TARGETS += fuzz
