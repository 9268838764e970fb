// Package catalog is gpu-profiles' live inventory of the cluster by kind of GPU: for each kind (whole GPUs of
// a product, each MIG profile, time-sliced and MPS shares, time-sliced MIG, CPU-only), how many units the nodes
// offer, how many pods hold, how many are free where a new pod can land, and on how many nodes. It is kept up
// to date event by event by the informers' handlers (PodHandler, NodeHandler), so answering costs no API
// call: Kinds rebuilds its table only after something changed, and every reader in between shares it.
//
// Units are counted as the scheduler counts them: a node's allocatable GPU resource minus the requests of the
// pods bound to it that have not finished (Pending-but-bound and terminating pods hold their units). Units on
// a cordoned, NotReady or tainted node (a NoSchedule/NoExecute taint the single-user pods do not tolerate) are
// allocatable but never free: inventory.Node.Blocked, the rule gpu-quota admits by too.
package catalog

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// KindCPU is the kind of the CPU-only choice (no GPU resource).
const KindCPU = "cpu"

// SlugCPU is the CPU-only choice's slug.
const SlugCPU = "cpu"

// KindStatus is one kind of GPU in the cluster. Read it, never change it: Kinds hands the same values to every
// caller until something changes.
type KindStatus struct {
	// Slug names the kind stably (services/gpu-profiles/README.md, "Slugs"): "gpu-h100-80gb-hbm3".
	Slug string `json:"slug"`
	// Kind is a gpu.Kind ("gpu", "mig", "shared", "mps", "mig-shared") or "cpu".
	Kind string `json:"kind"`
	// Class is the vocabulary's accounting class ("gpu H100-80GB-HBM3"); empty for cpu.
	Class string `json:"class"`
	// Description is one unit in the vocabulary's words ("Whole H100-80GB-HBM3").
	Description string `json:"description"`
	// Resource is the extended resource a pod requests for one unit ("nvidia.com/mig-3g.20gb").
	Resource string `json:"resource"`
	// NodeSelector lands a pod on the nodes of this kind, as the GPU Operator labels them.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Count is the units asked for (Lookup); 0 in Kinds.
	Count int64 `json:"count,omitempty"`
	// Allocatable units on every node of the kind; Allocated held by pods bound to them; Free on the nodes a new
	// pod can land on (SchedulableNodes).
	Allocatable int64 `json:"allocatable"`
	Allocated   int64 `json:"allocated"`
	Free        int64 `json:"free"`
	// Nodes offering the kind, and those of them a new pod can land on.
	Nodes            int `json:"nodes"`
	SchedulableNodes int `json:"schedulableNodes"`
	// MaxFreeOnOneNode is the most units free together on one schedulable node (a multi-GPU request fits when
	// it is at least the count); MaxAllocatableOnOneSchedulableNode the most one schedulable node offers at all.
	MaxFreeOnOneNode                   int64 `json:"maxFreeOnOneNode"`
	MaxAllocatableOnOneSchedulableNode int64 `json:"maxAllocatableOnOneSchedulableNode"`
	// Blocked are the nodes of the kind a new pod cannot land on, with why: "cordoned", "not ready",
	// "tainted key=value:NoSchedule".
	Blocked map[string]string `json:"blocked,omitempty"`
	// FreeOnNodes are the free units of each schedulable node that has any, largest first; AllocatableOnNodes
	// the allocatable units of each schedulable node, largest first.
	FreeOnNodes        []int64 `json:"-"`
	AllocatableOnNodes []int64 `json:"-"`
	// Unit is one unit (Count 1) as the vocabulary reads it on the first node of the kind: product, profile,
	// memory, share.
	Unit gpu.Allocation `json:"-"`
}

// FreeSets is how many requests of n units each fit in the free units now, each on one node.
func (k KindStatus) FreeSets(n int64) int64 { return sets(k.FreeOnNodes, n) }

// AllocatableSets is how many requests of n units each the schedulable nodes hold when nothing else runs.
func (k KindStatus) AllocatableSets(n int64) int64 { return sets(k.AllocatableOnNodes, n) }

func sets(perNode []int64, n int64) int64 {
	if n <= 0 {
		return 0
	}
	var out int64
	for _, f := range perNode {
		if f < n {
			break
		}
		out += f / n
	}
	return out
}

// Options configure a Catalog.
type Options struct {
	// Tolerations are those of the single-user pods: a node tainted only with taints they tolerate still counts
	// as free. See DefaultTolerations.
	Tolerations []corev1.Toleration
	// Synced and Healthy, when set, gate Kinds: the informers have delivered every object, and their watches
	// work. A catalog built from objects (FromObjects) leaves them nil.
	Synced, Healthy func() error
}

