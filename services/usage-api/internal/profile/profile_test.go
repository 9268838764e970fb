package profile

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

const (
	gib      = 1 << 30
	interval = 5 * time.Second
	h100     = "H100-80GB-HBM3"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

var offers = []rightsize.Offer{
	{Kind: gpu.KindGPU, Class: "gpu " + h100, Product: h100, Description: "Whole " + h100, MemoryBytes: 80 * gib, ComputeGPUs: 1},
	{Kind: gpu.KindMIG, Class: "mig " + h100 + " 1g.10gb", Product: h100, Description: "MIG 1g.10gb on an H100, 1/7 of a GPU", MemoryBytes: 10 * gib, ComputeGPUs: 1.0 / 7},
	{Kind: gpu.KindMIG, Class: "mig " + h100 + " 3g.40gb", Product: h100, Description: "MIG 3g.40gb on an H100, 3/7 of a GPU", MemoryBytes: 40 * gib, ComputeGPUs: 3.0 / 7},
}

func ptr(x float64) *float64 { return &x }

// unit is one GPU of a server as the view shows it; util < 0: unknown.
func unit(kind gpu.Kind, class string, share, scale, util float64, mem uint64) usage.GPU {
	g := usage.GPU{Kind: kind, Class: class, Product: h100, Share: share, UtilizationScale: scale, MemoryUsedBytes: mem, MemoryTotalBytes: 80 * gib}
	if kind.MIG() {
		g.MemoryTotalBytes = 40 * gib
	}
	if util >= 0 {
		g.SMUtilPercent, g.UsedGPUs = ptr(util), ptr(util/100*scale)
	}
	return g
}

func view(at time.Time, stale bool, gpus ...usage.GPU) *usage.View {
	var held float64
	for _, g := range gpus {
		held += g.Share
	}
	return &usage.View{SampledAt: at, Interval: interval, Users: map[string]*usage.User{
		"alice": {Name: "alice", Servers: []usage.Server{{Name: "", Pod: "jupyter-alice", AllocatedGPUs: held, Stale: stale, GPUs: gpus}}},
	}}
}

func openStore(t *testing.T, path string) *ledger.Store {
	t.Helper()
	s, err := ledger.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestRecordedHistory replays a recorded day of a whole H100 in a notebook: 90 minutes busy at 10 % with 4 GiB
// (one burst to 30 % and 6 GiB), 30 minutes idle, 10 minutes of stale telemetry, with a restart in the middle.
// The profile read back says exactly that, and the advice is MIG 1g.10gb.
func TestRecordedHistory(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	st := openStore(t, path)
	whole := func(util float64, mem uint64) usage.GPU { return unit(gpu.KindGPU, "gpu "+h100, 1, 1, util, mem) }
	r := NewRecorder(2 * interval)
	at := t0
	tick := func(n int, stale bool, g usage.GPU) {
		for range n {
			at = at.Add(interval)
			r.Observe(view(at, stale, g))
		}
	}
	tick(45*12, false, whole(10, 4*gib))
	tick(12, false, whole(30, 6*gib))
	if err := r.Flush(ctx, st, at); err != nil {
		t.Fatal(err)
	}
	// A restart: a new recorder continues the day it reads back.
	r = NewRecorder(2 * interval)
	at = at.Add(time.Minute) // down for a minute: not charged (MaxStep)
	tick(44*12, false, whole(10, 4*gib))
	tick(30*12, false, whole(0, 4*gib))
	tick(10*12, true, whole(-1, 4*gib))
	if err := r.Flush(ctx, st, at); err != nil {
		t.Fatal(err)
	}
	days, err := openStore(t, path).Profiles(ctx, t0, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ps := Profiles(days)
	if len(ps) != 1 {
		t.Fatalf("%d profiles, want 1: %+v", len(ps), ps)
	}
	got := ps[0]
	want := rightsize.Profile{User: "alice", Held: rightsize.Offer{Kind: gpu.KindGPU, Class: "gpu " + h100, Product: h100, MemoryBytes: 80 * gib, ComputeGPUs: 1},
		From: t0.Add(interval), To: at,
		// the first tick after the restart stands for one interval, not the minute down
		HeldSeconds: (45*12 + 12 + 44*12 + 30*12 + 10*12) * 5, BusySeconds: (45*12 + 12 + 44*12) * 5, UnknownSeconds: 10 * 12 * 5,
		Samples: 45*12 + 12 + 44*12, PeakMemoryBytes: 6 * gib, P95MemoryBytes: 5153960756, // the upper edge of 4 GiB's bin, 5/100 of 80 GiB: 6/100
		P95SMUtilPercent: 11, Scale: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("profile (-want +got):\n%s", diff)
	}
	a := rightsize.Decide(got, offers, at)
	if a.Verdict != contract.VerdictSmaller || a.Candidates[0].Class != offers[1].Class {
		t.Errorf("advice %s %v: %s", a.Verdict, a.Candidates, a.Reason)
	}
}

// TestMIGScale: a MIG instance's utilization is of the instance; the profile keeps the scale that turns it into
// GPU time, so 20 % of a 3g.40gb (0.086 GPU) fits a 1g.10gb.
func TestMIGScale(t *testing.T) {
	r := NewRecorder(2 * interval)
	at := t0
	for range 1000 {
		at = at.Add(interval)
		r.Observe(view(at, false, unit(gpu.KindMIG, "mig "+h100+" 3g.40gb", 3.0/7, 3.0/7, 20, 3*gib)))
	}
	var days []ledger.ProfileDay
	for _, d := range r.days {
		days = append(days, *d)
	}
	ps := Profiles(days)
	if len(ps) != 1 {
		t.Fatalf("%d profiles", len(ps))
	}
	if got, want := ps[0].Scale, 3.0/7; got-want > 1e-9 || want-got > 1e-9 {
		t.Errorf("scale %v, want %v", got, want)
	}
	a := rightsize.Decide(ps[0], offers, at)
	if a.Verdict != contract.VerdictSmaller || a.Candidates[0].Class != offers[1].Class {
		t.Errorf("advice %s %v: %s", a.Verdict, a.Candidates, a.Reason)
	}
}

// TestSharedMIGScale: a 2-replica time-sliced 3g.40gb busy at 60 % of the instance (0.26 GPU) does not fit a
// 1g.10gb (1/7), whether or not the day's last sample was idle: an idle sample's scale is the instance's
// (3/7), not the replica's share of it (3/14).
func TestSharedMIGScale(t *testing.T) {
	const class = "mig-shared " + h100 + " 3g.40gb"
	for name, idleLast := range map[string]bool{"busy last": false, "idle last": true} {
		t.Run(name, func(t *testing.T) {
			r := NewRecorder(2 * interval)
			at := t0
			for range 1000 {
				at = at.Add(interval)
				r.Observe(view(at, false, unit(gpu.KindSharedMIG, class, 3.0/14, 3.0/7, 60, 3*gib)))
			}
			if idleLast {
				at = at.Add(interval)
				r.Observe(view(at, false, unit(gpu.KindSharedMIG, class, 3.0/14, 3.0/7, 0, 3*gib)))
			}
			var days []ledger.ProfileDay
			for _, d := range r.days {
				days = append(days, *d)
			}
			ps := Profiles(days)
			if len(ps) != 1 {
				t.Fatalf("%d profiles", len(ps))
			}
			if got, want := ps[0].Scale, 3.0/7; math.Abs(got-want) > 1e-9 {
				t.Errorf("scale %v, want %v", got, want)
			}
			if a := rightsize.Decide(ps[0], offers, at); a.Verdict != contract.VerdictKeep {
				t.Errorf("advice %s %v: %s", a.Verdict, a.Candidates, a.Reason)
			}
		})
	}
}

func TestPercentileBin(t *testing.T) {
	h := func(counts map[int]uint32) []uint32 {
		out := make([]uint32, 101)
		for i, c := range counts {
			out[i] = c
		}
		return out
	}
	for name, tc := range map[string]struct {
		h      []uint32
		want   int
		wantOK bool
	}{
		"empty":                           {h: h(nil)},
		"one sample":                      {h: h(map[int]uint32{42: 1}), want: 42, wantOK: true},
		"95 low, 5 high: the 95th is low": {h: h(map[int]uint32{10: 95, 90: 5}), want: 10, wantOK: true},
		"94 low, 6 high: high":            {h: h(map[int]uint32{10: 94, 90: 6}), want: 90, wantOK: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := percentileBin(tc.h, 0.95)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("percentileBin = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestDaysRollAndRetention: a server seen across midnight has a row per day; days older than Retention go.
func TestDaysRollAndRetention(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "ledger.db"))
	old := ledger.ProfileDay{User: "bob", Class: "gpu " + h100, Day: ledger.DayOf(t0).AddDate(0, 0, -31), Kind: "gpu",
		First: t0.AddDate(0, 0, -31), Last: t0.AddDate(0, 0, -31), MemoryHist: make([]uint32, ledger.MemoryBins), SMHist: make([]uint32, ledger.SMBins)}
	if err := st.PutProfiles(ctx, []ledger.ProfileDay{old}, old.Day); err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(2 * interval)
	midnight := ledger.DayOf(t0).Add(24 * time.Hour)
	for at := midnight.Add(-time.Minute); at.Before(midnight.Add(time.Minute)); at = at.Add(interval) {
		r.Observe(view(at, false, unit(gpu.KindGPU, "gpu "+h100, 1, 1, 50, gib)))
	}
	if err := r.Flush(ctx, st, midnight.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	days, err := st.Profiles(ctx, old.Day, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range days {
		got = append(got, d.User+" "+d.Day.Format(time.DateOnly))
	}
	if diff := cmp.Diff([]string{"alice 2026-11-30", "alice 2026-12-01"}, got); diff != "" {
		t.Errorf("days kept (-want +got):\n%s", diff)
	}
	if len(r.days) != 1 {
		t.Errorf("%d days in memory after the flush, want today's alone", len(r.days))
	}
}

// TestFromBuiltViews runs the whole path on views the usage API builds (usage.Build) from nodes as GFD labels
// them and an agent's snapshot: alice holds a whole H100 at 10 % with 4 GiB for 90 minutes, another node offers
// MIG 1g.10gb instances of the same model; the advice read back is the 1g.10gb.
func TestFromBuiltViews(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "ledger.db"))
	nodes := map[string]inventory.Node{
		"gpu-h100-0": {Name: "gpu-h100-0", Ready: true, Allocatable: map[string]int64{gpu.ResourceGPU: 8}, Labels: map[string]string{
			gpu.LabelProduct: "NVIDIA-H100-80GB-HBM3", gpu.LabelMemoryMiB: "81559", gpu.LabelCount: "8",
			gpu.LabelReplicas: "1", gpu.LabelSharingStrategy: gpu.SharingNone}},
		"gpu-h100-mig": {Name: "gpu-h100-mig", Ready: true, Allocatable: map[string]int64{gpu.MIGResource("1g.10gb"): 7}, Labels: map[string]string{
			gpu.LabelProduct: "NVIDIA-H100-80GB-HBM3", gpu.LabelMIGStrategy: "mixed",
			gpu.LabelMIGMemoryMiB("1g.10gb"): "9984", gpu.LabelMIGSlicesGI("1g.10gb"): "1"}},
	}
	pod := inventory.Pod{UID: "uid-alice", Namespace: "jhub", Name: "jupyter-alice", Node: "gpu-h100-0", User: "alice",
		Phase: corev1.PodRunning, Ready: true, Resources: map[string]int64{gpu.ResourceGPU: 1}}
	r := NewRecorder(2 * interval)
	var v *usage.View
	for at := t0; at.Before(t0.Add(90 * time.Minute)); at = at.Add(interval) {
		snap := &snapshot.Snapshot{Node: "gpu-h100-0", Backend: snapshot.BackendNVML, SampledAt: at, IntervalSeconds: 5,
			Health: snapshot.SamplerHealth{OK: true},
			GPUs:   []snapshot.GPU{{UUID: "GPU-0", Product: "NVIDIA H100 80GB HBM3", MemoryTotalBytes: 81559 << 20}},
			Pods: []snapshot.Pod{{UID: "uid-alice", Namespace: "jhub", Name: "jupyter-alice", User: "alice", SMUtilPercent: ptr(10),
				UtilizationSource: snapshot.SourceNVML, MemoryUsedBytes: 4 * gib,
				Devices: []snapshot.Device{{UUID: "GPU-0", SMUtilPercent: ptr(10), UtilizationSource: snapshot.SourceNVML, MemoryUsedBytes: 4 * gib}}}}}
		v = usage.Build(usage.Input{Now: at, Interval: interval, Pods: []inventory.Pod{pod}, Nodes: nodes,
			Agents: map[string]collect.Result{"gpu-h100-0": {FetchedAt: at, SampleSeenAt: at, Snapshot: snap}},
			Hub:    usage.Directory{Users: map[string]usage.HubUser{"alice": {Name: "alice"}}}})
		r.Observe(v)
	}
	if err := r.Flush(ctx, st, v.SampledAt); err != nil {
		t.Fatal(err)
	}
	days, err := st.Profiles(ctx, t0, "alice")
	if err != nil {
		t.Fatal(err)
	}
	advice := Advise(Profiles(days), v.Offers, v.SampledAt)
	if len(advice) != 1 {
		t.Fatalf("%d advice, want 1: %+v", len(advice), advice)
	}
	a := advice[0]
	type short struct {
		Verdict, Held string
		Candidates    []string
		BusyHours     float64
		P95SM         float64
		PeakMemory    uint64
	}
	got := short{Verdict: a.Verdict, Held: a.Held.Class, Candidates: classes(a), BusyHours: a.Evidence.BusySeconds / 3600,
		P95SM: a.Evidence.P95SMUtilPercent, PeakMemory: a.Evidence.PeakMemoryBytes}
	want := short{Verdict: contract.VerdictSmaller, Held: "gpu H100-80GB-HBM3", Candidates: []string{"mig H100-80GB-HBM3 1g.10gb"},
		BusyHours: 1.5, P95SM: 11, PeakMemory: 4 * gib}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("(-want +got):\n%s\nreason: %s", diff, a.Reason)
	}
}

func classes(a contract.RightSize) []string {
	var out []string
	for _, c := range a.Candidates {
		out = append(out, c.Class)
	}
	return out
}

// TestContention: on a time-sliced GPU a server's busy time counts as contended while another server on the
// same physical GPU is busy too; an idle neighbour does not count, nor a time-sliced MIG instance, whose pods
// are all shown the instance's number.
func TestContention(t *testing.T) {
	share := func(kind gpu.Kind, uuid string, util float64) usage.GPU {
		g := unit(kind, string(kind)+" "+h100, 0.25, 1, util, gib)
		g.UUID = uuid
		return g
	}
	servers := func(gs ...usage.GPU) *usage.View {
		v := &usage.View{SampledAt: t0, Interval: interval, Users: map[string]*usage.User{}}
		for i, g := range gs {
			name := fmt.Sprintf("u%d", i)
			v.Users[name] = &usage.User{Name: name, Servers: []usage.Server{{AllocatedGPUs: 0.25, GPUs: []usage.GPU{g}}}}
		}
		return v
	}
	for name, tc := range map[string]struct {
		v    *usage.View
		want float64 // u0's contended seconds
	}{
		"two busy on one GPU":          {servers(share(gpu.KindShared, "GPU-0", 40), share(gpu.KindShared, "GPU-0", 30)), 5},
		"a busy and an idle neighbour": {servers(share(gpu.KindShared, "GPU-0", 40), share(gpu.KindShared, "GPU-0", 0)), 0},
		"busy on two GPUs":             {servers(share(gpu.KindShared, "GPU-0", 40), share(gpu.KindShared, "GPU-1", 30)), 0},
		"MPS":                          {servers(share(gpu.KindMPS, "GPU-0", 40), share(gpu.KindMPS, "GPU-0", 30)), 5},
		"time-sliced MIG: not known":   {servers(share(gpu.KindSharedMIG, "MIG-0", 40), share(gpu.KindSharedMIG, "MIG-0", 40)), 0},
		"no device named: not known":   {servers(share(gpu.KindShared, "", 40), share(gpu.KindShared, "", 30)), 0},
	} {
		t.Run(name, func(t *testing.T) {
			r := NewRecorder(2 * interval)
			r.Observe(tc.v)
			var got float64
			for k, d := range r.days {
				if k.user == "u0" {
					got = d.ContendedS
				}
			}
			if got != tc.want {
				t.Errorf("contended %v s, want %v", got, tc.want)
			}
		})
	}
}
