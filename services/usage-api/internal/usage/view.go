// Package usage joins pods, nodes, agent snapshots and Hub users into the live view ("who holds what, using how
// much") that the API serves from memory, and the samples the ledger integrates. Build is pure: the caller passes
// the clock's reading.
package usage

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
	"github.com/gpuhub/gpuhub/services/internal/yield"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// IdleBelowPercent is the utilization under which a server's GPU counts as idle, and at or above which busy: the
// admin view's idle time and right-size profiles' busy time (issue 38) both read it. 1 % leaves out the
// background a loaded but idle CUDA context shows.
const IdleBelowPercent = 1.0

// StaleIntervals is how many sampling intervals telemetry may age, by default, before it is stale.
const StaleIntervals = 3

// Directory is the Hub's view of users and groups, the last one known.
type Directory struct {
	Users map[string]HubUser
	// FetchedAt is when the directory was read from the Hub; zero if never.
	FetchedAt time.Time
}

// HubUser is what the usage API needs of a Hub user.
type HubUser struct {
	Name   string
	Groups []string
	Admin  bool
}

// Input is everything one tick joins.
type Input struct {
	Now      time.Time
	Interval time.Duration
	Pods     []inventory.Pod
	Nodes    map[string]inventory.Node
	Agents   map[string]collect.Result // by node
	Hub      Directory
	// StaleAfter is the age past which a node's telemetry is stale; 0: StaleIntervals sampling intervals (the
	// agent's intervalSeconds or Interval, whichever is longer).
	StaleAfter time.Duration
	// Tolerations are the single-user pods' (inventory.DefaultTolerations when nil): a unit on a node tainted
	// against them is not free (View.Free).
	Tolerations []corev1.Toleration
	// Departed are the GPU pods that stopped holding since the last tick (gone from Pods, or no longer Running
	// there): the ledger charges each up to when it went. One Pods still lists as holding is left out.
	Departed []Departure
}

// Departure is a pod that stopped holding its GPUs (deleted, or no longer Running), as last known while it held
// them, and when the informer told.
type Departure struct {
	Pod inventory.Pod
	At  time.Time
}

// The parts of a view that the API answers as they are: the usage API's wire types, declared once in
// services/internal/contract for the services and tools that read them.
type (
	Share       = contract.Share
	GPU         = contract.GPU
	Server      = contract.Server
	ClassStats  = contract.ClassStats
	Cluster     = contract.Cluster
	AgentStatus = contract.AgentStatus
)

// User is a user's live view.
type User struct {
	Name      string
	Groups    []string
	Simulated bool
	Stale     bool
	// StaleReason joins the distinct reasons of the user's stale servers.
	StaleReason string
	Share       Share
	// SMUtilPercent is the user's utilization: used / the GPU time their units can reach (the sum of UtilizationScale),
	// so a single unit's is its own smUtilPercent; nil when used is. The history keeps it.
	SMUtilPercent *float64
	Servers       []Server
}

// GroupShare is the live share of a group's members.
type GroupShare struct {
	AllocatedGPUs, UsedGPUs float64 // UsedGPUs counts only the known part
}

// View is one tick's immutable join.
type View struct {
	SampledAt time.Time
	Interval  time.Duration
	Users     map[string]*User // users holding GPUs
	Groups    map[string]GroupShare
	Hub       Directory
	Cluster   Cluster
	// Samples for the ledger: one per allocated unit of a Hub user's running pod, and of each pod that went since
	// the last tick (Input.Departed, with Until).
	Samples []ledger.Sample
	// Notices are the pending notices on each user's pods, one per service, sorted by service.
	Notices map[string][]Notice
	// Offers are the GPU kinds the nodes offer, one per class, sorted by class: what right-size advice compares
	// a server's use against.
	Offers []rightsize.Offer
	// Free are the units a new server could be given now, by class (inventory.FreeUnits: the rule gpu-quota's
	// admission and gpu-profiles' form count by): the "N free now" of right-size advice.
	Free map[string]int64
}

