package app

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/fixture"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
)

// TestCapacity checks what the pending explainer is told: counts on schedulable nodes only, blocked nodes with
// why, provisionable pools without a node still waited for, and free kinds in form order without kinds limited
// to groups (the explainer does not know the user's groups).
func TestCapacity(t *testing.T) {
	nodes := []*corev1.Node{
		fixture.H100("h100-a", 2).Obj(),
		fixture.H100("h100-b", 4).Cordoned().Obj(),
		fixture.T4TimeSliced("t4").Obj(),
		fixture.A100MIGMixed("a100").Obj(),
		fixture.CPU("cpu").Obj(),
	}
	pods := []*corev1.Pod{fixture.Pod("p1").User("carol").On("h100-a").Req("nvidia.com/gpu", 2).Phase(corev1.PodRunning).Obj()}
	cat := catalog.FromObjects(nodes, pods, catalog.Options{})
	yes := true
	cfg := &profiles.Config{Kinds: map[string]profiles.Override{
		"shared-t4":          {Groups: []string{"staff"}},
		"gpu-l40s":           {Provisionable: &yes},
		"gpu-h100-80gb-hbm3": {},
	}}
	c := capacity{cat: cat, config: func() *profiles.Config { return cfg }}

	h100, ok := c.Lookup(map[string]int64{"nvidia.com/gpu": 1}, map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
	if !ok {
		t.Fatal("H100 not found")
	}
	type got struct {
		Slug                 string
		Allocatable, Free    int64
		SchedulableNodes     int
		MaxOnOne             int64
		Blocked              map[string]string
		Provisionable, Unit1 bool
	}
	g := got{h100.Slug, h100.Allocatable, h100.Free, h100.SchedulableNodes, h100.MaxAllocatableOnOneSchedulableNode, h100.Blocked,
		h100.Provisionable, h100.Unit.Count == 1}
	want := got{"gpu-h100-80gb-hbm3", 2, 0, 1, 2, map[string]string{"h100-b": "cordoned"}, false, true}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("H100 availability (-want +got):\n%s", diff)
	}

	l40s, ok := c.Lookup(map[string]int64{"nvidia.com/gpu": 1}, map[string]string{"nvidia.com/gpu.product": "NVIDIA-L40S"})
	if !ok || !l40s.Provisionable || l40s.Slug != "gpu-l40s" {
		t.Errorf("provisionable L40S pool without a node: got %+v, %v; want it waited for", l40s, ok)
	}
	if a, ok := c.Lookup(map[string]int64{"nvidia.com/gpu": 1}, map[string]string{"nvidia.com/gpu.product": "NVIDIA-B200"}); ok {
		t.Errorf("a kind no node offers and nobody provisions: got %+v, want not found", a)
	}

	var free []string
	for _, a := range c.FreeNow("bob") {
		free = append(free, a.Slug)
	}
	wantFree := []string{"mig-a100-sxm4-40gb-1g-5gb", "mig-a100-sxm4-40gb-3g-20gb"} // the form's order
	if diff := cmp.Diff(wantFree, free); diff != "" {
		t.Errorf("free now (-want +got):\n%s", diff)
	}
}
