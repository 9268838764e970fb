# A real node (e2e/realnode): containerd + CNI bridge + kubelet next to the local control plane, all in a
# network namespace the test makes (e2e/scripts/in-netns.sh); pods run the images `make images` built.

.PHONY: containerd
containerd: ## containerd from Debian (the real node's container runtime, with its CRI plugin).
	$(call apt-install,containerd,containerd)

.PHONY: cni-plugins
cni-plugins: ## CNI plugins from Debian (containernetworking-plugins: bridge, host-local, portmap).
	$(call apt-install,/usr/lib/cni/bridge,containernetworking-plugins)

.PHONY: realnode-test
.PHONY: conntrack
conntrack: ## conntrack and iptables from Debian (kube-proxy's iptables mode).
	$(call apt-install,conntrack,conntrack)
	$(call apt-install,iptables,iptables)

COREDNS_VERSION := $(shell awk '$$1=="require" && $$2=="github.com/coredns/coredns" {print $$3}' e2e/corednsbuild/go.mod)
COREDNS         := $(GPUHUB_CACHE)/coredns/$(COREDNS_VERSION)/bin/coredns

.PHONY: coredns
coredns: ## Build CoreDNS (the real node's cluster DNS) into $(GPUHUB_CACHE)/coredns (Go module proxy, first run only).
	GPUHUB_CACHE="$(GPUHUB_CACHE)" e2e/corednsbuild/build.sh "$(dir $(COREDNS))"

KUBE_ROUTER_VERSION := $(shell awk '$$1=="require" && $$2=="github.com/cloudnativelabs/kube-router/v2" {print $$3}' e2e/kuberouterbuild/go.mod)
KUBE_ROUTER         := $(GPUHUB_CACHE)/kube-router/$(KUBE_ROUTER_VERSION)/bin/kube-router

.PHONY: kube-router
kube-router: ## Build kube-router (the real node's NetworkPolicy enforcer, firewall only) into $(GPUHUB_CACHE)/kube-router; ipset from Debian.
	$(call apt-install,ipset,ipset)
	GPUHUB_CACHE="$(GPUHUB_CACHE)" e2e/kuberouterbuild/build.sh "$(dir $(KUBE_ROUTER))"

Z2JH_CHART ?= $(CURDIR)/../shared/data/z2jh-4.4.0/chart/jupyterhub

realnode-test: kube-binaries coredns kube-router etcd images containerd cni-plugins conntrack $(HELM) chromium browser-deps ext-deps ext-ui-tests ## A real node (containerd, kubelet, kube-proxy, CoreDNS, kube-router, emulated GPUs) in a network namespace: the built images as pods, Services, DNS, GPUs, NetworkPolicies; z2jh 4.4.0 and gpuhub installed by helm as the README says; the users' and the admin's story in Chromium; helm upgrade and uninstall.
	@mkdir -p $(BIN)
	$(GO) test -c -race -tags realnode -o $(BIN)/realnode.test ./e2e/realnode/
	$(GO) build -o $(BIN)/gpuhub ./services/gpuhub
	cd e2e/realnode && GPUHUB_KUBE_BIN="$(KUBE_BIN)" GPUHUB_COREDNS="$(COREDNS)" GPUHUB_KUBE_ROUTER="$(KUBE_ROUTER)" GPUHUB_IMAGES="$(IMAGES_DIR)" \
	  GPUHUB_HELM="$(HELM)" GPUHUB_Z2JH_CHART="$(Z2JH_CHART)" GPUHUB_CLI="$(BIN)/gpuhub" \
	  GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  ../scripts/in-netns.sh $(BIN)/realnode.test -test.v -test.count=1 -test.timeout=20m

TEST_TARGETS += realnode-test
