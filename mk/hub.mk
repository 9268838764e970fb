# Real JupyterHub for the Hub integration tests (e2e/hubint) and for the local cluster:
# two Python virtualenvs (JupyterHub 5.5 and 6.x) and configurable-http-proxy from npm.
# Everything lives under $(GPUHUB_CACHE); nothing is installed into the work tree.
#
# Other fragments depend on: venv-hub55, venv-hub6, chp, venv-idleculler and the variables VENV_HUB55, VENV_HUB6,
# CHP, IDLE_CULLER_VENVS.

PYTHON3          ?= python3
NPM              ?= npm
HUB_REQ_55       := $(CURDIR)/e2e/requirements-hub55.txt
HUB_REQ_6        := $(CURDIR)/e2e/requirements-hub6.txt
VENV_HUB55       := $(GPUHUB_CACHE)/venv/hub55
VENV_HUB6        := $(GPUHUB_CACHE)/venv/hub6
CHP_VERSION      := 5.3.0
NODE_PREFIX      := $(GPUHUB_CACHE)/node
CHP              := $(NODE_PREFIX)/node_modules/.bin/configurable-http-proxy
HUB_INT_PKGS     ?= ./e2e/hubint/... ./e2e/internal/hubproc/...
# e2e/hubint/quota also needs a control plane (etcd, kube-apiserver: KubeSpawner), helm (the chart's RBAC for
# gpu-quota) and gpu-quota built from this tree; e2e/hubint/profiles a control plane and gpu-profiles.
HUB_INT_FLAGS    ?= -race -count=1 -timeout 10m

# hub-venv builds venv $(1) from requirements file $(2) unless the venv's stamp holds the sha256 of
# that file and of the Python version. A failed install leaves no stamp, so the next run starts over.
define hub-venv
	@command -v $(PYTHON3) >/dev/null || { \
	  echo "ERROR: $(PYTHON3) not found; install it: apt-get install -y python3 python3-venv python3-pip"; exit 1; }
	@if ! $(PYTHON3) -c 'import venv, ensurepip' 2>/dev/null; then \
	  if command -v apt-get >/dev/null && [[ $$(id -u) -eq 0 ]]; then \
	    echo "==> $(PYTHON3) cannot create virtualenvs: installing Debian package python3-venv (apt-get)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv; \
	  fi; \
	  $(PYTHON3) -c 'import venv, ensurepip' 2>/dev/null || { \
	    echo "ERROR: $(PYTHON3) cannot create virtualenvs; install it: apt-get install -y python3-venv python3-pip"; exit 1; }; \
	fi
	@want=$$( { cat "$(2)"; $(PYTHON3) --version; } | sha256sum | cut -d' ' -f1); \
	if [[ -x "$(1)/bin/jupyterhub" && "$$(cat "$(1)/.requirements.sha256" 2>/dev/null)" == "$$want" ]]; then \
	  echo "==> venv $(1) is up to date ($(notdir $(2)), stamp $${want:0:12})"; \
	else \
	  echo "==> building venv $(1) with $$($(PYTHON3) --version) from $(notdir $(2)) (PyPI):"; \
	  sed -e '/^#/d' -e '/^$$/d' -e 's/^/      /' "$(2)"; \
	  rm -rf "$(1)"; mkdir -p "$(dir $(1))"; \
	  $(PYTHON3) -m venv "$(1)"; \
	  "$(1)/bin/python" -m pip install --disable-pip-version-check --quiet --upgrade pip; \
	  "$(1)/bin/python" -m pip install --disable-pip-version-check --quiet -r "$(2)"; \
	  echo "$$want" > "$(1)/.requirements.sha256"; \
	  echo "==> venv $(1) ready: jupyterhub $$("$(1)/bin/jupyterhub" --version)"; \
	fi
endef

.PHONY: venv-hub55
venv-hub55: ## Python venv: JupyterHub 5.5 + KubeSpawner + idle culler + JupyterLab (under $GPUHUB_CACHE/venv).
	$(call hub-venv,$(VENV_HUB55),$(HUB_REQ_55))

.PHONY: venv-hub6
venv-hub6: ## Python venv: newest JupyterHub 6.x + JupyterLab (under $GPUHUB_CACHE/venv).
	$(call hub-venv,$(VENV_HUB6),$(HUB_REQ_6))

# jupyterhub-idle-culler, each version in a venv of its own, for the side-by-side test of gpu-culler
# (e2e/cullere2e): 1.4.0, what z2jh 4.4 runs as its cull.* culler, and the newest on PyPI when this line was
# written (`pip index versions jupyterhub-idle-culler`; bump it here).
IDLE_CULLER_VERSIONS := 1.4.0 2.0.0
IDLE_CULLER_VENVS    := $(foreach v,$(IDLE_CULLER_VERSIONS),$(GPUHUB_CACHE)/venv/idleculler-$(v))

.PHONY: venv-idleculler
venv-idleculler: ## Python venvs with jupyterhub-idle-culler 1.4.0 (z2jh's) and the newest (under $GPUHUB_CACHE/venv).
	@for v in $(IDLE_CULLER_VERSIONS); do \
	  PYTHON3=$(PYTHON3) e2e/scripts/idleculler-venv.sh "$$v" "$(GPUHUB_CACHE)/venv/idleculler-$$v" || exit 1; \
	done

.PHONY: chp
chp: ## configurable-http-proxy from npm (pinned) under $GPUHUB_CACHE/node.
	@command -v $(NPM) >/dev/null && command -v node >/dev/null || { \
	  echo "ERROR: node/npm not found; install them: apt-get install -y nodejs npm"; exit 1; }
	@have=$$(node -p 'require(process.argv[1]).version' "$(NODE_PREFIX)/node_modules/configurable-http-proxy/package.json" 2>/dev/null || true); \
	if [[ -x "$(CHP)" && "$$have" == "$(CHP_VERSION)" ]]; then \
	  echo "==> configurable-http-proxy $(CHP_VERSION) is installed ($(CHP))"; \
	else \
	  echo "==> installing configurable-http-proxy@$(CHP_VERSION) into $(NODE_PREFIX) (npm)"; \
	  mkdir -p "$(NODE_PREFIX)"; \
	  $(NPM) install --prefix "$(NODE_PREFIX)" --no-audit --no-fund --loglevel=error --save-exact \
	    "configurable-http-proxy@$(CHP_VERSION)"; \
	  "$(CHP)" --version >/dev/null; \
	fi

.PHONY: integration
integration: venv-hub55 venv-hub6 chp etcd kube-binaries $(HELM) ## Hub integration tests (e2e/hubint, incl. gpu-quota refusals and the gpu-profiles spawn form) against real JupyterHub 5.5 and 6.x.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpu-quota ./services/gpu-quota
	$(GO) build -o $(BIN)/gpu-profiles ./services/gpu-profiles
	@for venv in $(VENV_HUB55) $(VENV_HUB6); do \
	  echo "==> Hub integration tests against jupyterhub $$("$$venv/bin/jupyterhub" --version) ($$venv)"; \
	  GPUHUB_HUB_VENV="$$venv" GPUHUB_CHP="$(CHP)" GPUHUB_KUBE_BIN="$(KUBE_BIN)" GPUHUB_HELM="$(HELM)" \
	  GPUHUB_QUOTA_BIN="$(BIN)/gpu-quota" GPUHUB_PROFILES_BIN="$(BIN)/gpu-profiles" \
	    $(GO) test $(HUB_INT_FLAGS) -tags integration $(HUB_INT_PKGS) || exit 1; \
	done

TEST_TARGETS += integration
