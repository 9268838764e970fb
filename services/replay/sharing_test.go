package replay

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// TestEverySetupSharesTheCluster: time-slicing is the cluster's, configured by the admin, not a gpuhub part.
// Two nodes: the largest (8 GPUs) stays whole, the other (4 GPUs) is time-sliced 2 ways (8 shares). 8 short
// sessions that each ask for a fraction of a GPU all fit in the shares at once in every setup: no one waits, and
// each holds half a GPU for its whole session (too short for any culler to stop it).
func TestEverySetupSharesTheCluster(t *testing.T) {
	cfg, pol := testConfig(t, 1, 0, 12)
	cfg.Capacity.SharedFraction = 1
	nodes := []TraceNode{{Name: "n0", GPUs: 8, Model: "G2"}, {Name: "n1", GPUs: 4, Model: "T4"}}
	var pods []TracePod
	const sessions, minutes = 8, 30
	for i := range sessions {
		pods = append(pods, TracePod{Name: fmt.Sprintf("p%02d", i), GPUs: 1, Milli: 300, Created: 60, Deleted: 60 + minutes*60})
	}
	rep, err := Replay(cfg, pol, nodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, rep.Results)
	wantHeld := float64(sessions) * 0.5 * minutes / 60
	for _, r := range rep.Results {
		if r.WaitedShare != 0 {
			t.Errorf("%s: %.0f %% of the requests waited, want none: the 8 time-sliced shares hold all %d sessions",
				r.Mode, 100*r.WaitedShare, sessions)
		}
		if d := r.HeldGPUHours - wantHeld; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: %.2f GPU-hours held, want %.2f (%d sessions x 1/2 GPU x %d min)", r.Mode, r.HeldGPUHours, wantHeld, sessions, minutes)
		}
	}
}

// TestSetupsGetTheSameCluster: in the main replay and in every sensitivity variation, every setup runs on the
// same cluster (nodes, GPUs, time-sliced shares), and the sensitivity table's sharing row turns time-slicing off
// for every setup alike.
func TestSetupsGetTheSameCluster(t *testing.T) {
	dir := synthetic(t)
	cfg, pol := testConfig(t, 1, 0, 8)
	cfg.Capacity.SharedFraction = 0.5
	nodes, pods, err := ReadTrace(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replay(cfg, pol, nodes, pods, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Results[0].Cluster; got.SharedNodes == 0 || got.Units[gpu.ResourceGPUShared] == 0 {
		t.Fatalf("main cluster %+v: no time-sliced node, the test checks nothing", got)
	}
	if got, want := len(rep.Results), len(Modes); got != want {
		t.Errorf("%d setups in the main replay, want %d", got, want)
	}
	sharingOff := 0
	scenarios := map[string][]*Result{"main": rep.Results}
	for _, v := range rep.Sensitivity {
		scenarios[v.Name] = v.Results
	}
	for name, rs := range scenarios {
		for _, r := range rs[1:] {
			if diff := cmp.Diff(rs[0].Cluster, r.Cluster); diff != "" {
				t.Errorf("%s: %s and %s run on different clusters (-%s +%s):\n%s", name, rs[0].Mode, r.Mode, rs[0].Mode, r.Mode, diff)
			}
		}
		if strings.HasPrefix(name, "capacity.sharedFraction 0 ") {
			sharingOff++
			for _, r := range rs {
				if r.Cluster.SharedNodes != 0 || r.Cluster.Units[gpu.ResourceGPUShared] != 0 {
					t.Errorf("%s: %s has time-sliced nodes: %+v", name, r.Mode, r.Cluster)
				}
			}
		}
	}
	if sharingOff != 1 {
		t.Errorf("%d sensitivity rows turn time-slicing off, want 1", sharingOff)
	}
	var b strings.Builder
	WriteReport(&b, rep)
	for _, want := range []string{"## What each gpuhub part adds", "## Sensitivity", "capacity.sharedFraction 0 "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report has no %q", want)
		}
	}
	for _, m := range Modes {
		if !strings.Contains(b.String(), "| "+m.String()+" |") && !strings.Contains(b.String(), " | "+m.String()) {
			t.Errorf("the report has no column %q", m)
		}
	}
}

// TestTimeSliced: the admin time-slices whole nodes until they hold at least the share of the GPUs, never the
// largest node, and the draw spreads nodes whose names differ only in their last digits (FNV-1a alone did not:
// with 0.25, none of openb-node-0200 ... 0209 was ever drawn).
func TestTimeSliced(t *testing.T) {
	var t4 []TraceNode
	for i := range 40 {
		t4 = append(t4, TraceNode{Name: fmt.Sprintf("openb-node-%04d", 200+i), GPUs: 2, Model: "T4"})
	}
	withG2 := append([]TraceNode{{Name: "openb-node-0885", GPUs: 8, Model: "G2"}}, t4[:15]...)
	for name, tc := range map[string]struct {
		nodes      []TraceNode
		share      float64
		wantGPUs   int64 // time-sliced
		wantWhole  string
		wantSliced int
	}{
		"none":                       {nodes: withG2, share: 0, wantGPUs: 0, wantWhole: "openb-node-0885"},
		"a quarter, whole nodes":     {nodes: t4, share: 0.25, wantGPUs: 20, wantSliced: 10},
		"the largest node stays":     {nodes: withG2, share: 1, wantGPUs: 30, wantWhole: "openb-node-0885", wantSliced: 15},
		"rounded up to a whole node": {nodes: withG2, share: 0.25, wantGPUs: 10, wantWhole: "openb-node-0885", wantSliced: 5},
	} {
		t.Run(name, func(t *testing.T) {
			got := timeSliced("20230601", tc.nodes, tc.share)
			var gpus int64
			for _, n := range tc.nodes {
				if got[n.Name] {
					gpus += n.GPUs
				}
			}
			if gpus != tc.wantGPUs || len(got) != tc.wantSliced {
				t.Errorf("time-sliced %d nodes with %d GPUs, want %d with %d", len(got), gpus, tc.wantSliced, tc.wantGPUs)
			}
			if tc.wantWhole != "" && got[tc.wantWhole] {
				t.Errorf("%s, the largest node, is time-sliced", tc.wantWhole)
			}
		})
	}
	// Spread: among the 10 nodes 0200 ... 0209, a quarter of 40 draws some and not all.
	got := timeSliced("20230601", t4, 0.25)
	n := 0
	for _, node := range t4[:10] {
		if got[node.Name] {
			n++
		}
	}
	if n == 0 || n == 10 {
		t.Errorf("%d of the 10 nodes openb-node-0200 ... 0209 time-sliced: the draw does not spread similar names", n)
	}
}
