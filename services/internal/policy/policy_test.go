package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/golden"
)

// testConfig exercises every construct the strict walk knows: scalars of each kind, a pointer, a type that
// decodes itself (Duration), maps and lists of structs, an inline struct and a Validate hook.
type testConfig struct {
	Name     string               `yaml:"name"`
	Replicas int                  `yaml:"replicas"`
	Ratio    float64              `yaml:"ratio"`
	Enabled  *bool                `yaml:"enabled"`
	Timeout  Duration             `yaml:"timeout"`
	Limits   map[string]testLimit `yaml:"limits"`
	Items    []testItem           `yaml:"items"`
	Tags     []string             `yaml:"tags"`
	Extra    testExtra            `yaml:",inline"`
	ignored  int                  //nolint:unused // unexported fields are not keys
}

type testLimit struct {
	Max   int      `yaml:"max"`
	Every Duration `yaml:"every"`
}

type testItem struct {
	Window *Duration `yaml:"window"`
	Hours  float64   `yaml:"hours"`
}

type testExtra struct {
	Extra string `yaml:"extra"`
}

func (c *testConfig) Validate() []error {
	var errs []error
	if c.Replicas < 0 {
		errs = append(errs, Errorf([]string{"replicas"}, "cannot be negative"))
	}
	for name := range c.Limits {
		if name == "bad" {
			errs = append(errs, KeyErrorf([]string{"limits", name}, "%q is not a limit's name", name))
		}
	}
	for i, it := range c.Items {
		at := []string{"items", strconv.Itoa(i)}
		if it.Window == nil {
			errs = append(errs, Errorf(append(at, "window"), "an item needs a window"))
		}
		if it.Hours < 0 {
			errs = append(errs, Errorf(append(at, "hours"), "cannot be negative"))
		}
	}
	if c.Name == "top" {
		errs = append(errs, errors.New("an error without a path"))
	}
	return errs
}

// TestDecodeGolden decodes each testdata/decode/*.yaml into testConfig; its .golden file holds the errors, or
// "ok". Run with -update to rewrite them, then read the diff.
func TestDecodeGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "decode", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			var c testConfig
			got := "ok\n"
			if err := Load(file, &c); err != nil {
				var es Errors
				if !errors.As(err, &es) {
					t.Fatalf("Load returned %T, want Errors: %v", err, err)
				}
				for _, e := range es {
					if e.File != file || e.Line < 1 || e.Column < 1 {
						t.Errorf("error without a position in the file: %#v", e)
					}
				}
				got = err.Error() + "\n"
			}
			golden.Check(t, filepath.Join("decode", strings.TrimSuffix(filepath.Base(file), ".yaml")+".golden"), got)
		})
	}
}

