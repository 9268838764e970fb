package usage

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
)

// clusterInput is a tick's input for a cluster shaped like benchmark B1's (internal/bench Synthesize, which this
// package cannot import): gpus GPUs on 8-GPU nodes, a fifth A100s in 7 MIG 1g.5gb slices, the rest T4s
// time-sliced in `replicas`; one pod per user round-robin, filling the units in order, the rest pending; every
// agent fresh at now.
func clusterInput(users, gpus, pods, replicas int, now time.Time) Input {
	in := Input{Now: now, Interval: 5 * time.Second, Nodes: map[string]inventory.Node{}, Agents: map[string]collect.Result{},
		Hub: Directory{Users: map[string]HubUser{}, FetchedAt: now}}
	userName := func(i int) string { return fmt.Sprintf("user%05d", i) }
	for i := range users {
		n := userName(i)
		in.Hub.Users[n] = HubUser{Name: n, Groups: []string{fmt.Sprintf("course%02d", i%50)}}
	}
	type unit struct{ node, res, uuid string }
	var units []unit
	for g := 0; g < gpus; g += 8 {
		mig := g < gpus/5
		name := fmt.Sprintf("gpu-node-%04d", g/8)
		n := inventory.Node{Name: name, Allocatable: map[string]int64{}}
		snap := &snapshot.Snapshot{Node: name, Backend: "simulated", SampledAt: now, IntervalSeconds: 5}
		count := min(8, gpus-g)
		if mig {
			n.Labels = map[string]string{gpu.LabelProduct: "NVIDIA-A100-SXM4-40GB", gpu.LabelMIGStrategy: "mixed",
				gpu.LabelMIGSlicesGI("1g.5gb"): "1", gpu.LabelMIGMemoryMiB("1g.5gb"): "4864"}
			n.Allocatable[gpu.MIGResource("1g.5gb")] = int64(7 * count)
		} else {
			n.Labels = map[string]string{gpu.LabelProduct: "Tesla-T4-SHARED", gpu.LabelSharingStrategy: "time-slicing",
				gpu.LabelReplicas: fmt.Sprint(replicas), gpu.LabelMemoryMiB: "15360"}
			n.Allocatable[gpu.ResourceGPUShared] = int64(replicas * count)
		}
		for k := range count {
			card := snapshot.GPU{UUID: fmt.Sprintf("GPU-%04d", g+k), Index: k, Product: "Tesla T4", MemoryTotalBytes: 15 << 30}
			if mig {
				card.Product, card.MIGMode, card.MemoryTotalBytes = "NVIDIA A100-SXM4-40GB", true, 40<<30
				for s := range 7 {
					m := snapshot.MIGDevice{UUID: fmt.Sprintf("MIG-%04d-%d", g+k, s), Profile: "1g.5gb", MemoryTotalBytes: 4864 << 20, UtilizationSource: "simulated"}
					card.MIGDevices = append(card.MIGDevices, m)
					units = append(units, unit{name, gpu.MIGResource("1g.5gb"), m.UUID})
				}
			} else {
				for range replicas {
					units = append(units, unit{name, gpu.ResourceGPUShared, card.UUID})
				}
			}
			snap.GPUs = append(snap.GPUs, card)
		}
		in.Nodes[name] = n
		in.Agents[name] = collect.Result{Agent: collect.Agent{Node: name}, Snapshot: snap, FetchedAt: now, SampleSeenAt: now}
	}
	for i := range pods {
		u := userName(i % users)
		p := inventory.Pod{UID: fmt.Sprintf("uid-%05d", i), Namespace: "jhub", Name: "jupyter-" + u, User: u, Phase: corev1.PodPending,
			Resources: map[string]int64{gpu.ResourceGPUShared: 1}}
		if i >= users {
			p.Server = fmt.Sprintf("s%d", i/users)
			p.Name += "--" + p.Server
		}
		if i < len(units) {
			un := units[i]
			p.Node, p.Phase, p.Ready, p.Resources = un.node, corev1.PodRunning, true, map[string]int64{un.res: 1}
			util := float64(i % 101)
			snap := in.Agents[un.node].Snapshot
			snap.Pods = append(snap.Pods, snapshot.Pod{UID: p.UID, Namespace: p.Namespace, Name: p.Name, User: u, Server: p.Server,
				Devices:       []snapshot.Device{{UUID: un.uuid, Resource: un.res}},
				SMUtilPercent: &util, UtilizationSource: "simulated", MemoryUsedBytes: uint64(i%16) << 28})
		}
		in.Pods = append(in.Pods, p)
	}
	return in
}

// BenchmarkBuildSteadyTick is one steady-state tick of B1's cluster (20,000 users and pods, 2,000 GPUs, the
// SUT's 10 replicas per T4): the bytes and objects Build allocates at each tick for the collector to clear under
// the API's requests. objects/view is what one published view holds on the heap: the collector marks it at every
// cycle while it is the latest.
func BenchmarkBuildSteadyTick(b *testing.B) {
	in := clusterInput(20000, 2000, 20000, 10, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	var builder Builder
	builder.Build(in) // warm: the builder's memory, and the class and description names (once per process)
	// Before the loop, which keeps its last view alive.
	objects := heldObjects(func() any { return builder.Build(in) })
	b.ReportAllocs()
	for b.Loop() {
		builder.Build(in)
	}
	b.ReportMetric(float64(objects), "objects/view")
}

// heldObjects is how many heap objects what build returns keeps alive.
func heldObjects(build func() any) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return int64(after.HeapObjects) - int64(before.HeapObjects)
}

