# Local GPU cluster (e2e/): real kube-apiserver/scheduler/controller-manager built from
# k8s.io/kubernetes (e2e/kubebuild), Debian's etcd, emulated GPU nodes, JupyterHub + KubeSpawner.
# `make demo` runs it for a person; `make e2e` runs the end-to-end tests on it.
# Binaries and tools are cached under $(GPUHUB_CACHE); every install says what it installs.

KUBE_VERSION     := $(shell awk '$$1=="require" && $$2=="k8s.io/kubernetes" {print $$3}' e2e/kubebuild/go.mod)
KUBE_BIN         := $(GPUHUB_CACHE)/kube/$(KUBE_VERSION)/bin
BROWSER_MODULES  := $(GPUHUB_CACHE)/browser
CHROMIUM         ?= /usr/bin/chromium
E2E_FLAGS        ?= -race -count=1 -timeout 15m
DEMO_FLAGS       ?=
# gpu-quota's policy in `make demo` (make demo QUOTA_POLICY=path); gpu-quota re-reads it when it changes.
QUOTA_POLICY     ?= e2e/hub/quota-demo.yaml
# gpu-profiles' overrides in `make demo` (make demo PROFILES_CONFIG=path); gpu-profiles re-reads them when they change.
PROFILES_CONFIG  ?= e2e/hub/profiles-demo.yaml
# gpu-culler's policy in `make demo` (make demo CULLER_POLICY=path): idle 5 min, a 2 min countdown.
CULLER_POLICY    ?= e2e/hub/culler-demo.yaml
APT_GET          := DEBIAN_FRONTEND=noninteractive apt-get
# z2jh 4.4.0's chart (the shared data beside the checkout): the local Hub runs its jupyterhub_config.py and z2jh.py,
# fed by what helm template renders from it (e2e/hub).
Z2JH_CHART       ?= $(CURDIR)/../shared/data/z2jh-4.4.0/chart/jupyterhub

# apt-install installs Debian package $(2) unless $(1) exists (CI runs as root on a fresh machine).
define apt-install
	@if [[ -x "$(1)" ]] || command -v "$(1)" >/dev/null 2>&1; then \
	  echo "==> $(2) is installed ($$(command -v $(1) || echo $(1)))"; \
	else \
	  command -v apt-get >/dev/null || { echo "ERROR: $(1) missing and no apt-get; install Debian package $(2)"; exit 1; }; \
	  [[ $$(id -u) -eq 0 ]] || { echo "ERROR: $(1) missing; run: sudo apt-get install -y $(2)"; exit 1; }; \
	  echo "==> installing Debian package $(2) (apt-get)"; \
	  $(APT_GET) update -q && $(APT_GET) install -y -q $(2); \
	fi
endef

# The benchmarks start the local control plane through this command (services/internal/benchkit): nothing that
# ships imports the e2e harness.
CONTROLPLANE := $(GPUHUB_CACHE)/bin/controlplane

.PHONY: controlplane
controlplane: ## Build e2e/cmd/controlplane, the benchmarks' local control plane as a process.
	@mkdir -p $(dir $(CONTROLPLANE))
	$(GO) build -o $(CONTROLPLANE) ./e2e/cmd/controlplane

.PHONY: etcd
etcd: ## etcd from Debian (etcd-server) for the local control plane.
	$(call apt-install,etcd,etcd-server)

.PHONY: chromium
chromium: ## Chromium from Debian for the browser test.
	$(call apt-install,$(CHROMIUM),chromium)

.PHONY: kube-binaries
kube-binaries: ## Build kube-apiserver, kube-scheduler, kube-controller-manager (cached in $(GPUHUB_CACHE)/kube).
	@command -v $(GO) >/dev/null || { echo "ERROR: go not found"; exit 1; }
	@echo "==> kube binaries $(KUBE_VERSION) in $(KUBE_BIN)"
	GPUHUB_CACHE="$(GPUHUB_CACHE)" e2e/kubebuild/build.sh "$(KUBE_BIN)"

