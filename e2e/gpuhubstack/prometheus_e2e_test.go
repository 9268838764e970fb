//go:build e2e

package gpuhubstack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
)

// TestPrometheus: the configuration make demo writes passes promtool check config with the chart's rules, and
// a Prometheus started as the demo starts it scrapes a service's /metrics as up.
func TestPrometheus(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (make promtool)")
	}
	bin, err := LookPrometheus("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := filepath.Abs(filepath.Join("..", "..", "chart", "gpuhub", "files", "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, "# HELP gpuhub_test_up_ratio A stand-in service.\n# TYPE gpuhub_test_up_ratio gauge\ngpuhub_test_up_ratio 1\n")
	}))
	defer service.Close()
	servicePort := service.Listener.Addr().(*net.TCPAddr).Port

	// The stand-in serves as the usage API and as an agent, so that both kinds of scrape config are checked.
	agents := []AgentTarget{{Address: service.Listener.Addr().String(), Node: "gpu-a100-0", Pod: "gpuhub-agent-x7k2p"}}
	config, err := PrometheusConfig(ScrapeTargets{Services: ServiceTargets(Options{Port: servicePort}), Agents: agents, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, config, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, promtool, "check", "config", configFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s\nconfig:\n%s", err, out, config)
	}

	p := PrometheusOptions{Binary: bin, Port: cluster.FreePort()}
	spec := PrometheusSpec(p, configFile, filepath.Join(dir, "data"))
	spec.LogFile = filepath.Join(dir, "prometheus.log")
	prom, err := proc.Start(ctx, slog.New(slog.DiscardHandler), spec)
	if err != nil {
		log, _ := os.ReadFile(spec.LogFile)
		t.Fatalf("start prometheus: %v\n%s", err, log)
	}
	defer prom.Stop()

	deadline := time.Now().Add(60 * time.Second)
	for _, series := range []string{`up{job="usage-api"}`, `up{job="gpu-agent",node="gpu-a100-0",pod="gpuhub-agent-x7k2p"}`} {
		query := p.URL() + "api/v1/query?query=" + url.QueryEscape(series)
		for {
			got, err := upValue(ctx, query)
			if err == nil && got == "1" {
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(spec.LogFile)
				t.Fatalf("%s is %q (%v) after 60 s, want 1; prometheus log:\n%s", series, got, err, log)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	// The rules loaded: Prometheus lists the chart's groups.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"api/v1/rules", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rulesAnswer struct {
		Data struct {
			Groups []struct{ Name string } `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rulesAnswer); err != nil || len(rulesAnswer.Data.Groups) == 0 {
		t.Errorf("api/v1/rules: %v, %d groups; want the chart's rule groups loaded", err, len(rulesAnswer.Data.Groups))
	}
}

// upValue asks Prometheus's query API and returns the one sample's value.
func upValue(ctx context.Context, query string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, query, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var answer struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return "", err
	}
	if len(answer.Data.Result) != 1 {
		return "", fmt.Errorf("%d series", len(answer.Data.Result))
	}
	v, _ := answer.Data.Result[0].Value[1].(string)
	return v, nil
}
