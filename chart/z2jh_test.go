//go:build chart

package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// z2jhValuesFile is the one z2jh values file of gpuhub; gpuhubGlue the Hub glue it goes with (--set-file).
var (
	z2jhValuesFile = filepath.Join("gpuhub", "files", "z2jh-values.yaml")
	gpuhubGlue     = filepath.Join("gpuhub", "files", "gpuhub_hub_config.py")
)

// jupyterHubServiceKeys are the keys a service entry may have: JupyterHub 5.5.4's Service traits tagged input
// (`Service.class_traits(input=True)`), which the Hub sets from the entry and refuses any other ("No such service
// field"), plus z2jh's apiToken, which z2jh turns into api_token. JupyterHub 6.1 adds `timeout`, which 5.5
// refuses, so it is not here.
var jupyterHubServiceKeys = []string{
	"admin", "api_token", "command", "cwd", "display", "environment", "info", "name", "oauth_client_allowed_scopes",
	"oauth_client_id", "oauth_no_confirm", "oauth_redirect_uri", "oauth_roles", "url", "user", "apiToken",
}

// hubCall is one call a service makes to the Hub's REST API and the scopes JupyterHub checks for it (the
// handler's scope, and the scopes that let the fields the service reads through the filter).
type hubCall struct {
	call   string
	scopes []string
}

// hubCalls are the Hub API calls each service makes (every hubapi.Client call outside tests, by service) with
// their scopes. A service's role in z2jh-values.yaml must grant exactly the union: no call without its scope,
// no scope without a call.
var hubCalls = map[string][]hubCall{
	"gpu-usage": {
		{"GET /users, paginated (the directory: who is an admin, group shares)", []string{"list:users"}},
		{"  each user's name and admin flag", []string{"read:users:name"}},
		{"  each user's groups", []string{"read:users:groups"}},
		{"GET /user with a caller's token (hubauth; the admin view's OAuth login)", nil},
		{"POST /oauth2/token (the admin view: code for token, with the service token as client secret)", nil},
		{"GET / (the Hub's version)", nil},
	},
	"gpu-quota": {
		{"GET /users, paginated (the directory behind its decisions)", []string{"list:users"}},
		{"  each user's name and admin flag", []string{"read:users:name"}},
		{"  each user's groups", []string{"read:users:groups"}},
		{"  each user's servers (what runs where)", []string{"read:servers"}},
		{"DELETE /users/{name}/servers/{server} (a server over a budget, after the grace)", []string{"delete:servers"}},
		{"POST /users/{name}/servers/{server} (the waitlist: a server whose turn came starts by itself)", []string{"servers"}},
		{"GET /user with the glue's, the usage API's and users' tokens (hubauth)", nil},
	},
	"gpu-profiles": {
		{"DELETE /users/{name}/servers/{server} (a GPU spawn nothing can ever place)", []string{"delete:servers"}},
		{"GET /user with the glue's and the usage API's tokens (hubauth)", nil},
	},
	"gpu-culler": {
		{"GET /users?state=ready, paginated (each pass)", []string{"list:users"}},
		{"  last_activity of users and servers", []string{"read:users:activity"}},
		{"  each user's servers", []string{"read:servers"}},
		{"GET /users/{name} (re-read before a stop)", []string{"read:users:activity", "read:servers"}},
		{"DELETE /users/{name}/servers/{server} (an idle server)", []string{"delete:servers"}},
		{"GET /user with its own token (its scopes, checked against the policy)", nil},
	},
}

// panelServices are the services users' browsers call with their own token through the proxy: the usage API
// (panel, admin view), gpu-quota (the waitlist), gpu-culler (countdown, snooze). The user role must reach exactly
// these.
var panelServices = []string{"gpu-usage", "gpu-quota", "gpu-culler"}

// z2jhValues is what the test reads of the file; helm checks every key against z2jh's schema.
type z2jhValues struct {
	Hub struct {
		Services  map[string]map[string]any `yaml:"services"`
		LoadRoles map[string]struct {
			Scopes   []string `yaml:"scopes"`
			Services []string `yaml:"services"`
		} `yaml:"loadRoles"`
		ExtraEnv map[string]string `yaml:"extraEnv"`
	} `yaml:"hub"`
	Cull struct {
		Enabled *bool `yaml:"enabled"`
	} `yaml:"cull"`
	Scheduling struct {
		UserScheduler struct {
			PluginConfig []any `yaml:"pluginConfig"`
		} `yaml:"userScheduler"`
	} `yaml:"scheduling"`
}

