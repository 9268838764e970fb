package usage

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

var now = time.Date(2026, 11, 22, 10, 0, 10, 0, time.UTC)

func f(v float64) *float64 { return &v }

func nodes() map[string]inventory.Node {
	return map[string]inventory.Node{
		"gpu-a100-0": {Name: "gpu-a100-0", Ready: true, Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed",
			"nvidia.com/mig-3g.20gb.slices.gi": "3", "nvidia.com/mig-3g.20gb.memory": "20096"},
			Allocatable: map[string]int64{"nvidia.com/mig-3g.20gb": 2}},
		"gpu-t4-0": {Name: "gpu-t4-0", Ready: true, Labels: map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.sharing-strategy": "time-slicing",
			"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.memory": "15360"},
			Allocatable: map[string]int64{"nvidia.com/gpu.shared": 4}},
	}
}

func pods() []inventory.Pod {
	return []inventory.Pod{
		{UID: "ua", Namespace: "jhub", Name: "jupyter-alice", Node: "gpu-a100-0", User: "alice", Phase: corev1.PodRunning, Ready: true, Resources: map[string]int64{"nvidia.com/mig-3g.20gb": 1},
			Started: now.Add(-time.Hour)},
		{UID: "ub", Namespace: "jhub", Name: "jupyter-bob", Node: "gpu-t4-0", User: "bob", Phase: corev1.PodRunning, Ready: true, Resources: map[string]int64{"nvidia.com/gpu.shared": 1}},
		{UID: "uc", Namespace: "jhub", Name: "jupyter-carol", User: "carol", Phase: corev1.PodPending, Resources: map[string]int64{"nvidia.com/gpu.shared": 1}},
	}
}

func agents(fetched time.Time, aliceUtil *float64) map[string]collect.Result {
	return map[string]collect.Result{
		"gpu-a100-0": {FetchedAt: fetched, SampleSeenAt: fetched, Snapshot: &snapshot.Snapshot{Node: "gpu-a100-0", Backend: "simulated", SampledAt: fetched,
			GPUs: []snapshot.GPU{{UUID: "GPU-A", Product: "NVIDIA A100-SXM4-40GB", MemoryTotalBytes: 40 << 30, MIGMode: true,
				MIGDevices: []snapshot.MIGDevice{{UUID: "MIG-1", Profile: "3g.20gb", MemoryTotalBytes: 20 << 30, UtilizationSource: "none"}}}},
			Pods: []snapshot.Pod{{UID: "ua", Namespace: "jhub", Name: "jupyter-alice", User: "alice",
				Devices:       []snapshot.Device{{UUID: "MIG-1", ParentUUID: "GPU-A", Resource: "nvidia.com/mig-3g.20gb"}},
				SMUtilPercent: aliceUtil, UtilizationSource: "simulated", MemoryUsedBytes: 1 << 20}}}},
		"gpu-t4-0": {FetchedAt: fetched, SampleSeenAt: fetched, Snapshot: &snapshot.Snapshot{Node: "gpu-t4-0", Backend: "simulated", SampledAt: fetched,
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
				SMUtilPercent: util, UtilizationSource: src, MemoryTotalBytes: 20096 << 20, Stale: stale, UtilizationScale: 3.0 / 7}}}
		if !stale {
			s.GPUs[0].UUID, s.GPUs[0].MemoryUsedBytes, s.GPUs[0].MemoryTotalBytes = "MIG-1", 1<<20, 20<<30
		}
		if util != nil {
			s.UsedGPUs = f(3.0 / 7 * *util / 100)
			s.GPUs[0].UsedGPUs = s.UsedGPUs
		} else {
			s.GPUs[0].UtilizationUnknownReason = "the GPU agent on node gpu-a100-0 does not measure MIG instances (that needs DCGM)"
		}
		return s
	}
	bob := Server{Pod: "jupyter-bob", Namespace: "jhub", Node: "gpu-t4-0", Ready: true, AllocatedGPUs: 0.25, UsedGPUs: f(0), Simulated: true,
		GPUs: []GPU{{Kind: "shared", Resource: "nvidia.com/gpu.shared", Product: "Tesla-T4", Class: "shared T4", Share: 0.25, ShareNumerator: 1, ShareDenominator: 4,
			Description: "1 of 4 time-sliced shares of a T4", UUID: "GPU-T", SMUtilPercent: f(0), UtilizationSource: "simulated", UsedGPUs: f(0), MemoryTotalBytes: 15 << 30, UtilizationScale: 1}}}

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
				{Key: ledger.Key{User: "alice", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}, Pod: "ua", Since: now.Add(-time.Hour), Allocated: 3.0 / 7, Used: 3.0 / 7 * 0.8, UsedKnown: true},
				{Key: ledger.Key{User: "bob", Kind: "shared", Class: "shared T4"}, Pod: "ub", Allocated: 0.25, Used: 0, UsedKnown: true},
			},
			wantGroups: map[string]GroupShare{"physics": {AllocatedGPUs: 3.0/7 + 0.25, UsedGPUs: 3.0 / 7 * 0.8}, "students": {AllocatedGPUs: 0.25}},
		},
		"MIG without DCGM: used unknown, never invented": {
			agents:    agents(now.Add(-time.Second), nil),
			wantAlice: alice(nil, "none", false),
			wantSamples: []ledger.Sample{
				{Key: ledger.Key{User: "alice", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}, Pod: "ua", Since: now.Add(-time.Hour), Allocated: 3.0 / 7},
				{Key: ledger.Key{User: "bob", Kind: "shared", Class: "shared T4"}, Pod: "ub", Allocated: 0.25, Used: 0, UsedKnown: true},
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
			// Free now: the A100's two 3g.20gb less alice's; the T4's four shares less bob's (carol's pod is unbound).
			if diff := cmp.Diff(map[string]int64{"mig A100-SXM4-40GB 3g.20gb": 1, "shared T4": 3}, v.Free); diff != "" {
				t.Errorf("free units (-want +got):\n%s", diff)
			}
			if v.Cluster.CapacityGPUs != 6.0/7+1 || v.Cluster.Nodes != 2 || v.Cluster.Agents != 2 {
				t.Errorf("cluster capacity %v nodes %d agents %d", v.Cluster.CapacityGPUs, v.Cluster.Nodes, v.Cluster.Agents)
			}
		})
	}
}

