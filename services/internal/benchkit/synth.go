// Package benchkit is what the services' benchmarks against a real kube-apiserver share (benchmarks.md B2,
// B7): a synthetic cluster of GPU nodes and single-user pods and the code that creates it, the load
// generators (bursts and closed loops, each call timed), the API server's own read counters, the start of the
// control plane (controlplane.go: e2e/cmd/controlplane run as a process, so nothing here imports e2e/) and of a
// system under test as a process of its own. Each benchmark keeps its systems under test and its table.
package benchkit

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Synth is a synthetic cluster: GPU nodes of three kinds and one pod per user, some of them holding GPUs.
type Synth struct {
	Users, Pods int
	// GPUNodes is the number of GPU nodes, split a third each: 8 x H100, A100 with MIG (per GPU 1 x 3g.20gb
	// + 4 x 1g.5gb, 8 GPUs), 8 x T4 time-sliced 4 ways.
	GPUNodes int
	// CPUNodes are nodes without GPUs; the CPU-only pods run there (on the GPU nodes when there are none).
	CPUNodes int
	// CordonEvery: GPU node i is cordoned when CordonEvery > 0 and i % CordonEvery == CordonEvery-1 (its units
	// are allocatable but not free for a new pod).
	CordonEvery int
	// GPUPodEvery: pod i holds a GPU unit when i % GPUPodEvery == 0 (the others are CPU-only servers).
	GPUPodEvery int
}

// UserName is synthetic user i.
func UserName(i int) string { return fmt.Sprintf("user%05d", i) }

// Group is the Hub group of user i: a tenth are researchers, the rest students.
func Group(i int) string {
	if i%10 == 0 {
		return "researchers"
	}
	return "students"
}

// Profile is one spawn choice: the resources and node selector KubeSpawner puts on the pod.
type Profile struct {
	Slug         string
	Resource     string
	NodeSelector map[string]string
}

// Profiles are the choices of the synthetic cluster.
var Profiles = []Profile{
	{Slug: "h100", Resource: "nvidia.com/gpu", NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
	{Slug: "a100-1g", Resource: "nvidia.com/mig-1g.5gb", NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed"}},
	{Slug: "a100-3g", Resource: "nvidia.com/mig-3g.20gb", NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed"}},
	{Slug: "t4", Resource: "nvidia.com/gpu.shared", NodeSelector: map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED"}},
}

// Nodes returns the GPU nodes.
func (s Synth) Nodes() []*corev1.Node {
	var out []*corev1.Node
	for i := range s.GPUNodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gpu-%04d", i), Labels: map[string]string{"nvidia.com/gpu.present": "true"}}}
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
		switch i % 3 {
		case 0:
			n.Labels["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
			n.Labels["nvidia.com/gpu.count"] = "8"
			alloc["nvidia.com/gpu"] = resource.MustParse("8")
		case 1:
			n.Labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB"
			n.Labels["nvidia.com/mig.strategy"] = "mixed"
			n.Labels["nvidia.com/gpu.count"] = "8"
			n.Labels["nvidia.com/mig-3g.20gb.slices.gi"] = "3"
			n.Labels["nvidia.com/mig-1g.5gb.slices.gi"] = "1"
			alloc["nvidia.com/mig-3g.20gb"] = resource.MustParse("8")
			alloc["nvidia.com/mig-1g.5gb"] = resource.MustParse("32")
		default:
			n.Labels["nvidia.com/gpu.product"] = "Tesla-T4-SHARED"
			n.Labels["nvidia.com/gpu.count"] = "8"
			n.Labels["nvidia.com/gpu.replicas"] = "4"
			n.Labels["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
			alloc["nvidia.com/gpu.shared"] = resource.MustParse("32")
		}
		n.Status.Capacity, n.Status.Allocatable = alloc, alloc
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		n.Spec.Unschedulable = s.CordonEvery > 0 && i%s.CordonEvery == s.CordonEvery-1
		out = append(out, n)
	}
	for i := range s.CPUNodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cpu-%04d", i)}}
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
		n.Status.Capacity, n.Status.Allocatable = alloc, alloc
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		out = append(out, n)
	}
	return out
}

// PodObjects returns the single-user pods in namespace: pod i belongs to user i % Users. GPU pods take units on
// the nodes in order until a kind is full; later GPU pods of that kind stay unbound (Pending), as they would.
func (s Synth) PodObjects(namespace string) []*corev1.Pod {
	nodes := s.Nodes()
	hosts := nodes // where CPU-only pods run
	if s.CPUNodes > 0 {
		hosts = nodes[s.GPUNodes:]
	}
	type slot struct {
		node string
		left int64
	}
	slots := map[string][]*slot{}
	for _, n := range nodes {
		if n.Spec.Unschedulable {
			continue
		}
		for res, q := range n.Status.Allocatable {
			if r := string(res); len(r) > 11 && r[:11] == "nvidia.com/" {
				slots[r] = append(slots[r], &slot{node: n.Name, left: q.Value()})
			}
		}
	}
	var out []*corev1.Pod
	for i := range s.Pods {
		user := UserName(i % s.Users)
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "jupyter-" + user + "-" + strconv.Itoa(i/s.Users),
				Labels:      map[string]string{"component": "singleuser-server", "hub.jupyter.org/username": user},
				Annotations: map[string]string{"hub.jupyter.org/username": user, "hub.jupyter.org/servername": serverName(i / s.Users)}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "quay.io/jupyterhub/k8s-singleuser-sample:4.3.2"}}},
		}
		if len(hosts) > 0 {
			// Bound from the start like a running server (nothing to schedule); GPU pods below take a GPU node
			// with a free unit instead, or stay unbound when there is none.
			p.Spec.NodeName = hosts[i%len(hosts)].Name
		}
		if s.GPUPodEvery > 0 && i%s.GPUPodEvery == 0 {
			p.Spec.NodeName = ""
			prof := Profiles[(i/s.GPUPodEvery)%len(Profiles)]
			p.Spec.NodeSelector = prof.NodeSelector
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(prof.Resource): resource.MustParse("1")}
			for _, sl := range slots[prof.Resource] {
				if sl.left > 0 {
					sl.left--
					p.Spec.NodeName = sl.node
					break
				}
			}
		}
		out = append(out, p)
	}
	return out
}

