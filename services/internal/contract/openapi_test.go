package contract

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

// TestOpenAPIMatchesTypes: each schema that documents one of these types for people lists exactly the type's
// JSON members, so the openapi.yaml files cannot drift from what the services send.
func TestOpenAPIMatchesTypes(t *testing.T) {
	for _, tc := range []struct {
		file, schema string
		typ          any
	}{
		{"usage-api", "Error", Error{}},
		{"usage-api", "Share", Share{}},
		{"usage-api", "GPU", GPU{}},
		{"usage-api", "Server", Server{}},
		{"usage-api", "Window", Window{}},
		{"usage-api", "UserUsage", UserResponse{}},
		{"usage-api", "Notice", Notice{}},
		{"usage-api", "RollingHours", RollingResponse{}},
		{"usage-api", "DecayedHours", DecayedResponse{}},
		{"usage-api", "WaitlistState", WaitlistStateResponse{}},
		{"usage-api", "WaitlistWritten", WaitlistWriteResponse{}},
		{"usage-api", "ServerList", ServersResponse{}},
		{"usage-api", "ServerTelemetry", Telemetry{}},
		{"usage-api", "UserSummary", UserSummary{}},
		{"usage-api", "UserList", UsersResponse{}},
		{"usage-api", "ClassStats", ClassStats{}},
		{"usage-api", "Cluster", ClusterResponse{}},
		{"usage-api", "AgentStatus", AgentStatus{}},
		{"usage-api", "RightSizeAdvice", RightSizeResponse{}},
		{"usage-api", "RightSize", RightSize{}},
		{"usage-api", "RightSizeKind", RightSizeKind{}},
		{"usage-api", "RightSizeCandidate", RightSizeCandidate{}},
		{"usage-api", "RightSizeEvidence", RightSizeEvidence{}},
		{"usage-api", "RightSizeSavings", RightSizeSavings{}},
		{"usage-api", "RightSizeSavingsRow", RightSizeSavingsRow{}},
		{"gpu-quota", "Error", Error{}},
		{"gpu-quota", "Unavailable", Unavailable{}},
		{"gpu-quota", "AssessRequest", AssessRequest{}},
		{"gpu-quota", "Assessment", Assessment{}},
		{"gpu-quota", "Verdict", Verdict{}},
		{"gpu-quota", "AssessOption", AssessOption{}},
		{"gpu-quota", "VerdictWatchRequest", VerdictWatchRequest{}},
		{"gpu-quota", "VerdictLine", VerdictLine{}},
		{"gpu-quota", "Place", Place{}},
		{"gpu-quota", "Places", Places{}},
	} {
		t.Run(tc.file+"/"+tc.schema, func(t *testing.T) {
			doc := loadDoc(t, "../../"+tc.file+"/openapi.yaml")
			got := doc.properties(t, tc.schema)
			want := jsonMembers(reflect.TypeOf(tc.typ))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s/openapi.yaml schema %s against contract.%s (-type +doc):\n%s", tc.file, tc.schema, reflect.TypeOf(tc.typ).Name(), diff)
			}
		})
	}
}

type schema struct {
	Ref        string               `yaml:"$ref"`
	Properties map[string]yaml.Node `yaml:"properties"`
	AllOf      []schema             `yaml:"allOf"`
}

type document struct {
	Components struct {
		Schemas map[string]schema `yaml:"schemas"`
	} `yaml:"components"`
}

func loadDoc(t *testing.T, path string) *document {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d document
	if err := yaml.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &d
}

// properties are a schema's property names, with those of the schemas it references or combines (allOf).
func (d *document) properties(t *testing.T, name string) []string {
	t.Helper()
	s, ok := d.Components.Schemas[name]
	if !ok {
		t.Fatalf("no schema %s", name)
	}
	var out []string
	var walk func(s schema)
	walk = func(s schema) {
		if s.Ref != "" {
			ref, ok := d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
			if !ok {
				t.Fatalf("%s: no schema %s", name, s.Ref)
			}
			walk(ref)
		}
		for p := range s.Properties {
			out = append(out, p)
		}
		for _, a := range s.AllOf {
			walk(a)
		}
	}
	walk(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// jsonMembers are the names encoding/json gives a struct's members, embedded structs' included.
func jsonMembers(typ reflect.Type) []string {
	var out []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			out = append(out, jsonMembers(f.Type)...)
		case name == "":
			out = append(out, f.Name)
		default:
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
