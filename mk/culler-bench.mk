# gpu-culler's benchmark B3 (services/gpu-culler/cmd/culler-bench): a pass over a real JupyterHub with 10,000
# users and 2,000 running servers, against jupyterhub-idle-culler 1.4.0 (pinned in the hub55 venv) on the same Hub.
# `make bench-culler` measures, prints the table and writes it to docs/benchmarks/culler.md; `make bench-culler-smoke`
# (in `make test`) runs the harness on a small fleet, one pass each, to show it works, and asserts no timings.

CULLER_BENCH_BIN   := $(GPUHUB_CACHE)/bin/culler-bench
CULLER_BENCH_FLAGS ?=
# Where `make bench-culler` writes its table, with the date, machine, commit and flags (services/internal/benchfile);
# empty: stdout only. The smoke run writes none.
CULLER_BENCH_OUT   ?= docs/benchmarks/culler.md
# The Hub runs on CPU 0 (culler-bench --hub-cpu); the cullers, the control plane and the load side on CPU 1.
CULLER_BENCH_HUB_CPU  ?= 0
CULLER_BENCH_LOAD_CPU ?= 1
# gpu-culler is measured when its main exists in this tree; otherwise the table shows the anchor alone.
CULLER_MAIN := $(wildcard services/gpu-culler/main.go)

define culler-bench
	@command -v taskset >/dev/null || { echo "ERROR: taskset not found; install it: apt-get install -y util-linux"; exit 1; }
	@mkdir -p $(dir $(CULLER_BENCH_BIN)) $(BIN)
	$(GO) build -o $(CULLER_BENCH_BIN) ./services/gpu-culler/cmd/culler-bench
	$(if $(CULLER_MAIN),$(GO) build -o $(BIN)/gpu-culler ./services/gpu-culler)
	GPUHUB_KUBE_BIN="$(KUBE_BIN)" GPUHUB_CONTROLPLANE="$(CONTROLPLANE)" GPUHUB_HUB_VENV="$(VENV_HUB55)" GPUHUB_CULLER_BIN="$(if $(CULLER_MAIN),$(BIN)/gpu-culler)" \
	  taskset -c $(CULLER_BENCH_LOAD_CPU) $(CULLER_BENCH_BIN) --hub-cpu $(CULLER_BENCH_HUB_CPU) $(1) $(CULLER_BENCH_FLAGS)
endef

.PHONY: bench-culler
bench-culler: venv-hub55 etcd kube-binaries controlplane ## B3: gpu-culler pass vs jupyterhub-idle-culler on a real Hub (10k users, 2k servers). Prints a table and writes it to docs/benchmarks/culler.md.
	$(call culler-bench,--out="$(CULLER_BENCH_OUT)")

.PHONY: bench-culler-smoke
bench-culler-smoke: venv-hub55 etcd kube-binaries controlplane ## B3's harness on a small fleet, one pass each (no timings asserted; < 2 min).
	$(call culler-bench,-short)

TEST_TARGETS += bench-culler-smoke
