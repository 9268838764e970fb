package replay

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// products are the GFD product labels of the trace's models. G2 and G3 are undisclosed codes in the trace:
// they keep them, named as such.
var products = map[string]string{
	"P100": "Tesla-P100-PCIE-16GB", "T4": "Tesla-T4", "V100M16": "Tesla-V100-SXM2-16GB",
	"V100M32": "Tesla-V100-SXM2-32GB", "A10": "NVIDIA-A10", "G2": "PAI-G2", "G3": "PAI-G3",
}

func productOf(model string) string {
	if p, ok := products[model]; ok {
		return p
	}
	return "PAI-" + model
}

// simNode is one node of the simulated cluster: the one GPU resource it offers and how much of it is free.
type simNode struct {
	name     string
	labels   map[string]string
	resource string
	units    int64
	free     int64
}

// cluster is the simulated nodes and the scheduler's placement: the most allocated node that fits (z2jh's
// user-scheduler scores MostAllocated), by name on a tie.
type cluster struct {
	nodes []*simNode
	gpus  int64
	// shared: some nodes are time-sliced (the spawn form, gpuhub's or z2jh's static list, offers shares).
	shared bool
}

// newCluster builds the nodes; with shared, the admin time-slices whole nodes into replicas (renamed
// nvidia.com/gpu.shared, as the GPU Operator's time-slicing config with renameByDefault does): nodes taken in a
// seeded order until they hold at least that share of the GPUs, never the largest node (kept whole for the
// largest requests). It is the admin's cluster, not a gpuhub part: every setup runs on a copy of the same one
// (Env).
func newCluster(seed string, nodes []TraceNode, shared float64, replicas int64) *cluster {
	c := &cluster{}
	sliced := timeSliced(seed, nodes, shared)
	for _, n := range nodes {
		sn := &simNode{name: n.Name, resource: gpu.ResourceGPU, units: n.GPUs}
		sn.labels = map[string]string{gpu.LabelProduct: productOf(n.Model), gpu.LabelCount: strconv.FormatInt(n.GPUs, 10),
			gpu.LabelSharingStrategy: gpu.SharingNone, gpu.LabelReplicas: "1"}
		if sliced[n.Name] {
			sn.resource, sn.units = gpu.ResourceGPUShared, n.GPUs*replicas
			sn.labels[gpu.LabelSharingStrategy] = gpu.SharingTimeSlicing
			sn.labels[gpu.LabelReplicas] = strconv.FormatInt(replicas, 10)
			c.shared = true
		}
		sn.free = sn.units
		c.nodes = append(c.nodes, sn)
		c.gpus += n.GPUs
	}
	return c
}

// timeSliced are the nodes the admin time-slices: in a seeded order (a well-mixed hash of the name: names that
// differ in one digit get unrelated places), whole nodes until they hold at least share of the GPUs; the
// largest node (the first by name among equals) stays whole.
func timeSliced(seed string, nodes []TraceNode, share float64) map[string]bool {
	out := map[string]bool{}
	if share <= 0 || len(nodes) == 0 {
		return out
	}
	var total int64
	largest := nodes[0]
	for _, n := range nodes {
		total += n.GPUs
		if n.GPUs > largest.GPUs || (n.GPUs == largest.GPUs && n.Name < largest.Name) {
			largest = n
		}
	}
	order := slices.Clone(nodes)
	slices.SortFunc(order, func(a, b TraceNode) int {
		return cmp.Or(cmp.Compare(mixed(seed, "shared", a.Name), mixed(seed, "shared", b.Name)), cmp.Compare(a.Name, b.Name))
	})
	want := share * float64(total)
	var got int64
	for _, n := range order {
		if float64(got) >= want {
			break
		}
		if n.Name == largest.Name {
			continue
		}
		out[n.Name] = true
		got += n.GPUs
	}
	return out
}

