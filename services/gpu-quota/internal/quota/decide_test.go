package quota

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// decidePolicy is a campus policy: students get one MIG slice or a T4 share at a time and a small budget,
// researchers up to two whole GPUs, an H100 hour bills 2 and a T4 share hour 1/4.
const decidePolicy = `
default:
  maxGPUs: 1
  maxServers: 2
  budgets:
    - {window: 24h, gpuHours: 8}
  weights:
    "gpu H100-80GB-HBM3": 2
    shared: 0.25
groups:
  students:
    maxGPUs: 3/7
    maxServers: 1
    allowedKinds: [mig, shared]
    budgets:
      - {window: 24h, gpuHours: 2}
      - {window: 7d, gpuHours: 6}
  researchers:
    maxGPUs: 2
    maxGPUsPerKind: {mig: 3/7}
    maxServers: 3
    priority: 10
  guests:
    maxGPUs: 0
    maxServers: 0
    budgets: [{window: 24h, gpuHours: 0}]
users:
  admin: {exempt: true}
  carol: {allowedKinds: []}
`

// hours builds Usage.GPUHours: window, then class and hours pairs.
func hours(kv ...any) map[time.Duration]map[string]float64 {
	out := map[time.Duration]map[string]float64{}
	var w time.Duration
	for i := 0; i < len(kv); i++ {
		if d, ok := kv[i].(time.Duration); ok {
			w = d
			out[w] = map[string]float64{}
			continue
		}
		out[w][kv[i].(string)] = kv[i+1].(float64)
		i++
	}
	return out
}

// student and researcher usage: nothing used in any window the policy has.
var (
	noHours = hours(day, 7*day)
	studs   = []string{"students"}
	resr    = []string{"researchers"}
)

type decideCase struct {
	user   string
	groups []string
	closed bool
	usage  Usage
	req    []gpu.Allocation
	want   Decision // Message aside: the messages are golden (TestMessagesGolden)
}