.PHONY: browser-deps
browser-deps: ## playwright-core and axe-core (pinned in e2e/browser/package-lock.json) under $(GPUHUB_CACHE)/browser.
	@command -v $(NPM) >/dev/null || { echo "ERROR: npm not found; install it: apt-get install -y nodejs npm"; exit 1; }
	@want=$$(sha256sum e2e/browser/package-lock.json | cut -d' ' -f1); \
	if [[ -d "$(BROWSER_MODULES)/node_modules/playwright-core" && "$$(cat "$(BROWSER_MODULES)/.lock.sha256" 2>/dev/null)" == "$$want" ]]; then \
	  echo "==> playwright-core is installed ($(BROWSER_MODULES))"; \
	else \
	  echo "==> installing playwright-core from e2e/browser/package-lock.json into $(BROWSER_MODULES) (npm ci; no browser download)"; \
	  mkdir -p "$(BROWSER_MODULES)"; cp e2e/browser/package.json e2e/browser/package-lock.json "$(BROWSER_MODULES)/"; \
	  (cd "$(BROWSER_MODULES)" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(NPM) ci --no-audit --no-fund --loglevel=error); \
	  echo "$$want" > "$(BROWSER_MODULES)/.lock.sha256"; \
	fi

.PHONY: z2jh-chart
z2jh-chart:
	@[[ -f "$(Z2JH_CHART)/files/hub/jupyterhub_config.py" ]] || { \
	  echo "ERROR: z2jh 4.4.0's chart is not at $(Z2JH_CHART) (the local Hub runs its jupyterhub_config.py); set Z2JH_CHART=path"; exit 1; }

# The local cluster's Hub: JupyterHub 5.5 (what z2jh 4.4 ships) by default; HUB=6 runs it on 6.x (make demo HUB=6).
HUB ?= 5.5
ifeq ($(HUB),5.5)
HUB_VENV_TARGET := venv-hub55
else ifeq ($(HUB),6)
HUB_VENV_TARGET := venv-hub6
else
$(error HUB=$(HUB): the local cluster's Hub is 5.5 (z2jh 4.4's, the default) or 6 (JupyterHub 6.x))
endif
HUB_VENV = $(if $(filter 6,$(HUB)),$(VENV_HUB6),$(VENV_HUB55))

# Everything the cluster needs at run time.
.PHONY: cluster-deps
cluster-deps: etcd kube-binaries $(HUB_VENV_TARGET) chp z2jh-chart

.PHONY: demo
demo: cluster-deps build $(HELM) ## Run the local GPU JupyterHub with gpuhub (agents, usage API, gpu-quota, gpu-profiles, gpu-culler, panel, Prometheus) until Ctrl-C; QUOTA_POLICY=path PROFILES_CONFIG=path CULLER_POLICY=path.
	@# Prometheus is optional: without Debian's prometheus package the demo says so and runs without it.
	@$(MAKE) promtool || echo "==> Debian's prometheus package could not be installed: the demo runs without Prometheus"
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/localcluster ./e2e/cmd/localcluster
	$(LOCALCLUSTER_ENV) $(BIN)/localcluster $(DEMO_FLAGS)

# What localcluster needs: the cluster, gpuhub's binaries, helm to render chart/gpuhub and z2jh's chart (the Hub).
LOCALCLUSTER_ENV = GPUHUB_KUBE_BIN="$(KUBE_BIN)" GPUHUB_HUB_VENV="$(HUB_VENV)" GPUHUB_CHP="$(CHP)" \
	GPUHUB_GPU_AGENT="$(BIN)/gpu-agent" GPUHUB_USAGE_API="$(BIN)/usage-api" GPUHUB_HELM="$(HELM)" GPUHUB_CHART=chart/gpuhub \
	GPUHUB_Z2JH_CHART="$(Z2JH_CHART)" \
	GPUHUB_GPU_QUOTA="$(BIN)/gpu-quota" GPUHUB_QUOTA_POLICY="$(QUOTA_POLICY)" \
	GPUHUB_GPU_PROFILES="$(BIN)/gpu-profiles" GPUHUB_PROFILES_CONFIG="$(PROFILES_CONFIG)" \
	GPUHUB_GPU_CULLER="$(BIN)/gpu-culler" GPUHUB_CULLER_POLICY="$(CULLER_POLICY)"