// TestBuilderKeepsNoViewMemory: a Builder that built other views before builds the view a fresh one builds, and
// leaves the views it built before as they were (requests read them, the state keeps them).
func TestBuilderKeepsNoViewMemory(t *testing.T) {
	twoServers := clusterInput(40, 16, 60, 4, now) // 20 users with two servers
	noHubUser := clusterInput(10, 8, 10, 4, now)
	for i := range noHubUser.Pods {
		if i%3 == 0 {
			noHubUser.Pods[i].User = ""
		}
	}
	departed := Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now, f(80)), Hub: hub(),
		Departed: []Departure{{Pod: inventory.Pod{UID: "ud", Namespace: "jhub", Name: "jupyter-dan", Node: "gpu-t4-0", User: "dan",
			Phase: corev1.PodRunning, Resources: map[string]int64{"nvidia.com/gpu.shared": 2}}, At: now.Add(-time.Second)}}}
	inputs := []struct {
		name string
		in   Input
	}{
		{"fresh", Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now, f(80)), Hub: hub()}},
		{"stale", Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now.Add(-time.Hour), f(80)), Hub: hub()}},
		{"two servers each", twoServers},
		{"pods of no Hub user", noHubUser},
		{"departed", departed},
		{"nothing", Input{Now: now, Interval: 5 * time.Second}},
		{"fresh again", Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now, f(20)), Hub: hub()}},
	}
	// Sums over maps (the classes) are in map order: the last bits may differ from one build to the next.
	approx := cmpopts.EquateApprox(0, 1e-12)
	var b Builder
	built := make([]*View, len(inputs))
	for i, tc := range inputs {
		built[i] = b.Build(tc.in)
		if diff := cmp.Diff(Build(tc.in), built[i], approx); diff != "" {
			t.Errorf("%s: a used builder's view (-fresh +used):\n%s", tc.name, diff)
		}
	}
	for i, tc := range inputs {
		if diff := cmp.Diff(Build(tc.in), built[i], approx); diff != "" {
			t.Errorf("%s: the view changed after later builds (-built then +now):\n%s", tc.name, diff)
		}
	}
}

// TestUnitDevices: each unit of a pod is given the next device the agent tied to its resource, then the next it
// tied to none; a unit left without one has no UUID.
func TestUnitDevices(t *testing.T) {
	const shared = "nvidia.com/gpu.shared"
	dev := func(uuid, res string) snapshot.Device { return snapshot.Device{UUID: uuid, Resource: res} }
	cases := map[string]struct {
		devices []snapshot.Device
		want    []string // the units' UUIDs
	}{
		"tied":                 {devices: []snapshot.Device{dev("GPU-1", shared), dev("GPU-2", shared)}, want: []string{"GPU-1", "GPU-2"}},
		"tied to none":         {devices: []snapshot.Device{dev("GPU-1", ""), dev("GPU-2", "")}, want: []string{"GPU-1", "GPU-2"}},
		"tied ones first":      {devices: []snapshot.Device{dev("GPU-1", ""), dev("GPU-2", shared)}, want: []string{"GPU-2", "GPU-1"}},
		"another resource's":   {devices: []snapshot.Device{dev("GPU-1", "nvidia.com/gpu"), dev("GPU-2", shared)}, want: []string{"GPU-2", ""}},
		"fewer than the units": {devices: []snapshot.Device{dev("GPU-1", shared)}, want: []string{"GPU-1", ""}},
		"none":                 {want: []string{"", ""}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := agents(now, f(80))
			a["gpu-t4-0"].Snapshot.Pods[0].Devices = tc.devices
			ps := pods()
			ps[1].Resources = map[string]int64{shared: 2}
			v := Build(Input{Now: now, Interval: 5 * time.Second, Pods: ps, Nodes: nodes(), Agents: a, Hub: hub()})
			var got []string
			for _, g := range v.Users["bob"].Servers[0].GPUs {
				got = append(got, g.UUID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("units' UUIDs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSteadyBuildAllocates: a builder's steady tick allocates per node and per class, not per pod: the view's
// users, servers, units and numbers come in a few slabs (it was about 11 objects per pod).
func TestSteadyBuildAllocates(t *testing.T) {
	in := clusterInput(2000, 200, 2000, 10, now)
	var b Builder
	b.Build(in)
	allocs := testing.AllocsPerRun(5, func() { b.Build(in) })
	if limit := float64(len(in.Pods)) / 10; allocs > limit {
		t.Errorf("a steady tick of %d pods on %d nodes: %.0f allocations, want at most %.0f", len(in.Pods), len(in.Nodes), allocs, limit)
	}
}
