package apicheck

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// routePattern matches a ServeMux pattern built in Go source: "GET "+p+"me", "POST "+l.opts.Prefix+"logout",
// "GET "+statePath.
var routePattern = regexp.MustCompile(`"(GET|HEAD|POST|PUT|PATCH|DELETE) "\s*\+\s*([A-Za-z_][\w.]*)(?:\s*\+\s*"([^"]*)")?`)

// SourceRoutes lists the routes registered in Go source files as "METHOD /path" relative to the service
// prefix; vars gives the value of each variable a pattern starts with (e.g. "p": "/api/v1/"). A pattern
// whose variable vars does not name fails the test, so a new way of registering is noticed.
func SourceRoutes(t *testing.T, vars map[string]string, files ...string) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range routePattern.FindAllStringSubmatch(string(b), -1) {
			v, ok := vars[m[2]]
			if !ok {
				t.Fatalf("%s: route %s: what is %s? add it to vars", f, m[0], m[2])
			}
			path := strings.TrimSuffix(v+m[3], "{$}")
			out = append(out, m[1]+" "+path)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Routes checks that the document has exactly the registered routes (ServeMux's {$} is the bare path).
func Routes(t *testing.T, doc *Document, registered []string) {
	t.Helper()
	var documented []string
	for _, op := range doc.Operations {
		documented = append(documented, op.String())
	}
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is served but not in the OpenAPI document", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("%s is documented but not served", d)
		}
	}
	if len(registered) == 0 {
		t.Error(fmt.Errorf("no routes found in the source"))
	}
}