// Build joins one tick's input, with a Builder of its own (the tick goroutine keeps one: see Builder).
func Build(in Input) *View {
	var b Builder
	return b.Build(in)
}

// Builder joins the input of tick after tick. A tick at 20,000 pods made over 200,000 heap objects, and a
// published view held 100,000 of them; garbage collection, which ran about once per tick and marks every object,
// was then the cause of the API's latency tail (B1). So a Builder keeps, from one build to the next, what only
// a build reads (its tallies by pod and user, and its maps), and a build allocates what its view holds in a few
// slabs (users, servers, units and the numbers they point to) instead of an object each. Nothing a view holds
// is kept or written after its build: requests read a published view, and the state keeps it after the next
// one is published. Its zero value is ready; it is not for use by several goroutines at once.
type Builder struct {
	pods    []podTally                    // by index in Input.Pods
	users   []userTally                   // by index in the build's users slab
	userAt  map[string]int                // a user's index in users
	allocs  map[allocKey][]gpu.Allocation // a pod's units by node and resource, for one build: labels change
	units   []gpu.Allocation              // the nodes' capacity
	status  map[string]*AgentStatus       // by node
	reasons []string                      // one user's stale servers' distinct reasons
	lone    []GPU                         // the units of a pod of no Hub user: counted in the cluster, kept in no view
}

// podTally is what the first pass found of a pod (nothing, for a pod that holds no units).
type podTally struct {
	allocs []gpu.Allocation // shared by the pods of a node that hold the same: read only
	units  int
	user   int // index in Builder.users; -1: no Hub user's
}

type userTally struct {
	name    string
	servers int
	scale   float64 // the GPU time their units can reach
}

// allocKey is what gpu.Allocations depends on for a pod that requests one resource, within one build.
type allocKey struct {
	node, resource string
	count          int64
}

