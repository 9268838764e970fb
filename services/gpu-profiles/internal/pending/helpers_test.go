package pending

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// GFD labels of the local cluster's GPU kinds (e2e/topology.yaml).
var (
	h100Labels = map[string]string{gpu.LabelProduct: "NVIDIA-H100-80GB-HBM3"}
	a100Labels = map[string]string{gpu.LabelProduct: "NVIDIA-A100-SXM4-40GB", gpu.LabelMIGStrategy: "mixed"}
	t4Labels   = map[string]string{gpu.LabelProduct: "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4"}
	b200Labels = map[string]string{gpu.LabelProduct: "NVIDIA-B200"}
)

const (
	resGPU    = "nvidia.com/gpu"
	resShared = "nvidia.com/gpu.shared"
	resMIG1g  = "nvidia.com/mig-1g.5gb"
	resMIG3g  = "nvidia.com/mig-3g.20gb"
)

// avail builds a kind's availability: allocatable units on nodes schedulable nodes, maxOne on the largest.
func avail(slug, res string, labels map[string]string, allocatable, free int64, nodes int, maxOne int64) Availability {
	u := gpu.Allocations(map[string]int64{res: 1}, gpu.Node{Labels: labels})[0]
	return Availability{Slug: slug, Unit: u, Allocatable: allocatable, Free: free, SchedulableNodes: nodes,
		MaxAllocatableOnOneSchedulableNode: maxOne}
}

func (a Availability) blocked(nodes map[string]string) Availability { a.Blocked = nodes; return a }
func (a Availability) provisionable() Availability                  { a.Provisionable = true; return a }

// fakeCapacity answers Lookup by the resource asked for and the product the selector names.
type fakeCapacity struct {
	mu    sync.Mutex
	kinds map[string]Availability // resource + "|" + product label
	free  []Availability
	users []string // FreeNow's callers
	// uncertain makes every answer a guess (Availability.Certain false).
	uncertain bool
}

func newCapacity(free ...Availability) *fakeCapacity {
	return &fakeCapacity{kinds: map[string]Availability{}, free: free}
}

// with makes av the kind of pods asking for res on the product of labels.
func (c *fakeCapacity) with(res string, labels map[string]string, av Availability) *fakeCapacity {
	c.set(res, labels, av)
	return c
}

func (c *fakeCapacity) set(res string, labels map[string]string, av Availability) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kinds[res+"|"+labels[gpu.LabelProduct]] = av
}

func (c *fakeCapacity) setFree(free []Availability) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.free = free
}

func (c *fakeCapacity) Lookup(res map[string]int64, sel map[string]string) (Availability, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for r := range res {
		if av, ok := c.kinds[r+"|"+sel[gpu.LabelProduct]]; ok {
			av.Certain = !c.uncertain
			return av, true
		}
	}
	return Availability{Certain: !c.uncertain}, false
}

func (c *fakeCapacity) FreeNow(user string) []Availability {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.users = append(c.users, user)
	return c.free
}

// podBuilder builds KubeSpawner-like singleuser pods.
type podBuilder struct{ p *corev1.Pod }

var t0 = time.Date(2026, 11, 22, 14, 2, 11, 0, time.UTC)

func newPod(user, server string) *podBuilder {
	name := "jupyter-" + user
	if server != "" {
		name += "--" + server
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(t0),
			Annotations:       map[string]string{inventory.AnnotationUser: user}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if server != "" {
		p.Annotations[inventory.AnnotationServer] = server
	}
	return &podBuilder{p: p}
}

// wants asks for n units of res on the product of labels.
func (b *podBuilder) wants(res string, n int64, labels map[string]string) *podBuilder {
	c := &b.p.Spec.Containers[0]
	c.Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}
	b.p.Spec.NodeSelector = map[string]string{gpu.LabelProduct: labels[gpu.LabelProduct]}
	return b
}

func (b *podBuilder) unschedulable(msg string, at time.Time) *podBuilder {
	b.p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.NewTime(at)}}
	return b
}

func (b *podBuilder) bound(node string, at time.Time, waiting ...string) *podBuilder {
	b.p.Spec.NodeName = node
	b.p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(at)}}
	for _, w := range waiting {
		b.p.Status.ContainerStatuses = append(b.p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "notebook",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: w, Message: "raw kubelet text"}}})
	}
	return b
}

func (b *podBuilder) phase(p corev1.PodPhase) *podBuilder { b.p.Status.Phase = p; return b }

// affinity adds required node affinity (a zone), as an admin's KubeSpawner override might.
func (b *podBuilder) affinity() *podBuilder {
	b.p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
		}}},
	}}
	return b
}

// uncertain makes every answer of c a guess.
func uncertain(c *fakeCapacity) *fakeCapacity { c.uncertain = true; return c }
func (b *podBuilder) noUser() *podBuilder {
	delete(b.p.Annotations, inventory.AnnotationUser)
	return b
}
func (b *podBuilder) obj() *corev1.Pod { return b.p.DeepCopy() }

func (b *podBuilder) inv(t *testing.T) inventory.Pod {
	t.Helper()
	p, ok := inventory.PodFrom(b.p)
	if !ok {
		t.Fatal("not a GPU pod")
	}
	return p
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeHub records StopServer calls.
type fakeHub struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (h *fakeHub) StopServer(_ context.Context, user, server string, remove bool) (hubapi.StopResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := user + "/" + server
	if remove {
		s += " remove"
	}
	h.calls = append(h.calls, s)
	return hubapi.StopResult{Pending: true}, h.err
}

func (h *fakeHub) called() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}
