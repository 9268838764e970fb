package quota

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// TestPolicyErrorsGolden loads each testdata/bad/*.yaml; its .golden file holds the errors, one a line, as
// `gpuhub policy check` prints them.
func TestPolicyErrorsGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "bad", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			var out bytes.Buffer
			err := policy.Check(&out, file, &Policy{})
			var es policy.Errors
			if !errors.As(err, &es) {
				t.Fatalf("Check = %v, want errors", err)
			}
			golden.Check(t, filepath.Join("bad", strings.TrimSuffix(filepath.Base(file), ".yaml")+".golden"), out.String())
		})
	}
}

// readmeBlock is the code block of services/gpu-quota/README.md after the line "<!-- marker -->".
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + " -->\n```[a-z]*\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatalf("README.md has no block after <!-- %s -->", marker)
	}
	return string(m[1])
}

// readmeExample is the README's full policy example.
func readmeExample(t *testing.T) string { return readmeBlock(t, "example policy") }

// TestREADMEQuotes: what the README shows of explain and of the messages is what the code prints.
func TestREADMEQuotes(t *testing.T) {
	p := mustPolicy(t, readmeExample(t))
	if diff := cmp.Diff(readmeBlock(t, "explain carol"), p.Explain("carol", []string{"researchers", "students"})); diff != "" {
		t.Errorf("README's explain of carol (-README +Explain):\n%s", diff)
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	messages, err := os.ReadFile(filepath.Join("testdata", "messages.golden"))
	if err != nil {
		t.Fatal(err)
	}
	quotes := regexp.MustCompile("(?s)\n- `([a-z_]+)`: \"(.*?)\"").FindAllSubmatch(data, -1)
	if len(quotes) < 4 {
		t.Fatalf("found %d quoted messages in README.md", len(quotes))
	}
	for _, q := range quotes {
		text := strings.Join(strings.Fields(string(q[2])), " ")
		if !strings.Contains(string(messages), string(q[1])+": "+text+"\n") {
			t.Errorf("README quotes a %s message that testdata/messages.golden does not have: %q", q[1], text)
		}
	}
}

// TestREADMEExample: the README's example loads, and means what the README says it means.
func TestREADMEExample(t *testing.T) {
	p := mustPolicy(t, readmeExample(t))
	bob := p.Effective("bob", []string{"students"})
	if got := Decide(bob, Usage{Held: allocs(mig("3g.20gb", 3)), Servers: 1, GPUHours: hours(day, 7*day)},
		Request{Allocations: allocs(mig("3g.20gb", 3))}); got.Reason != ReasonMaxGPUs {
		t.Errorf("bob's second MIG slice: %+v", got)
	}
	if got := Decide(bob, Usage{GPUHours: hours(day, 7*day)}, Request{Allocations: allocs(whole(h100, 1))}); got.Reason != ReasonKindNotAllowed {
		t.Errorf("bob's H100: %+v", got)
	}
	carol := p.Effective("carol", []string{"researchers", "students"})
	if carol.MaxGPUs.Value != 2 || !carol.Allows(gpu.KindGPU) {
		t.Errorf("carol, researcher and student: %+v", carol)
	}
	if got := Decide(carol, Usage{Held: allocs(whole(h100, 1)), Servers: 1, GPUHours: hours(day, 7*day, 30*day)},
		Request{Allocations: allocs(whole(h100, 1))}); !got.Allow {
		t.Errorf("carol's second H100: %+v", got)
	}
}

// TestExplainGolden: `gpuhub policy explain` for users of the README's example.
func TestExplainGolden(t *testing.T) {
	p := mustPolicy(t, readmeExample(t))
	var b strings.Builder
	for _, u := range []struct {
		name   string
		groups []string
	}{
		{"bob", []string{"students"}},
		{"carol", []string{"researchers", "students"}},
		{"dave", []string{"staff"}},
		{"alice", []string{"students", "ta"}},
		{"erin", nil},
	} {
		b.WriteString(p.Explain(u.name, u.groups))
		b.WriteString("\n")
	}
	golden.Check(t, "explain.golden", b.String())
}

// FuzzPolicy: any policy that loads can be merged, explained and decided on without a panic, and admits a
// CPU-only server.
func FuzzPolicy(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "bad", "*.yaml"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "alice", "students")
	}
	f.Add([]byte(decidePolicy), "bob", "students")
	f.Add([]byte(decidePolicy), "rita", "researchers")
	f.Fuzz(func(t *testing.T, data []byte, user, group string) {
		var p Policy
		if err := policy.Decode("f.yaml", data, &p); err != nil {
			return
		}
		eff := p.Effective(user, []string{group})
		_ = p.Explain(user, []string{group})
		u := Usage{Held: allocs(mig("3g.20gb", 3)), Servers: 1, GPUHours: hours(day, "gpu H100-80GB-HBM3", 1.0)}
		for _, req := range [][]gpu.Allocation{nil, allocs(whole(h100, 1)), allocs(timeSliced(t4, 4), mig("1g.5gb", 1))} {
			d := Decide(eff, u, Request{Allocations: req})
			if req == nil && !d.Allow {
				t.Fatalf("a CPU-only server refused: %+v", d)
			}
			if !d.Allow && d.Message == "" {
				t.Fatalf("a refusal without a message: %+v", d)
			}
		}
	})
}

func TestLimitYAML(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    Limit
		wantErr string
	}{
		"whole":         {in: "2", want: 2},
		"decimal":       {in: "0.5", want: 0.5},
		"fraction":      {in: "3/7", want: Limit(3.0 / 7)},
		"quoted":        {in: `"3/7"`, want: Limit(3.0 / 7)},
		"quoted number": {in: `"1.5"`, want: 1.5},
		"spaces":        {in: "1 / 4", want: 0.25},
		"unlimited":     {in: "unlimited", want: Unlimited},
		"zero":          {in: "0", want: 0},
		"negative":      {in: "-1", wantErr: `"-1": a limit cannot be negative`},
		"infinity":      {in: ".inf", wantErr: `".inf" is not a limit: write unlimited for no limit`},
		"word":          {in: "lots", wantErr: `expected a number, a fraction such as 3/7, or unlimited; found "lots"`},
		"by zero":       {in: "1/0", wantErr: `"1/0" divides by zero`},
		"bad fraction":  {in: "1/x", wantErr: `expected a number, a fraction such as 3/7, or unlimited; found "1/x"`},
		"a list":        {in: "[1]", wantErr: `expected a number, a fraction such as 3/7, or unlimited`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var e struct {
				L Limit `yaml:"l"`
			}
			err := policy.Decode("l.yaml", []byte("l: "+tc.in), &e)
			if tc.wantErr != "" {
				want := "l.yaml:1:4: l: " + tc.wantErr
				if err == nil || err.Error() != want {
					t.Fatalf("got %v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, e.L); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
