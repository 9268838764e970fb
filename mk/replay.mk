# B4 trace replay (services/internal/replay, docs/benchmarks.md row B4): the Alibaba PAI GPU trace 2023 through
# gpu-quota's engine, gpu-profiles' catalog and gpu-culler's decide, against plain Kubernetes and
# jupyterhub-idle-culler, in one deterministic simulation. A benchmark: not in TEST_TARGETS (the unit tests
# check its determinism and invariants on a synthetic trace and on 5 % of the real one).

REPLAY_TRACE ?= $(CURDIR)/../shared/data/pai-gpu-2023
REPLAY_FLAGS ?=

.PHONY: bench-replay
bench-replay: ## B4: replay the PAI GPU trace (4 setups + sensitivity); table on stdout, docs/replay-results.md, docs/replay-idle-held.svg.
	@test -f "$(REPLAY_TRACE)/openb_pod_list_default.csv" || { echo "ERROR: no PAI trace in $(REPLAY_TRACE); set REPLAY_TRACE=DIR"; exit 1; }
	$(GO) build -o $(BIN)/bench-replay ./services/internal/replay/cmd/bench-replay
	$(BIN)/bench-replay --trace "$(REPLAY_TRACE)" --markdown docs/replay-results.md --svg docs/replay-idle-held.svg $(REPLAY_FLAGS)
