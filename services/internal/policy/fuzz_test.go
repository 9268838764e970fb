package policy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzDecode: whatever the bytes, Decode never panics, and either decodes or says where the problem is: every
// error is an *Error inside the file (line 1 up to its last line, column 1 up to one past its longest line).
// Whatever it accepts, yaml.v3's strict decoder accepts too. Seeds: the golden test files.
// Run longer with: go test -run '^$' -fuzz FuzzDecode ./services/internal/policy/
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "decode", "*.yaml"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("limits: {x: {<<: [*y]}}"))
	f.Add([]byte("items: [{window: 1d, hours: .nan}]\n---\n"))
	f.Add([]byte("\xef\xbb\xbfname: bom\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c testConfig
		err := Decode("f.yaml", data, &c)
		if err == nil {
			dec := yaml.NewDecoder(bytes.NewReader(data))
			dec.KnownFields(true)
			var again testConfig
			if yerr := dec.Decode(&again); yerr != nil {
				t.Fatalf("Decode accepted what yaml.v3 refuses: %v", yerr)
			}
			return
		}
		var es Errors
		if !errors.As(err, &es) || len(es) == 0 {
			t.Fatalf("Decode returned %T %v, want Errors", err, err)
		}
		lines := splitLines(data)
		longest := 0
		for _, l := range lines {
			longest = max(longest, len(l))
		}
		for _, e := range es {
			if e.File != "f.yaml" || e.Line < 1 || e.Line > len(lines) || e.Column < 1 || e.Column > longest+1 || e.Msg == "" {
				t.Fatalf("error outside the file (%d lines, the longest %d bytes): %#v", len(lines), longest, e)
			}
		}
	})
}
