# JupyterLab 4 GPU panel (notebooks-ext/): npm for the TypeScript build and unit tests, the JupyterLab
# of $(VENV_HUB55) for the federated bundle, a Python wheel for the single-user environment, and UI tests
# in Debian's chromium driven by playwright-core (never a downloaded browser).
#
# Other fragments use: ext-install (puts the wheel into $(HUB_VENV), the local cluster's single-user env)
# and EXT_WHEEL_GLOB. The `chromium` target (Debian apt) is defined in mk/cluster.mk and shared.

EXT_DIR          := $(CURDIR)/notebooks-ext
EXT_NPM_STAMP    := $(EXT_DIR)/node_modules/.package-lock.json
EXT_WHEEL_DIR    := $(EXT_DIR)/dist
EXT_WHEEL_GLOB   := $(EXT_WHEEL_DIR)/gpuhub_jupyterlab_gpu_panel-*.whl
EXT_ARTIFACTS    ?= $(EXT_DIR)/ui-tests/artifacts
CHROMIUM         ?= /usr/bin/chromium
# The panel's build inputs, as a key: every file of notebooks-ext that git tracks or would track (so not
# node_modules or the build outputs .gitignore names; not the UI tests or docs), node's version and the JupyterLab
# that builds it (its venv's stamp). A build, wheel or install whose stamp holds this key is skipped: a warm make
# test builds the panel once, not once per target that needs it, and make test's lanes never rebuild it under each
# other. Without git the key changes on every run (always rebuilt).
EXT_INPUTS_KEY    = $$(cd "$(EXT_DIR)" && { git ls-files -co --exclude-standard -- . ':!:ui-tests' ':!:docs' 2>/dev/null | LC_ALL=C sort | xargs -r -d '\n' sha256sum || date +%s%N; node --version; cat "$(VENV_HUB55)/.requirements.sha256"; } | sha256sum | cut -c1-16)
EXT_BUILD_STAMP  := $(EXT_DIR)/lib/.build-inputs
EXT_WHEEL_STAMP  := $(EXT_WHEEL_DIR)/.build-inputs
# Run every npm script with the venv's `jupyter` first on PATH (jupyter labextension build).
# Recursive (=): VENV_HUB55 comes from mk/hub.mk, which is read after this file.
EXT_ENV           = PATH="$(VENV_HUB55)/bin:$$PATH"

# Not `npm ci`: npm 11 writes lock files without the other platforms' optional bindings of unrs-resolver (used by
# jest), and `npm ci` then refuses the lock as out of sync on a fresh clone. `npm install --no-save` installs
# exactly the locked versions (checked: all 859 packages) and never rewrites the lock.
.PHONY: ext-deps
ext-deps: ## Install notebooks-ext's npm packages at the locked versions (only when package-lock.json changed).
	@command -v node >/dev/null && command -v npm >/dev/null || { \
	  echo "ERROR: node/npm not found; install them: apt-get install -y nodejs npm (Node >= 20)"; exit 1; }
	@if [[ -f "$(EXT_NPM_STAMP)" && "$(EXT_NPM_STAMP)" -nt "$(EXT_DIR)/package-lock.json" ]]; then \
	  echo "==> notebooks-ext npm packages are up to date (node $$(node --version))"; \
	else \
	  echo "==> npm install (locked versions) in notebooks-ext (JupyterLab 4 packages, TypeScript, jest, eslint, prettier, playwright-core; npm registry)"; \
	  cd "$(EXT_DIR)" && npm install --no-save --no-audit --no-fund --loglevel=error; \
	fi

