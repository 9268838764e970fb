// Package bench measures spawn admission (benchmarks.md B2): gpu-quota's decisions from memory against a
// naive enforcer that LISTs pods and nodes from the API server for every decision, on the same real
// kube-apiserver holding the same 10,000 pods, in one run. It counts the API server's own read counters, so
// "reads per decision" is what the server saw, not what the client claims. The synthetic cluster, the load
// generators and the counters are services/internal/benchkit's.
package bench

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RaceSelector selects the race's node: 8 free H200s that only the race asks for, so the racer's limit, not
// the capacity, is what bounds the admissions.
var RaceSelector = map[string]string{"nvidia.com/gpu.product": "NVIDIA-H200", "bench.gpuhub.io/race": "true"}

// RaceNode is the race's node.
func RaceNode() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-race", Labels: map[string]string{"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8"}}}
	for k, v := range RaceSelector {
		n.Labels[k] = v
	}
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("8")}
	n.Status.Capacity, n.Status.Allocatable = alloc, alloc
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}
