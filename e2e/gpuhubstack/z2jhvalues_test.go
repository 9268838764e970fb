package gpuhubstack

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gopkg.in/yaml.v3"
)

// TestLocalHubValues: the local Hub gets the chart's z2jh values file with only the local differences: loopback
// urls, tokens, services left out with their roles, the waitlist switch; the rest (display, oauth_no_confirm,
// the user role, cull) as in the file, and the glue and profiles beside them.
func TestLocalHubValues(t *testing.T) {
	got, err := LocalHubValues("../../chart/gpuhub", LocalHub{
		Services:    map[string]LocalService{"gpu-usage": {Port: 8101, Token: "usage-token"}, "gpu-quota": {Port: 8102, Token: "quota-token"}},
		NoWaitlist:  true,
		ExtraConfig: map[string]string{"00-z2jh": "c.Spawner.consecutive_failure_limit = 5\n"},
	})
	if err != nil {
		t.Fatal(err)
	}
	glue, err := os.ReadFile("../../chart/gpuhub/" + GlueFile)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Singleuser struct {
			ProfileList []map[string]any `yaml:"profileList"`
		} `yaml:"singleuser"`
		Hub struct {
			Services  map[string]map[string]any `yaml:"services"`
			LoadRoles map[string]struct {
				Scopes []string `yaml:"scopes"`
			} `yaml:"loadRoles"`
			ExtraEnv    map[string]string `yaml:"extraEnv"`
			ExtraConfig map[string]string `yaml:"extraConfig"`
		} `yaml:"hub"`
		Cull map[string]any `yaml:"cull"`
	}
	if err := yaml.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	wantServices := map[string]map[string]any{
		"gpu-usage": {"url": "http://127.0.0.1:8101", "apiToken": "usage-token", "display": true, "oauth_no_confirm": true},
		"gpu-quota": {"url": "http://127.0.0.1:8102", "apiToken": "quota-token", "display": false},
	}
	if diff := cmp.Diff(wantServices, v.Hub.Services); diff != "" {
		t.Errorf("hub.services (-want +got):\n%s", diff)
	}
	var roles []string
	for name := range v.Hub.LoadRoles {
		roles = append(roles, name)
	}
	if diff := cmp.Diff([]string{"gpu-quota", "gpu-usage", "user"}, roles, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("hub.loadRoles (-want +got):\n%s", diff)
	}
	if _, ok := v.Hub.ExtraEnv["GPUHUB_WAITLIST"]; ok {
		t.Error("NoWaitlist kept hub.extraEnv.GPUHUB_WAITLIST")
	}
	if v.Hub.ExtraConfig["gpuhub"] != string(glue) || v.Hub.ExtraConfig["00-z2jh"] == "" {
		t.Error("hub.extraConfig lost the chart's glue or the extra snippet")
	}
	if len(v.Singleuser.ProfileList) == 0 || v.Cull["enabled"] != false {
		t.Errorf("values lost e2e/hub/values.yaml's profiles or the file's cull.enabled: false:\n%s", got)
	}

	if _, err := LocalHubValues("../../chart/gpuhub", LocalHub{Services: map[string]LocalService{"gpu-usge": {}}}); err == nil {
		t.Error("a service the file does not have was accepted")
	}
}