func decideCases() map[string]decideCase {
	return map[string]decideCase{
		"CPU-only server: no GPU quota applies": {
			user: "bob", groups: studs, usage: Usage{Held: allocs(mig("3g.20gb", 3)), Servers: 1, GPUHours: noHours},
			want: Decision{Allow: true, Check: Check{Reason: ReasonNoGPU}},
		},
		"exempt: admitted whatever the use": {
			user: "admin", usage: Usage{Held: allocs(whole(h100, 2)), Servers: 2},
			req:  allocs(whole(h100, 4)),
			want: Decision{Allow: true, Check: Check{Reason: ReasonExempt, From: user("admin")}},
		},
		"student, first MIG slice: within every limit": {
			user: "bob", groups: studs, usage: Usage{GPUHours: noHours}, req: allocs(mig("3g.20gb", 3)),
			want: Decision{Allow: true, Check: Check{Reason: ReasonOK, Limit: 3.0 / 7, Requested: 3.0 / 7, From: group("students")}},
		},
		"student holding a MIG slice asks for a second: max_gpus, and max_servers too": {
			user: "bob", groups: studs, usage: Usage{Held: allocs(mig("3g.20gb", 3)), Servers: 1, GPUHours: noHours},
			req: allocs(mig("3g.20gb", 3)),
			want: Decision{Check: Check{Reason: ReasonMaxGPUs, Limit: 3.0 / 7, Held: 3.0 / 7, Requested: 3.0 / 7, From: group("students")},
				Also: []Check{{Reason: ReasonMaxServers, Limit: 1, Held: 1, Requested: 1, From: group("students")}}},
		},
		"student holding a T4 share asks for a MIG slice: the sum is over": {
			user: "bob", groups: []string{"students"}, usage: Usage{Held: allocs(timeSliced(t4, 4)), GPUHours: noHours},
			req:  allocs(mig("3g.20gb", 3)),
			want: Decision{Check: Check{Reason: ReasonMaxGPUs, Limit: 3.0 / 7, Held: 0.25, Requested: 3.0 / 7, From: group("students")}},
		},
		"student asks for a whole H100: kind_not_allowed first, over max_gpus as well": {
			user: "bob", groups: studs, usage: Usage{GPUHours: noHours}, req: allocs(whole(h100, 1)),
			want: Decision{Check: Check{Reason: ReasonKindNotAllowed, Kind: gpu.KindGPU, Requested: 1, From: group("students")},
				Also: []Check{{Reason: ReasonMaxGPUs, Limit: 3.0 / 7, Requested: 1, From: group("students")}}},
		},
		"a user allowed no kind at all": {
			user: "carol", usage: Usage{GPUHours: hours(day)}, req: allocs(timeSliced(t4, 4)),
			want: Decision{Check: Check{Reason: ReasonKindNotAllowed, Kind: gpu.KindShared, Requested: 0.25, From: user("carol")}},
		},
		"student over the 24h budget": {
			user: "bob", groups: studs, req: allocs(mig("1g.5gb", 1)),
			usage: Usage{GPUHours: hours(day, "mig A100-SXM4-40GB 3g.20gb", 2.5, 7*day, "mig A100-SXM4-40GB 3g.20gb", 2.5)},
			want:  Decision{Check: Check{Reason: ReasonBudgetExhausted, Window: day, Budget: 2, Used: 2.5, From: group("students")}},
		},
		"student exactly at the budget: spent": {
			user: "bob", groups: studs, req: allocs(mig("1g.5gb", 1)),
			usage: Usage{GPUHours: hours(day, "mig A100-SXM4-40GB 3g.20gb", 2.0, 7*day, "mig A100-SXM4-40GB 3g.20gb", 2.0)},
			want:  Decision{Check: Check{Reason: ReasonBudgetExhausted, Window: day, Budget: 2, Used: 2, From: group("students")}},
		},
		"student within the day but over the week": {
			user: "bob", groups: studs, req: allocs(mig("1g.5gb", 1)),
			usage: Usage{GPUHours: hours(day, "mig A100-SXM4-40GB 3g.20gb", 0.5, 7*day, "mig A100-SXM4-40GB 3g.20gb", 6.5)},
			want:  Decision{Check: Check{Reason: ReasonBudgetExhausted, Window: 7 * day, Budget: 6, Used: 6.5, From: group("students")}},
		},
		"weights: 6 hours of a T4 share bill 1.5, within a budget of 2": {
			user: "bob", groups: studs, req: allocs(timeSliced(t4, 4)),
			usage: Usage{GPUHours: hours(day, "shared T4", 6.0, 7*day, "shared T4", 6.0)},
			want:  Decision{Allow: true, Check: Check{Reason: ReasonOK, Limit: 3.0 / 7, Requested: 0.25, From: group("students")}},
		},
		"weights: 4 H100-hours bill 8, the default's daily budget": {
			user: "rita", groups: resr, req: allocs(whole(h100, 1)),
			usage: Usage{GPUHours: hours(day, "gpu H100-80GB-HBM3", 4.0)},
			want:  Decision{Check: Check{Reason: ReasonBudgetExhausted, Window: day, Budget: 8, Used: 8, From: dflt}},
		},
		"weights: 3.9 H100-hours bill 7.8, within it": {
			user: "rita", groups: resr, req: allocs(whole(h100, 1)),
			usage: Usage{GPUHours: hours(day, "gpu H100-80GB-HBM3", 3.9)},
			want:  Decision{Allow: true, Check: Check{Reason: ReasonOK, Limit: 2, Requested: 1, From: group("researchers")}},
		},
		"researcher with two H100s asks for a third": {
			user: "rita", groups: resr, req: allocs(whole(h100, 1)),
			usage: Usage{Held: allocs(whole(h100, 1), whole(h100, 1)), Servers: 2, GPUHours: hours(day)},
			want:  Decision{Check: Check{Reason: ReasonMaxGPUs, Limit: 2, Held: 2, Requested: 1, From: group("researchers")}},
		},
		"researcher asks for three H100s at once": {
			user: "rita", groups: resr, req: allocs(whole(h100, 3)), usage: Usage{GPUHours: hours(day)},
			want: Decision{Check: Check{Reason: ReasonMaxGPUs, Limit: 2, Requested: 3, From: group("researchers")}},
		},
		"researcher with an H100 asks for an H100 and a MIG slice: the sum of kinds": {
			user: "rita", groups: resr, req: allocs(whole(h100, 1), mig("3g.20gb", 3)),
			usage: Usage{Held: allocs(whole(h100, 1)), Servers: 1, GPUHours: hours(day)},
			want:  Decision{Check: Check{Reason: ReasonMaxGPUs, Limit: 2, Held: 1, Requested: 1 + 3.0/7, From: group("researchers")}},
		},
		"researcher holding a MIG slice asks for another: max_gpus_per_kind": {
			user: "rita", groups: resr, req: allocs(mig("1g.5gb", 1)),
			usage: Usage{Held: allocs(mig("3g.20gb", 3)), Servers: 1, GPUHours: hours(day)},
			want: Decision{Check: Check{Reason: ReasonMaxGPUsPerKind, Kind: gpu.KindMIG, Limit: 3.0 / 7, Held: 3.0 / 7,
				Requested: 1.0 / 7, From: group("researchers")}},
		},
		"researcher with a whole GPU asks for a MIG slice: the per-kind limit counts its kind only": {
			user: "rita", groups: resr, req: allocs(mig("3g.20gb", 3)),
			usage: Usage{Held: allocs(whole(h100, 1)), Servers: 1, GPUHours: hours(day)},
			want:  Decision{Allow: true, Check: Check{Reason: ReasonOK, Limit: 2, Held: 1, Requested: 3.0 / 7, From: group("researchers")}},
		},
		"default user with two T4 shares asks for a third: max_servers": {
			user: "dave", req: allocs(timeSliced(t4, 4)),
			usage: Usage{Held: allocs(timeSliced(t4, 4), timeSliced(t4, 4)), Servers: 2, GPUHours: hours(day)},
			want:  Decision{Check: Check{Reason: ReasonMaxServers, Limit: 2, Held: 2, Requested: 1, From: dflt}},
		},
		"float rounding: 3/7 + 3/7 + 1/7 is exactly the limit of 1": {
			user: "dave", req: allocs(mig("1g.5gb", 1)),
			usage: Usage{Held: allocs(mig("3g.20gb", 3), mig("3g.20gb", 3)), Servers: 1, GPUHours: hours(day)},
			want:  Decision{Allow: true, Check: Check{Reason: ReasonOK, Limit: 1, Held: 6.0 / 7, Requested: 1.0 / 7, From: dflt}},
		},
		"a guest: no GPUs, no servers, no budget": {
			user: "gus", groups: []string{"guests"}, req: allocs(mps(a100, 2)), usage: Usage{GPUHours: hours(day)},
			want: Decision{Check: Check{Reason: ReasonBudgetExhausted, Window: day, Budget: 0, From: group("guests")},
				Also: []Check{
					{Reason: ReasonMaxGPUs, Limit: 0, Requested: 0.5, From: group("guests")},
					{Reason: ReasonMaxServers, Limit: 0, Requested: 1, From: group("guests")},
				}},
		},
		"usage unavailable, open: admitted and said so": {
			user: "bob", groups: studs, req: allocs(mig("1g.5gb", 1)),
			want: Decision{Allow: true, Check: Check{Reason: ReasonUsageUnavailable, Window: day, Budget: 2, From: group("students")}},
		},
		"usage unavailable, open: the limits that can be checked still refuse": {
			user: "bob", groups: studs, req: allocs(mig("1g.5gb", 1)), usage: Usage{Held: allocs(mig("3g.20gb", 3)), Servers: 1},
			want: Decision{Check: Check{Reason: ReasonMaxGPUs, Limit: 3.0 / 7, Held: 3.0 / 7, Requested: 1.0 / 7, From: group("students")},
				Also: []Check{{Reason: ReasonMaxServers, Limit: 1, Held: 1, Requested: 1, From: group("students")}}},
		},
		"usage of one window unavailable, closed: refused": {
			user: "bob", groups: studs, closed: true, req: allocs(mig("1g.5gb", 1)), usage: Usage{GPUHours: hours(day)},
			want: Decision{Check: Check{Reason: ReasonUsageUnavailable, Window: 7 * day, Budget: 6, From: group("students")}},
		},
		"closed, and the one window needed is there": {
			user: "dave", closed: true, req: allocs(mig("1g.5gb", 1)), usage: Usage{GPUHours: hours(day)},
			want: Decision{Allow: true, Check: Check{Reason: ReasonOK, Limit: 1, Requested: 1.0 / 7, From: dflt}},
		},
		"a Hub group without an entry: the default applies": {
			user: "rita", groups: []string{"nobody"}, req: allocs(mig("1g.5gb", 1)), usage: Usage{GPUHours: hours(day)},
			want: Decision{Allow: true, Check: Check{Reason: ReasonOK, Limit: 1, Requested: 1.0 / 7, From: dflt}},
		},
	}
}

