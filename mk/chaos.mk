# Chaos on the local cluster (e2e/chaose2e, issues 15 and 36): two replicas of each service, a seeded workload of
# several users while faults are injected at seeded points (kill -9 of each service's active replica or a seeded
# one, the Hub and the kube-apiserver, a PostgreSQL restart, a node NotReady),
# then the invariants table. `make chaos` is the long run (every kind once: 13); `make e2e` runs the bounded form
# (200 s, 9 faults: the active replicas' kills with the other kinds, the first seed of CHAOS_BOUNDED_SEEDS) as its own `go test` line in mk/cluster.mk; `make chaos-bounded-seeds`
# runs the bounded form once per seed of that fixed set.
# Replay a run: make chaos CHAOS_SEED=<the seed it printed> (with the same CHAOS_SECONDS and CHAOS_FAULTS).

CHAOS_SECONDS ?= 300
CHAOS_FAULTS  ?= 13
CHAOS_SEED    ?=
# The bounded form's fixed seeds: make e2e runs the first; each must pass (make chaos-bounded-seeds).
CHAOS_BOUNDED_SEEDS := 20261123 20261129 20261130

.PHONY: chaos
chaos: cluster-deps postgres-server helm ## Chaos run on the local cluster (5 min, every fault kind once, two replicas of each service, usage API on PostgreSQL); CHAOS_SEED=n replays a run, CHAOS_SECONDS, CHAOS_FAULTS.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./services/gpu-agent ./services/usage-api ./services/gpu-quota ./services/gpu-profiles ./services/gpu-culler
	@seed="$(CHAOS_SEED)"; [[ -n "$$seed" ]] || seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); \
	echo "==> chaos seed $$seed (replay: make chaos CHAOS_SEED=$$seed CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_FAULTS=$(CHAOS_FAULTS))"; \
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" \
	GPUHUB_CHAOS_SEED=$$seed GPUHUB_CHAOS_SECONDS=$(CHAOS_SECONDS) GPUHUB_CHAOS_FAULTS=$(CHAOS_FAULTS) \
	  services/usage-api/scripts/with-postgres.sh \
	  $(GO) test -race -count=1 -timeout 25m -v -tags e2e -run TestChaos ./e2e/chaose2e/...

.PHONY: chaos-bounded-seeds
chaos-bounded-seeds: cluster-deps postgres-server helm ## The bounded chaos run (200 s, 9 faults: each service's active replica killed) for each seed of CHAOS_BOUNDED_SEEDS.
	@for seed in $(CHAOS_BOUNDED_SEEDS); do \
	  $(MAKE) --no-print-directory chaos CHAOS_SEED=$$seed CHAOS_SECONDS=200 CHAOS_FAULTS=9 || { echo "FAILED: bounded chaos run, seed $$seed"; exit 1; }; \
	done
