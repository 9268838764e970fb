package usage

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestTelemetry: one line per server; its utilization is the busiest unit's, unknown when any unit's is; memory
// is summed; kind and class are the first unit's.
func TestTelemetry(t *testing.T) {
	const stale = "the GPU agent on node gpu-t4-0 has not sampled since 09:50:00 UTC (10 min)"
	t4 := func(util *float64, mem uint64) GPU {
		g := GPU{Kind: "shared", Class: "shared T4", Share: 0.25, SMUtilPercent: util, MemoryUsedBytes: mem}
		if util == nil {
			g.UtilizationUnknownReason = "the GPU agent on node gpu-t4-0 reported no utilization for this pod"
		}
		return g
	}
	a100 := func(util *float64) GPU {
		return GPU{Kind: "gpu", Class: "gpu A100-SXM4-40GB", Share: 1, SMUtilPercent: util, MemoryUsedBytes: 1 << 30}
	}
	cases := map[string]struct {
		server Server
		want   Telemetry
	}{
		"one shared unit": {
			server: Server{Name: "", Pod: "jupyter-alice", Namespace: "jhub", Node: "gpu-t4-0", AllocatedGPUs: 0.25, Simulated: true,
				GPUs: []GPU{t4(f(12.5), 123456)}},
			want: Telemetry{User: "alice", Pod: "jupyter-alice", Namespace: "jhub", Node: "gpu-t4-0", Kind: "shared", Class: "shared T4",
				AllocatedGPUs: 0.25, SMUtilPercent: f(12.5), MemoryUsedBytes: 123456, Simulated: true},
		},
		"two whole GPUs: the busiest counts": {
			server: Server{Name: "train", Pod: "jupyter-alice--train", AllocatedGPUs: 2, GPUs: []GPU{a100(f(3)), a100(f(80))}},
			want: Telemetry{User: "alice", Server: "train", Pod: "jupyter-alice--train", Kind: "gpu", Class: "gpu A100-SXM4-40GB",
				AllocatedGPUs: 2, SMUtilPercent: f(80), MemoryUsedBytes: 2 << 30},
		},
		"one unit unknown: the server's is unknown": {
			server: Server{Name: "train", AllocatedGPUs: 1.25, GPUs: []GPU{a100(f(90)), t4(nil, 5)}},
			want: Telemetry{User: "alice", Server: "train", Kind: "gpu", Class: "gpu A100-SXM4-40GB", AllocatedGPUs: 1.25,
				UtilizationUnknownReason: "the GPU agent on node gpu-t4-0 reported no utilization for this pod", MemoryUsedBytes: 1<<30 + 5},
		},
		"stale": {
			server: Server{AllocatedGPUs: 0.25, Stale: true, StaleReason: stale,
				GPUs: []GPU{{Kind: "shared", Class: "shared T4", Stale: true, StaleReason: stale, UtilizationUnknownReason: stale}}},
			want: Telemetry{User: "alice", Kind: "shared", Class: "shared T4", AllocatedGPUs: 0.25, Stale: true, StaleReason: stale,
				UtilizationUnknownReason: stale},
		},
		"stale with a number left: still unknown": {
			server: Server{AllocatedGPUs: 0.25, Stale: true, StaleReason: stale, GPUs: []GPU{t4(f(0), 0)}},
			want: Telemetry{User: "alice", Kind: "shared", Class: "shared T4", AllocatedGPUs: 0.25, Stale: true, StaleReason: stale,
				UtilizationUnknownReason: stale},
		},
		"idle": {
			server: Server{AllocatedGPUs: 1, GPUs: []GPU{a100(f(0))}},
			want:   Telemetry{User: "alice", Kind: "gpu", Class: "gpu A100-SXM4-40GB", AllocatedGPUs: 1, SMUtilPercent: f(0), MemoryUsedBytes: 1 << 30},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := &View{Users: map[string]*User{"alice": {Name: "alice", Servers: []Server{tc.server}}}}
			if diff := cmp.Diff([]Telemetry{tc.want}, v.Telemetry()); diff != "" {
				t.Errorf("Telemetry (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTelemetryOrder: sorted by user, then server, over every user of the view; empty, not nil, without servers.
func TestTelemetryOrder(t *testing.T) {
	v := &View{Users: map[string]*User{
		"bob":   {Name: "bob", Servers: []Server{{Name: ""}, {Name: "b"}}},
		"alice": {Name: "alice", Servers: []Server{{Name: "z"}, {Name: ""}}},
	}}
	var got []string
	for _, s := range v.Telemetry() {
		got = append(got, fmt.Sprintf("%s/%s", s.User, s.Server))
	}
	if diff := cmp.Diff([]string{"alice/", "alice/z", "bob/", "bob/b"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if got := (&View{}).Telemetry(); got == nil || len(got) != 0 {
		t.Errorf("no users: %#v, want an empty list", got)
	}
}

// TestTelemetryFromBuild: the lines of a built view carry what Build measured (view_test's cluster; carol's pod
// is pending and holds nothing yet).
func TestTelemetryFromBuild(t *testing.T) {
	v := Build(Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now.Add(-time.Second), f(80)), Hub: hub()})
	want := []Telemetry{
		{User: "alice", Pod: "jupyter-alice", Namespace: "jhub", Node: "gpu-a100-0", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb",
			AllocatedGPUs: 3.0 / 7, SMUtilPercent: f(80), MemoryUsedBytes: 1 << 20, Simulated: true},
		{User: "bob", Pod: "jupyter-bob", Namespace: "jhub", Node: "gpu-t4-0", Kind: "shared", Class: "shared T4",
			AllocatedGPUs: 0.25, SMUtilPercent: f(0), Simulated: true},
	}
	if diff := cmp.Diff(want, v.Telemetry(), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("Telemetry (-want +got):\n%s", diff)
	}
}
