package admit

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// The index is the engine's own view of the GPU pods and nodes, kept up to date event by event by the
// informers' handlers, so that a decision costs O(the user's pods + GPU classes) and never a scan of every pod
// of the cluster: pods by user, units offered per class by the nodes, units held per class by the pods.
// Everything in it is guarded by Engine.mu.
//
// Free units are counted by inventory's rule (inventory.Node.Blocked), as gpu-profiles counts them: a node
// that takes no new single-user pod (cordoned, NotReady, tainted against them) offers nothing, and the pods
// bound to it hold nothing anyone else could have.
type index struct {
	// tolerations are the single-user pods' (Options.Tolerations).
	tolerations []corev1.Toleration
	nodes       map[string]inventory.Node // GPU nodes only
	nodeNames   []string                  // sorted: the first node matching a selector resolves it
	// nodeUnits are each node's allocatable GPU resources as allocations (Count = units).
	nodeUnits map[string]classified
	// blocked are the GPU nodes a new pod cannot land on, with why ("cordoned", ...).
	blocked   map[string]string
	capacity  map[string]int64          // class -> units the nodes that take new pods offer
	sample    map[string]gpu.Allocation // class -> one unit of it (Count 1), for canTake
	described map[string]string         // class -> sample's Description, formatted once
	classes   []string                  // classes with capacity, in vocabulary order

	pods    map[string]*podEntry            // namespace/name
	byUser  map[string][]*podEntry          // user -> their pods (a few: a slice is read faster than a map)
	byNode  map[string]map[string]*podEntry // bound pods by node name, known node or not
	unbound map[string]*podEntry            // pods not yet bound: classified by their nodeSelector
	held    map[string]int64                // class -> units held by active pods, but for those on blocked nodes

	// resolved caches resolve: GPU resources and nodeSelector -> allocations; cleared when nodes change.
	resolved map[string]classified
	// noneFree caches noneFreeMessage by what it says (the class asked for, the counts, the classes one can
	// take): a full cluster refuses many spawns with the same few texts. Cleared when nodes change.
	noneFree map[string]string
}

// classified are allocations with their classes (Class formats a string: computed once, not per decision).
type classified struct {
	allocs  []gpu.Allocation
	classes []string
}

func classify(as []gpu.Allocation) classified {
	c := classified{allocs: as, classes: make([]string, len(as))}
	for i, a := range as {
		c.classes[i] = a.Class()
	}
	return c
}

// units is how many units of class c holds.
func (c classified) units(class string) int64 {
	var n int64
	for i, cl := range c.classes {
		if cl == class {
			n += c.allocs[i].Count
		}
	}
	return n
}

// maxResolved bounds the resolve cache: profiles are few, but the request body is not ours.
const maxResolved = 4096

type podEntry struct {
	key string
	pod inventory.Pod
	classified
	// active pods hold (or will hold) their GPUs: not terminating and not finished. Pending ones count.
	active bool
}

func newIndex() *index {
	return &index{
		nodes: map[string]inventory.Node{}, nodeUnits: map[string]classified{}, blocked: map[string]string{},
		capacity: map[string]int64{}, sample: map[string]gpu.Allocation{}, described: map[string]string{},
		pods: map[string]*podEntry{}, byUser: map[string][]*podEntry{}, byNode: map[string]map[string]*podEntry{},
		unbound: map[string]*podEntry{}, held: map[string]int64{}, resolved: map[string]classified{},
		noneFree: map[string]string{},
	}
}

func active(p inventory.Pod) bool {
	return !p.Terminating && p.Phase != corev1.PodSucceeded && p.Phase != corev1.PodFailed
}

// classifyPod is what a pod holds: by its node's labels once bound to a known node, else by its nodeSelector.
func (ix *index) classifyPod(p inventory.Pod) classified {
	if n, ok := ix.nodes[p.Node]; ok {
		return classify(gpu.Allocations(p.Resources, gpu.Node{Labels: n.Labels}))
	}
	return ix.resolve(p.Resources, p.NodeSelector)
}