// DefaultTolerations are the single-user pods' tolerations when none are configured
// (inventory.DefaultTolerations).
func DefaultTolerations() []corev1.Toleration { return inventory.DefaultTolerations() }

// Catalog is the inventory by kind.
type Catalog struct {
	synced, healthy func() error

	mu          sync.Mutex
	tolerations []corev1.Toleration
	nodes       map[string]*nodeEntry
	nodeNames   []string // sorted
	pods        map[string]podEntry
	used        map[string]map[string]int64 // node -> resource -> units held by bound unfinished pods
	dirty       atomic.Bool

	snap atomic.Pointer[snapshot]
}

type nodeEntry struct {
	node  inventory.Node
	units []unit
}

// unit is one GPU resource a node offers, classified.
type unit struct {
	key      string // class, resource and selector: what one profile can ask for
	alloc    gpu.Allocation
	selector map[string]string
}

type podEntry struct {
	node      string
	resources map[string]int64
}

type snapshot struct {
	kinds      []KindStatus
	byResource map[string][]int
}

// New returns an empty catalog; register PodHandler and NodeHandler on the informers.
func New(o Options) *Catalog {
	c := &Catalog{synced: o.Synced, healthy: o.Healthy, tolerations: o.Tolerations,
		nodes: map[string]*nodeEntry{}, pods: map[string]podEntry{}, used: map[string]map[string]int64{}}
	if c.tolerations == nil {
		c.tolerations = DefaultTolerations()
	}
	c.dirty.Store(true)
	return c
}

// FromObjects builds a catalog from listed nodes and pods: the same answer as the informer-fed one, for a
// caller that LISTs (the benchmark's baseline) and for tests.
func FromObjects(nodes []*corev1.Node, pods []*corev1.Pod, o Options) *Catalog {
	o.Synced, o.Healthy = nil, nil
	c := New(o)
	for _, n := range nodes {
		c.setNode(n.Name, n)
	}
	for _, p := range pods {
		c.setPod(p.Namespace+"/"+p.Name, p)
	}
	return c
}

// SetTolerations replaces the single-user pods' tolerations (a configuration reload).
func (c *Catalog) SetTolerations(t []corev1.Toleration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tolerations = slices.Clone(t)
	c.dirty.Store(true)
}

// ErrNotReady is Kinds' error before the informers have delivered every object, or while their watches fail.
var ErrNotReady = errors.New("catalog: inventory not ready")

// Kinds returns every kind in display order: CPU-only first, then the GPU kinds in the vocabulary's order
// (whole GPUs, MIG, time-sliced, MPS, time-sliced MIG), each by class. It fails while the inventory is not
// synced or its watches fail: an answer from a stale cache would lie about what is free.
func (c *Catalog) Kinds() ([]KindStatus, error) {
	if err := c.ready(); err != nil {
		return nil, err
	}
	return c.current().kinds, nil
}

func (c *Catalog) ready() error {
	if c.synced != nil {
		if err := c.synced(); err != nil {
			return fmt.Errorf("%w: %w", ErrNotReady, err)
		}
	}
	if c.healthy != nil {
		if err := c.healthy(); err != nil {
			return fmt.Errorf("%w: %w", ErrNotReady, err)
		}
	}
	return nil
}

