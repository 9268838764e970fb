package rightsize

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

const (
	gib  = 1 << 30
	mib  = 1 << 20
	h100 = "H100-80GB-HBM3"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// The kinds an H100 node offers, with the memory GFD labels state (MiB), and a T4 (another model: never a
// candidate for an H100 server, since a share of a T4 is not a share of an H100's compute).
var (
	wholeH100 = Offer{Kind: gpu.KindGPU, Class: "gpu " + h100, Product: h100, Description: "Whole " + h100, MemoryBytes: 81559 * mib, ComputeGPUs: 1}
	mig1g     = Offer{Kind: gpu.KindMIG, Class: "mig " + h100 + " 1g.10gb", Product: h100, Description: "MIG 1g.10gb on an H100, 1/7 of a GPU", MemoryBytes: 9984 * mib, ComputeGPUs: 1.0 / 7}
	mig2g     = Offer{Kind: gpu.KindMIG, Class: "mig " + h100 + " 2g.20gb", Product: h100, Description: "MIG 2g.20gb on an H100, 2/7 of a GPU", MemoryBytes: 20096 * mib, ComputeGPUs: 2.0 / 7}
	mig3g     = Offer{Kind: gpu.KindMIG, Class: "mig " + h100 + " 3g.40gb", Product: h100, Description: "MIG 3g.40gb on an H100, 3/7 of a GPU", MemoryBytes: 40320 * mib, ComputeGPUs: 3.0 / 7}
	shared4   = Offer{Kind: gpu.KindShared, Class: "shared " + h100, Product: h100, Description: "1 of 4 time-sliced shares of an H100", MemoryBytes: 81559 * mib / 4, ComputeGPUs: 0.25}
	t4Shared  = Offer{Kind: gpu.KindShared, Class: "shared T4", Product: "T4", Description: "1 of 4 time-sliced shares of a T4", MemoryBytes: 15360 * mib / 4, ComputeGPUs: 0.25}
	allOffers = []Offer{wholeH100, mig1g, mig2g, mig3g, shared4, t4Shared}
)

// recorded is a week's history of a whole H100 in a notebook: busy 6 h of the 40 h held.
func recorded(peakMem uint64, p95SM float64) Profile {
	return Profile{User: "alice", Server: "", Held: wholeH100, From: now.Add(-7 * 24 * time.Hour), To: now.Add(-time.Minute),
		HeldSeconds: 40 * 3600, BusySeconds: 6 * 3600, Samples: 6 * 720, PeakMemoryBytes: peakMem, P95MemoryBytes: peakMem / 2,
		P95SMUtilPercent: p95SM, Scale: 1}
}

func classes(a contract.RightSize) []string {
	var cs []string
	for _, c := range a.Candidates {
		cs = append(cs, c.Class)
	}
	return cs
}

func TestDecide(t *testing.T) {
	type want struct {
		Verdict    string
		Candidates []string
		Caveats    []string
	}
	noMIG := []Offer{wholeH100, shared4, t4Shared}
	onlyWhole := []Offer{wholeH100, t4Shared}
	// exactly the 1g.10gb instance's memory with the margin: fits; a byte more does not.
	edge := uint64(float64(mig1g.MemoryBytes) / (1 + MemoryMargin))
	for name, tc := range map[string]struct {
		p      Profile
		offers []Offer
		want   want
	}{
		"whole GPU with small use: MIG 1g.10gb first": {
			p: recorded(4*gib, 10), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{mig1g.Class, shared4.Class, mig2g.Class, mig3g.Class}},
		},
		"bursty high use: keep": {
			p: recorded(60*gib, 85), offers: allOffers, want: want{Verdict: contract.VerdictKeep},
		},
		"high compute, small memory: keep (no smaller kind guarantees 0.85 GPU)": {
			p: recorded(2*gib, 85), offers: allOffers, want: want{Verdict: contract.VerdictKeep},
		},
		"large memory, small compute: only what holds 60 GiB x 1.2 (nothing smaller)": {
			p: recorded(60*gib, 5), offers: allOffers, want: want{Verdict: contract.VerdictKeep},
		},
		"medium memory: 3g.40gb": {
			p: recorded(30*gib, 20), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{mig3g.Class}},
		},
		"too little busy time: no advice": {
			p: func() Profile { p := recorded(4*gib, 10); p.BusySeconds = MinBusy.Seconds() - 1; return p }(), offers: allOffers,
			want: want{Verdict: contract.VerdictNotEnoughData},
		},
		"exactly the minimum busy time: advice": {
			p: func() Profile { p := recorded(4*gib, 10); p.BusySeconds = MinBusy.Seconds(); return p }(), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{mig1g.Class, shared4.Class, mig2g.Class, mig3g.Class}},
		},
		"too few samples: no advice": {
			p: func() Profile { p := recorded(4*gib, 10); p.Samples = MinSamples - 1; return p }(), offers: allOffers,
			want: want{Verdict: contract.VerdictNotEnoughData},
		},
		"never busy: no advice (the culler's business, not right-sizing)": {
			p: func() Profile { p := recorded(4*gib, 0); p.BusySeconds, p.Samples = 0, 0; return p }(), offers: allOffers,
			want: want{Verdict: contract.VerdictNotEnoughData},
		},
		"MIG not offered: the time-sliced share": {
			p: recorded(4*gib, 10), offers: noMIG,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{shared4.Class}},
		},
		"nothing smaller of the model offered: keep (a T4 share is not a smaller H100)": {
			p: recorded(1*gib, 1), offers: onlyWhole, want: want{Verdict: contract.VerdictKeep},
		},
		"memory margin: peak x 1.2 equals the instance's memory, fits": {
			p: recorded(edge, 10), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{mig1g.Class, shared4.Class, mig2g.Class, mig3g.Class}},
		},
		"memory margin: a little over, the next that holds it": {
			p: recorded(edge+2, 10), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{shared4.Class, mig2g.Class, mig3g.Class}},
		},
		"memory margin: the peak alone fits 1g.10gb but not with the margin": {
			p: recorded(9*gib, 10), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{shared4.Class, mig2g.Class, mig3g.Class}},
		},
		"p95 equal to 1/7 of a GPU: 1g fits": {
			p: recorded(4*gib, 100.0/7), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{mig1g.Class, shared4.Class, mig2g.Class, mig3g.Class}},
		},
		"p95 just over 1/4 of a GPU: 2g.20gb and 3g.40gb": {
			p: recorded(4*gib, 26), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{mig2g.Class, mig3g.Class}},
		},
		"MIG 3g.40gb at 20 % of the instance (0.086 GPU), 5 GiB: 1g.10gb": {
			p: func() Profile {
				p := recorded(5*gib, 20)
				p.Held, p.Scale = mig3g, 3.0/7
				return p
			}(), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{mig1g.Class, shared4.Class, mig2g.Class}},
		},
		"simulated samples: advice with a caveat": {
			p: func() Profile { p := recorded(4*gib, 10); p.Simulated = true; return p }(), offers: noMIG,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{shared4.Class},
				Caveats: []string{"measured on simulated GPUs: the numbers are not a real workload's"}},
		},
		"utilization unknown for a tenth of the time: a caveat": {
			p: func() Profile { p := recorded(4*gib, 10); p.UnknownSeconds = 4 * 3600; return p }(), offers: noMIG,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{shared4.Class},
				Caveats: []string{"for 4.0 h of the 40.0 h held the utilization was unknown (stale telemetry, or MIG without DCGM): that time is left out"}},
		},
		"utilization unknown all along: no advice, and why": {
			p: func() Profile {
				p := recorded(4*gib, 0)
				p.BusySeconds, p.Samples, p.UnknownSeconds = 0, 0, p.HeldSeconds
				return p
			}(), offers: allOffers,
			want: want{Verdict: contract.VerdictNotEnoughData,
				Caveats: []string{"for 40.0 h of the 40.0 h held the utilization was unknown (stale telemetry, or MIG without DCGM): that time is left out"}},
		},
		"a busy neighbour on the same time-sliced GPU for a tenth of the busy time: a caveat": {
			p: func() Profile {
				p := recorded(4*gib, 10)
				p.Held, p.ContendedSeconds = shared4, 0.1*p.BusySeconds
				return p
			}(), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{mig1g.Class},
				Caveats: []string{"for 36 min of the 6.0 h busy another server was busy on the same GPU: its p95 may be lower than its use alone"}},
		},
		"a busy neighbour for 5 % of the busy time: no caveat (the p95 leaves that out)": {
			p: func() Profile {
				p := recorded(4*gib, 10)
				p.Held, p.ContendedSeconds = shared4, 0.05*p.BusySeconds
				return p
			}(), offers: allOffers,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{mig1g.Class}},
		},
		"memory never measured (the agent reports 0): no advice, and why": {
			p: recorded(0, 10), offers: allOffers,
			want: want{Verdict: contract.VerdictNotEnoughData,
				Caveats: []string{"GPU memory was not measured (the agent reported none): the memory a smaller kind needs is unknown"}},
		},
		"no kind of the model offered now (no nodes of it, or no view yet): keep, and why": {
			p: recorded(4*gib, 10), offers: []Offer{t4Shared},
			want: want{Verdict: contract.VerdictKeep,
				Caveats: []string{"no node offers a kind of H100-80GB-HBM3 now (or its nodes were not read yet): nothing was compared"}},
		},
		"nothing offered at all: keep, and why": {
			p: recorded(4*gib, 10), offers: nil,
			want: want{Verdict: contract.VerdictKeep,
				Caveats: []string{"no node offers a kind of H100-80GB-HBM3 now (or its nodes were not read yet): nothing was compared"}},
		},
		"model unknown (held and offered): never compared, since two unknown models need not be one": {
			p: func() Profile {
				p := recorded(4*gib, 10)
				p.Held.Product, p.Held.Class = "", "gpu unknown"
				return p
			}(),
			offers: func() []Offer {
				o := mig1g
				o.Product, o.Class = "", "mig unknown 1g.10gb"
				return []Offer{o}
			}(),
			want: want{Verdict: contract.VerdictKeep,
				Caveats: []string{"no node offers a kind of this GPU model now (or its nodes were not read yet): nothing was compared"}},
		},
		"stale profile: advice with a caveat": {
			p: func() Profile { p := recorded(4*gib, 10); p.To = now.Add(-10 * 24 * time.Hour); return p }(), offers: noMIG,
			want: want{Verdict: contract.VerdictSmaller, Candidates: []string{shared4.Class},
				Caveats: []string{"the newest sample is 10 days old: the use may have changed since"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			a := Decide(tc.p, tc.offers, now)
			got := want{Verdict: a.Verdict, Candidates: classes(a), Caveats: a.Caveats}
			if len(got.Caveats) == 0 {
				got.Caveats = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\nreason: %s", diff, a.Reason)
			}
		})
	}
}