// TestZ2JHValuesFile checks gpuhub's z2jh values file: z2jh 4.4.0 accepts it with the glue; the Hub accepts every
// service key; each role grants exactly the scopes of its service's calls; users reach the services they call; the
// urls name this chart's Services; z2jh's culler is off and the user-scheduler packs GPUs.
func TestZ2JHValuesFile(t *testing.T) {
	b, err := os.ReadFile(z2jhValuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var v z2jhValues
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", z2jhValuesFile, err)
	}

	t.Run("z2jh 4.4.0 accepts it", func(t *testing.T) {
		z2jh := z2jhSchemaChart(t)
		args := []string{"template", "z2jh", z2jh, "--kube-version", kubeVersion, "-f", z2jhValuesFile, "--set-file", "hub.extraConfig.gpuhub=" + gpuhubGlue}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("z2jh 4.4.0 rejects %s: %v\n%s", z2jhValuesFile, err, out)
		}
		// The check is not vacuous: a misspelt key anywhere is refused.
		for _, typo := range [][2]string{{"pluginConfig:", "pluginConfigs:"}, {"  extraEnv:", "  extraEnvs:"}, {"cull:", "culls:"}} {
			bad := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(bad, []byte(strings.Replace(string(b), typo[0], typo[1], 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			want := strings.TrimSuffix(strings.TrimSpace(typo[1]), ":")
			if out, err := helm(t, "template", "z2jh", z2jh, "--kube-version", kubeVersion, "-f", bad); err == nil || !strings.Contains(out, want) {
				t.Errorf("z2jh schema accepted %s (err %v):\n%s", want, err, out)
			}
		}
	})

	t.Run("service keys", func(t *testing.T) {
		for name, svc := range v.Hub.Services {
			for k := range svc {
				if !slices.Contains(jupyterHubServiceKeys, k) {
					t.Errorf("hub.services.%s.%s: JupyterHub 5.5 stops at startup on an unknown service key (it knows %v)", name, k, jupyterHubServiceKeys)
				}
			}
		}
	})

	t.Run("roles grant exactly the scopes of the calls", func(t *testing.T) {
		var roles []string
		for name := range v.Hub.LoadRoles {
			roles = append(roles, name)
		}
		var want []string
		for name := range hubCalls {
			want = append(want, name)
		}
		want = append(want, "user")
		sort.Strings(roles)
		sort.Strings(want)
		if diff := cmp.Diff(want, roles); diff != "" {
			t.Errorf("hub.loadRoles (-a role per service and user +file):\n%s", diff)
		}
		for service, calls := range hubCalls {
			var scopes []string
			for _, c := range calls {
				for _, s := range c.scopes {
					if !slices.Contains(scopes, s) {
						scopes = append(scopes, s)
					}
				}
			}
			role := v.Hub.LoadRoles[service]
			got := slices.Clone(role.Scopes)
			sort.Strings(scopes)
			sort.Strings(got)
			if diff := cmp.Diff(scopes, got); diff != "" {
				t.Errorf("hub.loadRoles.%s scopes (-what its Hub API calls need +file):\n%s", service, diff)
			}
			if diff := cmp.Diff([]string{service}, role.Services); diff != "" {
				t.Errorf("hub.loadRoles.%s services (-want +file):\n%s", service, diff)
			}
			if _, ok := v.Hub.Services[service]; !ok {
				t.Errorf("hub.loadRoles.%s has no hub.services.%s entry", service, service)
			}
		}
		want = []string{"self"}
		for _, s := range panelServices {
			want = append(want, "access:services!service="+s)
		}
		if diff := cmp.Diff(want, v.Hub.LoadRoles["user"].Scopes); diff != "" {
			t.Errorf("hub.loadRoles.user scopes (-self and the services users call +file):\n%s", diff)
		}
	})

	t.Run("the admin view is listed and an OAuth client without a confirmation page", func(t *testing.T) {
		usage := v.Hub.Services["gpu-usage"]
		got := map[string]any{"display": usage["display"], "oauth_no_confirm": usage["oauth_no_confirm"], "has url": usage["url"] != nil}
		want := map[string]any{"display": true, "oauth_no_confirm": true, "has url": true}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("hub.services.gpu-usage (-want +file):\n%s", diff)
		}
	})

	t.Run("urls name the chart's Services", func(t *testing.T) {
		// The full install the file is written for: release gpuhub in z2jh's namespace, every service on.
		objs := rendered(t, "--set", "quota.enabled=true", "--set", "quota.waitlist.enabled=true",
			"--set", "profiles.enabled=true", "--set", "culler.enabled=true")
		want := map[string]string{}
		for _, o := range objs {
			d, ok := o.(*appsv1.Deployment)
			if !ok {
				continue
			}
			var name string
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "JUPYTERHUB_SERVICE_NAME" {
					name = e.Value
				}
			}
			for _, o := range objs {
				if s, ok := o.(*corev1.Service); ok && s.Spec.Selector["app.kubernetes.io/component"] == d.Spec.Selector.MatchLabels["app.kubernetes.io/component"] {
					want[name] = fmt.Sprintf("http://%s:%d", s.Name, s.Spec.Ports[0].Port)
				}
			}
		}
		got := map[string]string{}
		for name, svc := range v.Hub.Services {
			got[name], _ = svc["url"].(string)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("hub.services urls (-the chart's Services +file):\n%s", diff)
		}
	})

	t.Run("z2jh's culler off, the waitlist on, GPUs packed", func(t *testing.T) {
		if v.Cull.Enabled == nil || *v.Cull.Enabled {
			t.Error("cull.enabled is not false: z2jh's culler would run next to gpu-culler")
		}
		if v.Hub.ExtraEnv["GPUHUB_WAITLIST"] != "1" {
			t.Errorf("hub.extraEnv.GPUHUB_WAITLIST = %q, want \"1\" (the chart's quota.waitlist.enabled)", v.Hub.ExtraEnv["GPUHUB_WAITLIST"])
		}
		if len(v.Scheduling.UserScheduler.PluginConfig) == 0 {
			t.Error("no scheduling.userScheduler.pluginConfig: the user-scheduler would not pack GPUs")
		}
	})
}