.PHONY: ext-build
ext-build: venv-hub55 ext-deps ## Build the GPU panel: TypeScript + prebuilt JupyterLab extension (notebooks-ext/gpuhub_panel/labextension).
	@key=$(EXT_INPUTS_KEY); \
	if [[ -d "$(EXT_DIR)/gpuhub_panel/labextension" && "$$(cat "$(EXT_BUILD_STAMP)" 2>/dev/null)" == "$$key" ]]; then \
	  echo "==> the GPU panel is built (inputs $$key unchanged)"; \
	else \
	  echo "==> building the GPU panel with $$("$(VENV_HUB55)/bin/jupyter" lab --version 2>/dev/null | sed 's/^/jupyterlab /') (inputs $$key)"; \
	  cd "$(EXT_DIR)" && rm -rf lib tsconfig.tsbuildinfo gpuhub_panel/labextension && $(EXT_ENV) npm run --silent build && \
	  echo "$$key" > "$(EXT_BUILD_STAMP)"; \
	fi

.PHONY: ext-test
ext-test: ext-deps ## GPU panel: eslint + prettier + type checks, then the jest unit tests; eslint on the e2e browser scripts.
	cd "$(EXT_DIR)" && npm run --silent lint
	cd "$(EXT_DIR)" && npx jest --ci
	cd e2e/browser && "$(EXT_DIR)/node_modules/.bin/eslint" .

.PHONY: ext-wheel
ext-wheel: ext-build ## Python wheel of the GPU panel (notebooks-ext/dist), installable into a single-user env.
	@key=$$(cat "$(EXT_BUILD_STAMP)"); \
	if compgen -G '$(EXT_WHEEL_GLOB)' >/dev/null && [[ "$$(cat "$(EXT_WHEEL_STAMP)" 2>/dev/null)" == "$$key" ]]; then \
	  echo "==> the panel's wheel is built (inputs $$key unchanged)"; \
	else \
	  echo "==> building the wheel (pip fetches hatchling + hatch-jupyter-builder from PyPI into an isolated build env)"; \
	  rm -rf "$(EXT_WHEEL_DIR)" && mkdir -p "$(EXT_WHEEL_DIR)" && \
	  (cd "$(EXT_DIR)" && "$(VENV_HUB55)/bin/python" -m pip wheel --disable-pip-version-check --quiet --no-deps \
	    --wheel-dir "$(EXT_WHEEL_DIR)" .) && \
	  echo "$$key" > "$(EXT_WHEEL_STAMP)"; \
	fi
	@ls -1 $(EXT_WHEEL_GLOB)

.PHONY: ext-install
ext-install: ext-wheel $(HUB_VENV_TARGET) ## Install the GPU panel wheel into the local cluster's single-user env (the Hub venv: HUB=5.5 or 6).
	@# The stamp in the venv: this wheel's inputs and the overrides file; a rebuilt venv has none. The overrides turn
	@# off JupyterLab's "receive official Jupyter news?" toast, which would cover the panel (as images/singleuser.Dockerfile).
	@key="$$(cat "$(EXT_WHEEL_STAMP)") $$(sha256sum < images/jupyterlab-overrides.json | cut -c1-16)"; \
	stamp="$(HUB_VENV)/.gpuhub-panel-inputs"; \
	if [[ "$$(cat "$$stamp" 2>/dev/null)" == "$$key" ]]; then \
	  echo "==> the panel is installed in $(HUB_VENV) (inputs $$key unchanged)"; \
	else \
	  echo "==> installing $$(basename $(EXT_WHEEL_GLOB)) into $(HUB_VENV)"; \
	  rm -f "$$stamp"; \
	  "$(HUB_VENV)/bin/python" -m pip install --disable-pip-version-check --quiet --no-deps --force-reinstall $(EXT_WHEEL_GLOB); \
	  "$(HUB_VENV)/bin/jupyter" labextension list 2>&1 | grep -E '@gpuhub/jupyterlab-gpu-panel .*enabled' || { \
	    echo "ERROR: @gpuhub/jupyterlab-gpu-panel is not listed as enabled by jupyter labextension list"; exit 1; }; \
	  install -D -m 0644 images/jupyterlab-overrides.json "$(HUB_VENV)/share/jupyter/lab/settings/overrides.json"; \
	  echo "$$key" > "$$stamp"; \
	fi