// TestDecide: one row per reason, and the precedence, windows and weights they depend on.
func TestDecide(t *testing.T) {
	open, closed := mustPolicy(t, decidePolicy), mustPolicy(t, "onUnavailable: closed\n"+decidePolicy)
	for name, tc := range decideCases() {
		t.Run(name, func(t *testing.T) {
			p := open
			if tc.closed {
				p = closed
			}
			got := Decide(p.Effective(tc.user, tc.groups), tc.usage, Request{Allocations: tc.req})
			opts := cmp.Options{cmpopts.IgnoreFields(Check{}, "Message"), cmpopts.EquateApprox(0, 1e-12)}
			if diff := cmp.Diff(tc.want, got, opts); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
			if got.Allow != (got.Message == "") && got.Reason != ReasonUsageUnavailable {
				t.Errorf("a refusal needs a message, an admission has none: %+v", got)
			}
			for _, c := range got.Also {
				if c.Message != "" {
					t.Errorf("a message for %s, also crossed: only the refusal reported is said", c.Reason)
				}
			}
			// Fits is Decide on the limits that depend on the request: the same answer once the others pass.
			eff := p.Effective(tc.user, tc.groups)
			asked := Request{Allocations: tc.req}
			fits := true
			for _, c := range append([]Check{got.Check}, got.Also...) {
				switch c.Reason {
				case ReasonKindNotAllowed, ReasonMaxGPUs, ReasonMaxGPUsPerKind:
					fits = false
				}
			}
			if got := Fits(eff, tc.usage, asked); got != fits {
				t.Errorf("Fits = %v, want %v", got, fits)
			}
		})
	}
}