// Build joins one tick's input into a new view.
func (b *Builder) Build(in Input) *View {
	if b.userAt == nil {
		b.userAt, b.allocs, b.status = map[string]int{}, map[allocKey][]gpu.Allocation{}, map[string]*AgentStatus{}
	}
	defer b.forget()
	v := &View{SampledAt: in.Now, Interval: in.Interval, Groups: map[string]GroupShare{}, Hub: in.Hub,
		Notices: notices(in.Pods)}
	classes := map[string]*ClassStats{}
	classOf := func(a gpu.Allocation) *ClassStats {
		c := classes[a.Class()]
		if c == nil {
			c = &ClassStats{Class: a.Class(), Kind: a.Kind, Product: a.Product, Profile: a.Profile}
			classes[a.Class()] = c
		}
		return c
	}
	// Capacity from the nodes' allocatable GPU resources.
	for _, n := range in.Nodes {
		if len(n.Allocatable) == 0 {
			continue
		}
		v.Cluster.Nodes++
		for _, a := range gpu.Allocations(n.Allocatable, gpu.Node{Labels: n.Labels}) {
			c := classOf(a)
			c.CapacityUnits += a.Count
			c.CapacityGPUs += a.Share()
			b.units = append(b.units, a)
		}
	}
	v.Offers = rightsize.OffersOf(b.units, nil)
	tolerations := in.Tolerations
	if tolerations == nil {
		tolerations = inventory.DefaultTolerations()
	}
	v.Free = inventory.FreeUnits(in.Nodes, in.Pods, tolerations)
	slices.SortFunc(v.Offers, func(a, b rightsize.Offer) int { return strings.Compare(a.Class, b.Class) })

	var pace yield.Pass // on one CPU the API's requests wait for these loops otherwise
	size := b.tally(in, &pace)
	mem := viewMemory{floats: newSlab[float64](size.floats + len(in.Agents)), stamps: newSlab[time.Time](len(in.Agents)),
		gpus: newSlab[GPU](size.units), servers: newSlab[Server](size.servers)}

	v.Cluster.AgentStatus = make([]AgentStatus, 0, len(in.Agents))
	for node, r := range in.Agents {
		v.Cluster.Agents++
		st := judgeAgent(node, r, in, &mem)
		if st.Stale {
			v.Cluster.StaleAgents++
		}
		if r.Snapshot != nil && r.Snapshot.Backend == snapshot.BackendSimulated {
			v.Cluster.Simulated = true
		}
		v.Cluster.AgentStatus = append(v.Cluster.AgentStatus, st)
	}
	slices.SortFunc(v.Cluster.AgentStatus, func(a, b AgentStatus) int { return strings.Compare(a.Node, b.Node) })
	for i := range v.Cluster.AgentStatus {
		b.status[v.Cluster.AgentStatus[i].Node] = &v.Cluster.AgentStatus[i]
	}

	users := make([]User, len(b.users))
	v.Users = make(map[string]*User, len(b.users))
	for i, t := range b.users {
		pace.Item()
		u := &users[i]
		*u = User{Name: t.name, Groups: in.Hub.Users[t.name].Groups, Share: Share{UsedGPUs: mem.floats.new(0)},
			Servers: mem.servers.take(t.servers)}
		v.Users[t.name] = u
	}
	// Sized for the units of Hub users' pods that hold units now (one sample each; grown by appending, the
	// samples were the largest garbage of a tick at 20,000 pods), and a departed pod's unit or so each.
	v.Samples = make([]ledger.Sample, 0, size.hubUnits+len(in.Departed))
	for i, p := range in.Pods {
		pace.Item()
		t := b.pods[i]
		if !p.Allocated() {
			continue
		}
		var gpus []GPU
		if t.user >= 0 {
			gpus = mem.gpus.take(t.units)
		} else {
			b.lone = slices.Grow(b.lone[:0], t.units) // not a Hub server: its units are in no view
			gpus = b.lone
		}
		srv, scale := buildServer(p, t.allocs, in.Agents[p.Node], b.status[p.Node], gpus, &mem.floats)
		for _, g := range srv.GPUs {
			c := classes[g.Class]
			if c == nil {
				c = &ClassStats{Class: g.Class, Kind: g.Kind, Product: g.Product, Profile: g.Profile}
				classes[g.Class] = c
			}
			c.AllocatedUnits++
			c.AllocatedGPUs += g.Share
			c.MemoryUsedBytes += g.MemoryUsedBytes
			c.MemoryTotalBytes += g.MemoryTotalBytes
			if g.UsedGPUs != nil {
				c.UsedGPUs += *g.UsedGPUs
			} else {
				c.UsedUnknownGPUs += g.Share
			}
			if p.User != "" {
				s := ledger.Sample{Key: ledger.Key{User: p.User, Kind: g.Kind, Class: g.Class}, Pod: p.UID, Since: p.Started, Allocated: g.Share}
				if g.UsedGPUs != nil {
					s.Used, s.UsedKnown = *g.UsedGPUs, true
				}
				v.Samples = append(v.Samples, s)
			}
		}
		if t.user < 0 {
			continue // not a Hub server: counted in the cluster view only
		}
		u := &users[t.user]
		u.Servers = append(u.Servers, srv) // within the room taken for the user's servers
		b.users[t.user].scale += scale
		u.Simulated = u.Simulated || srv.Simulated
		u.Stale = u.Stale || srv.Stale
		u.Share.AllocatedGPUs += srv.AllocatedGPUs
		if srv.UsedGPUs == nil || u.Share.UsedGPUs == nil {
			u.Share.UsedGPUs = nil
		} else {
			*u.Share.UsedGPUs += *srv.UsedGPUs
		}
		for _, g := range srv.GPUs {
			u.Share.MemoryUsedBytes += g.MemoryUsedBytes
			u.Share.MemoryTotalBytes += g.MemoryTotalBytes
		}
	}
	for i := range users {
		pace.Item()
		u := &users[i]
		slices.SortFunc(u.Servers, func(a, b Server) int { return strings.Compare(a.Name, b.Name) })
		reasons := b.reasons[:0]
		for _, srv := range u.Servers {
			if srv.Stale && !slices.Contains(reasons, srv.StaleReason) {
				reasons = append(reasons, srv.StaleReason)
			}
		}
		u.StaleReason = strings.Join(reasons, "; ")
		b.reasons = reasons
		var used float64 // the known part, for the groups
		for _, s := range u.Servers {
			for _, g := range s.GPUs {
				if g.UsedGPUs != nil {
					used += *g.UsedGPUs
				}
			}
		}
		if scale := b.users[i].scale; u.Share.UsedGPUs != nil && scale > 0 {
			u.SMUtilPercent = mem.floats.new(min(100, *u.Share.UsedGPUs/scale*100))
		}
		for _, grp := range u.Groups {
			gs := v.Groups[grp]
			gs.AllocatedGPUs += u.Share.AllocatedGPUs
			gs.UsedGPUs += used
			v.Groups[grp] = gs
		}
	}
	v.Cluster.SampledAt, v.Cluster.IntervalSeconds = in.Now, in.Interval.Seconds()
	v.Cluster.Classes = make([]ClassStats, 0, len(classes))
	for _, c := range classes {
		// The share of the class's GPU time that is busy: used over the class's physical GPU-equivalents
		// (capacity), less the held part whose utilization is unknown. Over what is allocated instead, a replica
		// alone on a time-sliced GPU would read 400 %.
		if known := c.AllocatedGPUs - c.UsedUnknownGPUs; known > 1e-12 {
			gpus := c.CapacityGPUs - c.UsedUnknownGPUs
			if gpus < known {
				gpus = known // pods on a node that no longer advertises the resource
			}
			u := min(100, c.UsedGPUs/gpus*100)
			c.SMUtilPercent = &u
		}
		v.Cluster.CapacityGPUs += c.CapacityGPUs
		v.Cluster.AllocatedGPUs += c.AllocatedGPUs
		v.Cluster.UsedGPUs += c.UsedGPUs
		v.Cluster.UsedUnknownGPUs += c.UsedUnknownGPUs
		v.Cluster.Classes = append(v.Cluster.Classes, *c)
	}
	slices.SortFunc(v.Cluster.Classes, func(a, b ClassStats) int { return strings.Compare(a.Class, b.Class) })
	v.Samples = appendDeparted(v.Samples, in)
	return v
}

