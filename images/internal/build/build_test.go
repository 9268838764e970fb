package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/images/internal/oci"
)

func TestShellWords(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []string
		wantErr string
	}{
		"go build":      {in: `CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/x ./services/x`, want: []string{"CGO_ENABLED=0", "go", "build", "-trimpath", "-ldflags=-s -w", "-o", "/out/x", "./services/x"}},
		"single quotes": {in: `a 'b c' "d"e`, want: []string{"a", "b c", "de"}},
		"empty quoted":  {in: `a ""`, want: []string{"a", ""}},
		"pipe":          {in: `go build ./x | tee log`, wantErr: "shell syntax '|'"},
		"and":           {in: `go mod download && go build`, wantErr: "shell syntax '&'"},
		"expansion":     {in: `go build -o $OUT`, wantErr: "shell syntax '$'"},
		"unterminated":  {in: `go build "x`, wantErr: "unterminated quote"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := shellWords(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("shellWords (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetEnv(t *testing.T) {
	got := setEnv([]string{"PATH=/bin", "A=1"}, []string{"A=2", "B=3"})
	if diff := cmp.Diff([]string{"PATH=/bin", "A=2", "B=3"}, got); diff != "" {
		t.Errorf("setEnv (-want +got):\n%s", diff)
	}
}

func TestChanges(t *testing.T) {
	dir := t.TempDir()
	start := oci.Layer{
		{Path: "/etc/keep", Mode: 0o644, Data: []byte("same")},
		{Path: "/etc/edit", Mode: 0o644, Data: []byte("old")},
		{Path: "/etc/gone", Mode: 0o644, Data: []byte("x")},
		{Path: "/var/cache/apt/a.bin", Mode: 0o644, Data: []byte("a")},
		{Path: "/var/cache/apt/b.bin", Mode: 0o644, Data: []byte("b")},
	}
	if err := WriteTree(dir, start); err != nil {
		t.Fatal(err)
	}
	before, err := snapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	// What a RUN does: edit a file (size changes), add one, remove a file and a whole directory.
	if err := os.WriteFile(filepath.Join(dir, "etc", "edit"), []byte("new!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "added"), []byte("+"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "etc", "gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "var", "cache", "apt")); err != nil {
		t.Fatal(err)
	}
	layer, err := changes(dir, before)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range layer {
		if f.Mode.IsDir() {
			continue // parents whose times changed
		}
		got[f.Path] = string(f.Data)
	}
	want := map[string]string{
		"/etc/edit":          "new!",
		"/etc/added":         "+",
		"/etc/.wh.gone":      "",
		"/var/cache/.wh.apt": "", // one whiteout for the directory, none for its files
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

func TestPruneOthers(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"python-bookworm-aaaa", "python-bookworm-bbbb", "python-slim-bookworm-cccc", "python-bookworm-extra-dddd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := PruneOthers(filepath.Join(dir, "python-bookworm-bbbb")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{"python-bookworm-bbbb", "python-bookworm-extra-dddd", "python-slim-bookworm-cccc"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("left after pruning (-want +got):\n%s", diff)
	}
}
