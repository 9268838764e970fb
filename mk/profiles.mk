# gpu-profiles (services/gpu-profiles): the B7 benchmark.

PROFILES_BENCH_BIN   := $(GPUHUB_CACHE)/bin/profiles-bench
PROFILES_BENCH_SVC   := $(GPUHUB_CACHE)/bin/bench-gpu-profiles
PROFILES_BENCH_QUOTA := $(GPUHUB_CACHE)/bin/bench-gpu-quota
PROFILES_BENCH_FLAGS ?=
# Where the table goes, with the date, machine, commit and flags (services/internal/benchfile); empty: stdout only.
PROFILES_BENCH_OUT   ?= docs/benchmarks/profiles.md
# The systems under test run on CPU 0 (profiles-bench --sut-cpu); the load generator and the control plane on CPU 1.
PROFILES_BENCH_LOAD_CPU ?= 1

.PHONY: bench-profiles
bench-profiles: etcd kube-binaries controlplane ## B7: the spawn form (POST api/v1/profiles) at 64 at once, 1,000 nodes, 10k pods, vs LIST per render, on a real kube-apiserver; judged as the chart ships it (with gpu-quota when quota is enabled). Prints a table and writes it to docs/benchmarks/profiles.md.
	@command -v taskset >/dev/null || { echo "ERROR: taskset not found; install it: apt-get install -y util-linux"; exit 1; }
	@mkdir -p $(dir $(PROFILES_BENCH_BIN))
	$(GO) build -o $(PROFILES_BENCH_BIN) ./services/gpu-profiles/cmd/profiles-bench
	$(GO) build -o $(PROFILES_BENCH_SVC) ./services/gpu-profiles
	$(GO) build -o $(PROFILES_BENCH_QUOTA) ./services/gpu-quota
	GPUHUB_KUBE_BIN="$(KUBE_BIN)" GPUHUB_CONTROLPLANE="$(CONTROLPLANE)" taskset -c $(PROFILES_BENCH_LOAD_CPU) $(PROFILES_BENCH_BIN) run \
	  --profiles-bin $(PROFILES_BENCH_SVC) --quota-bin $(PROFILES_BENCH_QUOTA) --out="$(PROFILES_BENCH_OUT)" $(PROFILES_BENCH_FLAGS)

.PHONY: profiles-apiserver-test
profiles-apiserver-test: etcd kube-binaries ## gpu-profiles against a real kube-apiserver: the form follows the informers; the pending explainer's Events as KubeSpawner lists them, with only its RBAC.
	GPUHUB_KUBE_BIN="$(KUBE_BIN)" $(GO) test $(GO_TEST_FLAGS) -tags integration ./services/gpu-profiles/internal/app/ ./services/gpu-profiles/internal/pending/

TEST_TARGETS += profiles-apiserver-test
