# gpuhub: `make demo` runs a local GPU JupyterHub with our services; `make test` runs the whole suite.
# Both install what they need (Go modules, Debian, PyPI and npm packages) on a fresh machine.
# Area-specific targets live in mk/*.mk; each adds itself to TEST_TARGETS in the order `make test` runs them.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

GO            ?= go
# Build caches and installed tools live outside the work tree so a fresh clone reuses them.
GPUHUB_CACHE  ?= $(HOME)/.cache/gpuhub
export GPUHUB_CACHE
TOOLS_BIN     := $(GPUHUB_CACHE)/bin
BIN           := $(CURDIR)/bin
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(TOOLS_BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
GO_TEST_FLAGS ?= -race -count=1

# Programs built by `make build`; each is a thin main in services/<name>.
SERVICES := $(notdir $(patsubst %/main.go,%,$(wildcard services/*/main.go)))

TEST_TARGETS := lint unit

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z0-9_.-]+:.*## ' $(MAKEFILE_LIST) | sort | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'

.PHONY: build
build: ## Build every service binary into bin/.
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ $(addprefix ./services/,$(SERVICES))

.PHONY: vet
vet: ## go vet every package.
	$(GO) vet ./...

$(GOLANGCI_LINT):
	@echo "==> installing golangci-lint $(GOLANGCI_LINT_VERSION) (Go module proxy, first run only)"
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(GPUHUB_CACHE)/tmpbin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(GPUHUB_CACHE)/tmpbin/golangci-lint $@

.PHONY: lint
lint: vet $(GOLANGCI_LINT) ## go vet + golangci-lint (gofmt, goimports, errorlint, revive, ...).
	@# Two runs at once (a second checkout, an editor) wait for each other instead of failing.
	$(GOLANGCI_LINT) run --allow-serial-runners ./...

.PHONY: fmt
fmt: $(GOLANGCI_LINT) ## Format Go code (gofmt + goimports).
	$(GOLANGCI_LINT) fmt ./...

.PHONY: unit
unit: ## Go unit tests with -race (fakes only, no external processes).
	$(GO) test $(GO_TEST_FLAGS) ./...

.PHONY: clean
clean: ## Remove build outputs in the work tree (caches in $(GPUHUB_CACHE) stay).
	rm -rf $(BIN) out

include $(sort $(wildcard mk/*.mk))

# make test runs TEST_TARGETS in three lanes side by side (mk/lanes.sh): lane 2 holds the local-cluster suites,
# which spend most of their time waiting on the Hub, timers and the browser; lane 3 the images and the real node
# (building, then waiting on containers); lane 1 everything else, in TEST_TARGETS order. TEST_SHARED go to
# whichever lane is done with its own first, in the order listed (longest first; lane 3 with warm caches, lane 2
# on a fresh machine). test-deps first installs, once, everything that targets of two lanes need, so that no two
# lanes ever install or build the same thing at once (lanes_test.go checks it). TEST_LANES=1 runs every target in
# one lane, one after another.
TEST_LANE2 := e2e
TEST_LANE3 := images-test realnode-test
TEST_SHARED := e2e-hub6 bench-culler-smoke
TEST_LANES ?= 3
TEST_LOGS  ?= $(CURDIR)/out/test-logs

.PHONY: test-deps
test-deps: controlplane cluster-deps chromium browser-deps venv-idleculler promtool postgres-server $(HELM) venv-hub55 etcd kube-binaries ext-deps ext-ui-tests ## What targets in two of make test's lanes need, installed before the lanes start.
	@$(MAKE) --no-print-directory HUB=6 cluster-deps

.PHONY: test
test: ## The whole suite: lint, unit, Hub integration, e2e on the local cluster, extension tests (three lanes at once; TEST_LANES=1 for one).
	@[[ "$(TEST_LANES)" == 1 || "$(TEST_LANES)" == 3 ]] || { echo "ERROR: TEST_LANES=$(TEST_LANES): 1 or 3"; exit 1; }
	@# A cold run fills about 25 GiB (the Go build and module caches, the kube binaries, venvs, images, a real
	@# node's containers); a full disk fails whatever target writes next, with an error that names no cause.
	@for d in /tmp "$(GPUHUB_CACHE)"; do mkdir -p "$$d"; avail=$$(df -Pk "$$d" | awk 'NR==2 {print int($$4/1048576)}'); \
	  (( avail >= 25 )) || echo "WARNING: $$d has $$avail GiB free; a cold make test needs about 25 GiB (free some, or point GPUHUB_CACHE/TMPDIR elsewhere)"; done
	@echo "==> make test-deps"; start=$$SECONDS; $(MAKE) --no-print-directory test-deps; \
	  echo "==> make test-deps: $$((SECONDS - start))s"
	@if [[ "$(TEST_LANES)" == 1 ]]; then \
	  MAKE="$(MAKE)" mk/lanes.sh "$(TEST_LOGS)" "$(TEST_TARGETS)"; \
	else \
	  MAKE="$(MAKE)" mk/lanes.sh "$(TEST_LOGS)" --shared "$(filter $(TEST_TARGETS),$(TEST_SHARED))" \
	    "$(filter-out $(TEST_LANE2) $(TEST_LANE3) $(TEST_SHARED),$(TEST_TARGETS))" \
	    "$(filter $(TEST_LANE2),$(TEST_TARGETS))" "$(filter $(TEST_LANE3),$(TEST_TARGETS))"; \
	fi
	@echo "==> make test: all of [$(TEST_TARGETS)] passed"