// TestUnlimited: no entry at all admits anything, with +Inf as the limit.
func TestUnlimited(t *testing.T) {
	got := Decide(mustPolicy(t, "{}").Effective("zoe", nil), Usage{Held: allocs(whole(h100, 8)), Servers: 8},
		Request{Allocations: allocs(whole(h100, 8))})
	want := Decision{Allow: true, Check: Check{Reason: ReasonOK, Limit: math.Inf(1), Held: 8, Requested: 8}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decide (-want +got):\n%s", diff)
	}
}

// TestMessagesGolden: what each refusal says to the user, in testdata/messages.golden.
func TestMessagesGolden(t *testing.T) {
	open, closed := mustPolicy(t, decidePolicy), mustPolicy(t, "onUnavailable: closed\n"+decidePolicy)
	cases := decideCases()
	// Wordings that the table above does not reach.
	zero := mustPolicy(t, `
groups:
  nomig: {maxGPUsPerKind: {mig: 0}}
  gpulimit: {maxGPUsPerKind: {gpu: 1}}
  small: {maxGPUs: 1/2}
  weighted: {budgets: [{window: 1h, gpuHours: 1}], weights: {gpu: 2}}
  twodays: {budgets: [{window: 48h, gpuHours: 10}, {window: 36h, gpuHours: 10}]}
users:
  uma: {maxGPUs: 1, maxServers: 3}
`)
	extra := map[string]struct {
		p      *Policy
		groups []string
		usage  Usage
		req    []gpu.Allocation
	}{
		"per kind, none of the kind":     {p: zero, groups: []string{"nomig"}, req: allocs(mig("3g.20gb", 3))},
		"per kind, held already":         {p: zero, groups: []string{"gpulimit"}, req: allocs(whole(h100, 1)), usage: Usage{Held: allocs(whole(h100, 1)), Servers: 1}},
		"per kind, too big alone":        {p: zero, groups: []string{"gpulimit"}, req: allocs(whole(h100, 2))},
		"held below the limit, sum over": {p: zero, groups: []string{"small"}, req: allocs(mig("3g.20gb", 3)), usage: Usage{Held: allocs(timeSliced(t4, 4)), Servers: 1}},
		"user's own limit, several held": {p: zero, req: allocs(mig("3g.20gb", 3)), usage: Usage{Held: allocs(mig("3g.20gb", 3), mig("3g.20gb", 3), mps(a100, 2)), Servers: 3}},
		"weighted hourly budget":         {p: zero, groups: []string{"weighted"}, req: allocs(whole(h100, 1)), usage: Usage{GPUHours: hours(time.Hour, "gpu H100-80GB-HBM3", 0.5)}},
		"windows in days and hours":      {p: zero, groups: []string{"twodays"}, req: allocs(whole(h100, 1)), usage: Usage{GPUHours: hours(36*time.Hour, "gpu H100-80GB-HBM3", 10.0, 48*time.Hour, "gpu H100-80GB-HBM3", 12.25)}},
	}
	var b strings.Builder
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	slices.Sort(names)
	// write prints the refusal's message, and what each limit also crossed would say if it came first.
	write := func(name string, eff Effective, u Usage, req []gpu.Allocation) {
		d := Decide(eff, u, Request{Allocations: req})
		if d.Allow {
			return
		}
		fmt.Fprintf(&b, "%s\n  %s: %s\n", name, d.Reason, d.Message)
		s := situation{eff: eff, u: u, r: Request{Allocations: req}, held: byKind(u.Held), asked: byKind(req)}
		for _, c := range d.Also {
			fmt.Fprintf(&b, "  also %s: %s\n", c.Reason, s.say(c))
		}
		b.WriteString("\n")
	}
	for _, name := range names {
		tc := cases[name]
		p := open
		if tc.closed {
			p = closed
		}
		write(name, p.Effective(tc.user, tc.groups), tc.usage, tc.req)
	}
	names = names[:0]
	for name := range extra {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		tc := extra[name]
		write(name, tc.p.Effective("uma", tc.groups), tc.usage, tc.req)
	}
	golden.Check(t, "messages.golden", b.String())
}

