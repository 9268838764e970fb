package build

import (
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
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

// A recipe is built from the context its `docker build` comment ends with (a path from the repository root),
// else from the repository root (images/) or images/z2jh; z2jh's own recipes from their folders of z2jh's
// images/, tagged with z2jh's version.
func TestRecipesContext(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "images")
	files := map[string]string{
		"svc.Dockerfile":        "#   docker build -f images/svc.Dockerfile -t example/svc:1 .\nFROM scratch\n",
		"z2jh/proxy.Dockerfile": "#   docker build -f images/z2jh/proxy.Dockerfile -t example/proxy:1 images/z2jh\nFROM scratch\n",
		"z2jh/sched.Dockerfile": "#   docker build -f images/z2jh/sched.Dockerfile -t example/sched:1 .\nFROM scratch\n",
		"z2jh/plain.Dockerfile": "# no build line\nFROM scratch\n",
	}
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	z2jh := filepath.Join(root, "z2jh", "images")
	rs, err := Recipes(dir, z2jh, "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	got, gotTags := map[string]string{}, map[string]string{}
	for _, r := range rs {
		got[r.Name] = r.Context
		if r.Tag != "" {
			gotTags[r.Name] = r.Tag
		}
	}
	want := map[string]string{
		"svc": root, "proxy": filepath.Join(dir, "z2jh"), "sched": root, "plain": filepath.Join(dir, "z2jh"),
		"k8s-hub": filepath.Join(z2jh, "hub"), "k8s-image-awaiter": filepath.Join(z2jh, "image-awaiter"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("contexts (-want +got):\n%s", diff)
	}
	wantTags := map[string]string{"k8s-hub": "quay.io/jupyterhub/k8s-hub:1.2.3", "k8s-image-awaiter": "quay.io/jupyterhub/k8s-image-awaiter:1.2.3"}
	if diff := cmp.Diff(wantTags, gotTags); diff != "" {
		t.Errorf("z2jh's references (-want +got):\n%s", diff)
	}
}

// A Go toolchain stage's `go build` runs in the build context's directory whose go.mod the recipe copied into
// its WORKDIR, and fails, as in Docker, when the WORKDIR holds none.
func TestGoBuildInCopiedModule(t *testing.T) {
	ctxDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ctxDir, "tools", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.mod", "tools/sub/go.mod", "tools/sub/go.sum"} {
		if err := os.WriteFile(filepath.Join(ctxDir, f), []byte("module x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A stand-in for go: `go build ... -o OUT PKG` writes its working directory to OUT.
	fakeGo := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\nwhile [ $# -gt 1 ]; do if [ \"$1\" = -o ]; then pwd > \"$2\"; fi; shift; done\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		copyLine string
		output   string // go build's -o; /out/x when empty
		want     string
		wantErr  string
	}{
		"repository module": {copyLine: "COPY go.mod ./", want: ctxDir},
		"other module":      {copyLine: "COPY tools/sub/go.mod tools/sub/go.sum ./", want: filepath.Join(ctxDir, "tools", "sub")},
		"module elsewhere":  {copyLine: "COPY tools/sub/go.mod /elsewhere/", wantErr: "WORKDIR /src holds no go.mod"},
		// z2jh's image-awaiter: `COPY *.mod ... .` and `-o out/image-awaiter`, the output from the WORKDIR.
		"relative output": {copyLine: "COPY *.mod .", output: "out/x", want: ctxDir},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			output, from := "/out/x", "/out/x"
			if tc.output != "" {
				output, from = tc.output, path.Join("/src", tc.output)
			}
			df, err := dockerfile.Parse("FROM golang:1.26-bookworm AS build\nWORKDIR /src\n" + tc.copyLine +
				"\nRUN CGO_ENABLED=0 go build -trimpath -o " + output + " example.com/x\nFROM scratch\nCOPY --from=build " + from + " /x\n")
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Context: ctxDir, Go: fakeGo, Arch: "amd64", Logger: slog.New(slog.DiscardHandler)}
			img, err := build(t.Context(), opts, df)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got string
			for _, f := range img.Layers[1] {
				if f.Path == "/x" {
					got = strings.TrimSpace(string(f.Data))
				}
			}
			if got != tc.want {
				t.Errorf("go build ran in %q, want %q", got, tc.want)
			}
		})
	}
}