func serverName(i int) string {
	if i == 0 {
		return ""
	}
	return "s" + strconv.Itoa(i)
}

// Seed creates the namespace, the synthetic nodes and extra ones (with their status) and the pods, with
// `parallel` writers; progress is called after every 1,000 pods.
func (s Synth) Seed(ctx context.Context, c kubernetes.Interface, namespace string, parallel int, progress func(done, total int), extra ...*corev1.Node) error {
	return Create(ctx, c, namespace, append(s.Nodes(), extra...), s.PodObjects(namespace), parallel, progress)
}

// Create creates the namespace, the nodes (with their status) and the pods, each with `parallel` writers;
// progress is called after every 1,000 pods.
func Create(ctx context.Context, c kubernetes.Interface, namespace string, nodes []*corev1.Node, pods []*corev1.Pod, parallel int, progress func(done, total int)) error {
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	err := inParallel(ctx, nodes, parallel, func(n *corev1.Node) error {
		created, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		created.Status = n.Status
		updated, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("node %s status: %w", n.Name, err)
		}
		// The API server's TaintNodesByCondition admission gives every new node the not-ready NoSchedule taint;
		// on a real cluster the node lifecycle controller lifts it once the kubelet reports Ready. The harness
		// runs no node lifecycle, so the taint is lifted here: left, it blocks every unit for new pods and the
		// benchmarks would measure refusals (B2's race admitted 0 of 7).
		var kept []corev1.Taint
		for _, t := range updated.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
				kept = append(kept, t)
			}
		}
		if len(kept) != len(updated.Spec.Taints) {
			updated.Spec.Taints = kept
			if _, err := c.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("node %s: lift the not-ready taint: %w", n.Name, err)
			}
		}
		return nil
	}, nil)
	if err != nil {
		return err
	}
	return inParallel(ctx, pods, parallel, func(p *corev1.Pod) error {
		if _, err := c.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
		return nil
	}, progress)
}

// inParallel calls fn on every item from `parallel` workers, stopping at the first error; progress (if set) is
// called after every 1,000 items.
func inParallel[T any](ctx context.Context, items []T, parallel int, fn func(T) error, progress func(done, total int)) error {
	work := make(chan T)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		done     int
	)
	for range max(parallel, 1) {
		wg.Go(func() {
			for it := range work {
				err := fn(it)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				done++
				if progress != nil && done%1000 == 0 {
					progress(done, len(items))
				}
				mu.Unlock()
			}
		})
	}
	for _, it := range items {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		work <- it
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}
