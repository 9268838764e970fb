package usage

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// TestBuilderKeepsNoViewMemory: a Builder that built other views before builds the view a fresh one builds, and
// leaves the views it built before as they were (requests read them, the state keeps them). Clusters shaped like
// B1's (users with two servers, pods of no Hub user) are in internal/bench's test of the same name.
func TestBuilderKeepsNoViewMemory(t *testing.T) {
	departed := Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now, f(80)), Hub: hub(),
		Departed: []Departure{{Pod: inventory.Pod{UID: "ud", Namespace: "jhub", Name: "jupyter-dan", Node: "gpu-t4-0", User: "dan",
			Phase: corev1.PodRunning, Resources: map[string]int64{"nvidia.com/gpu.shared": 2}}, At: now.Add(-time.Second)}}}
	inputs := []struct {
		name string
		in   Input
	}{
		{"fresh", Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now, f(80)), Hub: hub()}},
		{"stale", Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now.Add(-time.Hour), f(80)), Hub: hub()}},
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
