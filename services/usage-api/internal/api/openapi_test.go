package api

import (
	"os"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestOpenAPIMatchesResponses keeps openapi.yaml honest: the keys of real answers are the schema's properties,
// and every required property is present.
func TestOpenAPIMatchesResponses(t *testing.T) {
	b, err := os.ReadFile("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string       `yaml:"required"`
				Properties map[string]any `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	srv := testServer(t)
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
		"ClassStats":  cluster["classes"].([]any)[0].(map[string]any),
	}
	for name, obj := range objects {
		s, ok := doc.Components.Schemas[name]
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
