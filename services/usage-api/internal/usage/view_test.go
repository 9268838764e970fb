package usage

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/snapshot"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/inventory"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

var now = time.Date(2026, 11, 22, 10, 0, 10, 0, time.UTC)

func f(v float64) *float64 { return &v }

func nodes() map[string]inventory.Node {
	return map[string]inventory.Node{
		"gpu-a100-0": {Name: "gpu-a100-0", Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed",
			"nvidia.com/mig-3g.20gb.slices.gi": "3", "nvidia.com/mig-3g.20gb.memory": "20096"},
			Allocatable: map[string]int64{"nvidia.com/mig-3g.20gb": 2}},
		"gpu-t4-0": {Name: "gpu-t4-0", Labels: map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.sharing-strategy": "time-slicing",
			"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.memory": "15360"},
			Allocatable: map[string]int64{"nvidia.com/gpu.shared": 4}},
	}
}

func pods() []inventory.Pod {
	return []inventory.Pod{
		{UID: "ua", Namespace: "jhub", Name: "jupyter-alice", Node: "gpu-a100-0", User: "alice", Phase: corev1.PodRunning, Ready: true, Resources: map[string]int64{"nvidia.com/mig-3g.20gb": 1}},
		{UID: "ub", Namespace: "jhub", Name: "jupyter-bob", Node: "gpu-t4-0", User: "bob", Phase: corev1.PodRunning, Ready: true, Resources: map[string]int64{"nvidia.com/gpu.shared": 1}},
		{UID: "uc", Namespace: "jhub", Name: "jupyter-carol", User: "carol", Phase: corev1.PodPending, Resources: map[string]int64{"nvidia.com/gpu.shared": 1}},
	}
}

func agents(fetched time.Time, aliceUtil *float64) map[string]collect.Result {
	return map[string]collect.Result{
		"gpu-a100-0": {FetchedAt: fetched, Snapshot: &snapshot.Snapshot{Node: "gpu-a100-0", Backend: "simulated", SampledAt: fetched,
			GPUs: []snapshot.GPU{{UUID: "GPU-A", Product: "NVIDIA A100-SXM4-40GB", MemoryTotalBytes: 40 << 30, MIGMode: true,
				MIGDevices: []snapshot.MIGDevice{{UUID: "MIG-1", Profile: "3g.20gb", MemoryTotalBytes: 20 << 30, UtilizationSource: "none"}}}},
			Pods: []snapshot.Pod{{UID: "ua", Namespace: "jhub", Name: "jupyter-alice", User: "alice",
				Devices:       []snapshot.Device{{UUID: "MIG-1", ParentUUID: "GPU-A", Resource: "nvidia.com/mig-3g.20gb"}},
				SMUtilPercent: aliceUtil, UtilizationSource: "simulated", MemoryUsedBytes: 1 << 20}}}},
		"gpu-t4-0": {FetchedAt: fetched, Snapshot: &snapshot.Snapshot{Node: "gpu-t4-0", Backend: "simulated", SampledAt: fetched,
			GPUs: []snapshot.GPU{{UUID: "GPU-T", Product: "Tesla T4", MemoryTotalBytes: 15 << 30}},
			Pods: []snapshot.Pod{{UID: "ub", Namespace: "jhub", Name: "jupyter-bob", User: "bob",
				Devices:       []snapshot.Device{{UUID: "GPU-T", Resource: "nvidia.com/gpu.shared"}},
				SMUtilPercent: f(0), UtilizationSource: "simulated"}}}},
	}
}

func hub() Directory {
	return Directory{Users: map[string]HubUser{
		"alice": {Name: "alice", Groups: []string{"physics"}}, "bob": {Name: "bob", Groups: []string{"physics", "students"}}, "carol": {Name: "carol"},
	}}
}

