# gpu-agent (services/gpu-agent): golden files and the real-GPU benchmark (benchmarks.md B6), which needs an
# NVIDIA driver and is not part of `make test`. Its cgroup and DCGM parsers are fuzzed by `make fuzz` (mk/fuzz.mk).

GPU_AGENT_BENCH_N   ?= 60
# A command that runs a CUDA workload in the background during the bench, e.g.
#   CUDA_LOAD='python3 -c "import torch; x=torch.randn(8192,8192,device=\"cuda\"); [x@x for _ in range(10**6)]"'
CUDA_LOAD           ?=

.PHONY: gpu-agent-golden
gpu-agent-golden: ## Rewrite the gpu-agent's snapshot and /metrics golden files.
	$(GO) test -count=1 -run Golden ./services/gpu-agent/internal/agent -args -update

.PHONY: gpu-agent-bench
gpu-agent-bench: ## B6 on a GPU machine: NVML per-call cost, agent CPU and RSS at 1 s sampling (CUDA_LOAD=cmd adds a workload).
	@if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1'; then \
	  echo "ERROR: libnvidia-ml.so.1 not found: gpu-agent-bench needs a machine with an NVIDIA GPU and driver"; exit 1; fi
	@mkdir -p $(BIN) out
	$(GO) build -o $(BIN)/gpu-agent ./services/gpu-agent
	@if [[ -z "$(CUDA_LOAD)" ]]; then \
	  echo "==> NOTE: no CUDA_LOAD given: NVML sees no process of ours, so per-process calls and attribution are not exercised"; \
	  $(BIN)/gpu-agent --backend=nvml --node-name=$$(hostname) --interval=1s --bench=$(GPU_AGENT_BENCH_N) | tee out/gpu-agent-bench.txt; \
	else \
	  echo "==> starting CUDA load: $(CUDA_LOAD)"; \
	  bash -c '$(CUDA_LOAD)' & load=$$!; trap 'kill $$load 2>/dev/null' EXIT; sleep 5; \
	  $(BIN)/gpu-agent --backend=nvml --node-name=$$(hostname) --interval=1s --bench=$(GPU_AGENT_BENCH_N) | tee out/gpu-agent-bench.txt; \
	fi
	@echo "==> results in out/gpu-agent-bench.txt (record them in benchmarks.md B6)"

.PHONY: gpu-agent-apiserver-test
gpu-agent-apiserver-test: etcd kube-binaries $(HELM) ## The gpu-agent binary (simulated) against a real kube-apiserver with the chart's rendered RBAC and snapshot auth.
	GPUHUB_KUBE_BIN="$(KUBE_BIN)" GPUHUB_HELM="$(HELM)" $(GO) test -count=1 -tags apiserver -run TestAgentAgainstAPIServer ./services/gpu-agent

TEST_TARGETS += gpu-agent-apiserver-test
