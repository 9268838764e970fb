# Prometheus rules and the Grafana dashboard shipped in the chart (chart/gpuhub/files). promtool comes from
# Debian's prometheus package (the same one `make demo`'s Prometheus uses).

PROMTOOL ?= promtool

.PHONY: promtool
promtool: ## promtool from Debian (prometheus) for the rule checks.
	$(call apt-install,$(PROMTOOL),prometheus)

.PHONY: monitoring-test
monitoring-test: promtool ## promtool check + unit tests of the chart's Prometheus rules; dashboard and rule metrics exist in the services.
	$(PROMTOOL) check rules chart/gpuhub/files/prometheus-rules.yaml
	$(PROMTOOL) test rules chart/testdata/prometheus-rules-test.yaml
	$(GO) test -race -count=1 -tags chart -run '^TestMonitoring' ./chart/...

TEST_TARGETS += monitoring-test
