// Package golden compares what a test made with a file in the package's testdata/, which `go test -update`
// rewrites (node_exporter's pattern). One helper, so that every package's golden files behave alike: same flag,
// same diff, same hint when a file is missing.
package golden

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Check compares got with testdata/name and reports the difference as (-want +got). With -update it first writes
// got there, creating the directories, so that the diff of the files in git is what a change did.
func Check[T string | []byte](t testing.TB, name string, got T) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

// JSON is Check of v as JSON indented by two spaces, with a final newline; <, > and & are written as they are,
// since people read these files.
func JSON(t testing.TB, name string, v any) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	Check(t, name, buf.Bytes())
}
