package policy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

func mustPolicy(t testing.TB, yaml string) *Policy {
	t.Helper()
	var p Policy
	if err := ipolicy.Decode("test.yaml", []byte(yaml), &p); err != nil {
		t.Fatalf("policy:\n%v", err)
	}
	return &p
}

// readmeExample is the code block of services/gpu-culler/README.md after "<!-- example policy -->".
func readmeExample(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- example policy -->\n```yaml\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatal("README.md has no example policy")
	}
	return string(m[1])
}

// TestPolicyErrorsGolden loads each testdata/bad/*.yaml; its .golden file holds the errors as `gpuhub policy
// check` prints them.
func TestPolicyErrorsGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "bad", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			var out bytes.Buffer
			err := ipolicy.Check(&out, file, &Policy{})
			var es ipolicy.Errors
			if !errors.As(err, &es) {
				t.Fatalf("Check = %v, want errors", err)
			}
			golden.Check(t, filepath.Join("bad", strings.TrimSuffix(filepath.Base(file), ".yaml")+".golden"), out.String())
		})
	}
}

const (
	h100Slug = "gpu-h100-80gb-hbm3"
	t4Slug   = "shared-t4"
)

// TestRule: field-by-field precedence, profile > kind > gpu > built-in; cpu apart.
func TestRule(t *testing.T) {
	p := mustPolicy(t, readmeExample(t))
	ignoreFrom := cmpopts.IgnoreFields(Rule{}, "From", "Exempt")
	exempt := Exempt{Users: []string{"alice"}, Groups: []string{"staff"}, Annotations: map[string]string{"gpuhub.io/cull": "never"}}
	base := Rule{StaleAfter: 2 * time.Minute, Exempt: exempt, IdlePeriod: time.Hour, Utilization: 5, MemoryTolerance: 256 << 20,
		Warn: 15 * time.Minute, Snooze: time.Hour, MaxSnoozes: 2, MaxAge: 7 * 24 * time.Hour, Action: Stop}
	with := func(f func(*Rule)) Rule { r := base; f(&r); return r }
	cases := map[string]struct {
		kind     gpu.Kind
		profile  string
		want     Rule
		wantFrom map[string]string
	}{
		"whole GPU without a profile": {
			kind: gpu.KindGPU, want: with(func(r *Rule) { r.Kind = gpu.KindGPU }),
			wantFrom: map[string]string{"idlePeriod": "gpu", "maxAge": "gpu", "idleWhenContended": FromBuiltin, "hubIdlePeriod": FromBuiltin},
		},
		"H100 profile over gpu": {
			kind: gpu.KindGPU, profile: h100Slug,
			want: with(func(r *Rule) {
				r.Kind, r.Profile, r.IdlePeriod, r.HubIdlePeriod, r.MaxSnoozes = gpu.KindGPU, h100Slug, 30*time.Minute, 30*time.Minute, 1
			}),
			wantFrom: map[string]string{"idlePeriod": "profiles." + h100Slug, "maxSnoozes": "profiles." + h100Slug, "warn": "gpu"},
		},
		"a profile of another kind does not apply": {
			kind: gpu.KindMIG, profile: h100Slug,
			want:     with(func(r *Rule) { r.Kind, r.Profile, r.MaxAge = gpu.KindMIG, h100Slug, 3*24*time.Hour }),
			wantFrom: map[string]string{"idlePeriod": "gpu", "maxAge": "kinds.mig"},
		},
		"time-sliced share: kind rule": {
			kind: gpu.KindShared, profile: t4Slug,
			want: with(func(r *Rule) {
				r.Kind, r.Profile, r.Utilization, r.IdlePeriod, r.IdleWhenContended = gpu.KindShared, t4Slug, 2, 30*time.Minute, 20*time.Minute
			}),
			wantFrom: map[string]string{"utilization": "kinds.shared", "idleWhenContended": "kinds.shared", "memoryTolerance": "gpu"},
		},
		"time-sliced MIG is not mig": {
			kind: gpu.KindSharedMIG, want: with(func(r *Rule) { r.Kind = gpu.KindSharedMIG }),
			wantFrom: map[string]string{"maxAge": "gpu"},
		},
		"CPU-only": {
			want: Rule{CPU: true, StaleAfter: 2 * time.Minute, IdlePeriod: time.Hour, Warn: 10 * time.Minute,
				Snooze: time.Hour, MaxSnoozes: 2, Action: StopAndRemove},
			wantFrom: map[string]string{"idlePeriod": "cpu", "warn": "cpu", "action": "cpu", "snooze": FromBuiltin, "maxAge": FromBuiltin},
		},
		"CPU-only with a profile": {
			profile: "cpu",
			want: Rule{CPU: true, Profile: "cpu", StaleAfter: 2 * time.Minute, IdlePeriod: time.Hour, Warn: 10 * time.Minute,
				Snooze: time.Hour, MaxSnoozes: 2, Action: StopAndRemove},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := p.Rule(tc.kind, tc.profile)
			if diff := cmp.Diff(tc.want, got, ignoreFrom); diff != "" {
				t.Errorf("Rule (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(exempt, got.Exempt, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Exempt (-want +got):\n%s", diff)
			}
			for k, want := range tc.wantFrom {
				if got.From[k] != want {
					t.Errorf("From[%s] = %q, want %q", k, got.From[k], want)
				}
			}
		})
	}
}