// current is the table, rebuilt first if anything changed since it was built.
func (c *Catalog) current() *snapshot {
	if s := c.snap.Load(); s != nil && !c.dirty.Load() {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.snap.Load(); s != nil && !c.dirty.Load() {
		return s
	}
	c.dirty.Store(false) // before the build: a change during it marks the table dirty again
	s := c.build()
	c.snap.Store(s)
	return s
}

// Lookup finds the kind a pod asking for resources with nodeSelector gets: the kind of its first GPU resource
// (by name) whose node selector agrees with the pod's (no label both name with different values), the one
// agreeing on most labels first. ok is false for a pod without GPU resources or a kind no node offers. Count
// is the units of the kind the pod asks for. Lookup answers even when Kinds would fail (the last table).
func (c *Catalog) Lookup(resources map[string]int64, nodeSelector map[string]string) (KindStatus, bool) {
	s := c.current()
	names := slices.Sorted(maps.Keys(resources))
	for _, res := range names {
		if resources[res] <= 0 || !gpu.IsGPUResource(res) {
			continue
		}
		best, bestScore := -1, -1
		for _, i := range s.byResource[res] {
			score, ok := agree(s.kinds[i].NodeSelector, nodeSelector)
			if ok && score > bestScore {
				best, bestScore = i, score
			}
		}
		if best >= 0 {
			k := s.kinds[best]
			k.Count = resources[res]
			return k, true
		}
	}
	return KindStatus{}, false
}

func agree(kind, pod map[string]string) (int, bool) {
	n := 0
	for k, v := range pod {
		if kv, ok := kind[k]; ok {
			if kv != v {
				return 0, false
			}
			n++
		}
	}
	return n, true
}

// Slug is the stable name of the kind of a: lowercase [a-z0-9-], derived from the kind, product and MIG profile
// only (services/gpu-profiles/README.md, "Slugs").
func Slug(a gpu.Allocation) string {
	product := slugPart(gpu.ShortProduct(a.Product))
	if product == "" {
		product = "unknown"
	}
	switch a.Kind {
	case gpu.KindMIG, gpu.KindSharedMIG:
		return string(a.Kind) + "-" + product + "-" + slugPart(a.Profile)
	case gpu.KindShared, gpu.KindMPS:
		return string(a.Kind) + "-" + product
	}
	return "gpu-" + product
}

// slugPart lowercases s and turns every run of characters outside [a-z0-9] into one dash.
func slugPart(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	return b.String()
}

// selectorFor is the node selector that lands a pod asking for a on nodes like labels: the GPU product label
// as GFD writes it (the single strategy's and unrenamed shares' suffixes included), the MIG strategy for MIG
// kinds, and the sharing strategy for whole-GPU shares (a time-sliced and an MPS node of one product both say
// -SHARED).
func selectorFor(a gpu.Allocation, labels map[string]string) map[string]string {
	sel := map[string]string{}
	if p := labels[gpu.LabelProduct]; p != "" {
		sel[gpu.LabelProduct] = p
	}
	if a.Kind.MIG() {
		if s := labels[gpu.LabelMIGStrategy]; s != "" {
			sel[gpu.LabelMIGStrategy] = s
		}
	}
	if (a.Kind == gpu.KindShared || a.Kind == gpu.KindMPS) && labels[gpu.LabelSharingStrategy] != "" {
		sel[gpu.LabelSharingStrategy] = labels[gpu.LabelSharingStrategy]
	}
	return sel
}

func unitKey(class, resource string, sel map[string]string) string {
	var b strings.Builder
	b.WriteString(class)
	b.WriteByte('|')
	b.WriteString(resource)
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		b.WriteByte('|')
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(sel[k])
	}
	return b.String()
}

// setNode records node name (n nil: deleted). An update that changes nothing the catalog reads (a status
// heartbeat) costs a comparison.
func (c *Catalog) setNode(name string, n *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := c.nodes[name]
	if n == nil {
		if had {
			delete(c.nodes, name)
			c.nodeNames = slices.DeleteFunc(c.nodeNames, func(s string) bool { return s == name })
			c.dirty.Store(true)
		}
		return
	}
	nn := inventory.NodeFrom(n)
	if had && old.node.Equal(nn) {
		return
	}
	e := &nodeEntry{node: nn}
	for _, a := range nn.Units() {
		sel := selectorFor(a, nn.Labels)
		e.units = append(e.units, unit{key: unitKey(a.Class(), a.Resource, sel), alloc: a, selector: sel})
	}
	c.nodes[name] = e
	if !had {
		i, _ := slices.BinarySearch(c.nodeNames, name)
		c.nodeNames = slices.Insert(c.nodeNames, i, name)
	}
	c.dirty.Store(true)
}