// viewSize is what the first pass counted for the slabs of a view.
type viewSize struct {
	servers, units int // of Hub users' pods that hold units
	hubUnits       int // the units of pods with a User (a ledger sample each)
	floats         int // the numbers the users, servers and units point to
}

// tally is the build's first pass: what each pod holds and whose server it is, counted to size the view's slabs.
func (b *Builder) tally(in Input, pace *yield.Pass) viewSize {
	b.pods = slices.Grow(b.pods[:0], len(in.Pods))[:len(in.Pods)]
	var size viewSize
	for i, p := range in.Pods {
		pace.Item()
		t := podTally{user: -1}
		if p.Allocated() {
			t.allocs = b.allocations(p, in.Nodes[p.Node].Labels)
			for _, a := range t.allocs {
				t.units += int(a.Count)
			}
			size.floats += 1 + 2*t.units // the server's used GPUs; each unit's utilization and used GPUs
			if p.User != "" {
				size.hubUnits += t.units
				idx, ok := b.userAt[p.User]
				if !ok {
					idx = len(b.users)
					b.userAt[p.User] = idx
					b.users = append(b.users, userTally{name: p.User})
					size.floats += 2 // the user's used GPUs and utilization
				}
				t.user = idx
				b.users[idx].servers++
				size.servers++
				size.units += t.units
			}
		}
		b.pods[i] = t
	}
	return size
}

