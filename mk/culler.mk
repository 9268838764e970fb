# gpu-culler (services/gpu-culler): the tests behind the integration tag. Its unit tests run in `make unit`, its
# benchmark in mk/culler-bench.mk. etcd and kube-binaries come from mk/cluster.mk, venv-hub55 from mk/hub.mk.

# The whole packages, not a -run subset: mk/mk_test.go checks that every integration test in them is run.
CULLER_INT_PKGS := ./services/gpu-culler/internal/snooze/ ./services/gpu-culler/internal/stops/ ./services/gpu-culler/internal/bench/

.PHONY: culler-integration-test
culler-integration-test: etcd kube-binaries venv-hub55 controlplane ## gpu-culler against a real kube-apiserver (snoozes from three replicas race on a notice; the stops ConfigMap with only its Role) and a real JupyterHub (B3's Hub fixture). A skipped test fails it.
	@# The tests fail rather than skip without their variables; the awk fails the target on any skip added later.
	GPUHUB_KUBE_BIN="$(KUBE_BIN)" GPUHUB_CONTROLPLANE="$(CONTROLPLANE)" GPUHUB_HUB_VENV="$(VENV_HUB55)" \
	  $(GO) test $(GO_TEST_FLAGS) -v -tags integration $(CULLER_INT_PKGS) 2>&1 | \
	  awk '{ print; fflush() } /--- SKIP/ { skip = 1 } END { if (skip) print "FAILED: a test skipped under make culler-integration-test"; exit skip }'

TEST_TARGETS += culler-integration-test