// TestEmptyPolicy: {} culls GPU servers by the built-in values and leaves CPU-only servers alone.
func TestEmptyPolicy(t *testing.T) {
	p := mustPolicy(t, "{}")
	want := Rule{Kind: gpu.KindMPS, StaleAfter: DefaultStaleAfter, IdlePeriod: DefaultIdlePeriod, Utilization: DefaultUtilization,
		MemoryTolerance: DefaultMemoryTolerance, Warn: DefaultWarn, Snooze: DefaultSnooze, MaxSnoozes: DefaultMaxSnoozes, Action: Stop}
	if diff := cmp.Diff(want, p.Rule(gpu.KindMPS, ""), cmpopts.IgnoreFields(Rule{}, "From")); diff != "" {
		t.Errorf("GPU rule (-want +got):\n%s", diff)
	}
	if r := p.Rule("", ""); !r.CPU || r.IdlePeriod != 0 || r.MaxAge != 0 {
		t.Errorf("CPU rule of {}: %+v", r)
	}
	if p.EveryPeriod() != time.Minute || p.Workers() != 10 {
		t.Errorf("every %s, concurrency %d", p.EveryPeriod(), p.Workers())
	}
}

func TestIdlePeriodFor(t *testing.T) {
	r := Rule{IdlePeriod: time.Hour, IdleWhenContended: 20 * time.Minute}
	if r.IdlePeriodFor(false) != time.Hour || r.IdlePeriodFor(true) != 20*time.Minute {
		t.Errorf("%+v", r)
	}
	r.IdleWhenContended = 0
	if r.IdlePeriodFor(true) != time.Hour {
		t.Errorf("without idleWhenContended: %s", r.IdlePeriodFor(true))
	}
}

