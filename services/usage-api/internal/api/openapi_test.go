package api

import (
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

type schemas map[string]struct {
	Required   []string       `yaml:"required"`
	Properties map[string]any `yaml:"properties"`
}

func readSchemas(t *testing.T) schemas {
	t.Helper()
	b, err := os.ReadFile("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas schemas `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return doc.Components.Schemas
}

// answers reads me (alice), users (admin) and cluster and names their objects by schema.
func answers(t *testing.T, srv *httptest.Server) map[string]map[string]any {
	t.Helper()
	_, me := get(t, srv, "GET", prefix+"api/v1/me", "alice-token")
	_, users := get(t, srv, "GET", prefix+"api/v1/users", "root-token")
	_, cluster := get(t, srv, "GET", prefix+"api/v1/cluster", "alice-token")
	server := me["servers"].([]any)[0].(map[string]any)
	objects := map[string]map[string]any{
		"UserUsage":   me,
		"Share":       me["share"].(map[string]any),
		"Server":      server,
		"GPU":         server["gpus"].([]any)[0].(map[string]any),
		"Window":      me["gpuHours"].(map[string]any)["today"].(map[string]any),
		"UserList":    users,
		"UserSummary": users["items"].([]any)[0].(map[string]any),
		"Cluster":     cluster,
	}
	if ns, _ := me["notices"].([]any); len(ns) > 0 {
		objects["Notice"] = ns[0].(map[string]any)
	}
	if b, _ := me["budget"].(map[string]any); b != nil {
		if b["status"] == "unavailable" {
			objects["QuotaUnavailable"] = b
		} else {
			objects["Quota"] = b
		}
	}
	if _, rolling := get(t, srv, "GET", prefix+"api/v1/gpu-hours?windows=24h", "root-token"); rolling != nil {
		objects["RollingHours"] = rolling
	}
	if _, decayed := get(t, srv, "GET", prefix+"api/v1/gpu-hours/decayed?halfLife=7d", "root-token"); decayed != nil {
		objects["DecayedHours"] = decayed
	}
	if _, list := get(t, srv, "GET", prefix+"api/v1/servers", "root-token"); list != nil {
		objects["ServerList"] = list
		if ss := list["servers"].([]any); len(ss) > 0 {
			objects["ServerTelemetry"] = ss[0].(map[string]any)
		}
	}
	if cs := cluster["classes"].([]any); len(cs) > 0 {
		objects["ClassStats"] = cs[0].(map[string]any)
	}
	if as := cluster["agentStatus"].([]any); len(as) > 0 {
		objects["AgentStatus"] = as[0].(map[string]any)
	}
	return objects
}

func checkSchemas(t *testing.T, doc schemas, objects map[string]map[string]any) {
	t.Helper()
	for name, obj := range objects {
		s, ok := doc[name]
		if !ok {
			t.Errorf("schema %s missing", name)
			continue
		}
		for k := range obj {
			if _, ok := s.Properties[k]; !ok {
				t.Errorf("%s: answer has %q, not in the schema", name, k)
			}
		}
		for _, r := range s.Required {
			if _, ok := obj[r]; !ok {
				t.Errorf("%s: required %q missing from the answer", name, r)
			}
		}
	}
}

// TestOpenAPIMatchesResponses keeps openapi.yaml honest: the keys of real answers are the schema's properties,
// and every required property is present.
func TestOpenAPIMatchesResponses(t *testing.T) {
	objects := answers(t, testServer(t))
	for _, name := range []string{"ClassStats", "Notice", "Quota", "RollingHours", "DecayedHours", "ServerList", "ServerTelemetry"} {
		if _, ok := objects[name]; !ok {
			t.Errorf("the test answers have no %s", name)
		}
	}
	checkSchemas(t, readSchemas(t), objects)
}

// TestOpenAPIStaleAnswers checks the fields that only stale or unknown telemetry brings.
func TestOpenAPIStaleAnswers(t *testing.T) {
	const reason = "the GPU agent on node gpu-a100-0 has not sampled since 09:50:00 UTC (10 min)"
	sampled, age := now.Add(-10*time.Minute), 600.0
	v := &usage.View{
		SampledAt: now, Interval: 5 * time.Second,
		Users: map[string]*usage.User{"alice": {Name: "alice", Stale: true, StaleReason: reason, Share: usage.Share{AllocatedGPUs: 3.0 / 7},
			Servers: []usage.Server{{Pod: "jupyter-alice", Namespace: "jhub", Node: "gpu-a100-0", AllocatedGPUs: 3.0 / 7, Stale: true, StaleReason: reason,
				GPUs: []usage.GPU{{Kind: "mig", Resource: "nvidia.com/mig-3g.20gb", Share: 3.0 / 7, ShareNumerator: 3, ShareDenominator: 7,
					UtilizationSource: "none", Stale: true, StaleReason: reason, UtilizationUnknownReason: reason}}}}}},
		Hub: usage.Directory{Users: map[string]usage.HubUser{"alice": {Name: "alice"}, "root": {Name: "root", Admin: true}}},
		Cluster: usage.Cluster{SampledAt: now, Agents: 1, StaleAgents: 1,
			AgentStatus: []usage.AgentStatus{{Node: "gpu-a100-0", SampledAt: &sampled, AgeSeconds: &age, Stale: true, StaleReason: reason}}},
	}
	objects := answers(t, serveView(t, v))
	checkSchemas(t, readSchemas(t), objects)
	for _, name := range []string{"UserUsage", "Server", "GPU", "UserSummary", "AgentStatus", "ServerTelemetry"} {
		if objects[name]["staleReason"] != reason {
			t.Errorf("%s: staleReason %v, want %q", name, objects[name]["staleReason"], reason)
		}
	}
	if objects["ServerTelemetry"]["utilizationUnknownReason"] != reason || objects["ServerTelemetry"]["smUtilPercent"] != nil {
		t.Errorf("ServerTelemetry: %v", objects["ServerTelemetry"])
	}
	if objects["GPU"]["utilizationUnknownReason"] != reason || objects["GPU"]["usedGPUs"] != nil {
		t.Errorf("GPU: %v", objects["GPU"])
	}
}

func serveView(t *testing.T, v *usage.View) *httptest.Server {
	t.Helper()
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "alice"})
	hub.AddUser(hubapi.User{Name: "root", Admin: true})
	hub.AddToken("alice-token", "alice")
	hub.AddToken("root-token", "root")
	state := usage.NewState(usage.NewHistory(time.Hour, 5*time.Second))
	state.Publish(v)
	srv := httptest.NewServer(New(Options{Prefix: prefix, State: state, Ledger: newTestLedger(t),
		Auth: hubauth.New(hubauth.Options{Hub: hub.Client("service-token")}).Middleware, Now: func() time.Time { return now }}))
	t.Cleanup(srv.Close)
	return srv
}