// clone is a copy with every unit free, for one run.
func (c *cluster) clone() *cluster {
	out := &cluster{gpus: c.gpus, shared: c.shared}
	for _, n := range c.nodes {
		out.nodes = append(out.nodes, &simNode{name: n.name, labels: maps.Clone(n.labels), resource: n.resource, units: n.units, free: n.units})
	}
	return out
}

// Layout is what a run's cluster offers. Every setup of one replay gets the same.
type Layout struct {
	Nodes, SharedNodes int
	// GPUs are the physical GPUs; SharedGPUs of them are time-sliced, each into Replicas shares.
	GPUs, SharedGPUs int64
	Replicas         int64
	// Units are what the nodes advertise, by resource (nvidia.com/gpu, nvidia.com/gpu.shared).
	Units map[string]int64
}

func (c *cluster) layout() Layout {
	l := Layout{Nodes: len(c.nodes), GPUs: c.gpus, Units: map[string]int64{}}
	for _, n := range c.nodes {
		l.Units[n.resource] += n.units
		if n.resource == gpu.ResourceGPUShared {
			l.SharedNodes++
			g, _ := strconv.ParseInt(n.labels[gpu.LabelCount], 10, 64)
			l.SharedGPUs += g
			l.Replicas, _ = strconv.ParseInt(n.labels[gpu.LabelReplicas], 10, 64)
		}
	}
	return l
}

// place binds count units of res to the most allocated node that matches the selector and has them free.
func (c *cluster) place(res string, count int64, selector map[string]string) *simNode {
	var best *simNode
	for _, n := range c.nodes {
		if n.resource != res || n.free < count || !matches(n.labels, selector) {
			continue
		}
		if best == nil || cmp.Compare(n.free-count, best.free-count) < 0 {
			best = n
		}
	}
	if best != nil {
		best.free -= count
	}
	return best
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// nodeObject is the node as the API server would serve it: GFD labels, allocatable, Ready.
func nodeObject(n *simNode) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: maps.Clone(n.labels)},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceName(n.resource): *resource.NewQuantity(n.units, resource.DecimalSI)},
			Capacity:    corev1.ResourceList{corev1.ResourceName(n.resource): *resource.NewQuantity(n.units, resource.DecimalSI)},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// podObject is a single-user pod as KubeSpawner creates it, Pending until bound, Running from started on.
func podObject(user, server, slug string, res map[string]int64, selector map[string]string, created time.Time) *corev1.Pod {
	limits := corev1.ResourceList{}
	for r, n := range res {
		limits[corev1.ResourceName(r)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	name := "jupyter-" + user + "--" + server
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: name, UID: types.UID(name + "-" + strconv.FormatInt(created.Unix(), 36)),
			CreationTimestamp: metav1.NewTime(created),
			Labels:            map[string]string{"gpuhub.io/profile": slug, "component": "singleuser-server"},
			Annotations:       map[string]string{inventory.AnnotationUser: user, inventory.AnnotationServer: server}},
		Spec: corev1.PodSpec{NodeSelector: maps.Clone(selector),
			Containers: []corev1.Container{{Name: "notebook", Resources: corev1.ResourceRequirements{Limits: limits}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// bound is the pod bound to node and running since at.
func bound(p *corev1.Pod, node string, at time.Time) *corev1.Pod {
	q := p.DeepCopy()
	q.Spec.NodeName = node
	q.Status.Phase = corev1.PodRunning
	q.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	q.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "notebook", Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}}
	return q
}

// classOf is the GPU class and kind of what res holds on n (the vocabulary's, as the usage API and the
// waitlist name it) and its share in GPU-equivalents.
func classOf(res map[string]int64, n *simNode) (string, gpu.Kind, float64) {
	as := gpu.Allocations(res, gpu.Node{Labels: n.labels})
	if len(as) == 0 {
		return "", "", 0
	}
	var share float64
	for _, a := range as {
		share += a.Share()
	}
	return as[0].Class(), as[0].Kind, share
}