// TestZ2JHReadmeSnippets: every other z2jh values snippet in the READMEs (```yaml blocks that start with `hub:`,
// optional settings) is one z2jh 4.4.0 accepts, with service keys the Hub knows. The copies of z2jh-values.yaml
// are checked to be the file itself (chart/cmd/chartreadme).
func TestZ2JHReadmeSnippets(t *testing.T) {
	z2jh := z2jhSchemaChart(t)
	for _, readme := range []string{"README.md", filepath.Join("..", "README.md")} {
		b, err := os.ReadFile(readme)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range strings.Split(string(b), "```yaml\n")[1:] {
			body, _, _ := strings.Cut(block, "```")
			if !strings.HasPrefix(body, "hub:") {
				continue
			}
			t.Run(fmt.Sprintf("%s block %d", readme, i+1), func(t *testing.T) {
				var v z2jhValues
				if err := yaml.Unmarshal([]byte(body), &v); err != nil {
					t.Fatalf("not YAML: %v\n%s", err, body)
				}
				for name, svc := range v.Hub.Services {
					for k := range svc {
						if !slices.Contains(jupyterHubServiceKeys, k) {
							t.Errorf("hub.services.%s.%s: the Hub refuses unknown service keys", name, k)
						}
					}
				}
				values := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(values, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				if out, err := helm(t, "template", "z2jh", z2jh, "--kube-version", kubeVersion, "-f", values); err != nil {
					t.Errorf("z2jh 4.4.0 rejects the snippet: %v\n%s\n--- snippet ---\n%s", err, out, body)
				}
			})
		}
	}
}

// z2jhSchemaChart writes a chart that holds nothing but z2jh 4.4.0's values and schema (testdata/z2jh-4.4.0):
// `helm template` of it checks values files against z2jh's schema (additionalProperties false on most objects).
func z2jhSchemaChart(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"values.yaml", "values.schema.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "z2jh-4.4.0", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: jupyterhub\nversion: 4.4.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
