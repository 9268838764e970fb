package inventory

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// The informers keep only what PodFrom, NodeFrom, Agents and the services' event handlers read: a cached
// single-user pod otherwise carries its spec in full (env with the server's Hub token, volumes, probes) and a
// node its image list. gpu-quota holds 10,000 pods in memory; every byte of them is scanned by each garbage
// collection, and each collection's mark phase is time taken from admissions on a one-CPU pod (B2).

// trimObject is the informers' transform. It must be idempotent: client-go may hand it an object it has
// already trimmed.
func trimObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return trimPod(o), nil
	case *corev1.Node:
		return trimNode(o), nil
	}
	return obj, nil
}

// trimPod keeps the pod's identity, gpuhub's and KubeSpawner's annotations, its labels (the agent informer
// selects by them), where it runs and asked to run, each container's GPU resources and the status fields that
// say whether it holds them, since when, and why it waits.
func trimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, Labels: p.Labels,
			Annotations: keptAnnotations(p.Annotations), CreationTimestamp: p.CreationTimestamp,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{
			NodeName: p.Spec.NodeName, NodeSelector: p.Spec.NodeSelector, ServiceAccountName: p.Spec.ServiceAccountName,
			Containers: gpuContainers(p.Spec.Containers), InitContainers: gpuContainers(p.Spec.InitContainers),
		},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, PodIP: p.Status.PodIP, StartTime: p.Status.StartTime,
			ContainerStatuses:     containerStates(p.Status.ContainerStatuses),
			InitContainerStatuses: containerStates(p.Status.InitContainerStatuses),
		},
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		out.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution}}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.PodScheduled {
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status,
				Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime})
		}
	}
	return out
}

// keptAnnotations are gpuhub's notices and KubeSpawner's user and server names; nil when there are none.
func keptAnnotations(in map[string]string) map[string]string {
	out := notices(in)
	for _, k := range []string{AnnotationUser, AnnotationServer} {
		if v, ok := in[k]; ok {
			if out == nil {
				out = make(map[string]string, 2)
			}
			out[k] = v
		}
	}
	return out
}

// gpuContainers keeps each container's name, restart policy (a sidecar's GPUs count for the whole pod) and
// GPU requests and limits.
func gpuContainers(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy,
			Resources: corev1.ResourceRequirements{Limits: gpuResources(c.Resources.Limits), Requests: gpuResources(c.Resources.Requests)}}
	}
	return out
}

func gpuResources(in corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for name, q := range in {
		if gpu.IsGPUResource(string(name)) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[name] = q
		}
	}
	return out
}

// containerStates keeps each container's name and states (when it started, why it waits).
func containerStates(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, c := range in {
		out[i] = corev1.ContainerStatus{Name: c.Name, State: c.State, LastTerminationState: c.LastTerminationState}
	}
	return out
}

// trimNode keeps the node's labels (the GPU vocabulary reads GPU feature discovery's), whether new pods may
// land on it, and what it offers.
func trimNode(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp},
		Spec:   corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status: corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable},
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason,
				LastTransitionTime: c.LastTransitionTime}}
		}
	}
	return out
}
