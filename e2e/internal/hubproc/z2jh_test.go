package hubproc

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

// z2jhChart is z2jh 4.4.0's chart: $GPUHUB_Z2JH_CHART, else the shared data beside the checkout.
func z2jhChart(t *testing.T) string {
	t.Helper()
	chart := os.Getenv("GPUHUB_Z2JH_CHART")
	if chart == "" {
		chart = filepath.Join("..", "..", "..", "..", "shared", "data", "z2jh-4.4.0", "chart", "jupyterhub")
	}
	if _, err := os.Stat(filepath.Join(chart, "files", "hub", "z2jh.py")); err != nil {
		t.Fatalf("z2jh 4.4.0's chart is missing (../shared/data/z2jh-4.4.0/chart/jupyterhub beside the checkout, or "+
			"GPUHUB_Z2JH_CHART): %v", err)
	}
	return chart
}

// callerValues are what e2e/hub and gpuhubstack give: profiles, a service with its url and token, a role,
// hub.extraEnv, hub.extraConfig, and the user-scheduler on (gpuhub's z2jh values), which PodDifferences turns off.
const callerValues = `
singleuser:
  profileList:
    - {display_name: CPU only, slug: cpu, default: true}
hub:
  services:
    gpu-quota: {url: "http://127.0.0.1:9001", apiToken: quota-token, display: false}
  loadRoles:
    gpu-quota: {services: [gpu-quota], scopes: [list:users]}
  extraEnv:
    GPUHUB_WAITLIST: "1"
  extraConfig:
    gpuhub: "c.JupyterHub.active_server_limit = 7\n"
scheduling:
  userScheduler: {enabled: true}
`

