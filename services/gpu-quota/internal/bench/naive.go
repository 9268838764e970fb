package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// Request is one spawn to admit. On the wire (Wire) it is what the Hub glue sends: the pod cut to its
// containers' resources and node selector; the receiver counts the GPUs (gpu-quota, the naive enforcer and the
// floor alike).
type Request struct {
	User         string            `json:"user"`
	Server       string            `json:"server"`
	Groups       []string          `json:"groups"`
	Resources    map[string]int64  `json:"resources,omitempty"`
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	Profile      string            `json:"profile,omitempty"`
	Pod          *corev1.PodSpec   `json:"pod,omitempty"`
}

// Wire is the request's body as the Hub glue writes it (kit.pod_spec in the glue): one notebook container
// whose limits are the GPUs, and the node selector.
func (r Request) Wire() []byte {
	limits := corev1.ResourceList{}
	for name, n := range r.Resources {
		limits[corev1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	r.Pod = &corev1.PodSpec{NodeSelector: r.NodeSelector,
		Containers: []corev1.Container{{Name: "notebook", Resources: corev1.ResourceRequirements{Limits: limits}}}}
	r.Resources, r.NodeSelector = nil, nil
	body, _ := json.Marshal(r)
	return body
}

// counted fills Resources and NodeSelector from the pod, as gpu-quota does.
func (r Request) counted() Request {
	if r.Pod != nil {
		r.Resources, r.NodeSelector = gpu.PodResources(&corev1.Pod{Spec: *r.Pod}), r.Pod.NodeSelector
		r.Pod = nil
	}
	return r
}

// Naive is the anchor: the same policy and the same decision as gpu-quota, with the data read from the API
// server for every decision (LIST the namespace's pods, LIST the nodes), as an enforcer without informers
// would. It keeps no reservations, so concurrent spawns race past it.
type Naive struct {
	Client    kubernetes.Interface
	Namespace string
	Policy    *quota.Policy
	// Hours are the GPU-hours of a user per budget window (the same source for both sides).
	Hours func(user string) map[time.Duration]map[string]float64
}

// Admit decides one request; free is false when no unit of the requested kind is free.
func (n *Naive) Admit(ctx context.Context, r Request) (d quota.Decision, free bool, err error) {
	podList, err := n.Client.CoreV1().Pods(n.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, false, fmt.Errorf("list pods: %w", err)
	}
	nodeList, err := n.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, false, fmt.Errorf("list nodes: %w", err)
	}
	nodes := map[string]gpu.Node{}
	for i := range nodeList.Items {
		nodes[nodeList.Items[i].Name] = gpu.Node{Labels: nodeList.Items[i].Labels}
	}
	var u quota.Usage
	usedOn := map[string]map[string]int64{} // node -> resource -> units held
	for i := range podList.Items {
		p, ok := inventory.PodFrom(&podList.Items[i])
		if !ok || p.Terminating {
			continue
		}
		if p.Node != "" {
			if usedOn[p.Node] == nil {
				usedOn[p.Node] = map[string]int64{}
			}
			for res, q := range p.Resources {
				usedOn[p.Node][res] += q
			}
		}
		if p.User != r.User {
			continue
		}
		node, ok := nodes[p.Node]
		if !ok {
			node = gpu.Node{Labels: p.NodeSelector}
		}
		u.Held = append(u.Held, gpu.Allocations(p.Resources, node)...)
		u.Servers++
	}
	if n.Hours != nil {
		u.GPUHours = n.Hours(r.User)
	}
	eff := n.Policy.Effective(r.User, r.Groups)
	d = quota.Decide(eff, u, quota.Request{Allocations: gpu.Allocations(r.Resources, gpu.Node{Labels: r.NodeSelector})})
	if !d.Allow || len(r.Resources) == 0 {
		return d, true, nil
	}
	for i := range nodeList.Items {
		node := &nodeList.Items[i]
		if !matches(node, r.NodeSelector) {
			continue
		}
		alloc := gpu.NodeAllocatable(node)
		fits := true
		for res, want := range r.Resources {
			if alloc[res]-usedOn[node.Name][res] < want {
				fits = false
			}
		}
		if fits {
			return d, true, nil
		}
	}
	return d, false, nil
}

func matches(n *corev1.Node, sel map[string]string) bool {
	for k, v := range sel {
		if n.Labels[k] != v {
			return false
		}
	}
	return true
}
