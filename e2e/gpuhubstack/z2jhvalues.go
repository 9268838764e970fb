package gpuhubstack

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/gpuhub/gpuhub/e2e/hub"
)

// Z2JHValuesFile is gpuhub's z2jh values inside the chart directory: what a z2jh admin passes with -f, and what
// the local Hub loads (LocalHubValues).
const Z2JHValuesFile = "files/z2jh-values.yaml"

// LocalService is where a service of the z2jh values runs on the local cluster.
type LocalService struct {
	Port  int    // on 127.0.0.1
	Token string // its Hub token (z2jh generates one into its Secret; here the caller does)
}

// LocalHub is how the local Hub's gpuhub values differ from a z2jh release with the z2jh values (the hub pod's own
// differences are hubproc.PodDifferences; e2e/README.md lists both in one table).
type LocalHub struct {
	// Services run on loopback: each entry's url becomes http://127.0.0.1:<port> and its token apiToken. Services
	// of the file not named here are left out with their roles, as the chart's NOTES tell an admin
	// (--set hub.services.<name>=null --set hub.loadRoles.<name>=null).
	Services map[string]LocalService
	// NoWaitlist drops hub.extraEnv.GPUHUB_WAITLIST (gpu-quota runs without --waitlist).
	NoWaitlist bool
	// ExtraConfig adds hub.extraConfig snippets next to the glue (tests: z2jh's spawn settings).
	ExtraConfig map[string]string
}

// LocalHubValues returns the local Hub's values: e2e/hub/values.yaml (singleuser settings, the static profileList)
// with the chart's z2jh values file (hub.services, hub.loadRoles, hub.extraEnv, cull and scheduling), the glue as
// hub.extraConfig.gpuhub, and local's overrides. e2e/hub renders z2jh's chart with them and the Hub runs z2jh's own
// jupyterhub_config.py on the result, so it runs what admins install; what the local cluster must change on top
// (the user-scheduler off, ...) is hubproc.PodDifferences.
func LocalHubValues(chartDir string, local LocalHub) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(chartDir, Z2JHValuesFile))
	if err != nil {
		return nil, fmt.Errorf("z2jh values: %w", err)
	}
	var z2jh map[string]any
	if err := yaml.Unmarshal(b, &z2jh); err != nil {
		return nil, fmt.Errorf("z2jh values %s: %w", Z2JHValuesFile, err)
	}
	h, _ := z2jh["hub"].(map[string]any)
	services, _ := h["services"].(map[string]any)
	roles, _ := h["loadRoles"].(map[string]any)
	for name := range local.Services {
		if _, ok := services[name]; !ok {
			return nil, fmt.Errorf("z2jh values %s have no hub.services.%s", Z2JHValuesFile, name)
		}
	}
	for name, entry := range services {
		l, ok := local.Services[name]
		if !ok {
			delete(services, name)
			delete(roles, name)
			continue
		}
		svc, _ := entry.(map[string]any)
		svc["url"] = "http://127.0.0.1:" + strconv.Itoa(l.Port)
		svc["apiToken"] = l.Token
	}
	if env, _ := h["extraEnv"].(map[string]any); env != nil && local.NoWaitlist {
		delete(env, "GPUHUB_WAITLIST")
	}

	var values map[string]any
	if err := yaml.Unmarshal(hub.DefaultValues(), &values); err != nil {
		return nil, fmt.Errorf("hub values: %w", err)
	}
	merged, err := yaml.Marshal(merge(values, z2jh))
	if err != nil {
		return nil, fmt.Errorf("hub values: %w", err)
	}
	glue, err := os.ReadFile(filepath.Join(chartDir, GlueFile))
	if err != nil {
		return nil, fmt.Errorf("hub glue: %w", err)
	}
	snippets := map[string]string{"gpuhub": string(glue)}
	for k, v := range local.ExtraConfig {
		snippets[k] = v
	}
	return hub.WithExtraConfig(merged, snippets)
}

// merge returns base with over merged in as helm merges values files: maps key by key, anything else replaced.
func merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, ok1 := out[k].(map[string]any)
		om, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			out[k] = merge(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}