# The UI tests' compiled JavaScript (ui-tests/lib), once per change of their inputs (their sources and tsconfig, the
# locked TypeScript, node): ui-test, e2e-ui and realnode-test run it, in different lanes of make test.
EXT_UI_STAMP := $(EXT_DIR)/ui-tests/lib/.build-inputs

.PHONY: ext-ui-tests
ext-ui-tests: ext-deps ## Compile the UI tests (notebooks-ext/ui-tests/lib), only when their inputs changed.
	@key=$$(cd "$(EXT_DIR)" && { git ls-files -co --exclude-standard -- ui-tests package-lock.json 2>/dev/null | LC_ALL=C sort | xargs -r -d '\n' sha256sum || date +%s%N; node --version; } | sha256sum | cut -c1-16); \
	if [[ "$$(cat "$(EXT_UI_STAMP)" 2>/dev/null)" == "$$key" ]]; then \
	  echo "==> the UI tests are compiled (inputs $$key unchanged)"; \
	else \
	  echo "==> compiling the UI tests (inputs $$key)"; \
	  rm -f "$(EXT_UI_STAMP)"; \
	  (cd "$(EXT_DIR)" && npm run --silent build:ui-tests) && echo "$$key" > "$(EXT_UI_STAMP)"; \
	fi

.PHONY: ui-test
ui-test: ext-install ext-ui-tests chromium ## GPU panel in a real JupyterLab + chromium against a usage-API fixture; screenshots in notebooks-ext/ui-tests/artifacts.
	cd "$(EXT_DIR)" && GPUHUB_UI_VENV="$(HUB_VENV)" GPUHUB_UI_ARTIFACTS="$(EXT_ARTIFACTS)" CHROMIUM="$(CHROMIUM)" \
	  node --test-reporter=spec ui-tests/lib/standalone.test.js
	@echo "==> screenshots: $(EXT_ARTIFACTS)"

.PHONY: ui-test-cluster
ui-test-cluster: ext-deps ext-ui-tests chromium ## GPU panel on the running local cluster (needs GPUHUB_UI_HUB_URL; see notebooks-ext/README.md).
	@[[ -n "$${GPUHUB_UI_HUB_URL:-}" ]] || { \
	  echo "ERROR: GPUHUB_UI_HUB_URL is not set; run make e2e-ui (starts and stops a local cluster for the test), or start make demo and set GPUHUB_UI_HUB_URL=http://127.0.0.1:8000/ (passwords default to make demo's)"; exit 1; }
	cd "$(EXT_DIR)" && GPUHUB_UI_ARTIFACTS="$(EXT_ARTIFACTS)" CHROMIUM="$(CHROMIUM)" \
	  node --test-reporter=spec ui-tests/lib/cluster.test.js
	@echo "==> screenshots: $(EXT_ARTIFACTS)"

.PHONY: ext-screenshots
ext-screenshots: ## Copy the UI test's light/dark panel screenshots to notebooks-ext/docs (referenced by its README).
	@test -f "$(EXT_ARTIFACTS)/gpu-panel-light.png" || { echo "ERROR: no screenshots yet; run make ui-test"; exit 1; }
	mkdir -p "$(EXT_DIR)/docs"
	cp "$(EXT_ARTIFACTS)/gpu-panel-light.png" "$(EXT_ARTIFACTS)/gpu-panel-dark.png" \
	  "$(EXT_ARTIFACTS)/gpu-panel-dark-window.png" "$(EXT_DIR)/docs/"

TEST_TARGETS += ext-test ui-test

# The local cluster's single-user servers run from $(VENV_HUB55): install the panel there before
# make demo / make e2e start them, so a user who just logged in sees it (issue 5, item 5).
cluster-deps: ext-install
