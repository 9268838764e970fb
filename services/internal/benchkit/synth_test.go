package benchkit

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestSynthPlacesGPUPodsUntilFull(t *testing.T) {
	s := Synth{Users: 100, Pods: 300, GPUNodes: 3, GPUPodEvery: 1}
	unbound, bound := 0, 0
	for _, p := range s.PodObjects("jhub") {
		if p.Spec.NodeName == "" {
			unbound++
		} else {
			bound++
		}
	}
	// 3 nodes: 8 H100s, 8 x 3g.20gb + 32 x 1g.5gb, 32 T4 shares = 80 units for 300 GPU pods.
	if bound != 80 || unbound != 220 {
		t.Errorf("bound %d, unbound %d; want 80 and 220", bound, unbound)
	}
}

func TestSynthCPUNodesAndCordons(t *testing.T) {
	s := Synth{Users: 10, Pods: 40, GPUNodes: 6, CPUNodes: 2, CordonEvery: 3, GPUPodEvery: 4}
	nodes := s.Nodes()
	names := map[string]bool{}
	cordoned := 0
	for _, n := range nodes {
		names[n.Name] = n.Spec.Unschedulable
		if n.Spec.Unschedulable {
			cordoned++
		}
	}
	if len(nodes) != 8 || cordoned != 2 || !names["gpu-0002"] || !names["gpu-0005"] {
		t.Fatalf("%d nodes, %d cordoned (%v); want 8 nodes, gpu-0002 and gpu-0005 cordoned", len(nodes), cordoned, names)
	}
	for i, p := range s.PodObjects("jhub") {
		gpuPod := i%s.GPUPodEvery == 0
		switch {
		case p.Spec.NodeName == "gpu-0002" || p.Spec.NodeName == "gpu-0005":
			t.Errorf("pod %s on a cordoned node", p.Name)
		case !gpuPod && p.Spec.NodeName[:4] != "cpu-":
			t.Errorf("CPU-only pod %s on %s, want a CPU node", p.Name, p.Spec.NodeName)
		}
	}
}

func TestCreate(t *testing.T) {
	s := Synth{Users: 50, Pods: 1001, GPUNodes: 6, CPUNodes: 3, GPUPodEvery: 4}
	c := fake.NewClientset()
	ctx := context.Background()
	var progress []int
	if err := s.Seed(ctx, c, "jhub", 4, func(done, _ int) { progress = append(progress, done) }); err != nil {
		t.Fatal(err)
	}
	nodes, _ := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	pods, _ := c.CoreV1().Pods("jhub").List(ctx, metav1.ListOptions{})
	if len(nodes.Items) != 9 || len(pods.Items) != 1001 {
		t.Errorf("%d nodes, %d pods; want 9 and 1001", len(nodes.Items), len(pods.Items))
	}
	for _, n := range nodes.Items {
		if len(n.Status.Allocatable) == 0 {
			t.Errorf("node %s has no status", n.Name)
		}
	}
	if diff := cmp.Diff([]int{1000}, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if err := s.Seed(ctx, c, "jhub", 4, nil); err == nil {
		t.Error("seeding twice: no error (the namespace exists)")
	}
}
