// Package hub starts the local cluster's JupyterHub as Zero-to-JupyterHub runs it: z2jh 4.4.0's own
// jupyterhub_config.py and z2jh.py, fed by the hub ConfigMap and Secret that `helm template` of z2jh's chart
// renders from z2jh values (values.yaml: profileList, named servers; the caller's: hub.services, hub.loadRoles,
// hub.extraEnv, hub.extraConfig with gpuhub's glue), with the demo users and groups, everything on loopback.
// e2e/internal/hubproc runs it (Options.Z2JH); what differs from z2jh's hub pod is hubproc.PodDifferences.
package hub

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
)

//go:embed values.yaml
var defaultValues []byte

// Environment variables Start reads when Options leave them out; make demo, make e2e and make integration set
// GPUHUB_HELM, make demo and make e2e GPUHUB_Z2JH_CHART.
const (
	EnvHelm      = "GPUHUB_HELM"
	EnvZ2JHChart = "GPUHUB_Z2JH_CHART"
)

// Z2JHChartRel is z2jh 4.4.0's chart relative to the repository root (the shared data beside the checkout),
// the default when GPUHUB_Z2JH_CHART is not set.
const Z2JHChartRel = "../shared/data/z2jh-4.4.0/chart/jupyterhub"

// Release is the z2jh release name the Hub is rendered as (the real node's z2jh release has it too).
const Release = "jhub"

// Users, groups and admins of the local cluster.
var (
	Users  = []string{"alice", "bob", "carol"}
	Admins = []string{"admin"}
	Groups = map[string][]string{"students": {"alice", "bob"}, "researchers": {"carol"}}
)

// Options configures the Hub.
type Options struct {
	// Venv holds jupyterhub and KubeSpawner (make venv-hub55); CHP is configurable-http-proxy.
	Venv, CHP string
	// Kubeconfig is the Hub's identity for KubeSpawner.
	Kubeconfig string
	// Namespace of the single-user pods.
	Namespace string
	// Dir is the Hub's work dir (config, database, log).
	Dir string
	// Password of every demo user (DummyAuthenticator).
	Password string
	// Values replaces e2e/hub/values.yaml when set (a path): z2jh values.
	Values string
	// ExtraConfigDir holds *.py files run after hub.extraConfig, sorted by name (they become hub.extraConfig
	// entries "zz-<file name>", which sort last).
	ExtraConfigDir string
	// Helm is the helm binary (default $GPUHUB_HELM), Z2JHChart z2jh's chart directory (default
	// $GPUHUB_Z2JH_CHART, else Z2JHChartRel from the repository root).
	Helm, Z2JHChart string
	// ProxyPort is the public port, HubPort the Hub's own (API) port (0: free ones).
	ProxyPort, HubPort int
	// Services and Roles are added to the Hub (gpuhub's own services).
	Services []hubproc.Service
	Roles    []hubproc.Role
	LogLevel string
	// Env is added to the Hub's environment (KEY=value), e.g. settings read by hub.extraConfig code.
	Env []string
}

// extraConfigDirPrefix makes the hook files' hub.extraConfig keys sort after every other key.
const extraConfigDirPrefix = "zz-"

// DefaultValues returns e2e/hub/values.yaml, the z2jh-style values the local Hub starts with.
func DefaultValues() []byte { return append([]byte(nil), defaultValues...) }

// WithExtraConfig returns values (YAML) with hub.extraConfig.<key> set to each snippet, the way
// `helm --set-file hub.extraConfig.<key>=file.py` sets it for a z2jh release: the snippets run last in
// the Hub's config, sorted by key. Comments of values are not kept.
func WithExtraConfig(values []byte, snippets map[string]string) ([]byte, error) {
	return withHubMap(values, "extraConfig", snippets)
}

// WithExtraEnv returns values (YAML) with hub.extraEnv.<name> set to each value, as z2jh values set the Hub
// pod's environment (the rendered hub Deployment's env, which the local Hub gets).
func WithExtraEnv(values []byte, env map[string]string) ([]byte, error) {
	return withHubMap(values, "extraEnv", env)
}