// TestPodLayout renders z2jh 4.4.0's chart with helm as a Hub with Options.Z2JH does and checks the files laid
// out for /usr/local/etc/jupyterhub (the hub pod's volume mounts), the values z2jh.py reads (the caller's, with
// PodDifferences' last), and the hub container's args and environment.
func TestPodLayout(t *testing.T) {
	helm := os.Getenv("GPUHUB_HELM")
	if helm == "" {
		t.Skip("GPUHUB_HELM is not set; make integration runs this test with helm")
	}
	chart := z2jhChart(t)
	h := testHub(Options{
		Users: []string{"alice"}, Admins: []string{"admin"}, Groups: map[string][]string{"students": {"alice"}},
		Services: []Service{{Name: "gpu-usage", Token: "usage-token", URL: "http://127.0.0.1:9000", Scopes: []string{"list:users"}}},
		LogLevel: "DEBUG",
		Z2JH: &Z2JH{Helm: helm, Chart: chart, Namespace: "jhub", KubeVersion: "v1.36.3",
			Values: [][]byte{[]byte(callerValues)}},
	})
	h.workDir = t.TempDir()
	d, err := h.configData()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	local, err := h.localValues(&d)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := renderZ2JH(context.Background(), h.opts.Z2JH, local, filepath.Join(h.workDir, "pod"))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(h.workDir, "pod", "usr", "local", "etc", "jupyterhub")
	spec, err := layoutPod(rendered, "jhub", root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm template and layout took %s", time.Since(start).Round(time.Millisecond))

	// The file set, as the hub container sees it under /usr/local/etc/jupyterhub.
	got := map[string]fs.FileMode{}
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		got[rel] = info.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{"jupyterhub_config.py": 0o644, "z2jh.py": 0o644}
	for _, k := range []string{
		"fullname", "fullname-dash", "hub", "hub-serviceaccount", "hub-existing-secret", "hub-existing-secret-or-default",
		"hub-pvc", "proxy", "proxy-api", "proxy-http", "proxy-public", "proxy-public-tls", "proxy-public-manual-tls",
		"autohttps", "autohttps-serviceaccount", "user-scheduler-deploy", "user-scheduler-serviceaccount",
		"user-scheduler-lock", "user-placeholder", "image-puller-priority", "hook-image-awaiter",
		"hook-image-awaiter-serviceaccount", "hook-image-puller", "hook-image-puller-serviceaccount",
		"continuous-image-puller", "continuous-image-puller-serviceaccount", "singleuser", "image-pull-secret",
		"ingress", "priority", "user-placeholder-priority", "user-scheduler", "jupyterhub_config.py", "z2jh.py",
		"checksum_hook-image-puller",
	} {
		want["config/"+k] = 0o644
	}
	for _, k := range []string{
		"values.yaml", "hub.config.ConfigurableHTTPProxy.auth_token", "hub.config.JupyterHub.cookie_secret",
		"hub.config.CryptKeeper.keys", "hub.services.hubproc-admin.apiToken", "hub.services.gpu-usage.apiToken",
		"hub.services.gpu-quota.apiToken",
	} {
		want["secret/"+k] = 0o600
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files under /usr/local/etc/jupyterhub (-want +got):\n%s", diff)
	}

	// z2jh's own files, unchanged; the name templates z2jh.py's get_name reads.
	for rel, src := range map[string]string{
		"jupyterhub_config.py": "jupyterhub_config.py", "z2jh.py": "z2jh.py", "config/jupyterhub_config.py": "jupyterhub_config.py",
	} {
		if read(t, filepath.Join(chart, "files", "hub", src)) != read(t, filepath.Join(root, rel)) {
			t.Errorf("%s is not z2jh's files/hub/%s", rel, src)
		}
	}
	for k, v := range map[string]string{
		"config/hub": "hub", "config/proxy-api": "proxy-api", "config/proxy-public": "proxy-public",
		"secret/hub.services.gpu-usage.apiToken": "usage-token", "secret/hub.services.gpu-quota.apiToken": "quota-token",
		"secret/hub.services.hubproc-admin.apiToken": "secret-1",
	} {
		if got := read(t, filepath.Join(root, k)); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}

	// What z2jh.py's get_config reads: the caller's values, PodDifferences over them, Chart and Release.
	var values map[string]any
	if err := yaml.Unmarshal([]byte(read(t, filepath.Join(root, "secret", "values.yaml"))), &values); err != nil {
		t.Fatal(err)
	}
	wantValues := map[string]any{
		"hub.config.JupyterHub.hub_bind_url":                        "http://127.0.0.1:8081",
		"hub.config.JupyterHub.hub_connect_url":                     "http://127.0.0.1:8081",
		"hub.config.JupyterHub.authenticator_class":                 "dummy",
		"hub.config.JupyterHub.log_level":                           "DEBUG",
		"hub.config.JupyterHub.load_groups":                         map[string]any{"students": map[string]any{"users": []any{"alice"}}},
		"hub.config.ConfigurableHTTPProxy.api_url":                  "http://127.0.0.1:8001",
		"hub.config.DummyAuthenticator.password":                    "pw",
		"hub.config.Authenticator.allowed_users":                    []any{"alice"},
		"hub.config.Authenticator.admin_users":                      []any{"admin"},
		"hub.config.Authenticator.allow_all":                        true,
		"hub.services.gpu-usage":                                    map[string]any{"apiToken": "usage-token", "url": "http://127.0.0.1:9000"},
		"hub.services.gpu-quota":                                    map[string]any{"apiToken": "quota-token", "url": "http://127.0.0.1:9001", "display": false},
		"hub.loadRoles.service-gpu-usage":                           map[string]any{"scopes": []any{"list:users"}, "services": []any{"gpu-usage"}},
		"hub.loadRoles.gpu-quota":                                   map[string]any{"scopes": []any{"list:users"}, "services": []any{"gpu-quota"}},
		"hub.extraEnv.GPUHUB_WAITLIST":                              "1",
		"hub.extraConfig.gpuhub":                                    "c.JupyterHub.active_server_limit = 7\n",
		"singleuser.profileList":                                    []any{map[string]any{"display_name": "CPU only", "slug": "cpu", "default": true}},
		"singleuser.storage.type":                                   "none",
		"singleuser.cloudMetadata.blockWithIptables":                false,
		"scheduling.userScheduler.enabled":                          false,
		"cull.enabled":                                              false,
		"hub.db.type":                                               "sqlite-pvc",
		"Release.Name":                                              "jhub",
		"Release.Namespace":                                         "jhub",
		"Chart.Name":                                                "jupyterhub",
		"singleuser.extraLabels.hub.jupyter.org/network-access-hub": "true",
	}
	gotValues := map[string]any{}
	for k := range wantValues {
		gotValues[k] = lookup(values, k)
	}
	if diff := cmp.Diff(wantValues, gotValues); diff != "" {
		t.Errorf("secret/values.yaml (-want +got):\n%s", diff)
	}
	if lookup(values, "hub.loadRoles.hubproc-admin.services") == nil {
		t.Error("secret/values.yaml has no role for hubproc-admin")
	}

	// The hub container: its args, its env resolved from the Deployment, the Services' variables.
	if diff := cmp.Diff([]string{"jupyterhub", "--config", "/usr/local/etc/jupyterhub/jupyterhub_config.py", "--upgrade-db"}, spec.args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	token := read(t, filepath.Join(root, "secret", "hub.config.ConfigurableHTTPProxy.auth_token"))
	if len(token) < 32 || spec.proxyToken != token {
		t.Errorf("proxy token %q, the Secret's %q", spec.proxyToken, token)
	}
	wantEnv := []string{
		"PYTHONUNBUFFERED=1", "HELM_RELEASE_NAME=jhub", "POD_NAMESPACE=jhub", "CONFIGPROXY_AUTH_TOKEN=" + token,
		"GPUHUB_WAITLIST=1",
	}
	if diff := cmp.Diff(wantEnv, spec.env); diff != "" {
		t.Errorf("hub container env (-want +got):\n%s", diff)
	}
	h.pod = spec
	wantServices := []string{
		"HUB_SERVICE_HOST=127.0.0.1", "HUB_SERVICE_PORT=8081",
		"PROXY_API_SERVICE_HOST=127.0.0.1", "PROXY_API_SERVICE_PORT=8001",
		"PROXY_PUBLIC_SERVICE_HOST=127.0.0.1", "PROXY_PUBLIC_SERVICE_PORT=8000",
	}
	if diff := cmp.Diff(wantServices, h.serviceEnv()); diff != "" {
		t.Errorf("Service variables (-want +got):\n%s", diff)
	}
}

// TestPodLayoutRefusesWhatHasNoStandIn: a volume the local Hub cannot give the hub (hub.extraFiles) is an error,
// not a file silently missing.
func TestPodLayoutRefusesWhatHasNoStandIn(t *testing.T) {
	helm := os.Getenv("GPUHUB_HELM")
	if helm == "" {
		t.Skip("GPUHUB_HELM is not set; make integration runs this test with helm")
	}
	z := &Z2JH{Helm: helm, Chart: z2jhChart(t), Namespace: "jhub", KubeVersion: "v1.36.3",
		Values: [][]byte{[]byte("hub:\n  extraFiles:\n    x:\n      mountPath: /etc/x\n      stringData: hi\n")}}
	dir := t.TempDir()
	rendered, err := renderZ2JH(context.Background(), z, map[string]any{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := layoutPod(rendered, "jhub", filepath.Join(dir, "root")); err == nil || !strings.Contains(err.Error(), "no stand-in") {
		t.Errorf("layout with hub.extraFiles: err = %v, want one naming the volume without a stand-in", err)
	}
}

// TestPodDifferencesDocumented: e2e/README.md's table of differences has a row for each of PodDifferences.
func TestPodDifferencesDocumented(t *testing.T) {
	readme := read(t, filepath.Join("..", "..", "README.md"))
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(readme, -1) {
		rows[m[1]] = true
	}
	for _, d := range PodDifferences {
		if !rows[d.What] {
			t.Errorf("e2e/README.md has no row \"| `%s` |\" in its table of differences from z2jh's hub pod", d.What)
		}
		if d.Local == "" || d.Pod == "" || d.Why == "" {
			t.Errorf("PodDifferences %q: Local, Pod and Why must say something", d.What)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lookup resolves a dotted path in values; a key with dots of its own (a label) is matched whole at the end.
func lookup(values map[string]any, path string) any {
	var cur any = values
	parts := strings.Split(path, ".")
	for i := 0; i < len(parts); i++ {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok := m[parts[i]]; ok {
			cur = v
			continue
		}
		if v, ok := m[strings.Join(parts[i:], ".")]; ok {
			return v
		}
		return nil
	}
	return cur
}