func TestBuild(t *testing.T) {
	alice := func(util *float64, src string, stale bool) Server {
		s := Server{Pod: "jupyter-alice", Namespace: "jhub", Node: "gpu-a100-0", Ready: true, AllocatedGPUs: 3.0 / 7, Stale: stale, Simulated: !stale,
			GPUs: []GPU{{Kind: "mig", Resource: "nvidia.com/mig-3g.20gb", Product: "NVIDIA A100-SXM4-40GB", Profile: "3g.20gb", Class: "mig A100-SXM4-40GB 3g.20gb",
				Share: 3.0 / 7, ShareNumerator: 3, ShareDenominator: 7, Description: "MIG 3g.20gb on an A100, 3/7 of a GPU",
				SMUtilPercent: util, UtilizationSource: src, MemoryTotalBytes: 20096 << 20, Stale: stale}}}
		if !stale {
			s.GPUs[0].UUID, s.GPUs[0].MemoryUsedBytes, s.GPUs[0].MemoryTotalBytes = "MIG-1", 1<<20, 20<<30
		}
		if util != nil {
			s.UsedGPUs = f(3.0 / 7 * *util / 100)
		}
		return s
	}
	bob := Server{Pod: "jupyter-bob", Namespace: "jhub", Node: "gpu-t4-0", Ready: true, AllocatedGPUs: 0.25, UsedGPUs: f(0), Simulated: true,
		GPUs: []GPU{{Kind: "shared", Resource: "nvidia.com/gpu.shared", Product: "Tesla-T4", Class: "shared T4", Share: 0.25, ShareNumerator: 1, ShareDenominator: 4,
			Description: "1 of 4 time-sliced shares of a T4", UUID: "GPU-T", SMUtilPercent: f(0), UtilizationSource: "simulated", MemoryTotalBytes: 15 << 30}}}

	cases := map[string]struct {
		agents      map[string]collect.Result
		wantAlice   Server
		wantSamples []ledger.Sample
		wantGroups  map[string]GroupShare
	}{
		"busy alice on MIG, idle bob on T4": {
			agents:    agents(now.Add(-time.Second), f(80)),
			wantAlice: alice(f(80), "simulated", false),
			wantSamples: []ledger.Sample{
				{Key: ledger.Key{User: "alice", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}, Allocated: 3.0 / 7, Used: 3.0 / 7 * 0.8, UsedKnown: true},
				{Key: ledger.Key{User: "bob", Kind: "shared", Class: "shared T4"}, Allocated: 0.25, Used: 0, UsedKnown: true},
			},
			wantGroups: map[string]GroupShare{"physics": {AllocatedGPUs: 3.0/7 + 0.25, UsedGPUs: 3.0 / 7 * 0.8}, "students": {AllocatedGPUs: 0.25}},
		},
		"MIG without DCGM: used unknown, never invented": {
			agents:    agents(now.Add(-time.Second), nil),
			wantAlice: alice(nil, "none", false),
			wantSamples: []ledger.Sample{
				{Key: ledger.Key{User: "alice", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}, Allocated: 3.0 / 7},
				{Key: ledger.Key{User: "bob", Kind: "shared", Class: "shared T4"}, Allocated: 0.25, Used: 0, UsedKnown: true},
			},
			wantGroups: map[string]GroupShare{"physics": {AllocatedGPUs: 3.0/7 + 0.25}, "students": {AllocatedGPUs: 0.25}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := Build(Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: tc.agents, Hub: hub()})
			if diff := cmp.Diff([]Server{tc.wantAlice}, v.Users["alice"].Servers, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("alice (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]Server{bob}, v.Users["bob"].Servers, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("bob (-want +got):\n%s", diff)
			}
			if _, ok := v.Users["carol"]; ok {
				t.Error("carol's pending pod must hold nothing")
			}
			sortSamples := cmpopts.SortSlices(func(a, b ledger.Sample) bool { return a.User < b.User })
			if diff := cmp.Diff(tc.wantSamples, v.Samples, sortSamples, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("samples (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantGroups, v.Groups, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
			if v.Cluster.CapacityGPUs != 6.0/7+1 || v.Cluster.Nodes != 2 || v.Cluster.Agents != 2 {
				t.Errorf("cluster capacity %v nodes %d agents %d", v.Cluster.CapacityGPUs, v.Cluster.Nodes, v.Cluster.Agents)
			}
		})
	}
}

func TestBuildStaleAgent(t *testing.T) {
	v := Build(Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now.Add(-16*time.Second), f(80)), Hub: hub()})
	a := v.Users["alice"]
	if !a.Stale || a.Share.UsedGPUs != nil || a.Servers[0].GPUs[0].SMUtilPercent != nil || !a.Servers[0].GPUs[0].Stale {
		t.Errorf("stale agent: want stale and unknown use, got %+v", a.Servers[0])
	}
	if a.Share.AllocatedGPUs != 3.0/7 {
		t.Errorf("allocation must not depend on the agent: %v", a.Share.AllocatedGPUs)
	}
	if v.Cluster.StaleAgents != 2 {
		t.Errorf("stale agents = %d, want 2", v.Cluster.StaleAgents)
	}
}

