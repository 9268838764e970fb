package gpuhubstack

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
)

// PrometheusOptions configures the Prometheus of `make demo`: Debian's prometheus package, on loopback, scraping
// every gpuhub service and agent with the chart's rules loaded.
type PrometheusOptions struct {
	Binary string // prometheus executable; empty: no Prometheus
	Port   int    // on 127.0.0.1
	// Rules is the chart's rules file (chart/gpuhub/files/prometheus-rules.yaml).
	Rules string
}

// URL is Prometheus's web UI and API on loopback.
func (p PrometheusOptions) URL() string { return fmt.Sprintf("http://127.0.0.1:%d/", p.Port) }

// LookPrometheus finds the prometheus executable (name, or a path), and says why when it cannot: the demo then
// runs without it.
func LookPrometheus(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("no Prometheus (%s not found: install Debian's prometheus package, or make promtool as root)", name)
	}
	return path, nil
}

// ScrapeTargets is what the demo's Prometheus scrapes: each service's loopback host:port by job name, and the
// agent pods.
type ScrapeTargets struct {
	Services map[string][]string // job → host:port
	Agents   []AgentTarget
	Rules    string // rule file, absolute
}

// AgentTarget is one agent pod: its pod IP and port, and its node and pod names for the series' labels.
type AgentTarget struct {
	Address, Node, Pod string
}

// AgentTargets lists the running agent pods of the chart's DaemonSet (its labels, its port named http).
// Debian's prometheus is built without Kubernetes discovery, so the demo lists them once they are ready; an
// agent keeps its pod IP across restarts on the emulated nodes.
func AgentTargets(ctx context.Context, client kubernetes.Interface) ([]AgentTarget, error) {
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=gpu-agent,app.kubernetes.io/part-of=gpuhub"})
	if err != nil {
		return nil, fmt.Errorf("list agent pods: %w", err)
	}
	var out []AgentTarget
	for _, p := range pods.Items {
		if p.Status.PodIP == "" {
			continue
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if port.Name == "http" {
					out = append(out, AgentTarget{Address: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort))),
						Node: p.Spec.NodeName, Pod: p.Name})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b AgentTarget) int { return strings.Compare(a.Pod, b.Pod) })
	return out, nil
}

// ServiceTargets names the loopback address of each service o runs: the usage API, and gpu-quota, gpu-profiles
// and each gpu-culler replica when they run. /metrics is served outside the Hub prefix, without a token.
func ServiceTargets(o Options) map[string][]string {
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	t := map[string][]string{"usage-api": {addr(o.Port)}}
	if o.Quota.Binary != "" {
		t["gpu-quota"] = []string{addr(o.Quota.Port)}
	}
	if o.Profiles.Binary != "" {
		t["gpu-profiles"] = []string{addr(o.Profiles.Port)}
	}
	if o.Culler.Binary != "" {
		ports := o.Culler.ReplicaPorts
		if len(ports) == 0 {
			ports = []int{o.Culler.Port}
		}
		for _, p := range ports {
			t["gpu-culler"] = append(t["gpu-culler"], addr(p))
		}
	}
	return t
}

// prometheusConfig is the part of Prometheus's configuration file the demo writes.
type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string       `yaml:"rule_files"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
}

type scrapeConfig struct {
	JobName       string         `yaml:"job_name"`
	StaticConfigs []staticConfig `yaml:"static_configs"`
}

type staticConfig struct {
	Targets []string          `yaml:"targets"`
	Labels  map[string]string `yaml:"labels,omitempty"`
}

// PrometheusConfig writes the configuration file for t: every 5 s (the demo's agents sample every second), the
// services by their job names, the agents as job gpu-agent with their node and pod as labels (what a
// Kubernetes pod discovery would name them).
func PrometheusConfig(t ScrapeTargets) ([]byte, error) {
	var c prometheusConfig
	c.Global.ScrapeInterval, c.Global.EvaluationInterval = "5s", "5s"
	if t.Rules != "" {
		c.RuleFiles = []string{t.Rules}
	}
	jobs := make([]string, 0, len(t.Services))
	for job := range t.Services {
		jobs = append(jobs, job)
	}
	slices.Sort(jobs)
	for _, job := range jobs {
		c.ScrapeConfigs = append(c.ScrapeConfigs, scrapeConfig{JobName: job, StaticConfigs: []staticConfig{{Targets: t.Services[job]}}})
	}
	if len(t.Agents) > 0 {
		agents := scrapeConfig{JobName: "gpu-agent"}
		for _, a := range t.Agents {
			agents.StaticConfigs = append(agents.StaticConfigs, staticConfig{Targets: []string{a.Address},
				Labels: map[string]string{"node": a.Node, "pod": a.Pod}})
		}
		c.ScrapeConfigs = append(c.ScrapeConfigs, agents)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("prometheus config: %w", err)
	}
	return append([]byte("# Written by the local cluster (e2e/gpuhubstack/prometheus.go) for this run.\n"), out...), nil
}

// PrometheusComponent runs Prometheus after gpuhub's components: its configuration and data in the stack's
// state directory, the web UI and API on 127.0.0.1 only.
func PrometheusComponent(o Options, p PrometheusOptions) stack.Component {
	return stack.Component{Name: "prometheus", Spec: func(s *stack.Stack) (proc.Spec, error) {
		dir := filepath.Join(s.Dir, "prometheus")
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			return proc.Spec{}, fmt.Errorf("prometheus: %w", err)
		}
		rules := p.Rules
		if rules != "" {
			abs, err := filepath.Abs(rules)
			if err != nil {
				return proc.Spec{}, fmt.Errorf("prometheus rules: %w", err)
			}
			rules = abs
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		agents, err := AgentTargets(ctx, s.Client)
		if err != nil {
			return proc.Spec{}, fmt.Errorf("prometheus: %w", err)
		}
		config, err := PrometheusConfig(ScrapeTargets{Services: ServiceTargets(o), Agents: agents, Rules: rules})
		if err != nil {
			return proc.Spec{}, err
		}
		configFile := filepath.Join(dir, "prometheus.yml")
		if err := os.WriteFile(configFile, config, 0o644); err != nil {
			return proc.Spec{}, fmt.Errorf("prometheus: %w", err)
		}
		return PrometheusSpec(p, configFile, filepath.Join(dir, "data")), nil
	}}
}

// PrometheusSpec is the Prometheus process for configFile, its data in dataDir.
func PrometheusSpec(p PrometheusOptions, configFile, dataDir string) proc.Spec {
	return proc.Spec{
		Name: "prometheus", Path: p.Binary,
		Args: []string{"--config.file=" + configFile, "--storage.tsdb.path=" + dataDir,
			"--web.listen-address=127.0.0.1:" + strconv.Itoa(p.Port), "--storage.tsdb.retention.time=1d"},
		Ready:        readyz(p.URL() + "-/ready"),
		ReadyTimeout: 2 * time.Minute,
	}
}
