package admit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// TestWaitlistPassesOverUnusableNodes: an H100 freed on a node that takes no new single-user pod (cordoned,
// NotReady, tainted against them) is handed to nobody: the next in line keeps waiting and, asking again, is
// told why none is free. Once the node takes pods again, the unit is held for them.
func TestWaitlistPassesOverUnusableNodes(t *testing.T) {
	for name, tc := range map[string]struct {
		block func(*corev1.Node)
		says  string
	}{
		"cordoned":                  {block: cordoned, says: "gpu-h100 is cordoned"},
		"NotReady":                  {block: notReady, says: "gpu-h100 is not ready"},
		"tainted against user pods": {block: taint("team", "vision", corev1.TaintEffectNoSchedule), says: "gpu-h100 is tainted team=vision:NoSchedule"},
	} {
		t.Run(name, func(t *testing.T) {
			r := newWaitRigOn(t, &decayedTable{}, clusterWith(tc.block)...)
			r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
			r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
			if res := r.admit(t, joining(h100("bob", "", 1), false)); res.Waitlist == nil {
				t.Fatalf("bob did not join the waitlist: %+v", res)
			}

			r.clock.Add(time.Minute)
			r.remove(t, "carol-2")
			if tick := r.eng.WaitlistTick(r.clock.Now()); len(tick.Held) != 0 {
				t.Fatalf("the H100 freed on gpu-h100 (%s) was held for %s", name, tick.Held[0].User)
			}
			res := r.admit(t, h100("bob", "", 1))
			if res.Allow || res.Reason != string(ReasonNoneFree) || !strings.Contains(res.Message, tc.says) {
				t.Errorf("bob asks again: %s %q, want none_free saying %q", res.Reason, res.Message, tc.says)
			}

			// The node takes new pods again: the freed H100 goes to bob.
			if _, err := r.kc.CoreV1().Nodes().Update(context.Background(), clusterWith(nil)[0].(*corev1.Node), metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, func() bool {
				tick := r.eng.WaitlistTick(r.clock.Now())
				return len(tick.Held) == 1 && tick.Held[0].User == "bob"
			})
		})
	}
}

// TestTolerationsConfigured: the engine counts taints by the single-user pods' tolerations it is given
// (Options.Tolerations), inventory.DefaultTolerations when none are.
func TestTolerationsConfigured(t *testing.T) {
	tests := map[string]struct {
		tolerations []corev1.Toleration
		taint       func(*corev1.Node)
		wantReason  string
	}{
		"the defaults tolerate the GPU taint": {taint: taint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule), wantReason: "ok"},
		"the defaults do not tolerate a team's taint": {taint: taint("team", "vision", corev1.TaintEffectNoSchedule),
			wantReason: string(ReasonNoneFree)},
		"a team's taint tolerated": {tolerations: []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpExists}},
			taint: taint("team", "vision", corev1.TaintEffectNoSchedule), wantReason: "ok"},
		"none: the GPU taint keeps user pods off": {tolerations: []corev1.Toleration{},
			taint: taint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule), wantReason: string(ReasonNoneFree)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := newRigWith(t, func(o *Options) { o.Tolerations = tc.tolerations }, clusterWith(tc.taint)...)
			if res := r.admit(t, h100("dave", "", 1)); res.Reason != tc.wantReason {
				t.Errorf("reason %s (%s), want %s", res.Reason, res.Message, tc.wantReason)
			}
		})
	}
}