// withHubMap returns values with hub.<key>.<name> set to each of entries, the map created where missing.
// Comments of values are not kept.
func withHubMap(values []byte, key string, entries map[string]string) ([]byte, error) {
	var v map[string]any
	if err := yaml.Unmarshal(values, &v); err != nil {
		return nil, fmt.Errorf("hub values: %w", err)
	}
	if v == nil {
		v = map[string]any{}
	}
	h, _ := v["hub"].(map[string]any)
	if h == nil {
		h = map[string]any{}
		v["hub"] = h
	}
	m, _ := h[key].(map[string]any)
	if m == nil {
		m = map[string]any{}
		h[key] = m
	}
	for k, val := range entries {
		m[k] = val
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("hub values: %w", err)
	}
	return out, nil
}

// Start renders z2jh's chart with the values, starts the Hub (and its proxy) as z2jh's hub pod runs and waits
// until it answers through the proxy.
func Start(ctx context.Context, opts Options) (*hubproc.Hub, error) {
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("hub dir: %w", err)
	}
	values := defaultValues
	if opts.Values != "" {
		b, err := os.ReadFile(opts.Values)
		if err != nil {
			return nil, fmt.Errorf("hub values: %w", err)
		}
		values = b
	}
	if opts.ExtraConfigDir != "" {
		hooks, err := extraConfigFiles(opts.ExtraConfigDir)
		if err != nil {
			return nil, err
		}
		if values, err = WithExtraConfig(values, hooks); err != nil {
			return nil, err
		}
	}
	helm, chart, err := z2jhTools(opts)
	if err != nil {
		return nil, err
	}
	kubeVersion, err := serverVersion(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	ports := cluster.FreePorts(3)
	proxyPort, proxyAPIPort, hubPort := ports[0], ports[1], ports[2]
	if opts.ProxyPort != 0 {
		proxyPort = opts.ProxyPort
	}
	if opts.HubPort != 0 {
		hubPort = opts.HubPort
	}
	return hubproc.Start(ctx, hubproc.Options{
		Venv:     opts.Venv,
		CHPPath:  opts.CHP,
		Users:    Users,
		Admins:   Admins,
		Groups:   Groups,
		Password: opts.Password,
		Z2JH: &hubproc.Z2JH{
			Helm: helm, Chart: chart, Release: Release, Namespace: opts.Namespace, KubeVersion: kubeVersion,
			Values: [][]byte{values},
		},
		Env:          append([]string{"KUBECONFIG=" + opts.Kubeconfig}, opts.Env...),
		Services:     opts.Services,
		Roles:        opts.Roles,
		ProxyPort:    proxyPort,
		ProxyAPIPort: proxyAPIPort,
		HubPort:      hubPort,
		WorkDir:      opts.Dir,
		LogLevel:     opts.LogLevel,
	})
}

// z2jhTools finds helm and z2jh's chart: Options, the environment, the chart beside the checkout.
func z2jhTools(opts Options) (helm, chart string, err error) {
	helm = cmpOr(opts.Helm, os.Getenv(EnvHelm))
	if helm == "" {
		return "", "", errors.New("hub: no helm to render z2jh's chart: set " + EnvHelm + " (make demo, make e2e and make integration do)")
	}
	chart = cmpOr(opts.Z2JHChart, os.Getenv(EnvZ2JHChart))
	if chart == "" {
		root, err := repoRoot()
		if err != nil {
			return "", "", err
		}
		chart = filepath.Join(root, Z2JHChartRel)
	}
	if _, err := os.Stat(filepath.Join(chart, "files", "hub", "jupyterhub_config.py")); err != nil {
		return "", "", fmt.Errorf("hub: z2jh 4.4.0's chart (%s, or set %s): %w", Z2JHChartRel, EnvZ2JHChart, err)
	}
	return helm, chart, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// repoRoot is the directory of the go.mod of module github.com/gpuhub/gpuhub above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			first, _, _ := bytes.Cut(b, []byte("\n"))
			if strings.TrimSpace(string(first)) == "module github.com/gpuhub/gpuhub" {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("hub: not inside the gpuhub repository: set " + EnvZ2JHChart)
		}
		dir = parent
	}
}

// serverVersion asks the API server for its version (helm template checks z2jh's kubeVersion against it).
func serverVersion(kubeconfig string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", fmt.Errorf("hub: kubeconfig: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("hub: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("hub: API server version: %w", err)
	}
	return v.GitVersion, nil
}

// extraConfigFiles reads dir's *.py files as hub.extraConfig entries keyed extraConfigDirPrefix + file name.
func extraConfigFiles(dir string) (map[string]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.py"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("hub extra config: %w", err)
		}
		out[extraConfigDirPrefix+filepath.Base(p)] = string(b)
	}
	return out, nil
}