// allocations are gpu.Allocations of a pod's resources on its node, worked out once per node and resource in a
// build: most pods request one resource, a node offers one or two, and that call was the second largest
// source of a tick's garbage at 20,000 pods.
func (b *Builder) allocations(p inventory.Pod, labels map[string]string) []gpu.Allocation {
	if len(p.Resources) != 1 {
		return gpu.Allocations(p.Resources, gpu.Node{Labels: labels})
	}
	for res, n := range p.Resources {
		k := allocKey{node: p.Node, resource: res, count: n}
		allocs, ok := b.allocs[k]
		if !ok {
			allocs = gpu.Allocations(p.Resources, gpu.Node{Labels: labels})
			b.allocs[k] = allocs
		}
		return allocs
	}
	return nil
}

// forget drops what a build left in the builder's memory: its entries are only good for that build (a node's
// labels change), and they would keep its input and view from the collector.
func (b *Builder) forget() {
	clear(b.pods)
	clear(b.users)
	b.users = b.users[:0]
	clear(b.userAt)
	clear(b.allocs)
	clear(b.units)
	b.units = b.units[:0]
	clear(b.status)
	clear(b.reasons[:cap(b.reasons)])
	clear(b.lone[:cap(b.lone)])
}

// viewMemory is where a build allocates the parts of its view that were an object each.
type viewMemory struct {
	floats  slab[float64] // utilizations and used GPUs
	stamps  slab[time.Time]
	gpus    slab[GPU]
	servers slab[Server]
}

// slab hands out one build's values of a type from one slice: the view points into it, which keeps it whole
// while any of them is reachable. A handed out element is written only by the build that took it.
type slab[T any] struct{ free []T }

func newSlab[T any](n int) slab[T] { return slab[T]{free: make([]T, 0, n)} }

// take returns an empty slice with room for n elements, and no more: an append past n moves to new memory
// instead of over the next slice's elements.
func (s *slab[T]) take(n int) []T {
	if cap(s.free)-len(s.free) < n { // a first pass that counted short; never expected
		s.free = make([]T, 0, max(n, 64))
	}
	i := len(s.free)
	s.free = s.free[:i+n]
	return s.free[i : i : i+n]
}

// new returns a pointer to a new element set to x.
func (s *slab[T]) new(x T) *T {
	p := &s.take(1)[:1][0]
	*p = x
	return p
}

// appendDeparted appends the ledger's samples of the pods that went since the last tick, one per unit they held,
// with Until: charged up to when they went, whatever the time to the tick that found them gone. They are in no
// view.
func appendDeparted(out []ledger.Sample, in Input) []ledger.Sample {
	if len(in.Departed) == 0 {
		return out
	}
	holding := map[string]bool{} // a pod listed as holding is charged to now: never also up to its departure
	for _, p := range in.Pods {
		if p.Allocated() {
			holding[p.UID] = true
		}
	}
	for _, d := range in.Departed {
		p := d.Pod
		if !p.Allocated() || p.User == "" || p.UID == "" || d.At.IsZero() || holding[p.UID] {
			continue
		}
		for _, a := range gpu.Allocations(p.Resources, gpu.Node{Labels: in.Nodes[p.Node].Labels}) {
			for range a.Count {
				out = append(out, ledger.Sample{Key: ledger.Key{User: p.User, Kind: a.Kind, Class: a.Class()},
					Pod: p.UID, Since: p.Started, Allocated: a.UnitShare(), Until: d.At})
			}
		}
	}
	return out
}

