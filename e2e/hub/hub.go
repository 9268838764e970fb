// Package hub configures the local cluster's JupyterHub: KubeSpawner set up the way
// Zero-to-JupyterHub sets it up (values.yaml with profileList and hub.extraConfig), the demo users
// and groups, everything on loopback. It starts the Hub with e2e/internal/hubproc.
package hub

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
)

//go:embed kubespawner_config.py
var kubespawnerConfig string

//go:embed values.yaml
var defaultValues []byte

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
	// Values replaces e2e/hub/values.yaml when set (a path).
	Values string
	// ExtraConfigDir holds *.py files run after hub.extraConfig, sorted by name.
	ExtraConfigDir string
	// ProxyPort is the public port, HubPort the Hub's own (API) port (0: free ones).
	ProxyPort, HubPort int
	// Services and Roles are added to the Hub (gpuhub's own services).
	Services []hubproc.Service
	Roles    []hubproc.Role
	LogLevel string
	// Env is added to the Hub's environment (KEY=value), e.g. settings read by hub.extraConfig code.
	Env []string
}

// DefaultValues returns e2e/hub/values.yaml, the z2jh-style values the local Hub starts with.
func DefaultValues() []byte { return append([]byte(nil), defaultValues...) }

// WithExtraConfig returns values (YAML) with hub.extraConfig.<key> set to each snippet, the way
// `helm --set-file hub.extraConfig.<key>=file.py` sets it for a z2jh release: the snippets run last in
// the Hub's config, sorted by key. Comments of values are not kept.
func WithExtraConfig(values []byte, snippets map[string]string) ([]byte, error) {
	return withHubMap(values, "extraConfig", snippets)
}

// WithExtraEnv returns values (YAML) with hub.extraEnv.<name> set to each value, as z2jh values set the Hub
// pod's environment; the local Hub's config (kubespawner_config.py) applies them before hub.extraConfig runs.
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

// Start starts the Hub (and its proxy) and waits until it answers through the proxy.
func Start(ctx context.Context, opts Options) (*hubproc.Hub, error) {
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("hub dir: %w", err)
	}
	values := opts.Values
	if values == "" {
		values = filepath.Join(opts.Dir, "values.yaml")
		if err := os.WriteFile(values, defaultValues, 0o644); err != nil {
			return nil, fmt.Errorf("write values: %w", err)
		}
	}
	ports := cluster.FreePorts(3)
	proxyPort, proxyAPIPort, hubPort := ports[0], ports[1], ports[2]
	if opts.ProxyPort != 0 {
		proxyPort = opts.ProxyPort
	}
	if opts.HubPort != 0 {
		hubPort = opts.HubPort
	}
	env := []string{
		"KUBECONFIG=" + opts.Kubeconfig,
		"GPUHUB_HUB_VALUES=" + values,
		"GPUHUB_NAMESPACE=" + opts.Namespace,
		fmt.Sprintf("GPUHUB_HUB_CONNECT_URL=http://127.0.0.1:%d", hubPort),
	}
	if opts.ExtraConfigDir != "" {
		env = append(env, "GPUHUB_EXTRA_CONFIG_DIR="+opts.ExtraConfigDir)
	}
	env = append(env, opts.Env...)
	return hubproc.Start(ctx, hubproc.Options{
		Venv:         opts.Venv,
		CHPPath:      opts.CHP,
		Users:        Users,
		Admins:       Admins,
		Groups:       Groups,
		Password:     opts.Password,
		Spawner:      "kubespawner.KubeSpawner",
		ExtraConfig:  kubespawnerConfig,
		Env:          env,
		Services:     opts.Services,
		Roles:        opts.Roles,
		ProxyPort:    proxyPort,
		ProxyAPIPort: proxyAPIPort,
		HubPort:      hubPort,
		WorkDir:      opts.Dir,
		LogLevel:     opts.LogLevel,
	})
}
