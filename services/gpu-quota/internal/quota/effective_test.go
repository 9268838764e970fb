package quota

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

const day = 24 * time.Hour

func limit(v float64) Setting[Limit] { return Setting[Limit]{Value: Limit(v)} }

func from(s Setting[Limit], src Source) Setting[Limit] { s.From = src; return s }

var (
	dflt = Source{Level: FromDefault}
	none = Source{}
)

func user(name string) Source                 { return Source{Level: FromUser, Names: []string{name}} }
func group(names ...string) Source            { return Source{Level: FromGroup, Names: names} }
func unlimitedFrom(src Source) Setting[Limit] { return Setting[Limit]{Value: Unlimited, From: src} }

// builtin is the effective policy of a user no entry says anything about.
func builtin(user string, groups ...string) Effective {
	return Effective{User: user, Groups: groups, OnUnavailable: Open, MaxGPUs: unlimitedFrom(none), MaxServers: unlimitedFrom(none)}
}

// TestEffectivePrecedence: a user entry wins field by field; among groups the most generous value of each
// field; then default; an unset limit is unlimited.
func TestEffectivePrecedence(t *testing.T) {
	cases := map[string]struct {
		policy string
		user   string
		groups []string
		want   func() Effective
	}{
		"no entry at all: unlimited, every kind, weight 1": {
			policy: "{}", user: "alice", groups: []string{"students"},
			want: func() Effective { return builtin("alice") },
		},
		"default only": {
			policy: "default: {maxGPUs: 1, maxServers: 2, priority: 1}", user: "alice",
			want: func() Effective {
				e := builtin("alice")
				e.MaxGPUs, e.MaxServers = from(limit(1), dflt), from(limit(2), dflt)
				e.Priority = Setting[int]{Value: 1, From: dflt}
				return e
			},
		},
		"a group's value wins over the default's, a field the group leaves out comes from the default": {
			policy: `
default: {maxGPUs: 1, maxServers: 2}
groups:
  students: {maxGPUs: 3/7}`,
			user: "bob", groups: []string{"students"},
			want: func() Effective {
				e := builtin("bob", "students")
				e.MaxGPUs, e.MaxServers = from(limit(3.0/7), group("students")), from(limit(2), dflt)
				return e
			},
		},
		"several groups: the most generous value per field, each from its own group": {
			policy: `
default: {maxGPUs: 1, exempt: false}
groups:
  students: {maxGPUs: 3/7, maxServers: 2, priority: 5, allowedKinds: [shared, mig], exempt: false}
  staff: {maxGPUs: 2, maxServers: 1, priority: 1, allowedKinds: [gpu], exempt: true}
  physics: {allowedKinds: [mig]}
  unknown-to-hub: {maxGPUs: 8}`,
			user: "carol", groups: []string{"students", "staff", "physics", "not-in-policy"},
			want: func() Effective {
				e := builtin("carol", "physics", "staff", "students")
				e.MaxGPUs = from(limit(2), group("staff"))
				e.MaxServers = from(limit(2), group("students"))
				e.Priority = Setting[int]{Value: 5, From: group("students")}
				e.Exempt = Setting[bool]{Value: true, From: group("staff")}
				e.AllowedKinds = Setting[[]gpu.Kind]{Value: []gpu.Kind{gpu.KindGPU, gpu.KindMIG, gpu.KindShared},
					From: group("physics", "staff", "students")}
				return e
			},
		},
		"a tie names every group that gives the value": {
			policy: `
groups:
  a: {maxGPUs: 1}
  b: {maxGPUs: 1}
  c: {maxGPUs: 0.5}`,
			user: "dan", groups: []string{"c", "b", "a", "a"},
			want: func() Effective {
				e := builtin("dan", "a", "b", "c")
				e.MaxGPUs = from(limit(1), group("a", "b"))
				return e
			},
		},
		"unlimited is the most generous": {
			policy: `
default: {maxGPUs: 1}
groups:
  a: {maxGPUs: unlimited}
  b: {maxGPUs: 4}`,
			user: "dan", groups: []string{"a", "b"},
			want: func() Effective {
				e := builtin("dan", "a", "b")
				e.MaxGPUs = unlimitedFrom(group("a"))
				return e
			},
		},
		"the user's entry wins field by field, even when less generous; the rest comes from groups and default": {
			policy: `
default: {maxServers: 3, priority: 1}
groups:
  researchers: {maxGPUs: 2, maxServers: 2, allowedKinds: [gpu, mig]}
users:
  eve: {maxGPUs: 1/4, allowedKinds: [], exempt: false}`,
			user: "eve", groups: []string{"researchers"},
			want: func() Effective {
				e := builtin("eve", "researchers")
				e.MaxGPUs = from(limit(0.25), user("eve"))
				e.MaxServers = from(limit(2), group("researchers"))
				e.Priority = Setting[int]{Value: 1, From: dflt}
				e.Exempt = Setting[bool]{Value: false, From: user("eve")}
				e.AllowedKinds = Setting[[]gpu.Kind]{Value: []gpu.Kind{}, From: user("eve")}
				return e
			},
		},
		"a user's unlimited lifts the default's limit": {
			policy: `
default: {maxGPUs: 1}
users:
  frank: {maxGPUs: unlimited}`,
			user: "frank",
			want: func() Effective {
				e := builtin("frank")
				e.MaxGPUs = unlimitedFrom(user("frank"))
				return e
			},
		},
		"an empty entry applies and sets nothing": {
			policy: `
default: {maxGPUs: 1}
groups:
  ta:
users:
  gina: {}`,
			user: "gina", groups: []string{"ta"},
			want: func() Effective {
				e := builtin("gina", "ta")
				e.MaxGPUs = from(limit(1), dflt)
				return e
			},
		},
		"per-kind limits merge kind by kind": {
			policy: `
default: {maxGPUsPerKind: {gpu: 0, mig: 3/7, shared: 1/4}}
groups:
  students: {maxGPUsPerKind: {mig: 1/7}}
  labs: {maxGPUsPerKind: {mig: 2/7, mps: 1/2}}
users:
  hal: {maxGPUsPerKind: {shared: 1/2}}`,
			user: "hal", groups: []string{"students", "labs"},
			want: func() Effective {
				e := builtin("hal", "labs", "students")
				e.MaxGPUsPerKind = map[gpu.Kind]Setting[Limit]{
					gpu.KindGPU:    from(limit(0), dflt),
					gpu.KindMIG:    from(limit(2.0/7), group("labs")),
					gpu.KindMPS:    from(limit(0.5), group("labs")),
					gpu.KindShared: from(limit(0.5), user("hal")),
				}
				return e
			},
		},
		"budgets merge window by window": {
			policy: `
default:
  budgets: [{window: 24h, gpuHours: 4}, {window: 30d, gpuHours: 100}]
groups:
  students: {budgets: [{window: 24h, gpuHours: 2}, {window: 7d, gpuHours: 6}]}
  labs: {budgets: [{window: 7d, gpuHours: 10}]}
users:
  ivy: {budgets: [{window: 30d, gpuHours: unlimited}]}`,
			user: "ivy", groups: []string{"students", "labs"},
			want: func() Effective {
				e := builtin("ivy", "labs", "students")
				e.Budgets = map[time.Duration]Setting[Limit]{
					day:      from(limit(2), group("students")),
					7 * day:  from(limit(10), group("labs")),
					30 * day: unlimitedFrom(user("ivy")),
				}
				return e
			},
		},
		"weights merge key by key, the lowest weight of the groups": {
			policy: `
default: {weights: {gpu: 1, "gpu H100-80GB-HBM3": 2, shared: 0.5}}
groups:
  a: {weights: {"gpu H100-80GB-HBM3": 1.5}}
  b: {weights: {"gpu H100-80GB-HBM3": 3, mig: 0.5}}`,
			user: "jo", groups: []string{"a", "b"},
			want: func() Effective {
				e := builtin("jo", "a", "b")
				e.Weights = map[string]Setting[float64]{
					"gpu":                {Value: 1, From: dflt},
					"gpu H100-80GB-HBM3": {Value: 1.5, From: group("a")},
					"mig":                {Value: 0.5, From: group("b")},
					"shared":             {Value: 0.5, From: dflt},
				}
				return e
			},
		},
		"onUnavailable closed is carried": {
			policy: "onUnavailable: closed", user: "kim",
			want: func() Effective {
				e := builtin("kim")
				e.OnUnavailable = Closed
				return e
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := mustPolicy(t, tc.policy)
			if diff := cmp.Diff(tc.want(), p.Effective(tc.user, tc.groups), cmpopts.IgnoreUnexported(Effective{})); diff != "" {
				t.Errorf("Effective (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWeight(t *testing.T) {
	p := mustPolicy(t, `
default:
  weights:
    gpu: 1.5
    "gpu H100-80GB-HBM3": 2
    mig: 0.8
    "mig A100-SXM4-40GB": 0.6
    "mig A100-SXM4-40GB 1g.5gb": 0.1
    shared: 0.25
`)
	// Policy.Effective's lookup order, and the weights map an Effective made by hand has only.
	eff := p.Effective("alice", nil)
	byHand := eff
	byHand.sorted = nil
	cases := map[string]struct {
		class   string
		want    float64
		wantKey string
	}{
		"a class named in full":                    {class: "gpu H100-80GB-HBM3", want: 2, wantKey: "gpu H100-80GB-HBM3"},
		"kind only":                                {class: "gpu A100-SXM4-40GB", want: 1.5, wantKey: "gpu"},
		"model prefix over kind":                   {class: "mig A100-SXM4-40GB 3g.20gb", want: 0.6, wantKey: "mig A100-SXM4-40GB"},
		"the most specific key":                    {class: "mig A100-SXM4-40GB 1g.5gb", want: 0.1, wantKey: "mig A100-SXM4-40GB 1g.5gb"},
		"mig does not match mig-shared":            {class: "mig-shared A100-SXM4-40GB 1g.5gb", want: 1, wantKey: ""},
		"a prefix stops at a word":                 {class: "gpu H100-80GB-HBM3e", want: 1.5, wantKey: "gpu"},
		"no key: 1":                                {class: "mps A100-SXM4-40GB", want: 1, wantKey: ""},
		"time-sliced T4, as in TRESBillingWeights": {class: "shared T4", want: 0.25, wantKey: "shared"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			type result struct {
				Weight float64
				Key    string
			}
			for _, e := range []Effective{eff, byHand} {
				w, key := e.Weight(tc.class)
				if diff := cmp.Diff(result{tc.want, tc.wantKey}, result{w, key}); diff != "" {
					t.Errorf("Weight(%q), lookup order %v (-want +got):\n%s", tc.class, e.sorted != nil, diff)
				}
			}
		})
	}
	hours := map[string]float64{"gpu H100-80GB-HBM3": 3, "shared T4": 8, "mps A100-SXM4-40GB": 1}
	for _, e := range []Effective{eff, byHand} {
		if got, want := e.Weighted(hours), 3*2+8*0.25+1.0; got != want {
			t.Errorf("Weighted, lookup order %v = %v, want %v", e.sorted != nil, got, want)
		}
	}
}

// TestWeightEmptyKey: an empty weights key (the policy refuses it; an Effective made by hand may have it)
// applies to no class, in the lookup order as in the map scan.
func TestWeightEmptyKey(t *testing.T) {
	byHand := Effective{Weights: map[string]Setting[float64]{"": {Value: 5}, "gpu": {Value: 2}}}
	sorted := byHand
	sorted.sortKeys()
	for _, e := range []Effective{byHand, sorted} {
		for class, want := range map[string]float64{"": 1, " x": 1, "gpu H100": 2} {
			if got, _ := e.Weight(class); got != want {
				t.Errorf("Weight(%q), lookup order %v = %v, want %v", class, e.sorted != nil, got, want)
			}
		}
	}
}

func TestWindows(t *testing.T) {
	p := mustPolicy(t, `
default: {budgets: [{window: 30d, gpuHours: 100}, {window: 24h, gpuHours: 4}, {window: 7d, gpuHours: unlimited}]}
`)
	eff := p.Effective("a", nil)
	byHand := eff
	byHand.sorted = nil
	for _, e := range []Effective{eff, byHand} {
		if diff := cmp.Diff([]time.Duration{day, 30 * day}, e.Windows()); diff != "" {
			t.Errorf("Windows, lookup order %v (-want +got):\n%s", e.sorted != nil, diff)
		}
	}
}

func TestGraceAndMode(t *testing.T) {
	cases := map[string]struct {
		policy    string
		wantGrace time.Duration
		wantMode  Mode
	}{
		"defaults":      {policy: "{}", wantGrace: 10 * time.Minute, wantMode: Open},
		"grace":         {policy: "grace: 1h30m\nonUnavailable: closed", wantGrace: 90 * time.Minute, wantMode: Closed},
		"grace in days": {policy: "grace: 1d", wantGrace: day, wantMode: Open},
		"graceSeconds":  {policy: "graceSeconds: 600\nonUnavailable: open", wantGrace: 10 * time.Minute, wantMode: Open},
		"no grace":      {policy: "graceSeconds: 0", wantGrace: 0, wantMode: Open},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			type result struct {
				Grace time.Duration
				Mode  Mode
			}
			p := mustPolicy(t, tc.policy)
			if diff := cmp.Diff(result{tc.wantGrace, tc.wantMode}, result{p.GracePeriod(), p.Unavailable()}); diff != "" {
				t.Errorf("GracePeriod, Unavailable (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSourceString(t *testing.T) {
	for src, want := range map[*Source]string{
		{Level: FromUser, Names: []string{"alice"}}:        "user alice",
		{Level: FromGroup, Names: []string{"students"}}:    "group students",
		{Level: FromGroup, Names: []string{"a", "b", "c"}}: "groups a, b and c",
		{Level: FromDefault}:                               "default",
		{}:                                                 "built-in",
	} {
		if got := src.String(); got != want {
			t.Errorf("%+v: %q, want %q", *src, got, want)
		}
	}
}