// judgeAgent says whether a node's telemetry is stale and why. Freshness is judged by when the agent sampled,
// not by when this service fetched: an agent whose NVML or DCGM is wedged keeps answering with its last
// sample. Two clocks are used, and the older age wins: now - sampledAt (the agent's clock against ours) and the
// time since this service first fetched that sampledAt (ours alone), so that a sample that does not move is
// stale even when the agent's clock is ahead. What the status points to is taken from mem.
func judgeAgent(node string, r collect.Result, in Input, mem *viewMemory) AgentStatus {
	st := AgentStatus{Node: node}
	s := r.Snapshot
	if s == nil {
		st.Stale = true
		if r.Err != nil {
			st.StaleReason = fmt.Sprintf("the GPU agent on node %s is unreachable: %v", node, r.Err)
		} else {
			st.StaleReason = fmt.Sprintf("the GPU agent on node %s has sent no snapshot yet", node)
		}
		return st
	}
	limit := staleAfter(in, s.IntervalSeconds)
	sampled, seen := s.SampledAt, r.SampleSeenAt
	if seen.IsZero() {
		seen = r.FetchedAt
	}
	agentAge, seenAge := in.Now.Sub(sampled), in.Now.Sub(seen)
	age := max(agentAge, seenAge)
	st.SampledAt, st.AgeSeconds = mem.stamps.new(sampled), mem.floats.new(math.Round(age.Seconds()*1000)/1000)
	h := s.Health
	// Health is reported when the agent stamped an attempt; it fails "that long" when its last success is older
	// than the limit (agents keep serving the last good sample meanwhile).
	failing := !h.LastAttemptAt.IsZero() && !h.OK && (h.LastSuccessAt.IsZero() || in.Now.Sub(h.LastSuccessAt) > limit)
	switch {
	case age > limit && r.Err != nil:
		st.StaleReason = fmt.Sprintf("the GPU agent on node %s has not answered since %s (%s): agent unreachable: %v",
			node, clock(r.FetchedAt, in.Now), ago(in.Now.Sub(r.FetchedAt)), r.Err)
	case failing && h.LastSuccessAt.IsZero():
		st.StaleReason = fmt.Sprintf("the GPU agent on node %s has never sampled successfully (%d attempts)", node, h.ConsecutiveFailures)
	case failing:
		st.StaleReason = fmt.Sprintf("the GPU agent on node %s has failed to sample %d times in a row since %s (%s)",
			node, h.ConsecutiveFailures, clock(h.LastSuccessAt, in.Now), ago(in.Now.Sub(h.LastSuccessAt)))
	case age <= limit:
		return st
	case agentAge >= seenAge:
		st.StaleReason = fmt.Sprintf("the GPU agent on node %s has not sampled since %s (%s)", node, clock(sampled, in.Now), ago(agentAge))
	default:
		st.StaleReason = fmt.Sprintf("the GPU agent on node %s has served the same sample for %s (stamped %s by the agent's clock)",
			node, ago(seenAge), clock(sampled, in.Now))
	}
	if failing && h.LastError != "" {
		st.StaleReason += ": " + h.LastError
	}
	st.Stale = true
	return st
}

// staleAfter is the telemetry age limit for an agent that samples every intervalSeconds. By default it is
// StaleIntervals sampling intervals, counted in the agent's interval or this service's, whichever is longer:
// this service cannot see a sample sooner than it polls.
func staleAfter(in Input, intervalSeconds float64) time.Duration {
	if in.StaleAfter > 0 {
		return in.StaleAfter
	}
	return StaleIntervals * max(in.Interval, time.Duration(intervalSeconds*float64(time.Second)))
}