// resolve is what a pod asking for resources with nodeSelector will hold. A nodeSelector names a GPU product
// but rarely everything the share model reads (replicas, sharing strategy, MIG slices): the labels of the
// first node (by name) that matches the selector and offers the resources complete it, so a request is
// classified exactly as the pod will be once bound. Without such a node, the selector's labels alone.
func (ix *index) resolve(res map[string]int64, sel map[string]string) classified {
	var buf [256]byte
	key := appendResolveKey(buf[:0], res, sel)
	if a, ok := ix.resolved[string(key)]; ok { // no allocation: the common case, a profile seen before
		return a
	}
	labels := sel
	for _, name := range ix.nodeNames {
		n := ix.nodes[name]
		if matches(n, sel) && offers(n, res) {
			labels = n.Labels
			break
		}
	}
	a := classify(gpu.Allocations(res, gpu.Node{Labels: labels}))
	if len(ix.resolved) >= maxResolved {
		clear(ix.resolved)
	}
	ix.resolved[string(key)] = a
	return a
}

// appendResolveKey appends resolve's cache key to b: the GPU resources asked for and the selector, sorted.
// Each map is read once (pairs kept on the stack), not iterated and then looked up again per key.
func appendResolveKey(b []byte, res map[string]int64, sel map[string]string) []byte {
	type count struct {
		k string
		n int64
	}
	type label struct{ k, v string }
	var cb [4]count
	counts := cb[:0]
	for k, n := range res {
		if n > 0 && gpu.IsGPUResource(k) {
			counts = append(counts, count{k: k, n: n})
		}
	}
	var lb [8]label
	labels := lb[:0]
	for k, v := range sel {
		labels = append(labels, label{k: k, v: v})
	}
	slices.SortFunc(counts, func(a, b count) int { return strings.Compare(a.k, b.k) })
	slices.SortFunc(labels, func(a, b label) int { return strings.Compare(a.k, b.k) })
	for _, c := range counts {
		b = append(b, c.k...)
		b = append(b, '=')
		b = strconv.AppendInt(b, c.n, 10)
		b = append(b, ';')
	}
	b = append(b, '|')
	for _, l := range labels {
		b = append(b, l.k...)
		b = append(b, '=')
		b = append(b, l.v...)
		b = append(b, ';')
	}
	return b
}

func matches(n inventory.Node, sel map[string]string) bool {
	for k, v := range sel {
		if n.Labels[k] != v {
			return false
		}
	}
	return true
}

func offers(n inventory.Node, res map[string]int64) bool {
	for k, v := range res {
		if v > 0 && gpu.IsGPUResource(k) && n.Allocatable[k] < v {
			return false
		}
	}
	return true
}

// addHeld counts e's units in held (sign 1) or takes them out (-1). A pod on a blocked node counts for nothing:
// its units are not among capacity either.
func (ix *index) addHeld(e *podEntry, sign int64) {
	if !e.active || ix.blocked[e.pod.Node] != "" {
		return
	}
	for i, a := range e.allocs {
		ix.held[e.classes[i]] += sign * a.Count
	}
}

// upsertPod records p (added or changed) and returns its entry.
func (ix *index) upsertPod(key string, p inventory.Pod) *podEntry {
	ix.removePod(key)
	e := &podEntry{key: key, pod: p, active: active(p)}
	e.classified = ix.classifyPod(p)
	ix.pods[key] = e
	ix.addHeld(e, 1)
	if p.User != "" {
		ix.byUser[p.User] = append(ix.byUser[p.User], e)
	}
	if p.Node != "" {
		addTo(ix.byNode, p.Node, key, e)
	} else {
		ix.unbound[key] = e
	}
	return e
}

func (ix *index) removePod(key string) {
	e, ok := ix.pods[key]
	if !ok {
		return
	}
	ix.addHeld(e, -1)
	delete(ix.pods, key)
	ix.removeUserPod(e)
	removeFrom(ix.byNode, e.pod.Node, key)
	delete(ix.unbound, key)
}

// removeUserPod takes e out of its user's pods.
func (ix *index) removeUserPod(e *podEntry) {
	pods := ix.byUser[e.pod.User]
	i := slices.Index(pods, e)
	if i < 0 {
		return
	}
	if len(pods) == 1 {
		delete(ix.byUser, e.pod.User)
		return
	}
	ix.byUser[e.pod.User] = slices.Delete(pods, i, i+1)
}

func addTo(m map[string]map[string]*podEntry, k, key string, e *podEntry) {
	inner := m[k]
	if inner == nil {
		inner = map[string]*podEntry{}
		m[k] = inner
	}
	inner[key] = e
}

func removeFrom(m map[string]map[string]*podEntry, k, key string) {
	if inner := m[k]; inner != nil {
		delete(inner, key)
		if len(inner) == 0 {
			delete(m, k)
		}
	}
}