func TestDecodeValues(t *testing.T) {
	var c testConfig
	if err := Load(filepath.Join("testdata", "decode", "ok.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	yes := true
	d36h, d30d := Duration(36*time.Hour), Duration(30*24*time.Hour)
	want := testConfig{
		Name: "demo", Replicas: 3, Ratio: 0.5, Enabled: &yes, Timeout: Duration(10 * time.Minute),
		Limits: map[string]testLimit{
			"small": {Max: 1, Every: Duration(24 * time.Hour)},
			"large": {Max: 4, Every: Duration(7 * 24 * time.Hour)},
		},
		Items: []testItem{{Window: &d36h, Hours: 2.5}, {Window: &d30d, Hours: 100}},
		Tags:  []string{"a", "b"},
		Extra: testExtra{Extra: "inline field"},
	}
	if diff := cmp.Diff(want, c, cmp.AllowUnexported(testConfig{})); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
}

// TestFieldErrorPositions: a Validate error lands on the node its path names, through aliases and merges.
func TestFieldErrorPositions(t *testing.T) {
	doc := strings.Join([]string{
		"limits:",              //                      1
		"  small: &s {max: 1}", //         2
		"  large:",             //                     3
		"    <<: *s",           //                   4
		"    every: 1h",        //                5
		"items:",               //                       6
		"  - hours: 1",         //                 7
		"    window: 1h",       //               8
	}, "\n")
	cases := map[string]struct {
		err        error
		line, col  int
		wantInText string
	}{
		"value":                                  {err: Errorf([]string{"items", "0", "window"}, "m"), line: 8, col: 13},
		"key":                                    {err: KeyErrorf([]string{"items", "0", "window"}, "m"), line: 8, col: 5},
		"key of a mapping value":                 {err: KeyErrorf([]string{"limits", "large"}, "m"), line: 3, col: 3},
		"missing key: the deepest node there is": {err: Errorf([]string{"items", "0", "nothing", "deeper"}, "m"), line: 7, col: 5},
		"index out of range":                     {err: Errorf([]string{"items", "3"}, "m"), line: 7, col: 3},
		"through a merge":                        {err: Errorf([]string{"limits", "large", "max"}, "m"), line: 2, col: 19},
		"a key written beside a merge":           {err: Errorf([]string{"limits", "large", "every"}, "m"), line: 5, col: 12},
		"no path":                                {err: errors.New("m"), line: 1, col: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := &walker{file: "f.yaml"}
			root, perr := parse("f.yaml", []byte(doc))
			if perr != nil {
				t.Fatal(perr)
			}
			got := w.locate(root, tc.err)
			msg := "m"
			var fe *FieldError
			if errors.As(tc.err, &fe) {
				msg = fe.Error()
			}
			want := &Error{File: "f.yaml", Line: tc.line, Column: tc.col, Msg: msg}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("locate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    time.Duration
		wantErr string
		format  string // FormatDuration of the result, when it differs from in
	}{
		"minutes":              {in: "10m", want: 10 * time.Minute},
		"hours":                {in: "24h", want: 24 * time.Hour, format: "1d"},
		"days":                 {in: "7d", want: 7 * 24 * time.Hour},
		"30 days":              {in: "30d", want: 30 * 24 * time.Hour},
		"days and hours":       {in: "1d12h", want: 36 * time.Hour},
		"fractional days":      {in: "1.5d", want: 36 * time.Hour, format: "1d12h"},
		"Go compound":          {in: "1h30m", want: 90 * time.Minute},
		"seconds":              {in: "90s", want: 90 * time.Second, format: "1m30s"},
		"zero":                 {in: "0s", want: 0},
		"sub-second":           {in: "1.5s", want: 1500 * time.Millisecond},
		"no unit":              {in: "600", wantErr: `invalid duration "600": a unit is missing (s, m, h or d, as in 600s or 600m)`},
		"negative":             {in: "-1h", wantErr: `invalid duration "-1h": a duration cannot be negative`},
		"negative after days":  {in: "1d-1h", wantErr: `invalid duration "1d-1h": write a number and a unit, s, m, h or d (as in 90s, 10m, 24h, 7d, 1d12h)`},
		"days after hours":     {in: "1h7d", wantErr: `invalid duration "1h7d": write a number and a unit, s, m, h or d (as in 90s, 10m, 24h, 7d, 1d12h)`},
		"unknown unit":         {in: "5x", wantErr: `invalid duration "5x": write a number and a unit, s, m, h or d (as in 90s, 10m, 24h, 7d, 1d12h)`},
		"weeks are not a unit": {in: "1w", wantErr: `invalid duration "1w": write a number and a unit, s, m, h or d (as in 90s, 10m, 24h, 7d, 1d12h)`},
		"empty":                {in: "", wantErr: `invalid duration "": write a number and a unit, s, m, h or d (as in 90s, 10m, 24h, 7d, 1d12h)`},
		"too many days":        {in: "99999999d", wantErr: `invalid duration "99999999d": write a number and a unit, s, m, h or d (as in 90s, 10m, 24h, 7d, 1d12h)`},
		"overflow":             {in: "36600d9999999h", wantErr: `invalid duration "36600d9999999h": write a number and a unit, s, m, h or d (as in 90s, 10m, 24h, 7d, 1d12h)`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseDuration(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("ParseDuration(%q) = %v, %v; want error %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			format := tc.format
			if format == "" {
				format = tc.in
			}
			if s := FormatDuration(got); s != format {
				t.Errorf("FormatDuration(%v) = %q, want %q", got, s, format)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, good, "name: x\n")
	writeFile(t, bad, "name: x\nreplica: 1\nreplicas: -1\n")
	cases := map[string]struct {
		path    string
		want    string
		wantErr bool
	}{
		"ok": {path: good, want: good + ": ok\n"},
		"errors": {path: bad, wantErr: true, want: bad + `:2:1: unknown key "replica" (did you mean "replicas"?)` + "\n" +
			bad + ": 1 error\n"},
		"missing": {path: filepath.Join(dir, "none.yaml"), wantErr: true,
			want: filepath.Join(dir, "none.yaml") + ": read policy: open " + filepath.Join(dir, "none.yaml") + ": no such file or directory\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out strings.Builder
			err := Check(&out, tc.path, &testConfig{})
			if (err != nil) != tc.wantErr {
				t.Errorf("Check error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("Check output (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTooManyErrors: a file of nothing but mistakes is reported up to a bound, and says it stopped.
func TestTooManyErrors(t *testing.T) {
	var b strings.Builder
	for i := range 200 {
		b.WriteString("key" + strconv.Itoa(i) + ": 1\n")
	}
	err := Decode("many.yaml", []byte(b.String()), &testConfig{})
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Decode = %v, want Errors", err)
	}
	if len(es) != maxErrors+1 || es[maxErrors].Msg != tooManyErrors {
		t.Fatalf("got %d errors, the last %q; want %d and %q", len(es), es[len(es)-1].Msg, maxErrors+1, tooManyErrors)
	}
	var out strings.Builder
	dir := t.TempDir()
	path := filepath.Join(dir, "many.yaml")
	writeFile(t, path, b.String())
	_ = Check(&out, path, &testConfig{})
	if !strings.HasSuffix(out.String(), path+": more than 50 errors\n") {
		t.Errorf("Check's last line: %q", out.String()[strings.LastIndex(strings.TrimSuffix(out.String(), "\n"), "\n")+1:])
	}
}

// TestAliasBomb: nested aliases that would expand to billions of nodes are checked in linear time.
func TestAliasBomb(t *testing.T) {
	doc := `a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
`
	// Typed all the way down, so the walk follows every alias; and untyped, so yaml.v3 alone expands them.
	type bomb struct {
		A []string                 `yaml:"a"`
		B [][]string               `yaml:"b"`
		C [][][]string             `yaml:"c"`
		D [][][][]string           `yaml:"d"`
		E [][][][][]string         `yaml:"e"`
		F [][][][][][]string       `yaml:"f"`
		G [][][][][][][]string     `yaml:"g"`
		H [][][][][][][][]string   `yaml:"h"`
		I [][][][][][][][][]string `yaml:"i"`
	}
	for name, into := range map[string]any{"typed": &bomb{}, "untyped": &map[string]any{}} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			err := Decode("bomb.yaml", []byte(doc), into)
			if err == nil {
				t.Fatal("a billion-element document decoded")
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			if want := "bomb.yaml:1:1: YAML: document contains excessive aliasing"; err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