// clock writes a time of day for a reason ("14:02:11 UTC"), with the date when it is not recent.
func clock(t, now time.Time) string {
	if d := now.Sub(t); d > 20*time.Hour || d < -20*time.Hour {
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return t.UTC().Format("15:04:05 UTC")
}

// ago writes a duration for a reason: "47 s", "12 min", "5 h", "3 days".
func ago(d time.Duration) string {
	switch d = max(d, 0); {
	case d < 2*time.Minute:
		return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
	case d < 2*time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
}

// buildServer details one pod and returns the GPU time its units can reach (the sum of their UtilizationScale). st is
// the node agent's status, nil when no agent runs on the node. The units go in gpus (empty, with room for them),
// the numbers they point to are taken from floats.
func buildServer(p inventory.Pod, allocs []gpu.Allocation, agent collect.Result, st *AgentStatus, gpus []GPU, floats *slab[float64]) (Server, float64) {
	fresh := st != nil && !st.Stale
	srv := Server{Name: p.Server, Pod: p.Name, Namespace: p.Namespace, Node: p.Node, Ready: p.Ready, UsedGPUs: floats.new(0)}
	var unknown string // why the utilization is unknown, where it is
	switch {
	case st == nil:
		unknown = "no GPU agent runs on node " + p.Node
	case st.Stale:
		srv.Stale, srv.StaleReason, unknown = true, st.StaleReason, st.StaleReason
	}
	var ap *snapshot.Pod
	var snap *snapshot.Snapshot
	if fresh {
		snap = agent.Snapshot
		srv.Simulated = snap.Backend == snapshot.BackendSimulated
		for i := range snap.Pods {
			if snap.Pods[i].UID == p.UID || (snap.Pods[i].UID == "" && snap.Pods[i].Namespace == p.Namespace && snap.Pods[i].Name == p.Name) {
				ap = &snap.Pods[i]
				break
			}
		}
	}
	// A unit's device is the next the agent tied to the unit's resource, else the next it tied to none.
	var devices []snapshot.Device
	if ap != nil {
		devices = ap.Devices
	}
	loose := 0 // devices scanned for the next tied to no resource
	units, scale := 0, 0.0
	for _, a := range allocs {
		units += int(a.Count)
	}
	if units > 0 {
		srv.GPUs = gpus
	}
	for _, a := range allocs {
		tied := 0 // devices scanned for the next tied to a's resource
		for range a.Count {
			g := GPU{
				Kind: a.Kind, Resource: a.Resource, Product: a.Product, Profile: a.Profile, Class: a.Class(),
				Share: a.UnitShare(), ShareNumerator: a.Numerator, ShareDenominator: a.Denominator,
				Description: a.Description(), MemoryTotalBytes: a.MemoryTotalBytes, UtilizationSource: snapshot.SourceNone,
				UtilizationScale: a.UtilizationScale(),
				Stale:            srv.Stale, StaleReason: srv.StaleReason, UtilizationUnknownReason: unknown,
			}
			var dev *snapshot.Device
			if a.Resource != "" {
				dev, tied = nextDevice(devices, tied, a.Resource)
			}
			if dev == nil {
				dev, loose = nextDevice(devices, loose, "")
			}
			if fresh {
				fillMeasured(&g, p.Node, snap, ap, dev, units, floats)
			}
			g.UsedGPUs = usedGPUs(g.SMUtilPercent, a, floats)
			scale += a.UtilizationScale()
			srv.GPUs = append(srv.GPUs, g)
			srv.AllocatedGPUs += g.Share
			if g.UsedGPUs == nil {
				srv.UsedGPUs = nil
			} else if srv.UsedGPUs != nil {
				*srv.UsedGPUs += *g.UsedGPUs
			}
		}
	}
	if !fresh {
		srv.UsedGPUs = nil
	}
	return srv, scale
}

// nextDevice is the first of devices from index from on that the agent tied to resource ("": to none), and the
// index after it; nil and len(devices) when none is left.
func nextDevice(devices []snapshot.Device, from int, resource string) (*snapshot.Device, int) {
	for i := from; i < len(devices); i++ {
		if devices[i].Resource == resource {
			return &devices[i], i + 1
		}
	}
	return nil, len(devices)
}

// usedGPUs is the one definition of "used": the fraction of a physical GPU's time a unit keeps busy,
// utilization / 100 x UtilizationScale; nil when the utilization is unknown.
func usedGPUs(utilPercent *float64, a gpu.Allocation, floats *slab[float64]) *float64 {
	if utilPercent == nil {
		return nil
	}
	return floats.new(*utilPercent / 100 * a.UtilizationScale())
}

// fillMeasured sets utilization and memory of one unit from a fresh snapshot. A fresh snapshot that does not
// list the pod means the agent saw no GPU process of it: utilization 0, measured, not invented.
func fillMeasured(g *GPU, node string, snap *snapshot.Snapshot, ap *snapshot.Pod, dev *snapshot.Device, units int, floats *slab[float64]) {
	g.UtilizationUnknownReason = ""
	if ap == nil {
		g.SMUtilPercent, g.UtilizationSource = floats.new(0), string(snap.Backend)
		return
	}
	var phys *snapshot.GPU
	var mig *snapshot.MIGDevice
	if dev != nil {
		g.UUID = dev.UUID
		for i := range snap.GPUs {
			sg := &snap.GPUs[i]
			if sg.UUID == dev.UUID || sg.UUID == dev.ParentUUID {
				phys = sg
			}
			for j := range sg.MIGDevices {
				if sg.MIGDevices[j].UUID == dev.UUID {
					phys, mig = sg, &sg.MIGDevices[j]
				}
			}
		}
	}
	if phys != nil && g.Product == "" {
		g.Product = phys.Product
	}
	switch {
	case mig != nil && mig.MemoryTotalBytes > 0:
		g.MemoryTotalBytes = mig.MemoryTotalBytes
	case phys != nil && phys.MemoryTotalBytes > 0 && !g.Kind.MIG():
		g.MemoryTotalBytes = phys.MemoryTotalBytes
	}
	// One unit: the pod's own numbers are this unit's. Several: per device.
	if units == 1 {
		g.SMUtilPercent, g.UtilizationSource = capPct(ap.SMUtilPercent, floats), ap.UtilizationSource
		g.MemoryUsedBytes = ap.MemoryUsedBytes
	} else if dev != nil {
		for _, pr := range ap.Processes {
			if pr.DeviceUUID == dev.UUID {
				g.MemoryUsedBytes += pr.MemoryUsedBytes
			}
		}
		switch {
		case mig != nil:
			g.SMUtilPercent, g.UtilizationSource = capPct(mig.UtilizationPercent, floats), mig.UtilizationSource
		case phys != nil && g.Kind == gpu.KindGPU:
			g.SMUtilPercent, g.UtilizationSource = capPct(phys.UtilizationPercent, floats), string(snap.Backend)
		}
	}
	switch {
	case g.SMUtilPercent != nil:
		if g.UtilizationSource == "" || g.UtilizationSource == snapshot.SourceNone {
			g.UtilizationSource = string(snap.Backend)
		}
		return
	case phys != nil && phys.Error != "":
		g.UtilizationUnknownReason = fmt.Sprintf("the GPU agent on node %s could not read GPU %d: %s", node, phys.Index, phys.Error)
	case phys == nil && failedGPU(snap) != nil:
		// The agent lists a pod whose GPU it cannot tell with null while any GPU of the node failed to read.
		fg := failedGPU(snap)
		g.UtilizationUnknownReason = fmt.Sprintf("the GPU agent on node %s could not read GPU %d: %s", node, fg.Index, fg.Error)
	case g.Kind.MIG():
		g.UtilizationUnknownReason = fmt.Sprintf("the GPU agent on node %s does not measure MIG instances (that needs DCGM)", node)
	case units > 1 && dev == nil:
		g.UtilizationUnknownReason = fmt.Sprintf("the GPU agent on node %s did not say which device this unit of the pod is", node)
	case units > 1:
		g.UtilizationUnknownReason = fmt.Sprintf("the GPU agent on node %s does not split the pod's utilization between its time-sliced units", node)
	default:
		g.UtilizationUnknownReason = fmt.Sprintf("the GPU agent on node %s reported no utilization for this pod", node)
	}
	g.UtilizationSource = snapshot.SourceNone
}

func failedGPU(snap *snapshot.Snapshot) *snapshot.GPU {
	for i := range snap.GPUs {
		if snap.GPUs[i].Error != "" {
			return &snap.GPUs[i]
		}
	}
	return nil
}

func capPct(p *float64, floats *slab[float64]) *float64 {
	if p == nil {
		return nil
	}
	return floats.new(min(max(*p, 0), 100))
}
