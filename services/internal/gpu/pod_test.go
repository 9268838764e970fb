package gpu

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ctr builds a container with limits and requests given as "name=count" pairs.
func ctr(limits, requests map[string]int64) corev1.Container {
	list := func(m map[string]int64) corev1.ResourceList {
		if m == nil {
			return nil
		}
		out := corev1.ResourceList{}
		for k, v := range m {
			out[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
		}
		return out
	}
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: list(limits), Requests: list(requests)}}
}

func sidecar(c corev1.Container) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func TestPodResources(t *testing.T) {
	cases := map[string]struct {
		containers, initContainers []corev1.Container
		want                       map[string]int64
	}{
		"no GPU": {
			containers: []corev1.Container{ctr(map[string]int64{"cpu": 2}, nil)},
		},
		"zero GPUs asked": {
			containers: []corev1.Container{ctr(map[string]int64{ResourceGPU: 0}, nil)},
		},
		"one container, limit": {
			containers: []corev1.Container{ctr(map[string]int64{"nvidia.com/mig-3g.20gb": 1, "cpu": 2}, nil)},
			want:       map[string]int64{"nvidia.com/mig-3g.20gb": 1},
		},
		"containers add up": {
			containers: []corev1.Container{ctr(map[string]int64{ResourceGPU: 1}, nil), ctr(map[string]int64{ResourceGPU: 2}, nil)},
			want:       map[string]int64{ResourceGPU: 3},
		},
		"limit wins over request": {
			containers: []corev1.Container{ctr(map[string]int64{ResourceGPUShared: 1}, map[string]int64{ResourceGPUShared: 5})},
			want:       map[string]int64{ResourceGPUShared: 1},
		},
		"request stands in for a missing limit, per resource": {
			containers: []corev1.Container{ctr(map[string]int64{"cpu": 1}, map[string]int64{ResourceGPU: 1})},
			want:       map[string]int64{ResourceGPU: 1},
		},
		"init container by max, not added": {
			containers:     []corev1.Container{ctr(map[string]int64{ResourceGPU: 1}, nil)},
			initContainers: []corev1.Container{ctr(map[string]int64{ResourceGPU: 2}, nil), ctr(map[string]int64{ResourceGPU: 1}, nil)},
			want:           map[string]int64{ResourceGPU: 2},
		},
		"init container smaller than the app": {
			containers:     []corev1.Container{ctr(map[string]int64{ResourceGPU: 2}, nil)},
			initContainers: []corev1.Container{ctr(map[string]int64{ResourceGPU: 1}, nil)},
			want:           map[string]int64{ResourceGPU: 2},
		},
		"sidecar adds to the app containers": {
			containers:     []corev1.Container{ctr(map[string]int64{ResourceGPU: 1}, nil)},
			initContainers: []corev1.Container{sidecar(ctr(map[string]int64{ResourceGPU: 1}, nil))},
			want:           map[string]int64{ResourceGPU: 2},
		},
		"init container after a sidecar counts with it": {
			containers: []corev1.Container{ctr(map[string]int64{ResourceGPU: 1}, nil)},
			initContainers: []corev1.Container{sidecar(ctr(map[string]int64{ResourceGPU: 1}, nil)),
				ctr(map[string]int64{ResourceGPU: 3}, nil)},
			want: map[string]int64{ResourceGPU: 4},
		},
		"init-only GPU": {
			containers:     []corev1.Container{ctr(map[string]int64{"cpu": 1}, nil)},
			initContainers: []corev1.Container{ctr(map[string]int64{"nvidia.com/mig-1g.5gb": 1}, nil)},
			want:           map[string]int64{"nvidia.com/mig-1g.5gb": 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Containers: tc.containers, InitContainers: tc.initContainers}}
			if diff := cmp.Diff(tc.want, PodResources(p)); diff != "" {
				t.Errorf("PodResources (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeAllocatable(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		"cpu": resource.MustParse("16"), ResourceGPU: resource.MustParse("0"), ResourceGPUShared: resource.MustParse("8"),
		"nvidia.com/mig-1g.5gb": resource.MustParse("7"), "example.com/fpga": resource.MustParse("1"),
	}}}
	want := map[string]int64{ResourceGPUShared: 8, "nvidia.com/mig-1g.5gb": 7}
	if diff := cmp.Diff(want, NodeAllocatable(n)); diff != "" {
		t.Errorf("NodeAllocatable (-want +got):\n%s", diff)
	}
	if got := NodeAllocatable(&corev1.Node{}); got == nil || len(got) != 0 {
		t.Errorf("NodeAllocatable(no GPUs) = %#v, want an empty map", got)
	}
}
