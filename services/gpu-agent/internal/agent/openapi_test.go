package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/gpuhub/gpuhub/services/internal/apicheck"
)

const openAPIPath = "../../openapi.yaml"

// oaSchema is the part of a schema the key walk needs.
type oaSchema struct {
	Ref        string               `yaml:"$ref"`
	Properties map[string]*oaSchema `yaml:"properties"`
	Items      *oaSchema            `yaml:"items"`
	OneOf      []*oaSchema          `yaml:"oneOf"`
}

type oaResponse struct {
	Ref     string `yaml:"$ref"`
	Content map[string]struct {
		Schema *oaSchema `yaml:"schema"`
	} `yaml:"content"`
}

type oaDoc struct {
	Paths map[string]map[string]struct {
		Access    string                `yaml:"x-gpuhub-access"`
		Responses map[string]oaResponse `yaml:"responses"`
	} `yaml:"paths"`
	Components struct {
		Responses map[string]oaResponse `yaml:"responses"`
		Schemas   map[string]*oaSchema  `yaml:"schemas"`
	} `yaml:"components"`
}

func readOpenAPI(t *testing.T) *oaDoc {
	t.Helper()
	b, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc oaDoc
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return &doc
}

// literalRoute matches the patterns apicheck.SourceRoutes does not: a whole literal, "GET /api/v1/snapshot".
var literalRoute = regexp.MustCompile(`"(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^"]*)"`)

// TestOpenAPIRoutes: every route the agent's source registers is documented, and every documented one is
// registered. apicheck.Load refuses the document (its credential is no Hub one, see its description), so the
// operations are read here and handed to apicheck.Routes.
func TestOpenAPIRoutes(t *testing.T) {
	if _, err := apicheck.Load(openAPIPath); err == nil || !strings.Contains(err.Error(), "x-gpuhub-credential") {
		t.Fatalf("apicheck.Load = %v, want the missing x-gpuhub-credential: if apicheck now takes the agent's token, use Load and its suites", err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
	registered := apicheck.SourceRoutes(t, map[string]string{}, files...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range literalRoute.FindAllStringSubmatch(string(b), -1) {
			registered = append(registered, m[1]+" "+strings.TrimSuffix(m[2], "{$}"))
		}
	}
	slices.Sort(registered)
	registered = slices.Compact(registered)

	doc := &apicheck.Document{}
	for path, item := range readOpenAPI(t).Paths {
		for method, op := range item {
			if _, err := apicheck.ParseAccess(op.Access); err != nil {
				t.Errorf("%s %s: x-gpuhub-access: %v", method, path, err)
			}
			doc.Operations = append(doc.Operations, &apicheck.Operation{Method: strings.ToUpper(method), Path: path})
		}
	}
	apicheck.Routes(t, doc, registered)
}

// declaredKeys lists the key paths a schema declares ("gpus[].migDevices[].uuid").
func declaredKeys(t *testing.T, doc *oaDoc, s *oaSchema, path string, out map[string]bool) {
	t.Helper()
	for depth := 0; s != nil && s.Ref != ""; depth++ {
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		if s = doc.Components.Schemas[name]; s == nil || depth > 8 {
			t.Fatalf("unresolved schema %s", name)
		}
	}
	if s == nil {
		return
	}
	for _, alt := range s.OneOf {
		declaredKeys(t, doc, alt, path, out)
	}
	for k, p := range s.Properties {
		out[joinKey(path, k)] = true
		declaredKeys(t, doc, p, joinKey(path, k), out)
	}
	declaredKeys(t, doc, s.Items, path+"[]", out)
}

// answerKeys lists the key paths of a JSON value, the union over array elements.
func answerKeys(v any, path string, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out[joinKey(path, k)] = true
			answerKeys(e, joinKey(path, k), out)
		}
	case []any:
		for _, e := range v {
			answerKeys(e, path+"[]", out)
		}
	}
}

func joinKey(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// responseSchema is the JSON schema the document gives GET path's answer with status code.
func responseSchema(t *testing.T, doc *oaDoc, path, code string) *oaSchema {
	t.Helper()
	r, ok := doc.Paths[path]["get"].Responses[code]
	if !ok {
		t.Fatalf("GET %s: no %s answer documented", path, code)
	}
	if r.Ref != "" {
		r = doc.Components.Responses[strings.TrimPrefix(r.Ref, "#/components/responses/")]
	}
	media, ok := r.Content["application/json"]
	if !ok || media.Schema == nil {
		t.Fatalf("GET %s %s: no application/json schema", path, code)
	}
	return media.Schema
}

// TestOpenAPIMatchesSnapshot keeps openapi.yaml honest: what Handler serves has exactly the keys the schema
// declares, nested ones included, less the omitempty ones a case cannot have.
func TestOpenAPIMatchesSnapshot(t *testing.T) {
	doc := readOpenAPI(t)
	// A GPU that cannot be read, and a failed attempt after the good sample, bring the omitempty keys.
	lostGPU := func() *Agent {
		a := newTestAgent(readingWithLostGPU(), nvmlPIDs)
		if err := a.SampleOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		a.sampler.(*fakeSampler).err = errors.New("DeviceGetCount: ERROR_UNKNOWN")
		_ = a.SampleOnce(context.Background())
		return a
	}
	sampled := func() *Agent {
		a := newTestAgent(nvmlReading(), nvmlPIDs)
		if err := a.SampleOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		return a
	}
	tests := []struct {
		name  string
		agent func() *Agent
		code  int
		// omitted are declared keys this answer leaves out (omitempty).
		omitted []string
	}{
		{name: "every key", agent: lostGPU, code: http.StatusOK},
		{name: "healthy sample", agent: sampled, code: http.StatusOK, omitted: []string{"health.lastError", "gpus[].error"}},
		{name: "no sample yet", agent: func() *Agent { return newTestAgent(nvmlReading(), nvmlPIDs) }, code: http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tt.agent().Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/api/v1/snapshot", nil))
			if rec.Code != tt.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.code, rec.Body)
			}
			var body any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			answerKeys(body, "", got)
			want := map[string]bool{}
			declaredKeys(t, doc, responseSchema(t, doc, "/api/v1/snapshot", strconv.Itoa(tt.code)), "", want)
			for _, k := range tt.omitted {
				delete(want, k)
			}
			if diff := cmp.Diff(sortedKeys(want), sortedKeys(got)); diff != "" {
				t.Errorf("keys (-documented +served):\n%s", diff)
			}
		})
	}
}
