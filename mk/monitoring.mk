# Prometheus rules and the Grafana dashboard shipped in the chart (chart/gpuhub/files). promtool comes from
# Debian's prometheus package (the same one `make demo`'s Prometheus uses).

PROMTOOL ?= promtool
# Every /metrics golden the services' tests write (testdata/metrics*.golden, refreshed with each package's -update).
METRICS_GOLDENS := $(sort $(shell find services -path '*/testdata/*' -name 'metrics*.golden'))

.PHONY: promtool
promtool: ## promtool from Debian (prometheus) for the rule checks.
	$(call apt-install,$(PROMTOOL),prometheus)

.PHONY: monitoring-test
monitoring-test: promtool ## promtool check + unit tests of the chart's Prometheus rules; every /metrics golden passes promtool check metrics; dashboard and rule metrics exist in the services.
	@for f in $(METRICS_GOLDENS); do \
	  echo "$(PROMTOOL) check metrics < $$f"; \
	  $(PROMTOOL) check metrics < "$$f" || { echo "FAILED: $$f: fix the metric's name or help in its service, then rewrite the golden with go test <package> -update"; exit 1; }; \
	done
	$(PROMTOOL) check rules chart/gpuhub/files/prometheus-rules.yaml
	$(PROMTOOL) test rules chart/testdata/prometheus-rules-test.yaml
	$(GO) test -race -count=1 -tags chart -run '^TestMonitoring' ./chart/...

TEST_TARGETS += monitoring-test