// TestNoneFreeNamesBlockedNodes: a none_free refusal names the nodes of the class that take no new pods when
// they explain it (units of it no pod holds, or no other node offers the class), and only then.
func TestNoneFreeNamesBlockedNodes(t *testing.T) {
	h100b := func(change func(*corev1.Node)) *corev1.Node {
		n := node("gpu-h100-b", h100Labels, map[string]int64{"nvidia.com/gpu": 2})
		if change != nil {
			change(n)
		}
		return n
	}
	carol := func(name, server, nodeName string) *corev1.Pod {
		return pod(name, "carol", server, nodeName, "nvidia.com/gpu")
	}
	tests := map[string]struct {
		objs []runtime.Object // besides cluster()'s
		h100 func(*corev1.Node)
		req  Request
		want string
	}{
		"a full node and a cordoned one with a free unit": {
			objs: []runtime.Object{h100b(cordoned), carol("c1", "", "gpu-h100"), carol("c2", "two", "gpu-h100"), carol("c3", "three", "gpu-h100-b")},
			req:  h100("dave", "", 1),
			want: "No H100 is free right now: gpu-h100-b is cordoned. Free now and within your quota: three MIG 1g.5gb slices on an A100 and two MIG 3g.20gb slices on an A100. Pick one of those profiles, or try again later.",
		},
		"a full cordoned node does not explain it while another node offers H100s": {
			objs: []runtime.Object{h100b(cordoned), carol("c1", "", "gpu-h100"), carol("c2", "two", "gpu-h100"), carol("c3", "three", "gpu-h100-b"), carol("c4", "four", "gpu-h100-b")},
			req:  h100("dave", "", 1),
			want: "No H100 is free right now. Free now and within your quota: three MIG 1g.5gb slices on an A100 and two MIG 3g.20gb slices on an A100. Pick one of those profiles, or try again later.",
		},
		"every node of the class blocked, full or not": {
			objs: []runtime.Object{h100b(notReady), carol("c1", "", "gpu-h100"), carol("c2", "two", "gpu-h100")},
			h100: cordoned, req: h100("dave", "", 1),
			want: "No H100 is free right now: gpu-h100 is cordoned, gpu-h100-b is not ready. Free now and within your quota: three MIG 1g.5gb slices on an A100 and two MIG 3g.20gb slices on an A100. Pick one of those profiles, or try again later.",
		},
		"one free, two asked, the others on a cordoned node": {
			objs: []runtime.Object{h100b(cordoned), carol("c1", "", "gpu-h100")},
			req:  h100("dave", "", 2),
			want: "Only one whole H100 is free right now (gpu-h100-b is cordoned) and this server asks for two whole H100s. Free now and within your quota: one whole H100, three MIG 1g.5gb slices on an A100 and two MIG 3g.20gb slices on an A100. Pick one of those profiles, or try again later.",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, append(clusterWith(tc.h100), tc.objs...)...)
			res := r.admit(t, tc.req)
			if diff := cmp.Diff(tc.want, res.Message); diff != "" || res.Reason != string(ReasonNoneFree) {
				t.Errorf("%s (-want +got):\n%s", res.Reason, diff)
			}
		})
	}
}

