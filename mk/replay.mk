# B4 trace replay (services/replay, docs/benchmarks.md row B4): the Alibaba PAI GPU trace 2023 through
# gpu-quota's engine, gpu-profiles' catalog and gpu-culler's decide, against plain Kubernetes and
# jupyterhub-idle-culler, every setup on the same cluster (capacity and time-slicing), with gpuhub's parts
# switched off one at a time, in one deterministic simulation. A benchmark: not in TEST_TARGETS (the unit tests
# check its determinism and invariants on a synthetic trace and on 5 % of the real one). It writes its results,
# with date, machine, commit and flags, to docs/benchmarks/replay.md; the time target counts the whole target,
# build included (--started).

REPLAY_TRACE ?= $(CURDIR)/../shared/data/pai-gpu-2023
REPLAY_FLAGS ?=
REPLAY_OUT   ?= docs/benchmarks

.PHONY: bench-replay
bench-replay: ## B4: replay the PAI GPU trace (anchors, gpuhub and its ablation, sensitivity); docs/benchmarks/replay.md and replay-idle-held.svg.
	@test -f "$(REPLAY_TRACE)/openb_pod_list_default.csv" || { echo "ERROR: no PAI trace in $(REPLAY_TRACE); set REPLAY_TRACE=DIR"; exit 1; }
	@started=$$(date +%s%N); \
	echo "$(GO) build -o $(BIN)/bench-replay ./services/replay/cmd/bench-replay"; \
	$(GO) build -o $(BIN)/bench-replay ./services/replay/cmd/bench-replay && \
	echo "$(BIN)/bench-replay --trace $(REPLAY_TRACE) --markdown $(REPLAY_OUT)/replay.md --svg $(REPLAY_OUT)/replay-idle-held.svg --started $$started $(REPLAY_FLAGS)" && \
	$(BIN)/bench-replay --trace "$(REPLAY_TRACE)" --markdown $(REPLAY_OUT)/replay.md --svg $(REPLAY_OUT)/replay-idle-held.svg --started $$started $(REPLAY_FLAGS)
