# gpu-quota (services/gpu-quota): the B2 benchmark. Its unit tests (incl. the 1,000-spawn race) run in `make unit`.

QUOTA_BENCH_BIN   := $(GPUHUB_CACHE)/bin/quota-bench
QUOTA_BENCH_FLAGS ?=
# Where the table goes, with the date, machine, commit and flags (services/internal/benchfile); empty: stdout only.
QUOTA_BENCH_OUT   ?= docs/benchmarks/quota.md
# The systems under test run on CPU 0 (quota-bench --sut-cpu); the load generator and the control plane on CPU 1.
QUOTA_BENCH_LOAD_CPU ?= 1

.PHONY: bench-quota
bench-quota: etcd kube-binaries controlplane ## B2: gpu-quota admission vs a naive LIST-per-decision enforcer on a real kube-apiserver, 10k users/pods. Prints a table and writes it to docs/benchmarks/quota.md.
	@command -v taskset >/dev/null || { echo "ERROR: taskset not found; install it: apt-get install -y util-linux"; exit 1; }
	@mkdir -p $(dir $(QUOTA_BENCH_BIN))
	$(GO) build -o $(QUOTA_BENCH_BIN) ./services/gpu-quota/cmd/quota-bench
	GPUHUB_KUBE_BIN="$(KUBE_BIN)" GPUHUB_CONTROLPLANE="$(CONTROLPLANE)" taskset -c $(QUOTA_BENCH_LOAD_CPU) $(QUOTA_BENCH_BIN) run --out="$(QUOTA_BENCH_OUT)" $(QUOTA_BENCH_FLAGS)

.PHONY: quota-apiserver-test
quota-apiserver-test: etcd kube-binaries ## gpu-quota against a real kube-apiserver: B2's race of 1,000 spawns spread over two replicas with the chart's RBAC admits exactly N; two deciders (the control) admit 2N.
	GPUHUB_KUBE_BIN="$(KUBE_BIN)" $(GO) test $(GO_TEST_FLAGS) -tags integration -run APIServer ./services/gpu-quota/internal/app/

TEST_TARGETS += quota-apiserver-test