// TestIndexFollowsNodeState: as nodes are cordoned, go NotReady, get tainted, come back, lose their GPUs and
// go, with active, finished and unbound pods on them, the index's units offered and held per class stay what
// an index built from scratch on the same nodes and pods has.
func TestIndexFollowsNodeState(t *testing.T) {
	const class = "gpu H100-80GB-HBM3"
	h100Node := func(name string, change func(*corev1.Node)) *inventory.Node {
		n := node(name, h100Labels, map[string]int64{"nvidia.com/gpu": 4})
		if change != nil {
			change(n)
		}
		v := inventory.NodeFrom(n)
		return &v
	}
	sel := selector(map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
	pods := map[string]inventory.Pod{}
	for _, p := range []*corev1.Pod{
		pod("a1", "u1", "", "a", "nvidia.com/gpu"),
		pod("b1", "u2", "", "b", "nvidia.com/gpu"),
		pod("b2", "u3", "", "b", "nvidia.com/gpu"),
		pod("b-done", "u4", "", "b", "nvidia.com/gpu", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("pending", "u5", "", "", "nvidia.com/gpu", sel),
	} {
		gp, _ := inventory.PodFrom(p)
		pods["jhub/"+p.Name] = gp
	}
	type counts struct {
		Capacity, Held map[string]int64
		Blocked        map[string]string
	}
	of := func(ix *index) counts {
		return counts{Capacity: ix.capacity, Held: ix.held, Blocked: ix.blocked}
	}
	live := newIndex()
	live.tolerations = inventory.DefaultTolerations()
	nodes := map[string]*inventory.Node{"a": h100Node("a", nil), "b": h100Node("b", nil)}
	for _, name := range []string{"a", "b"} {
		live.setNode(name, nodes[name])
	}
	for k, p := range pods {
		live.upsertPod(k, p)
	}
	steps := []struct {
		name string
		node string
		to   *inventory.Node
		want counts
	}{
		{name: "b cordoned", node: "b", to: h100Node("b", cordoned),
			want: counts{Capacity: map[string]int64{class: 4}, Held: map[string]int64{class: 2}, Blocked: map[string]string{"b": "cordoned"}}},
		{name: "b also NotReady", node: "b", to: h100Node("b", func(n *corev1.Node) { cordoned(n); notReady(n) }),
			want: counts{Capacity: map[string]int64{class: 4}, Held: map[string]int64{class: 2}, Blocked: map[string]string{"b": "cordoned"}}},
		{name: "b uncordoned, still NotReady", node: "b", to: h100Node("b", notReady),
			want: counts{Capacity: map[string]int64{class: 4}, Held: map[string]int64{class: 2}, Blocked: map[string]string{"b": "not ready"}}},
		{name: "b back", node: "b", to: h100Node("b", nil),
			want: counts{Capacity: map[string]int64{class: 8}, Held: map[string]int64{class: 4}, Blocked: map[string]string{}}},
		{name: "a tainted", node: "a", to: h100Node("a", taint("team", "vision", corev1.TaintEffectNoExecute)),
			want: counts{Capacity: map[string]int64{class: 4}, Held: map[string]int64{class: 3}, Blocked: map[string]string{"a": "tainted team=vision:NoExecute"}}},
		{name: "a's taint tolerated", node: "a", to: h100Node("a", taint("hub.jupyter.org/dedicated", "user", corev1.TaintEffectNoSchedule)),
			want: counts{Capacity: map[string]int64{class: 8}, Held: map[string]int64{class: 4}, Blocked: map[string]string{}}},
		{name: "b cordoned again", node: "b", to: h100Node("b", cordoned),
			want: counts{Capacity: map[string]int64{class: 4}, Held: map[string]int64{class: 2}, Blocked: map[string]string{"b": "cordoned"}}},
		{name: "b loses its GPUs", node: "b", to: &inventory.Node{Name: "b", Unschedulable: true},
			want: counts{Capacity: map[string]int64{class: 4}, Held: map[string]int64{class: 4}, Blocked: map[string]string{}}},
		{name: "b has them again, cordoned", node: "b", to: h100Node("b", cordoned),
			want: counts{Capacity: map[string]int64{class: 4}, Held: map[string]int64{class: 2}, Blocked: map[string]string{"b": "cordoned"}}},
		{name: "b deleted", node: "b",
			want: counts{Capacity: map[string]int64{class: 4}, Held: map[string]int64{class: 4}, Blocked: map[string]string{}}},
		{name: "a cordoned, b gone", node: "a", to: h100Node("a", cordoned),
			want: counts{Capacity: map[string]int64{}, Held: map[string]int64{class: 3}, Blocked: map[string]string{"a": "cordoned"}}},
	}
	for _, st := range steps {
		live.setNode(st.node, st.to)
		nodes[st.node] = st.to
		if diff := cmp.Diff(st.want, of(live)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
		fresh := newIndex()
		fresh.tolerations = inventory.DefaultTolerations()
		for name, n := range nodes {
			fresh.setNode(name, n)
		}
		for k, p := range pods {
			fresh.upsertPod(k, p)
		}
		if diff := cmp.Diff(of(fresh), of(live)); diff != "" {
			t.Errorf("%s: built from scratch (-) and followed (+) differ:\n%s", st.name, diff)
		}
	}
}