// While contended, the idle period is idleWhenContended and a snooze lasts no longer than it.
func TestContendedPeriods(t *testing.T) {
	type periods struct {
		Under        bool
		Idle, Snooze time.Duration
	}
	cases := map[string]struct {
		tc        Rule
		contended bool
		want      periods
	}{
		"not contended": {
			tc:   Rule{IdlePeriod: time.Hour, IdleWhenContended: 20 * time.Minute, Snooze: time.Hour},
			want: periods{Idle: time.Hour, Snooze: time.Hour},
		},
		"contended: the shorter idle period, the snooze cut to it": {
			tc: Rule{IdlePeriod: time.Hour, IdleWhenContended: 20 * time.Minute, Snooze: time.Hour}, contended: true,
			want: periods{Under: true, Idle: 20 * time.Minute, Snooze: 20 * time.Minute},
		},
		"contended, a snooze already shorter: kept": {
			tc: Rule{IdlePeriod: time.Hour, IdleWhenContended: 20 * time.Minute, Snooze: 10 * time.Minute}, contended: true,
			want: periods{Under: true, Idle: 20 * time.Minute, Snooze: 10 * time.Minute},
		},
		"contended, no idleWhenContended: nothing changes": {
			tc: Rule{IdlePeriod: time.Hour, Snooze: time.Hour}, contended: true,
			want: periods{Idle: time.Hour, Snooze: time.Hour},
		},
		"idle culling only while contended": {
			tc: Rule{IdleWhenContended: 20 * time.Minute, Snooze: time.Hour}, contended: true,
			want: periods{Under: true, Idle: 20 * time.Minute, Snooze: 20 * time.Minute},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := periods{Under: tc.tc.UnderContention(tc.contended), Idle: tc.tc.IdlePeriodFor(tc.contended), Snooze: tc.tc.SnoozeFor(tc.contended)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExempts(t *testing.T) {
	x := Exempt{Users: []string{"alice"}, Groups: []string{"staff"}, Admins: true,
		Annotations: map[string]string{"gpuhub.io/cull": "never", "example.org/keep": "*"}}
	cases := map[string]struct {
		user        string
		groups      []string
		admin       bool
		annotations map[string]string
		want        string
	}{
		"user":                {user: "alice", want: "user alice"},
		"group":               {user: "bob", groups: []string{"students", "staff"}, want: "group staff"},
		"admin":               {user: "root", admin: true, want: "admin"},
		"annotation value":    {user: "bob", annotations: map[string]string{"gpuhub.io/cull": "never"}, want: "annotation gpuhub.io/cull=never"},
		"other value":         {user: "bob", annotations: map[string]string{"gpuhub.io/cull": "soon"}},
		"annotation wildcard": {user: "bob", annotations: map[string]string{"example.org/keep": ""}, want: "annotation example.org/keep="},
		"nobody":              {user: "bob", groups: []string{"students"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := x.Exempts(tc.user, tc.groups, tc.admin, tc.annotations); got != tc.want {
				t.Errorf("Exempts = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseBytes(t *testing.T) {
	cases := map[string]struct {
		want    int64
		wantErr bool
	}{
		"0": {}, "256MiB": {want: 256 << 20}, "1GiB": {want: 1 << 30}, "500MB": {want: 500e6}, "1.5KiB": {want: 1536}, "1000B": {want: 1000},
		"256": {wantErr: true}, "-1MiB": {wantErr: true}, "1XB": {wantErr: true}, "1iB": {wantErr: true}, "2PiB": {wantErr: true}, "99999TiB": {wantErr: true},
	}
	for in, tc := range cases {
		got, err := ParseBytes(in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, error %v", in, got, err, tc.want, tc.wantErr)
		}
	}
	for _, b := range []Bytes{0, 256 << 20, 1 << 30, 1536, 1000} {
		back, err := ParseBytes(b.String())
		if err != nil || Bytes(back) != b {
			t.Errorf("%d writes %q, which reads %d, %v", int64(b), b.String(), back, err)
		}
	}
}

// TestZ2JHDefaults: the README's translation of z2jh's cull defaults loads and means what they meant.
func TestZ2JHDefaults(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)z2jh's defaults, as a gpu-culler file:\n\n```yaml\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatal("README.md has no z2jh defaults block")
	}
	p := mustPolicy(t, string(m[1]))
	r := p.Rule("", "")
	if p.EveryPeriod() != 600*time.Second || p.Workers() != 10 || r.IdlePeriod != 3600*time.Second || r.MaxAge != 0 || r.Action != Stop {
		t.Errorf("z2jh defaults: every %s, concurrency %d, rule %+v", p.EveryPeriod(), p.Workers(), r)
	}
}

// TestZ2JHKeys: the README's migration table names every key of z2jh 4.4.0's cull section, and no other.
func TestZ2JHKeys(t *testing.T) {
	// The repository's copy of z2jh 4.4.0's values (chart/testdata), so the test runs on every checkout.
	schema, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "chart", "testdata", "z2jh-4.4.0", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sec := regexp.MustCompile(`(?s)\ncull:\n(.*?)\n\S`).FindSubmatch(schema)
	if sec == nil {
		t.Fatal("no cull: section in z2jh values")
	}
	var want []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-zA-Z]+):`).FindAllSubmatch(sec[1], -1) {
		want = append(want, "cull."+string(m[1]))
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(cull\\.[a-zA-Z]+)`").FindAllSubmatch(readme, -1) {
		got = append(got, string(m[1]))
	}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("README's z2jh keys (-z2jh +README):\n%s", diff)
	}
}

// FuzzPolicy: whatever the bytes, decoding never panics; a policy that loads resolves a rule for any server
// that warns before it stops.
func FuzzPolicy(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "bad", "*.yaml"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "gpu", h100Slug)
	}
	if data, err := os.ReadFile(filepath.Join("..", "..", "README.md")); err == nil {
		if m := regexp.MustCompile("(?s)<!-- example policy -->\n```yaml\n(.*?)```").FindSubmatch(data); m != nil {
			f.Add(m[1], "shared", t4Slug)
			f.Add(m[1], "", "cpu")
		}
	}
	f.Add([]byte("gpu: {warn: 1m, idlePeriod: 2m}\nprofiles: {mig-a100-3g-20gb: {idlePeriod: 0s}}"), "mig", "mig-a100-3g-20gb")
	f.Fuzz(func(t *testing.T, data []byte, kind, profile string) {
		var p Policy
		err := ipolicy.Decode("f.yaml", data, &p)
		if err != nil {
			var es ipolicy.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Decode returned %T %v, want Errors", err, err)
			}
			for _, e := range es {
				if e.Line < 1 || e.Column < 1 || e.Msg == "" {
					t.Fatalf("error without a place: %#v", e)
				}
			}
			return
		}
		k := gpu.Kind(kind)
		if !k.Known() {
			k = ""
		}
		r := p.Rule(k, profile)
		if r.Warn <= 0 {
			t.Fatalf("a rule that stops without a warning: %+v", r)
		}
		if p := r.IdlePeriod; p > 0 && r.Warn >= p {
			t.Fatalf("a warning before the server is idle: %+v", r)
		}
		if r.Action != Stop && r.Action != StopAndRemove {
			t.Fatalf("action %q", r.Action)
		}
	})
}

// The policy make demo runs (and the docs quote) loads.
func TestDemoPolicyLoads(t *testing.T) {
	var p Policy
	if err := ipolicy.Load("../../../../e2e/hub/culler-demo.yaml", &p); err != nil {
		t.Fatal(err)
	}
	if r := p.Rule("gpu", ""); r.IdleWhenContended == 0 {
		t.Errorf("the demo shows contention-aware culling: idleWhenContended is not set (%+v)", r)
	}
}
