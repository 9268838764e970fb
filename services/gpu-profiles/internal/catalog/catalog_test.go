package catalog_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/fixture"
	"github.com/gpuhub/gpuhub/services/internal/golden"
)

// row is what a test reads of a KindStatus.
type row struct {
	Slug                         string
	Resource                     string
	Allocatable, Allocated, Free int64
	Nodes, Schedulable           int
	MaxFreeOnOne, MaxAllocOnOne  int64
	Blocked                      map[string]string
}

func rows(ks []catalog.KindStatus) []row {
	out := make([]row, 0, len(ks))
	for _, k := range ks {
		out = append(out, row{Slug: k.Slug, Resource: k.Resource, Allocatable: k.Allocatable, Allocated: k.Allocated, Free: k.Free,
			Nodes: k.Nodes, Schedulable: k.SchedulableNodes, MaxFreeOnOne: k.MaxFreeOnOneNode,
			MaxAllocOnOne: k.MaxAllocatableOnOneSchedulableNode, Blocked: k.Blocked})
	}
	return out
}

// TestZoo: every kind of the vocabulary's table, counted as the scheduler counts, with the nodes that take no
// new pod allocatable but never free. The golden file is the inventory endpoint's kinds.
func TestZoo(t *testing.T) {
	nodes, pods := fixture.Zoo()
	c := catalog.FromObjects(nodes, pods, catalog.Options{})
	ks, err := c.Kinds()
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{Slug: "cpu", Nodes: 1, Schedulable: 1},
		// 2 + 2 (cordoned) + 8 (tainted for another team); carol holds one.
		{Slug: "gpu-h100-80gb-hbm3", Resource: "nvidia.com/gpu", Allocatable: 12, Allocated: 1, Free: 1, Nodes: 3, Schedulable: 1,
			MaxFreeOnOne: 1, MaxAllocOnOne: 2, Blocked: map[string]string{"gpu-h100-1": "cordoned", "gpu-h100-8x": "tainted team=vision:NoSchedule"}},
		{Slug: "gpu-l4", Resource: "nvidia.com/gpu", Allocatable: 1, Nodes: 1, Blocked: map[string]string{"gpu-l4-0": "not ready"}},
		// dave's pod is Pending but bound: it holds its slice.
		{Slug: "mig-a100-sxm4-40gb-1g-5gb", Resource: "nvidia.com/mig-1g.5gb", Allocatable: 8, Allocated: 1, Free: 7, Nodes: 1, Schedulable: 1, MaxFreeOnOne: 7, MaxAllocOnOne: 8},
		{Slug: "mig-a100-sxm4-40gb-1g-5gb-2", Resource: "nvidia.com/gpu", Allocatable: 7, Free: 7, Nodes: 1, Schedulable: 1, MaxFreeOnOne: 7, MaxAllocOnOne: 7},
		{Slug: "mig-a100-sxm4-40gb-3g-20gb", Resource: "nvidia.com/mig-3g.20gb", Allocatable: 2, Allocated: 1, Free: 1, Nodes: 1, Schedulable: 1, MaxFreeOnOne: 1, MaxAllocOnOne: 2},
		// heidi's pod finished: only frank's counts.
		{Slug: "shared-t4", Resource: "nvidia.com/gpu.shared", Allocatable: 4, Allocated: 1, Free: 3, Nodes: 1, Schedulable: 1, MaxFreeOnOne: 3, MaxAllocOnOne: 4},
		{Slug: "shared-t4-2", Resource: "nvidia.com/gpu", Allocatable: 4, Free: 4, Nodes: 1, Schedulable: 1, MaxFreeOnOne: 4, MaxAllocOnOne: 4},
		{Slug: "mps-a100-sxm4-40gb", Resource: "nvidia.com/gpu.shared", Allocatable: 2, Allocated: 2, Nodes: 1, Schedulable: 1, MaxAllocOnOne: 2},
		// judy's pod is being deleted: it still holds its share.
		{Slug: "mig-shared-a100-sxm4-40gb-1g-5gb", Resource: "nvidia.com/mig-1g.5gb.shared", Allocatable: 14, Allocated: 1, Free: 13, Nodes: 1, Schedulable: 1, MaxFreeOnOne: 13, MaxAllocOnOne: 14},
	}
	if diff := cmp.Diff(want, rows(ks)); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	data, err := json.MarshalIndent(ks, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "zoo.golden", append(data, '\n'))
}