// TestBuildStale judges freshness by when the agent sampled (and its health), not by when this service
// fetched: an agent whose NVML is wedged keeps answering with its last sample.
func TestBuildStale(t *testing.T) {
	const node = "gpu-a100-0"
	type unit struct {
		UserStale, ServerStale, GPUStale    bool
		UserReason, ServerReason, GPUReason string
		UnknownReason, Source               string
		Util                                *float64
		Allocated                           float64
		UsedKnown                           bool
		StaleAgents                         int
		Status                              AgentStatus
	}
	fresh := func(age float64) unit {
		return unit{Source: "simulated", Util: f(80), Allocated: 3.0 / 7, UsedKnown: true, Status: AgentStatus{Node: node, AgeSeconds: f(age)}}
	}
	stale := func(age *float64, reason string) unit {
		return unit{UserStale: true, ServerStale: true, GPUStale: true, UserReason: reason, ServerReason: reason, GPUReason: reason,
			UnknownReason: reason, Source: "none", Allocated: 3.0 / 7, StaleAgents: 1,
			Status: AgentStatus{Node: node, AgeSeconds: age, Stale: true, StaleReason: reason}}
	}
	cases := map[string]struct {
		agent      func(r *collect.Result)
		staleAfter time.Duration
		want       unit
	}{
		"fresh": {agent: func(*collect.Result) {}, want: fresh(1)},
		"fetched just now, sampled 10 minutes ago": {
			agent: func(r *collect.Result) { r.Snapshot.SampledAt = now.Add(-10 * time.Minute) },
			want:  stale(f(600), "the GPU agent on node gpu-a100-0 has not sampled since 09:50:10 UTC (10 min)"),
		},
		"health not ok for longer than stale-after": {
			agent: func(r *collect.Result) {
				r.Snapshot.Health = snapshot.SamplerHealth{ConsecutiveFailures: 12, LastAttemptAt: now.Add(-time.Second),
					LastSuccessAt: now.Add(-time.Minute), LastError: "nvml: GPU is lost"}
			},
			want: stale(f(1), "the GPU agent on node gpu-a100-0 has failed to sample 12 times in a row since 09:59:10 UTC (60 s): nvml: GPU is lost"),
		},
		"health not ok for less than stale-after": {
			agent: func(r *collect.Result) {
				r.Snapshot.Health = snapshot.SamplerHealth{ConsecutiveFailures: 2, LastAttemptAt: now.Add(-time.Second),
					LastSuccessAt: now.Add(-10 * time.Second), LastError: "nvml: timeout"}
			},
			want: fresh(1),
		},
		"sampledAt frozen while fetches succeed, agent clock ahead": {
			agent: func(r *collect.Result) {
				r.Snapshot.SampledAt, r.FetchedAt, r.SampleSeenAt = now.Add(5*time.Minute), now, now.Add(-time.Minute)
			},
			want: stale(f(60), "the GPU agent on node gpu-a100-0 has served the same sample for 60 s (stamped 10:05:10 UTC by the agent's clock)"),
		},
		"agent unreachable": {
			agent: func(r *collect.Result) {
				r.Snapshot.SampledAt, r.FetchedAt, r.SampleSeenAt = now.Add(-61*time.Second), now.Add(-time.Minute), now.Add(-time.Minute)
				r.Err, r.FailingSince = errors.New("agent gpuhub/agent-a: connect: connection refused"), now.Add(-55*time.Second)
			},
			want: stale(f(61), "the GPU agent on node gpu-a100-0 has not answered since 09:59:10 UTC (60 s): agent unreachable: agent gpuhub/agent-a: connect: connection refused"),
		},
		"never answered": {
			agent: func(r *collect.Result) {
				r.Snapshot, r.FetchedAt, r.SampleSeenAt = nil, time.Time{}, time.Time{}
				r.Err, r.FailingSince = errors.New("agent gpuhub/agent-a: connect: connection refused"), now.Add(-5*time.Second)
			},
			want: stale(nil, "the GPU agent on node gpu-a100-0 is unreachable: agent gpuhub/agent-a: connect: connection refused"),
		},
		"--stale-after 2 min tolerates 90 s": {
			agent:      func(r *collect.Result) { r.Snapshot.SampledAt = now.Add(-90 * time.Second) },
			staleAfter: 2 * time.Minute,
			want:       fresh(90),
		},
		"an agent sampling every 30 s is stale after 90 s, not 15": {
			agent: func(r *collect.Result) {
				r.Snapshot.IntervalSeconds, r.Snapshot.SampledAt = 30, now.Add(-60*time.Second)
			},
			want: fresh(60),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ags := agents(now.Add(-time.Second), f(80))
			r := ags[node]
			tc.agent(&r)
			ags[node] = r
			v := Build(Input{Now: now, Interval: 5 * time.Second, StaleAfter: tc.staleAfter, Pods: pods(), Nodes: nodes(), Agents: ags, Hub: hub()})
			a := v.Users["alice"]
			srv, g := a.Servers[0], a.Servers[0].GPUs[0]
			got := unit{UserStale: a.Stale, ServerStale: srv.Stale, GPUStale: g.Stale, UserReason: a.StaleReason, ServerReason: srv.StaleReason,
				GPUReason: g.StaleReason, UnknownReason: g.UtilizationUnknownReason, Source: g.UtilizationSource, Util: g.SMUtilPercent,
				StaleAgents: v.Cluster.StaleAgents}
			for _, smp := range v.Samples {
				if smp.User == "alice" {
					got.Allocated, got.UsedKnown = smp.Allocated, smp.UsedKnown
				}
			}
			for _, st := range v.Cluster.AgentStatus {
				if st.Node == node {
					got.Status = st
					got.Status.SampledAt = nil // compared below
				}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.want.UserStale != (a.Share.UsedGPUs == nil) {
				t.Errorf("stale %v but user's used GPUs %v", tc.want.UserStale, a.Share.UsedGPUs)
			}
			if a.Share.AllocatedGPUs != 3.0/7 {
				t.Errorf("allocation must not depend on the agent: %v", a.Share.AllocatedGPUs)
			}
			if len(v.Cluster.AgentStatus) != 2 {
				t.Errorf("agent status for %d nodes, want 2", len(v.Cluster.AgentStatus))
			}
		})
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

// TestHistoryFullRingAllocatesNothing: once a user's ring holds the whole window, a tick overwrites the oldest
// sample in place. It used to copy the ring into a new one on every tick (the oldest sample had just left the
// window), 8.6 KB per user per tick at 1 h / 5 s: at 20,000 users, 170 MB of garbage per tick (B1 tail, B5 RSS).
func TestHistoryFullRingAllocatesNothing(t *testing.T) {
	h := NewHistory(time.Hour, 5*time.Second) // 720 slots
	users := map[string]*User{}
	for i := range 100 {
		name := fmt.Sprintf("user%03d", i)
		users[name] = &User{Name: name, Share: Share{AllocatedGPUs: 1}}
	}
	v := &View{SampledAt: now, Users: users}
	for range 800 {
		h.Add(v)
	}
	allocs := testing.AllocsPerRun(20, func() { h.Add(v) })
	if allocs > 2 { // the tick's formatted time
		t.Errorf("Add with 100 full rings: %.0f allocations per tick, want at most 2", allocs)
	}
	if got := len(h.User("user007", time.Time{})); got != 720 {
		t.Errorf("user007: %d points, want 720", got)
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

// TestUtilizationUnknownReason: every unit whose utilization is null says why in plain words.
func TestUtilizationUnknownReason(t *testing.T) {
	cases := map[string]struct {
		agents     func() map[string]collect.Result
		wantReason string
	}{
		"no agent on the node": {
			agents:     func() map[string]collect.Result { a := agents(now, f(80)); delete(a, "gpu-a100-0"); return a },
			wantReason: "no GPU agent runs on node gpu-a100-0",
		},
		"MIG without DCGM": {
			agents:     func() map[string]collect.Result { return agents(now, nil) },
			wantReason: "the GPU agent on node gpu-a100-0 does not measure MIG instances (that needs DCGM)",
		},
		"the GPU could not be read": {
			agents: func() map[string]collect.Result {
				a := agents(now, nil)
				a["gpu-a100-0"].Snapshot.GPUs[0].Error = "gpu 0: Unknown Error"
				return a
			},
			wantReason: "the GPU agent on node gpu-a100-0 could not read GPU 0: gpu 0: Unknown Error",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := Build(Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: tc.agents(), Hub: hub()})
			g := v.Users["alice"].Servers[0].GPUs[0]
			if g.SMUtilPercent != nil || g.UtilizationSource != "none" {
				t.Errorf("utilization %v from %q, want null from none", g.SMUtilPercent, g.UtilizationSource)
			}
			if diff := cmp.Diff(tc.wantReason, g.UtilizationUnknownReason); diff != "" {
				t.Errorf("reason (-want +got):\n%s", diff)
			}
			if bob := v.Users["bob"].Servers[0].GPUs[0]; bob.SMUtilPercent == nil || bob.UtilizationUnknownReason != "" {
				t.Errorf("bob's known utilization: %v, reason %q", bob.SMUtilPercent, bob.UtilizationUnknownReason)
			}
		})
	}
}

// TestUsedIsAFractionOfThePhysicalGPU: "held" is 1/replicas of a time-sliced T4, "used" the fraction of the
// physical GPU's time the pod keeps busy (contract 2 of issue 9). NVML's per-process utilization on a
// time-sliced GPU is already a fraction of the whole GPU, so it must not be scaled by 1/replicas again.
func TestUsedIsAFractionOfThePhysicalGPU(t *testing.T) {
	t4 := nodes()["gpu-t4-0"]
	a100 := nodes()["gpu-a100-0"]
	type result struct {
		Held, Used      map[string]float64 // by user
		SampleUsed      map[string]float64
		ClusterUsed     float64
		GroupUsed       float64
		ClassUtil       map[string]float64 // smUtilPercent by class
		HistoryUtil     map[string]float64 // the user's history point
		HistoryUsedGPUs map[string]float64
	}
	cases := map[string]struct {
		node  inventory.Node
		res   string
		utils map[string]float64 // by user
		want  result
	}{
		"alone on a 4-way T4 at 100 %": {
			node: t4, res: "nvidia.com/gpu.shared", utils: map[string]float64{"u1": 100},
			want: result{Held: map[string]float64{"u1": 0.25}, Used: map[string]float64{"u1": 1}, SampleUsed: map[string]float64{"u1": 1},
				ClusterUsed: 1, GroupUsed: 1, ClassUtil: map[string]float64{"shared T4": 100},
				HistoryUtil: map[string]float64{"u1": 100}, HistoryUsedGPUs: map[string]float64{"u1": 1}},
		},
		"4 users x 25 % on a 4-way T4": {
			node: t4, res: "nvidia.com/gpu.shared", utils: map[string]float64{"u1": 25, "u2": 25, "u3": 25, "u4": 25},
			want: result{Held: map[string]float64{"u1": 0.25, "u2": 0.25, "u3": 0.25, "u4": 0.25},
				Used:        map[string]float64{"u1": 0.25, "u2": 0.25, "u3": 0.25, "u4": 0.25},
				SampleUsed:  map[string]float64{"u1": 0.25, "u2": 0.25, "u3": 0.25, "u4": 0.25},
				ClusterUsed: 1, GroupUsed: 1, ClassUtil: map[string]float64{"shared T4": 100},
				HistoryUtil:     map[string]float64{"u1": 25, "u2": 25, "u3": 25, "u4": 25},
				HistoryUsedGPUs: map[string]float64{"u1": 0.25, "u2": 0.25, "u3": 0.25, "u4": 0.25}},
		},
		"one busy and three idle on a 4-way T4": {
			node: t4, res: "nvidia.com/gpu.shared", utils: map[string]float64{"u1": 100, "u2": 0, "u3": 0, "u4": 0},
			want: result{Held: map[string]float64{"u1": 0.25, "u2": 0.25, "u3": 0.25, "u4": 0.25},
				Used:        map[string]float64{"u1": 1, "u2": 0, "u3": 0, "u4": 0},
				SampleUsed:  map[string]float64{"u1": 1, "u2": 0, "u3": 0, "u4": 0},
				ClusterUsed: 1, GroupUsed: 1, ClassUtil: map[string]float64{"shared T4": 100},
				HistoryUtil:     map[string]float64{"u1": 100, "u2": 0, "u3": 0, "u4": 0},
				HistoryUsedGPUs: map[string]float64{"u1": 1, "u2": 0, "u3": 0, "u4": 0}},
		},
		"MIG 3g.20gb at 50 %": {
			node: a100, res: "nvidia.com/mig-3g.20gb", utils: map[string]float64{"u1": 50},
			want: result{Held: map[string]float64{"u1": 3.0 / 7}, Used: map[string]float64{"u1": 3.0 / 14}, SampleUsed: map[string]float64{"u1": 3.0 / 14},
				ClusterUsed: 3.0 / 14, GroupUsed: 3.0 / 14,
				// the class's GPU time: 3/14 of the two 3g.20gb instances' 6/7 GPU
				ClassUtil:   map[string]float64{"mig A100-SXM4-40GB 3g.20gb": 25},
				HistoryUtil: map[string]float64{"u1": 50}, HistoryUsedGPUs: map[string]float64{"u1": 3.0 / 14}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			snap := &snapshot.Snapshot{Node: tc.node.Name, Backend: "nvml", SampledAt: now, IntervalSeconds: 5,
				GPUs: []snapshot.GPU{{UUID: "GPU-0", Product: "Tesla T4"}}}
			var ps []inventory.Pod
			hubUsers := map[string]HubUser{}
			for u, util := range tc.utils {
				uid := "uid-" + u
				ps = append(ps, inventory.Pod{UID: uid, Namespace: "jhub", Name: "jupyter-" + u, Node: tc.node.Name, User: u,
					Phase: corev1.PodRunning, Ready: true, Resources: map[string]int64{tc.res: 1}})
				snap.Pods = append(snap.Pods, snapshot.Pod{UID: uid, Namespace: "jhub", Name: "jupyter-" + u, User: u,
					SMUtilPercent: f(util), UtilizationSource: "nvml"})
				hubUsers[u] = HubUser{Name: u, Groups: []string{"lab"}}
			}
			v := Build(Input{Now: now, Interval: 5 * time.Second, Pods: ps, Nodes: map[string]inventory.Node{tc.node.Name: tc.node},
				Agents: map[string]collect.Result{tc.node.Name: {FetchedAt: now, SampleSeenAt: now, Snapshot: snap}}, Hub: Directory{Users: hubUsers}})
			h := NewHistory(time.Hour, 5*time.Second)
			h.Add(v)
			got := result{Held: map[string]float64{}, Used: map[string]float64{}, SampleUsed: map[string]float64{},
				ClusterUsed: v.Cluster.UsedGPUs, GroupUsed: v.Groups["lab"].UsedGPUs, ClassUtil: map[string]float64{},
				HistoryUtil: map[string]float64{}, HistoryUsedGPUs: map[string]float64{}}
			for name, u := range v.Users {
				got.Held[name] = u.Share.AllocatedGPUs
				if u.Share.UsedGPUs != nil {
					got.Used[name] = *u.Share.UsedGPUs
				}
				if ps := h.User(name, time.Time{}); len(ps) == 1 && ps[0].UsedKnown {
					got.HistoryUtil[name], got.HistoryUsedGPUs[name] = ps[0].SMUtilPercent, ps[0].UsedGPUs
				}
			}
			for _, s := range v.Samples {
				if s.UsedKnown {
					got.SampleUsed[s.User] = s.Used
				}
			}
			for _, c := range v.Cluster.Classes {
				if c.SMUtilPercent != nil {
					got.ClassUtil[c.Class] = *c.SMUtilPercent
				}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-6)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestHistoryKeepsUsedAndUtilization: the 10-byte samples give back the user's used GPUs and utilization.
func TestHistoryKeepsUsedAndUtilization(t *testing.T) {
	type point struct{ Used, Util float64 }
	cases := map[string]struct {
		share Share
		util  *float64
		want  point
	}{
		"alone on a 4-way time-sliced GPU":       {share: Share{AllocatedGPUs: 0.25, UsedGPUs: f(1)}, util: f(100), want: point{1, 100}},
		"a quarter of a time-sliced GPU":         {share: Share{AllocatedGPUs: 0.25, UsedGPUs: f(0.25)}, util: f(25), want: point{0.25, 25}},
		"MIG 3g.20gb at 50 %":                    {share: Share{AllocatedGPUs: 3.0 / 7, UsedGPUs: f(3.0 / 14)}, util: f(50), want: point{3.0 / 14, 50}},
		"8 whole GPUs at 37.5 %":                 {share: Share{AllocatedGPUs: 8, UsedGPUs: f(3)}, util: f(37.5), want: point{3, 37.5}},
		"idle":                                   {share: Share{AllocatedGPUs: 1, UsedGPUs: f(0)}, util: f(0), want: point{0, 0}},
		"no utilization given: used / allocated": {share: Share{AllocatedGPUs: 2, UsedGPUs: f(0.5)}, want: point{0.5, 25}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := NewHistory(time.Hour, 5*time.Second)
			h.Add(&View{SampledAt: now, Users: map[string]*User{"u": {Name: "u", Share: tc.share, SMUtilPercent: tc.util}}})
			ps := h.User("u", time.Time{})
			if len(ps) != 1 || !ps[0].UsedKnown {
				t.Fatalf("points %+v, want one known", ps)
			}
			if diff := cmp.Diff(tc.want, point{ps[0].UsedGPUs, ps[0].SMUtilPercent}, cmpopts.EquateApprox(1e-6, 0)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
