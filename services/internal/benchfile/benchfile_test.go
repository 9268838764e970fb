package benchfile

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.Int("users", 10000, "")
	fs.Duration("duration", 10*time.Second, "")
	fs.String("sut-env", "GOGC=200", "")
	fs.String("culler-args", "", "")
	fs.String("note", "", "")
	if err := fs.Parse([]string{"--users", "300", "--note", "it's slow", "--duration=1s"}); err != nil {
		t.Fatal(err)
	}
	given, all := Flags(fs)
	if diff := cmp.Diff([]string{"--duration=1s", `--note='it'\''s slow'`, "--users=300"}, given); diff != "" {
		t.Errorf("given (-want +got):\n%s", diff)
	}
	want := []string{"--culler-args=''", "--duration=1s", `--note='it'\''s slow'`, "--sut-env=GOGC=200", "--users=300"}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("all (-want +got):\n%s", diff)
	}
}

func TestDescribe(t *testing.T) {
	tests := map[string]struct {
		cpuinfo, meminfo, release string
		want                      string
	}{
		"x86": {
			cpuinfo: "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n",
			meminfo: "MemTotal:       24683652 kB\nMemFree:         1000 kB\n", release: "6.1.0-18-amd64",
			want: "AMD EPYC 7B13, 2 CPUs, 23.5 GiB memory, " + runtime.GOOS + "/" + runtime.GOARCH + ", kernel 6.1.0-18-amd64",
		},
		"no model name (arm)": {
			cpuinfo: "processor\t: 0\nBogoMIPS\t: 50.00\n\nHardware\t: BCM2835\n",
			want:    "BCM2835, 1 CPU, " + runtime.GOOS + "/" + runtime.GOARCH,
		},
		"nothing known": {
			want: "unknown CPU, " + plural(runtime.NumCPU(), "CPU") + ", " + runtime.GOOS + "/" + runtime.GOARCH,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := describe(tc.cpuinfo, tc.meminfo, tc.release); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMachineOnThisMachine(t *testing.T) {
	if _, err := os.Stat("/proc/cpuinfo"); err != nil {
		t.Skip("no /proc/cpuinfo")
	}
	m := Machine()
	if strings.HasPrefix(m, "unknown CPU") || !strings.Contains(m, " CPU") {
		t.Errorf("Machine() = %q: want a CPU model and a count", m)
	}
}

func TestCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ctx := context.Background()
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(dir)) // not inside a repository of the machine's
	if got := Commit(ctx, dir); !strings.HasPrefix(got, "unknown (git rev-parse") {
		t.Errorf("not a repository: got %q, want unknown (git rev-parse ...)", got)
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	git("add", "a.txt")
	git("commit", "-q", "-m", "a")
	short := git("rev-parse", "--short", "HEAD")
	if got := Commit(ctx, dir); got != short {
		t.Errorf("clean: got %q, want %q", got, short)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := Commit(ctx, dir), short+", with uncommitted changes"; got != want {
		t.Errorf("changed file: got %q, want %q", got, want)
	}
	git("checkout", "-q", "a.txt")
	if err := os.WriteFile(filepath.Join(dir, "new.go"), []byte("package x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := Commit(ctx, dir), short+", with uncommitted changes"; got != want {
		t.Errorf("untracked file: got %q, want %q", got, want)
	}
	if err := os.Remove(filepath.Join(dir, "new.go")); err != nil {
		t.Fatal(err)
	}
	// Result files the benchmarks wrote and nobody committed yet are not changes to what was measured.
	if err := os.MkdirAll(filepath.Join(dir, ResultsDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsDir, "usage.md"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := Commit(ctx, filepath.Join(dir, ResultsDir)); got != short {
		t.Errorf("an uncommitted result file, asked from its folder: got %q, want %q", got, short)
	}
}

var header = Header{
	Title: "B2 spawn admission", Command: "make bench-quota",
	Date:    time.Date(2026, 12, 1, 10, 22, 5, 0, time.FixedZone("CET", 3600)),
	Machine: "AMD EPYC, 2 CPUs, 23.5 GiB memory, linux/amd64", Commit: "abc1234, with uncommitted changes", Go: "go1.26.8",
	Given: []string{"--runs=1"}, All: []string{"--runs=1", "--sut-env=a|b"},
}

func TestHeader(t *testing.T) {
	var b bytes.Buffer
	if _, err := header.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	want := "# B2 spawn admission\n\n" +
		"Written by `make bench-quota`; do not edit by hand: run it again to replace this file.\n\n" +
		"| | |\n|---|---|\n" +
		"| date | 2026-12-01 09:22 UTC |\n" +
		"| machine | AMD EPYC, 2 CPUs, 23.5 GiB memory, linux/amd64 |\n" +
		"| commit | abc1234, with uncommitted changes |\n" +
		"| Go | go1.26.8 |\n" +
		"| flags given | `--runs=1` |\n" +
		"| all flags | `--runs=1 --sut-env=a\\|b` |\n\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	b.Reset()
	h := header
	h.Given = nil
	if _, err := h.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| flags given | none |\n") {
		t.Errorf("no flags given: got\n%s", b.String())
	}
}

func TestNew(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.Int("runs", 3, "")
	if err := fs.Parse([]string{"--runs=1"}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	h := New(context.Background(), "B7 spawn form", "make bench-profiles", fs)
	if h.Title != "B7 spawn form" || h.Command != "make bench-profiles" || h.Go != runtime.Version() {
		t.Errorf("title, command, Go: %q %q %q", h.Title, h.Command, h.Go)
	}
	if h.Date.Before(before) || time.Since(h.Date) > time.Minute {
		t.Errorf("date %v, want now", h.Date)
	}
	if h.Machine == "" || h.Commit == "" {
		t.Errorf("machine %q, commit %q: want both", h.Machine, h.Commit)
	}
	if diff := cmp.Diff([]string{"--runs=1"}, h.Given); diff != "" {
		t.Errorf("given (-want +got):\n%s", diff)
	}
}

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docs", "benchmarks", "quota.md")
	body := Fence("\ntable\n  row 1\n\n")
	if err := Write(path, header, body); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	_, _ = header.WriteTo(&want)
	want.WriteString("```text\ntable\n  row 1\n```\n")
	if diff := cmp.Diff(want.String(), string(got)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A second write replaces the file and leaves nothing else in the folder.
	if err := Write(path, header, "second\n"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "quota.md" {
		t.Errorf("folder holds %v, want quota.md only", entries)
	}
	if got, _ := os.ReadFile(path); !strings.HasSuffix(string(got), "|\n\nsecond\n") {
		t.Errorf("second write: got\n%s", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v: want 0644", fi.Mode(), err)
	}
}