func TestBlocked(t *testing.T) {
	def := catalog.DefaultTolerations()
	cases := map[string]struct {
		node        *corev1.Node
		tolerations []corev1.Toleration
		want        string
	}{
		"ready":                           {node: fixture.H100("n", 1).Obj(), want: ""},
		"cordoned wins over its taint":    {node: fixture.H100("n", 1).Cordoned().Obj(), want: "cordoned"},
		"not ready":                       {node: fixture.H100("n", 1).NotReady().Obj(), want: "not ready"},
		"PreferNoSchedule does not block": {node: fixture.H100("n", 1).Taint("spot", "", corev1.TaintEffectPreferNoSchedule).Obj(), want: ""},
		"z2jh's dedicated user nodes are tolerated": {
			node: fixture.H100("n", 1).Taint("hub.jupyter.org/dedicated", "user", corev1.TaintEffectNoSchedule).Obj(), want: ""},
		"GKE's nvidia.com/gpu taint is tolerated (ExtendedResourceToleration)": {
			node: fixture.H100("n", 1).Taint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule).Obj(), want: ""},
		"another team's taint": {node: fixture.H100("n", 1).Taint("team", "vision", corev1.TaintEffectNoExecute).Obj(),
			want: "tainted team=vision:NoExecute"},
		"a taint without value": {node: fixture.H100("n", 1).Taint("maintenance", "", corev1.TaintEffectNoSchedule).Obj(),
			want: "tainted maintenance:NoSchedule"},
		"no tolerations configured: the GPU taint blocks": {node: fixture.H100("n", 1).Taint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule).Obj(),
			tolerations: []corev1.Toleration{}, want: "tainted nvidia.com/gpu=present:NoSchedule"},
		"Equal with another value": {node: fixture.H100("n", 1).Taint("team", "vision", corev1.TaintEffectNoSchedule).Obj(),
			tolerations: []corev1.Toleration{{Key: "team", Value: "nlp", Effect: corev1.TaintEffectNoSchedule}}, want: "tainted team=vision:NoSchedule"},
		"Exists without key tolerates all": {node: fixture.H100("n", 1).Taint("team", "vision", corev1.TaintEffectNoSchedule).Obj(),
			tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tol := tc.tolerations
			if tol == nil {
				tol = def
			}
			c := catalog.FromObjects([]*corev1.Node{tc.node}, nil, catalog.Options{Tolerations: tol})
			ks, _ := c.Kinds()
			got := ks[1].Blocked["n"]
			if got != tc.want {
				t.Errorf("blocked %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEvents: the informer-fed catalog follows adds, updates and deletes, and gives the same answer as one
// built from the listed objects.
func TestEvents(t *testing.T) {
	c := catalog.New(catalog.Options{})
	nh, ph := c.NodeHandler(), c.PodHandler()
	h100 := fixture.H100("gpu-h100-0", 2).Obj()
	nh.OnAdd(h100, true)
	pod := fixture.Pod("jupyter-bob").Req("nvidia.com/gpu", 1).Phase(corev1.PodPending).Obj()
	ph.OnAdd(pod, true)
	free := func() int64 {
		t.Helper()
		k, ok := c.Lookup(map[string]int64{"nvidia.com/gpu": 1}, map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
		if !ok {
			t.Fatal("no H100 kind")
		}
		return k.Free
	}
	if got := free(); got != 2 {
		t.Errorf("unbound pod: free %d, want 2", got)
	}
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "gpu-h100-0"
	ph.OnUpdate(pod, bound)
	if got := free(); got != 1 {
		t.Errorf("bound pending pod: free %d, want 1", got)
	}
	done := bound.DeepCopy()
	done.Status.Phase = corev1.PodFailed
	ph.OnUpdate(bound, done)
	if got := free(); got != 2 {
		t.Errorf("failed pod: free %d, want 2", got)
	}
	ph.OnUpdate(done, bound)
	ph.OnDelete(cache.DeletedFinalStateUnknown{Key: "jhub/jupyter-bob", Obj: bound})
	if got := free(); got != 2 {
		t.Errorf("deleted pod: free %d, want 2", got)
	}
	cordoned := fixture.H100("gpu-h100-0", 2).Cordoned().Obj()
	nh.OnUpdate(h100, cordoned)
	if got := free(); got != 0 {
		t.Errorf("cordoned: free %d, want 0", got)
	}
	nh.OnUpdate(cordoned, h100)
	ph.OnAdd(bound, false)
	nh.OnAdd(fixture.L4("gpu-l4-0", 1).Obj(), false)
	nh.OnAdd(fixture.CPU("cpu-0").Obj(), false)
	nh.OnDelete(fixture.L4("gpu-l4-0", 1).Obj())

	got, err := c.Kinds()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := catalog.FromObjects([]*corev1.Node{h100, fixture.CPU("cpu-0").Obj()}, []*corev1.Pod{bound}, catalog.Options{}).Kinds()
	if diff := cmp.Diff(rows(want), rows(got)); diff != "" {
		t.Errorf("informer-fed vs listed (-want +got):\n%s", diff)
	}
}

func TestLookup(t *testing.T) {
	nodes, pods := fixture.Zoo()
	c := catalog.FromObjects(nodes, pods, catalog.Options{})
	cases := map[string]struct {
		res      map[string]int64
		sel      map[string]string
		want     string
		wantN    int64
		wantNone bool
	}{
		"H100 by product":                 {res: map[string]int64{"nvidia.com/gpu": 2}, sel: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, want: "gpu-h100-80gb-hbm3", wantN: 2},
		"L4 by product":                   {res: map[string]int64{"nvidia.com/gpu": 1, "cpu": 2}, sel: map[string]string{"nvidia.com/gpu.product": "NVIDIA-L4"}, want: "gpu-l4", wantN: 1},
		"MIG single by its product label": {res: map[string]int64{"nvidia.com/gpu": 1}, sel: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}, want: "mig-a100-sxm4-40gb-1g-5gb-2", wantN: 1},
		"MIG mixed":                       {res: map[string]int64{"nvidia.com/mig-3g.20gb": 1}, want: "mig-a100-sxm4-40gb-3g-20gb", wantN: 1},
		"unrenamed T4 share":              {res: map[string]int64{"nvidia.com/gpu": 1}, sel: map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, want: "shared-t4-2", wantN: 1},
		"MPS by strategy":                 {res: map[string]int64{"nvidia.com/gpu.shared": 1}, sel: map[string]string{"nvidia.com/gpu.sharing-strategy": "mps"}, want: "mps-a100-sxm4-40gb", wantN: 1},
		"unknown product":                 {res: map[string]int64{"nvidia.com/gpu": 1}, sel: map[string]string{"nvidia.com/gpu.product": "NVIDIA-B200"}, wantNone: true},
		"no GPU":                          {res: map[string]int64{"cpu": 1}, wantNone: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			k, ok := c.Lookup(tc.res, tc.sel)
			if ok == tc.wantNone {
				t.Fatalf("found %v (%s), want %v", ok, k.Slug, !tc.wantNone)
			}
			if k.Slug != tc.want || k.Count != tc.wantN {
				t.Errorf("got %s x%d, want %s x%d", k.Slug, k.Count, tc.want, tc.wantN)
			}
		})
	}
}

func TestNotReady(t *testing.T) {
	c := catalog.New(catalog.Options{Synced: func() error { return os.ErrNotExist }})
	if _, err := c.Kinds(); err == nil {
		t.Fatal("Kinds before sync: want an error")
	}
}

func TestFreeSets(t *testing.T) {
	k := catalog.KindStatus{FreeOnNodes: []int64{8, 5, 3, 1}, AllocatableOnNodes: []int64{8, 8, 4, 2}}
	for n, want := range map[int64][2]int64{1: {17, 22}, 2: {7, 11}, 4: {3, 5}, 8: {1, 2}, 16: {0, 0}} {
		if got := [2]int64{k.FreeSets(n), k.AllocatableSets(n)}; got != want {
			t.Errorf("sets of %d: %v, want %v", n, got, want)
		}
	}
}