// setNode records a GPU node (n nil: deleted or without GPUs). Node status updates that change nothing the
// index reads (labels, GPU resources, whether new pods may land: inventory.Node.Equal) cost a comparison; a
// real change reclassifies the pods it can affect.
func (ix *index) setNode(name string, n *inventory.Node) {
	old, had := ix.nodes[name]
	if n != nil && len(n.Allocatable) == 0 {
		n = nil
	}
	if !had && n == nil {
		return
	}
	if had && n != nil && old.Equal(*n) {
		return
	}
	// The pods this node's labels classify and whose units it holds, and the unbound ones (their selector may
	// resolve differently now): out of held while the node changes, back in as it is now.
	var affected []*podEntry
	for _, e := range ix.byNode[name] {
		affected = append(affected, e)
	}
	for _, e := range ix.unbound {
		affected = append(affected, e)
	}
	for _, e := range affected {
		ix.addHeld(e, -1)
	}
	if ix.blocked[name] == "" {
		ix.addCapacity(ix.nodeUnits[name], -1)
	}
	delete(ix.nodeUnits, name)
	delete(ix.blocked, name)
	if n == nil {
		delete(ix.nodes, name)
	} else {
		ix.nodes[name] = *n
		units := classify(n.Units())
		ix.nodeUnits[name] = units
		if why := n.Blocked(ix.tolerations); why != "" {
			ix.blocked[name] = why
		} else {
			ix.addCapacity(units, 1)
		}
	}
	ix.nodeNames = slices.Sorted(maps.Keys(ix.nodes))
	clear(ix.resolved)
	clear(ix.noneFree)
	ix.refreshClasses()
	for _, e := range affected {
		e.classified = ix.classifyPod(e.pod)
		ix.addHeld(e, 1)
	}
}

func (ix *index) addCapacity(units classified, sign int64) {
	for i, a := range units.allocs {
		c := units.classes[i]
		ix.capacity[c] += sign * a.Count
		if ix.capacity[c] <= 0 {
			delete(ix.capacity, c)
		}
	}
}

// blockedWordsLocked names the nodes offering class that take no new pods, where they explain why none is
// free: all of them when no node that takes new pods offers the class (as gpu-profiles says "Not available
// now"), else those with units of it no active pod holds (free, but for the rule). Empty otherwise.
func (ix *index) blockedWordsLocked(class string) string {
	if len(ix.blocked) == 0 {
		return ""
	}
	all := ix.capacity[class] <= 0
	var named map[string]string
	for name, why := range ix.blocked {
		units := ix.nodeUnits[name].units(class)
		if units == 0 {
			continue
		}
		if !all {
			for _, e := range ix.byNode[name] {
				if e.active {
					units -= e.units(class)
				}
			}
		}
		if units > 0 {
			if named == nil {
				named = map[string]string{}
			}
			named[name] = why
		}
	}
	return inventory.BlockedWords(named)
}

// refreshClasses recomputes classes, sample and described after capacity changed.
func (ix *index) refreshClasses() {
	clear(ix.sample)
	clear(ix.described)
	for _, name := range ix.nodeNames {
		units := ix.nodeUnits[name]
		for i, a := range units.allocs {
			if _, ok := ix.sample[units.classes[i]]; !ok {
				one := a
				one.Count = 1
				ix.sample[units.classes[i]] = one
				ix.described[units.classes[i]] = one.Description()
			}
		}
	}
	ix.classes = ix.classes[:0]
	for class := range ix.capacity {
		ix.classes = append(ix.classes, class)
	}
	slices.SortFunc(ix.classes, func(a, b string) int {
		if c := kindRank(ix.sample[a].Kind) - kindRank(ix.sample[b].Kind); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
}

func kindRank(k gpu.Kind) int {
	if i := slices.Index(gpu.Kinds(), k); i >= 0 {
		return i
	}
	return len(gpu.Kinds())
}

// Event handlers: the informers call them one event at a time, each under the engine's lock.

func podKey(obj any) (string, *corev1.Pod) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		p, _ := t.Obj.(*corev1.Pod)
		return t.Key, p
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return "", nil
	}
	return p.Namespace + "/" + p.Name, p
}

func nodeOf(obj any) (string, *corev1.Node) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		n, _ := t.Obj.(*corev1.Node)
		return t.Key, n
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return "", nil
	}
	return n.Name, n
}
