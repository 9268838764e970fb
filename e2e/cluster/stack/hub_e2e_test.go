//go:build e2e

package stack

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/hub"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
)

// TestHubsSideBySide starts two local Hubs at once on one control plane, each with z2jh's own config and values
// of its own: each loads its own hub.extraConfig and never the other's, though both read the same path
// (/usr/local/etc/jupyterhub, a mount namespace each). A Hub killed with SIGKILL comes back with Relaunch on the
// same files and the same proxy, the other unaffected. After Stop nothing of either runs, and the machine's
// /usr/local/etc/jupyterhub is still the empty mount point.
func TestHubsSideBySide(t *testing.T) {
	need := map[string]string{}
	for _, k := range []string{"GPUHUB_KUBE_BIN", "GPUHUB_HUB_VENV", "GPUHUB_CHP", hub.EnvHelm} {
		if need[k] = os.Getenv(k); need[k] == "" {
			t.Fatalf("%s is not set; run `make e2e`", k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: need["GPUHUB_KUBE_BIN"], Dir: filepath.Join(t.TempDir(), "cluster")})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()

	names := []string{"left", "right"}
	hubs := make([]*hubproc.Hub, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		dir := filepath.Join(t.TempDir(), name)
		values, err := hub.WithExtraConfig(hub.DefaultValues(), map[string]string{"only-" + name: "c.JupyterHub.template_vars = {'hub_name': '" + name + "'}\n"})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		valuesFile := filepath.Join(dir, "values.yaml")
		if err := os.WriteFile(valuesFile, values, 0o600); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			hubs[i], errs[i] = hub.Start(ctx, hub.Options{
				Venv: need["GPUHUB_HUB_VENV"], CHP: need["GPUHUB_CHP"], Kubeconfig: cp.Kubeconfig, Namespace: "jhub-" + name,
				Dir: filepath.Join(dir, "hub"), Password: "pw", Values: valuesFile,
			})
		}()
	}
	wg.Wait()
	for i, h := range hubs {
		if h != nil {
			defer func() {
				if t.Failed() {
					t.Logf("hub %s log:\n%s", names[i], h.LogTail(60))
				}
				if err := h.Stop(); err != nil {
					t.Errorf("stop hub %s: %v", names[i], err)
				}
			}()
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("hub %s: %v", names[i], err)
		}
	}

	loaded := func(h *hubproc.Hub, name string) bool {
		b, err := os.ReadFile(h.LogPath())
		return err == nil && strings.Contains(string(b), "Loading extra config: only-"+name)
	}
	for i, h := range hubs {
		other := names[1-i]
		if !loaded(h, names[i]) || loaded(h, other) {
			t.Errorf("hub %s: loads its own hub.extraConfig %v, the other hub's %v (want true, false)", names[i], loaded(h, names[i]), loaded(h, other))
		}
		if got := hubVersion(ctx, t, h.BaseURL()); got != h.Version() {
			t.Errorf("hub %s through its proxy: version %q, want %q", names[i], got, h.Version())
		}
	}

	left, right := hubs[0], hubs[1]
	proxyPids := hubproc.MarkedProcesses(left.Marker())
	left.Kill()
	if got := hubVersion(ctx, t, right.BaseURL()); got != right.Version() {
		t.Errorf("right hub after left's kill: version %q", got)
	}
	if pids := hubproc.MarkedProcesses(left.Marker()); len(pids) != 1 {
		t.Errorf("after the kill, left's marked processes are %v, want its proxy alone (before: %v)", pids, proxyPids)
	}
	if err := left.Relaunch(ctx); err != nil {
		t.Fatalf("relaunch left: %v", err)
	}
	if got := hubVersion(ctx, t, left.BaseURL()); got != left.Version() {
		t.Errorf("left hub after relaunch: version %q", got)
	}

	markers := []string{left.Marker(), right.Marker()}
	for i, h := range hubs {
		if err := h.Stop(); err != nil {
			t.Errorf("stop hub %s: %v", names[i], err)
		}
	}
	for i, m := range markers {
		if pids := hubproc.MarkedProcesses(m); len(pids) > 0 {
			t.Errorf("hub %s: processes %v still run after Stop", names[i], pids)
		}
	}
	entries, err := os.ReadDir(hubproc.PodConfigDir)
	if err != nil || len(entries) > 0 {
		t.Errorf("%s on the machine: %d entries, err %v; want the empty mount point", hubproc.PodConfigDir, len(entries), err)
	}
}

func hubVersion(ctx context.Context, t *testing.T, baseURL string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"hub/api/", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("GET %shub/api/: %v", baseURL, err)
		return ""
	}
	defer resp.Body.Close()
	var v struct{ Version string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Errorf("GET %shub/api/: %v", baseURL, err)
	}
	return v.Version
}
