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
	// ProxyPort is the public port (0: a free one).
	ProxyPort int
	// Services and Roles are added to the Hub (gpuhub's own services).
	Services []hubproc.Service
	Roles    []hubproc.Role
	LogLevel string
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
	env := []string{
		"KUBECONFIG=" + opts.Kubeconfig,
		"GPUHUB_HUB_VALUES=" + values,
		"GPUHUB_NAMESPACE=" + opts.Namespace,
		fmt.Sprintf("GPUHUB_HUB_CONNECT_URL=http://127.0.0.1:%d", hubPort),
	}
	if opts.ExtraConfigDir != "" {
		env = append(env, "GPUHUB_EXTRA_CONFIG_DIR="+opts.ExtraConfigDir)
	}
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