.PHONY: e2e
e2e: cluster-deps chromium browser-deps venv-idleculler promtool postgres-server $(HELM) ## End-to-end tests on the local cluster (spawns per GPU profile, scheduling, chart agents + usage API, browser, gpu-culler beside jupyterhub-idle-culler, the waitlist).
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./services/gpu-agent ./services/usage-api ./services/gpu-quota ./services/gpu-profiles ./services/gpu-culler
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" \
	GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  $(GO) test $(E2E_FLAGS) -tags e2e ./e2e/gpuhubstack/... ./e2e/cluster/... ./e2e/e2etest/...
	@# gpu-quota changes what every spawn does: its tests get a cluster of their own, after the others.
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" \
	GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  $(GO) test $(E2E_FLAGS) -tags e2e ./e2e/quotae2e/...
	@# gpu-profiles generates the spawn form: its own cluster too (the form, its fallback, Pending pods, a second topology).
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" \
	GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  $(GO) test $(E2E_FLAGS) -tags e2e ./e2e/profilese2e/...
	@# gpu-culler stops servers: its own cluster, with jupyterhub-idle-culler (each version) beside it on the same Hub.
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" GPUHUB_IDLE_CULLER_VENVS="$(IDLE_CULLER_VENVS)" \
	GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  $(GO) test $(E2E_FLAGS) -tags e2e ./e2e/cullere2e/...
	@# The waitlist (gpu-quota + gpu-culler + the glue's spawn form + the panel): issue 13's story on its own cluster.
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" \
	GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  $(GO) test $(E2E_FLAGS) -tags e2e ./e2e/waitliste2e/...
	@# Chaos, bounded: one seeded run of 200 s, two replicas of each service, 9 faults with each service's Lease holder killed
	@# (mk/chaos.mk), the ledger on PostgreSQL.
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" GPUHUB_CHAOS_SEED=$(firstword $(CHAOS_BOUNDED_SEEDS)) \
	  services/usage-api/scripts/with-postgres.sh $(GO) test $(E2E_FLAGS) -tags e2e ./e2e/chaose2e/...

TEST_TARGETS += e2e

# The Chromium suites that show a user a message, again on JupyterHub 6.x (e2e ran them on 5.5): the quota refusal
# on the spawn page, the generated form with a disabled choice, the waitlist pages, gpu-culler's reason on the Hub
# home page. Each on its own cluster, as in e2e, with only those tests.
.PHONY: e2e-hub6
e2e-hub6: ## The user-visible messages in Chromium on JupyterHub 6.x (quota refusal, disabled choice, waitlist, culler's reason on the home page).
	@$(MAKE) --no-print-directory HUB=6 e2e-hub-messages

.PHONY: e2e-hub-messages
e2e-hub-messages: cluster-deps chromium browser-deps venv-idleculler $(HELM)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./services/gpu-agent ./services/usage-api ./services/gpu-quota ./services/gpu-profiles ./services/gpu-culler
	@echo "==> the user-visible messages in Chromium, JupyterHub $$("$(HUB_VENV)/bin/jupyterhub" --version) ($(HUB_VENV))"
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" \
	GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  $(GO) test $(E2E_FLAGS) -tags e2e -run '^(TestSecondGPUServerRefused|TestNoH100Free)$$' ./e2e/quotae2e/...
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" \
	GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  $(GO) test $(E2E_FLAGS) -tags e2e -run '^TestNoH100FreeOnTheForm$$' ./e2e/profilese2e/...
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" \
	GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  $(GO) test $(E2E_FLAGS) -tags e2e -run '^TestWaitlistStory$$' ./e2e/waitliste2e/...
	$(LOCALCLUSTER_ENV) GPUHUB_CHART="$(CURDIR)/chart/gpuhub" GPUHUB_IDLE_CULLER_VENVS="$(IDLE_CULLER_VENVS)" \
	GPUHUB_BROWSER_MODULES="$(BROWSER_MODULES)/node_modules" GPUHUB_CHROMIUM="$(CHROMIUM)" \
	  $(GO) test $(E2E_FLAGS) -tags e2e -run '^TestSideBySide$$/^idle_GPU,_tab_open' ./e2e/cullere2e/...

TEST_TARGETS += e2e-hub6

.PHONY: e2e-ui
e2e-ui: cluster-deps build $(HELM) ext-deps chromium ## GPU panel on a local cluster started for the test (alice busy on a100-3g, bob's share, screenshots), stopped after.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/localcluster ./e2e/cmd/localcluster
	$(LOCALCLUSTER_ENV) LOCALCLUSTER="$(BIN)/localcluster" e2e/scripts/with-localcluster.sh \
	  $(MAKE) --no-print-directory ui-test-cluster

TEST_TARGETS += e2e-ui