// setPod records pod key (p nil: deleted). Only GPU pods bound to a node and not finished hold units.
func (c *Catalog) setPod(key string, p *corev1.Pod) {
	var e podEntry
	holds := false
	if p != nil && p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		if res := gpu.PodResources(p); len(res) > 0 {
			e, holds = podEntry{node: p.Spec.NodeName, resources: res}, true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := c.pods[key]
	if !had && !holds {
		return
	}
	if had && holds && old.node == e.node && maps.Equal(old.resources, e.resources) {
		return
	}
	if had {
		c.hold(old, -1)
		delete(c.pods, key)
	}
	if holds {
		c.hold(e, 1)
		c.pods[key] = e
	}
	c.dirty.Store(true)
}

func (c *Catalog) hold(e podEntry, sign int64) {
	u := c.used[e.node]
	if u == nil {
		u = map[string]int64{}
		c.used[e.node] = u
	}
	for r, n := range e.resources {
		u[r] += sign * n
		if u[r] == 0 {
			delete(u, r)
		}
	}
	if len(u) == 0 {
		delete(c.used, e.node)
	}
}

// build computes the table; c.mu is held.
func (c *Catalog) build() *snapshot {
	type acc struct {
		KindStatus
		key string
	}
	cpu := &acc{KindStatus: KindStatus{Slug: SlugCPU, Kind: KindCPU, Description: "CPU only, no GPU"}}
	byKey := map[string]*acc{}
	var order []*acc
	for _, name := range c.nodeNames {
		e := c.nodes[name]
		why := e.node.Blocked(c.tolerations)
		if len(e.units) == 0 {
			cpu.Nodes++
			if why == "" {
				cpu.SchedulableNodes++
			}
			continue
		}
		for _, u := range e.units {
			a := byKey[u.key]
			if a == nil {
				one := u.alloc
				one.Count = 1
				a = &acc{key: u.key, KindStatus: KindStatus{Slug: Slug(one), Kind: string(one.Kind), Class: one.Class(),
					Description: one.Description(), Resource: one.Resource, NodeSelector: u.selector, Unit: one}}
				byKey[u.key] = a
				order = append(order, a)
			}
			units, used := u.alloc.Count, c.used[name][u.alloc.Resource]
			a.Allocatable += units
			a.Allocated += used
			a.Nodes++
			if why != "" {
				if a.Blocked == nil {
					a.Blocked = map[string]string{}
				}
				a.Blocked[name] = why
				continue
			}
			a.SchedulableNodes++
			a.MaxAllocatableOnOneSchedulableNode = max(a.MaxAllocatableOnOneSchedulableNode, units)
			a.AllocatableOnNodes = append(a.AllocatableOnNodes, units)
			if free := units - used; free > 0 {
				a.Free += free
				a.MaxFreeOnOneNode = max(a.MaxFreeOnOneNode, free)
				a.FreeOnNodes = append(a.FreeOnNodes, free)
			}
		}
	}
	// Kinds of one class that nodes advertise differently (a renamed and an unrenamed time-sliced pool, MIG
	// under the mixed and the single strategy) share a slug: the one with its own resource name (.shared,
	// mig-...) keeps it, the others are numbered in key order.
	slices.SortFunc(order, func(x, y *acc) int {
		return cmp.Or(kindRank(x.Kind)-kindRank(y.Kind), strings.Compare(x.Class, y.Class),
			variantRank(x.Resource)-variantRank(y.Resource), strings.Compare(x.key, y.key))
	})
	seen := map[string]int{}
	for _, a := range order {
		seen[a.Slug]++
		if n := seen[a.Slug]; n > 1 {
			a.Slug += "-" + strconv.Itoa(n)
		}
	}
	s := &snapshot{kinds: make([]KindStatus, 0, len(order)+1), byResource: map[string][]int{}}
	s.kinds = append(s.kinds, cpu.KindStatus)
	for _, a := range order {
		slices.SortFunc(a.FreeOnNodes, func(x, y int64) int { return cmp.Compare(y, x) })
		slices.SortFunc(a.AllocatableOnNodes, func(x, y int64) int { return cmp.Compare(y, x) })
		s.byResource[a.Resource] = append(s.byResource[a.Resource], len(s.kinds))
		s.kinds = append(s.kinds, a.KindStatus)
	}
	return s
}

// variantRank puts a resource of the kind's own name before the plain nvidia.com/gpu it can also be advertised as.
func variantRank(resource string) int {
	if resource == gpu.ResourceGPU {
		return 1
	}
	return 0
}

func kindRank(k string) int {
	if i := slices.Index(gpu.Kinds(), gpu.Kind(k)); i >= 0 {
		return i
	}
	return len(gpu.Kinds())
}

// PodHandler keeps the pods up to date; register it with inventory.AddHandlers.
func (c *Catalog) PodHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { c.onPod(obj, false) },
		DeleteFunc: func(obj any) { c.onPod(obj, true) },
	}
}

// NodeHandler keeps the nodes up to date; register it with inventory.AddHandlers.
func (c *Catalog) NodeHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNode(obj, false) },
		UpdateFunc: func(_, obj any) { c.onNode(obj, false) },
		DeleteFunc: func(obj any) { c.onNode(obj, true) },
	}
}

func (c *Catalog) onPod(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.setPod(t.Key, nil)
		return
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := p.Namespace + "/" + p.Name
	if deleted {
		p = nil
	}
	c.setPod(key, p)
}

func (c *Catalog) onNode(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.setNode(t.Key, nil)
		return
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	if deleted {
		c.setNode(n.Name, nil)
		return
	}
	c.setNode(n.Name, n)
}
