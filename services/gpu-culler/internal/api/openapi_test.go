package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestOpenAPIMatchesGolden keeps openapi.yaml honest: the keys of the golden answers are their schema's
// properties, and every required property is present.
func TestOpenAPIMatchesGolden(t *testing.T) {
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
	read := func(name string) map[string]any {
		var m map[string]any
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	me, stops, decisions := read("me.json"), read("stops_hub_glue.json"), read("decisions_admin.json")
	objects := map[string]map[string]any{
		"Me":        me,
		"LastStop":  me["lastStop"].(map[string]any),
		"Notice":    me["notices"].([]any)[0].(map[string]any),
		"Snoozed":   read("snooze.json"),
		"Stops":     stops,
		"Decisions": decisions,
		"Decision":  decisions["decisions"].([]any)[0].(map[string]any),
		"Error":     read("snooze_none_left.json"),
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
