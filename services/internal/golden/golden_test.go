package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// recorder keeps what Check reports instead of failing the test that runs it.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestCheck(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll(filepath.Join("testdata", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "sub", "x.txt"), []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		got      string
		wantDiff bool
	}{
		"same":             {got: "one\ntwo\n"},
		"changed":          {got: "one\nthree\n", wantDiff: true},
		"no final newline": {got: "one\ntwo", wantDiff: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, check := range []func(*recorder){
				func(r *recorder) { Check(r, "sub/x.txt", tc.got) },
				func(r *recorder) { Check(r, "sub/x.txt", []byte(tc.got)) },
			} {
				r := &recorder{TB: t}
				check(r)
				if got := len(r.errs) > 0; got != tc.wantDiff {
					t.Errorf("reported a difference: %v, want %v (%q)", got, tc.wantDiff, r.errs)
				}
				for _, e := range r.errs {
					if !strings.Contains(e, filepath.Join("testdata", "sub", "x.txt")) || !strings.Contains(e, "-update") {
						t.Errorf("report without the file or the way to rewrite it: %q", e)
					}
				}
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	t.Chdir(t.TempDir())
	*update = true
	t.Cleanup(func() { *update = false })
	JSON(t, "new/v.json", map[string]any{"a": []int{1, 2}, "b": "x < y & z"})
	got, err := os.ReadFile(filepath.Join("testdata", "new", "v.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"x < y & z\"\n}\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("written file (-want +got):\n%s", diff)
	}
}
