# GPU bin packing (chart/gpuhub/files/z2jh-values.yaml, scheduling.userScheduler): the real kube-scheduler accepts the
# configuration z2jh renders with it, and schedules GPU pods side by side with stock and z2jh-default scoring.
# Its own target, not part of `make integration` (which runs once per Hub venv). etcd and kube-binaries come from
# mk/cluster.mk.

BINPACK_FLAGS ?= -race -count=1 -timeout 5m

.PHONY: binpack-test
binpack-test: etcd kube-binaries ## GPU bin packing: the user-scheduler fragment on the real kube-scheduler, side by side with the default scoring.
	GPUHUB_KUBE_BIN="$(KUBE_BIN)" $(GO) test $(BINPACK_FLAGS) -tags integration -v -run 'TestSchedulerAcceptsFragment|TestSideBySide' ./e2e/binpack/

TEST_TARGETS += binpack-test