// BenchmarkDecide is the in-process cost of one admission: merging a student's entries and deciding, what the
// service does per request (issue 10's B2 asks p99 <= 100 µs for the whole decision).
func BenchmarkDecide(b *testing.B) {
	p := mustPolicy(b, decidePolicy)
	u := Usage{Held: allocs(timeSliced(t4, 4)), Servers: 1,
		GPUHours: hours(day, "shared T4", 1.0, "mig A100-SXM4-40GB 3g.20gb", 0.5, 7*day, "shared T4", 3.0)}
	r := Request{Allocations: allocs(mig("3g.20gb", 3))}
	groups := []string{"students", "physics", "ta"}
	for b.Loop() {
		_ = Decide(p.Effective("bob", groups), u, r)
	}
}

func TestHoursText(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 2: "2", 2.345: "2.35", 48: "48", 0.5: "0.5", 0.004: "0.004", 0.00423: "0.0042", 0.1: "0.1", 0.0004: "under 0.001"} {
		if got := hoursText(in); got != want {
			t.Errorf("hoursText(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestZeroBudgetNeedsNoUsage: a budget of 0 refuses a GPU server even while GPU-hours cannot be read (review
// finding: under onUnavailable open it was admitted as usage_unavailable, against the README).
func TestZeroBudgetNeedsNoUsage(t *testing.T) {
	p := mustPolicy(t, "groups:\n  guests:\n    budgets: [{window: 24h, gpuHours: 0}]\n")
	got := Decide(p.Effective("gus", []string{"guests"}), Usage{}, Request{Allocations: allocs(whole(h100, 1))})
	if got.Allow || got.Reason != ReasonBudgetExhausted || !strings.Contains(got.Message, "a budget of 0 GPU-hours") {
		t.Errorf("Decide = allow %v, %s: %q; want budget_exhausted", got.Allow, got.Reason, got.Message)
	}
}

// TestKindShares: shares are summed by kind in the order messages list kinds (the vocabulary, then other
// kinds by name), also past the kinds kept in place.
func TestKindShares(t *testing.T) {
	type share struct {
		Kind  gpu.Kind
		Share float64
	}
	alloc := func(k gpu.Kind, n, d int64) gpu.Allocation {
		return gpu.Allocation{Kind: k, Count: 1, Numerator: n, Denominator: d}
	}
	var many []gpu.Allocation
	var wantMany []share
	for _, k := range gpu.Kinds() {
		wantMany = append(wantMany, share{k, 1})
	}
	for i := range 6 {
		k := gpu.Kind(fmt.Sprintf("other-%d", 5-i))
		many = append(many, alloc(k, 1, 1))
		wantMany = append(wantMany, share{gpu.Kind(fmt.Sprintf("other-%d", i)), 1})
	}
	for _, k := range slices.Backward(gpu.Kinds()) {
		many = append(many, alloc(k, 1, 1))
	}
	tests := map[string]struct {
		allocs    []gpu.Allocation
		want      []share
		wantTotal float64
	}{
		"none": {},
		"one kind summed": {allocs: []gpu.Allocation{alloc(gpu.KindMIG, 3, 7), alloc(gpu.KindMIG, 1, 7)},
			want: []share{{gpu.KindMIG, 4.0 / 7}}, wantTotal: 4.0 / 7},
		"vocabulary order": {allocs: []gpu.Allocation{alloc(gpu.KindShared, 1, 4), alloc("tpu", 1, 1), alloc(gpu.KindGPU, 1, 1), alloc(gpu.KindShared, 1, 4)},
			want: []share{{gpu.KindGPU, 1}, {gpu.KindShared, 0.5}, {"tpu", 1}}, wantTotal: 2.5},
		"more kinds than kept in place": {allocs: many, want: wantMany, wantTotal: 11},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ks := byKind(tc.allocs)
			var got []share
			for _, s := range ks.list() {
				got = append(got, share{s.kind, s.share})
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("byKind (-want +got):\n%s", diff)
			}
			if got := ks.total(); math.Abs(got-tc.wantTotal) > 1e-12 {
				t.Errorf("total = %v, want %v", got, tc.wantTotal)
			}
			for _, w := range tc.want {
				if got := ks.of(w.Kind); math.Abs(got-w.Share) > 1e-12 {
					t.Errorf("of(%s) = %v, want %v", w.Kind, got, w.Share)
				}
			}
		})
	}
}