// TestMIGNotAllowed: the candidates are every kind that fits; the first the user may take is what they are told.
func TestMIGNotAllowed(t *testing.T) {
	a := Decide(recorded(4*gib, 10), allOffers, now)
	noMIG := func(k contract.RightSizeKind) bool { return !k.Kind.MIG() }
	got, ok := First(a, noMIG)
	if !ok || got.Class != shared4.Class {
		t.Errorf("First without MIG = %q, %v; want %q", got.Class, ok, shared4.Class)
	}
	if _, ok := First(a, func(contract.RightSizeKind) bool { return false }); ok {
		t.Error("First with nothing allowed found a candidate")
	}
}

// TestCostWeights: where the project weighs kinds, the ranking and the savings follow the weights, and the held
// unit costs what its class is offered at.
func TestCostWeights(t *testing.T) {
	whole, one, share := wholeH100, mig1g, shared4
	whole.Cost, one.Cost, share.Cost = 2, 0.5, 0.3 // a time-sliced share weighed below a 1g instance
	held := wholeH100                              // the profile's held unit carries no weight: the offer's applies
	p := recorded(4*gib, 10)
	p.Held = held
	a := Decide(p, []Offer{whole, one, share}, now)
	type cand struct {
		Class string
		Saved float64
	}
	var got []cand
	for _, c := range a.Candidates {
		got = append(got, cand{c.Class, c.SavedPerHour})
	}
	want := []cand{{shared4.Class, 1.7}, {mig1g.Class, 1.5}}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got, want := SaveableGPUHours(a), 1.7*40; got-want > 1e-9 || want-got > 1e-9 {
		t.Errorf("SaveableGPUHours = %v, want %v", got, want)
	}
}

