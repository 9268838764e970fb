# Usage API (services/usage-api): the PostgreSQL ledger tests and the B1/B5 benchmark.
# The SQLite ledger (incl. the kill -9 test) runs in `make unit`; PostgreSQL needs a server, started here.

USAGE_PKGS        := ./services/usage-api/...
USAGE_BENCH_BIN   := $(GPUHUB_CACHE)/bin/usage-bench
USAGE_BENCH_FLAGS ?=
# Where the table goes, with the date, machine, commit and flags (services/internal/benchfile); empty: stdout only.
USAGE_BENCH_OUT   ?= docs/benchmarks/usage.md
PG_BIN_CANDIDATES := $(wildcard /usr/local/bin/initdb /usr/lib/postgresql/*/bin/initdb)
# B1's two-replica leg: two usage-API replicas sharing a ledger on a throw-away PostgreSQL (with-postgres.sh),
# measured in the same run as the single replica (SQLite, the chart's default); 0: the single replica only.
USAGE_BENCH_TWO_REPLICAS ?= 1

.PHONY: test-usage
test-usage: ## Usage API unit tests with -race (share model, ledger incl. kill -9, API, metrics golden).
	$(GO) test $(GO_TEST_FLAGS) $(USAGE_PKGS)

.PHONY: postgres-server
postgres-server: ## Ensure PostgreSQL server binaries exist (installs the Debian package when missing and root).
	@if command -v initdb >/dev/null || [[ -n "$(PG_BIN_CANDIDATES)" ]]; then \
	  echo "==> PostgreSQL binaries present: $$(command -v initdb || echo $(firstword $(PG_BIN_CANDIDATES)))"; \
	elif command -v apt-get >/dev/null && [[ $$(id -u) -eq 0 ]]; then \
	  echo "==> installing Debian package postgresql (apt-get) for the ledger tests"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; \
	else \
	  echo "ERROR: PostgreSQL (initdb, pg_ctl) not found; install it: apt-get install -y postgresql"; exit 1; \
	fi

.PHONY: test-usage-postgres
test-usage-postgres: postgres-server ## The whole ledger package against a throw-away PostgreSQL on 127.0.0.1, incl. restarting it under a writer. A skipped test fails it.
	@# Every test, not a -run subset: a test left out of the pattern passed on SQLite only. The store tests open
	@# PostgreSQL when GPUHUB_TEST_POSTGRES_URL is set (with-postgres.sh sets it); a skip would mean it was not.
	services/usage-api/scripts/with-postgres.sh \
	  $(GO) test $(GO_TEST_FLAGS) -v ./services/usage-api/internal/ledger/ 2>&1 | \
	  awk '{ print; fflush() } /--- SKIP/ { skip = 1 } END { if (skip) print "FAILED: a test skipped under make test-usage-postgres"; exit skip }'

TEST_TARGETS += test-usage-postgres

.PHONY: usage-apiserver-test
usage-apiserver-test: etcd kube-binaries ## Usage API against a real kube-apiserver: two replicas on one ledger, one writer at a time on a Lease with the chart's RBAC, the handover when the writer stops.
	GPUHUB_KUBE_BIN="$(KUBE_BIN)" $(GO) test $(GO_TEST_FLAGS) -tags integration -run APIServer ./services/usage-api/internal/app/

TEST_TARGETS += usage-apiserver-test

.PHONY: bench-usage
bench-usage: venv-hub55 chp $(if $(filter 1,$(USAGE_BENCH_TWO_REPLICAS)),postgres-server) ## B1/B5: usage API me vs the Hub's GET /users/{name} at 2,000 req/s, 10k users, with one replica and with two on PostgreSQL; history RSS. Prints a table and writes it to docs/benchmarks/usage.md.
	@command -v taskset >/dev/null || { echo "ERROR: taskset not found; install it: apt-get install -y util-linux"; exit 1; }
	@mkdir -p $(dir $(USAGE_BENCH_BIN))
	$(GO) build -o $(USAGE_BENCH_BIN) ./services/usage-api/cmd/usage-bench
ifeq ($(USAGE_BENCH_TWO_REPLICAS),1)
	@# with-postgres.sh exports the server's URL to the command it runs.
	services/usage-api/scripts/with-postgres.sh sh -c 'exec "$$0" "$$@" --postgres-url="$$GPUHUB_TEST_POSTGRES_URL"' \
	  $(USAGE_BENCH_BIN) run --hub-venv $(VENV_HUB55) --chp $(CHP) --out="$(USAGE_BENCH_OUT)" $(USAGE_BENCH_FLAGS)
else
	$(USAGE_BENCH_BIN) run --hub-venv $(VENV_HUB55) --chp $(CHP) --out="$(USAGE_BENCH_OUT)" $(USAGE_BENCH_FLAGS)
endif
