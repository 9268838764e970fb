package gpu

import (
	corev1 "k8s.io/api/core/v1"
)

// PodResources is the effective GPU request of a pod (resource name -> count), the scheduler's rule: app
// containers and sidecars (restartable init containers) add up, an ordinary init container counts with the
// sidecars started before it, and the pod holds the larger of the two. Per resource the limit comes first
// (extended resources must have one) and the request stands in when a limit is missing. Non-GPU resources and
// zero counts are left out; nil when the pod asks for no GPU.
func PodResources(p *corev1.Pod) map[string]int64 {
	sum := map[string]int64{}
	for _, c := range p.Spec.Containers {
		addContainer(sum, c)
	}
	sidecars := map[string]int64{}
	initMax := map[string]int64{}
	for _, c := range p.Spec.InitContainers {
		step := map[string]int64{}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			addContainer(sidecars, c)
		} else {
			addContainer(step, c)
		}
		for name, n := range sidecars {
			step[name] += n
		}
		for name, n := range step {
			initMax[name] = max(initMax[name], n)
		}
	}
	for name, n := range sidecars {
		sum[name] += n
	}
	var out map[string]int64
	for _, m := range []map[string]int64{sum, initMax} {
		for name, n := range m {
			if n <= 0 || n <= out[name] {
				continue
			}
			if out == nil {
				out = map[string]int64{}
			}
			out[name] = n
		}
	}
	return out
}

// addContainer adds the GPU resources of one container into m: the limit, else the request.
func addContainer(m map[string]int64, c corev1.Container) {
	for name, q := range c.Resources.Limits {
		if IsGPUResource(string(name)) {
			m[string(name)] += q.Value()
		}
	}
	for name, q := range c.Resources.Requests {
		if _, limited := c.Resources.Limits[name]; !limited && IsGPUResource(string(name)) {
			m[string(name)] += q.Value()
		}
	}
}

// NodeAllocatable is what a node offers pods in GPU resources (resource name -> count > 0); never nil.
func NodeAllocatable(n *corev1.Node) map[string]int64 {
	out := map[string]int64{}
	for name, q := range n.Status.Allocatable {
		if IsGPUResource(string(name)) && q.Value() > 0 {
			out[string(name)] = q.Value()
		}
	}
	return out
}
