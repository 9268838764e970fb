# Helm chart: lint, render golden files, schema rejection. helm is built from the Go module proxy once.

HELM_VERSION := v3.22.0
HELM         := $(TOOLS_BIN)/helm-$(HELM_VERSION)

$(HELM):
	@echo "==> installing helm $(HELM_VERSION) (Go module proxy, first run only; a few minutes on 2 cores)"
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(GPUHUB_CACHE)/tmpbin $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(GPUHUB_CACHE)/tmpbin/helm $@

.PHONY: helm
helm: $(HELM) ## Install helm into $(GPUHUB_CACHE)/bin.

.PHONY: chart-test
chart-test: $(HELM) ## helm lint + rendered-manifest golden files + values-schema tests + READMEs current (UPDATE=1 rewrites goldens).
	$(HELM) lint --strict chart/gpuhub
	$(GO) run ./chart/cmd/chartreadme -check
	$(if $(UPDATE),HELM=$(HELM) $(GO) test -count=1 -tags chart ./chart -args -update)
	HELM=$(HELM) $(GO) test -count=1 -tags chart ./chart/...

TEST_TARGETS += chart-test

.PHONY: chart-readme
chart-readme: ## Regenerate chart/README.md's values table (values.yaml's `# --` comments) and the READMEs' copies of files/z2jh-values.yaml.
	$(GO) run ./chart/cmd/chartreadme