func TestHistory(t *testing.T) {
	h := NewHistory(time.Minute, 5*time.Second) // 12 slots
	for i := range 30 {
		at := now.Add(time.Duration(i) * 5 * time.Second)
		var util *float64
		if i%2 == 0 {
			util = f(float64(i))
		}
		v := Build(Input{Now: at, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(at, util), Hub: hub()})
		if i >= 25 {
			delete(v.Users, "alice") // alice stopped her server
		}
		h.Add(v)
	}
	got := h.User("alice", time.Time{})
	// Ticks 18..29 are in the window; alice has 18..24.
	if len(got) != 7 || !got[0].T.Equal(now.Add(18*5*time.Second)) || got[1].UsedKnown {
		t.Fatalf("alice history: %d points, first %v; want 7 from tick 18", len(got), got[0].T)
	}
	if !got[0].UsedKnown || got[0].SMUtilPercent < 17.99 || got[0].SMUtilPercent > 18.01 {
		t.Errorf("tick 18 util = %v, want 18", got[0].SMUtilPercent)
	}
	if since := h.User("alice", now.Add(23*5*time.Second)); len(since) != 1 {
		t.Errorf("since tick 23: %d points, want 1", len(since))
	}
	if n := len(h.User("bob", time.Time{})); n != 12 {
		t.Errorf("bob: %d points, want 12", n)
	}
	for range 24 { // forgotten at the first sweep (every window) after the window passed
		h.Add(&View{SampledAt: now, Users: map[string]*User{}})
	}
	if h.Len() != 0 {
		t.Errorf("users with history after an idle hour: %d, want 0", h.Len())
	}
}

func TestHistoryGappyUserAcrossSequenceWrap(t *testing.T) {
	h := NewHistory(time.Hour, 5*time.Second) // 720 slots
	one := map[string]*User{"gappy": {Name: "gappy", Share: Share{AllocatedGPUs: 1}}}
	const ticks = 70000 // more than 2^16
	for i := range ticks {
		v := &View{SampledAt: now.Add(time.Duration(i) * 5 * time.Second), Users: map[string]*User{}}
		if i%100 == 0 {
			v.Users = one
		}
		h.Add(v)
	}
	got := h.User("gappy", time.Time{})
	oldest := now.Add(time.Duration(ticks-720) * 5 * time.Second)
	if len(got) != 7 { // ticks 69300, 69400, ..., 69900
		t.Errorf("%d points, want the 7 of the last hour", len(got))
	}
	for _, p := range got {
		if p.T.Before(oldest) {
			t.Errorf("point at %v is older than the window start %v", p.T, oldest)
		}
	}
}

func TestPointsJSON(t *testing.T) {
	ps := Points{{T: now, AllocatedGPUs: float64(float32(3.0 / 7)), UsedGPUs: float64(float32(0.1)), UsedKnown: true, SMUtilPercent: 23.33, MemoryUsedBytes: 1 << 24},
		{T: now.Add(5 * time.Second), AllocatedGPUs: 1}}
	b, err := ps.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"t":"2026-11-22T10:00:10Z","allocatedGPUs":0.42857143,"usedGPUs":0.1,"smUtilPercent":23.33,"memoryUsedBytes":16777216},` +
		`{"t":"2026-11-22T10:00:15Z","allocatedGPUs":1,"usedGPUs":null,"smUtilPercent":null,"memoryUsedBytes":0}]`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("Points JSON (-want +got):\n%s", diff)
	}
}