// TestAdviceJSON: the whole answer for the commonest case, as consumers read it.
func TestAdviceJSON(t *testing.T) {
	golden.JSON(t, "advice.json", Decide(recorded(4*gib, 10), allOffers, now))
	golden.JSON(t, "not-enough-data.json", Decide(func() Profile { p := recorded(4*gib, 10); p.BusySeconds = 1200; return p }(), allOffers, now))
}

// TestOfferOf: a time-sliced replica counts on its part of the memory; a MIG instance on its own.
func TestOfferOf(t *testing.T) {
	node := gpu.Node{Labels: map[string]string{
		gpu.LabelProduct: "NVIDIA-H100-80GB-HBM3", gpu.LabelMemoryMiB: "81559", gpu.LabelReplicas: "4",
		gpu.LabelSharingStrategy: gpu.SharingTimeSlicing,
	}}
	as := gpu.Allocations(map[string]int64{gpu.ResourceGPUShared: 1}, node)
	if len(as) != 1 {
		t.Fatalf("allocations: %+v", as)
	}
	got := OfferOf(as[0], 0)
	want := Offer{Kind: gpu.KindShared, Class: "shared H100-80GB-HBM3", Product: h100, Description: "1 of 4 time-sliced shares of an H100",
		MemoryBytes: 81559 * mib / 4, ComputeGPUs: 0.25}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestOffersOf: one offer per class however many nodes offer it, with the project's weight where it has one.
func TestOffersOf(t *testing.T) {
	mixed := gpu.Node{Labels: map[string]string{gpu.LabelProduct: "NVIDIA-H100-80GB-HBM3", gpu.LabelMIGStrategy: "mixed",
		gpu.LabelMIGMemoryMiB("1g.10gb"): "9984", gpu.LabelMIGSlicesGI("1g.10gb"): "1"}}
	var units []gpu.Allocation
	for range 2 { // two nodes alike
		units = append(units, gpu.Allocations(map[string]int64{gpu.MIGResource("1g.10gb"): 7}, mixed)...)
	}
	got := OffersOf(units, map[string]float64{"mig H100-80GB-HBM3 1g.10gb": 0.2})
	want := []Offer{{Kind: gpu.KindMIG, Class: "mig H100-80GB-HBM3 1g.10gb", Product: h100, Description: "MIG 1g.10gb on an H100, 1/7 of a GPU",
		MemoryBytes: 9984 * mib, ComputeGPUs: 1.0 / 7, Cost: 0.2}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
