// Package usage joins pods, nodes, agent snapshots and Hub users into the live view ("who holds what, using how
// much") that the API serves from memory, and the samples the ledger integrates. Build is pure: the caller passes
// the clock's reading.
package usage

import (
	"fmt"
	"math"
	"slices"
	"sort"
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

// Build joins one tick's input.
func Build(in Input) *View {
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
	var units []gpu.Allocation
	for _, n := range in.Nodes {
		if len(n.Allocatable) == 0 {
			continue
		}
		v.Cluster.Nodes++
		for _, a := range gpu.Allocations(n.Allocatable, gpu.Node{Labels: n.Labels}) {
			c := classOf(a)
			c.CapacityUnits += a.Count
			c.CapacityGPUs += a.Share()
			units = append(units, a)
		}
	}
	v.Offers = rightsize.OffersOf(units, nil)
	tolerations := in.Tolerations
	if tolerations == nil {
		tolerations = inventory.DefaultTolerations()
	}
	v.Free = inventory.FreeUnits(in.Nodes, in.Pods, tolerations)
	slices.SortFunc(v.Offers, func(a, b rightsize.Offer) int { return strings.Compare(a.Class, b.Class) })
	status := make(map[string]*AgentStatus, len(in.Agents))
	v.Cluster.AgentStatus = make([]AgentStatus, 0, len(in.Agents))
	for node, r := range in.Agents {
		v.Cluster.Agents++
		st := judgeAgent(node, r, in)
		if st.Stale {
			v.Cluster.StaleAgents++
		}
		if r.Snapshot != nil && r.Snapshot.Backend == snapshot.BackendSimulated {
			v.Cluster.Simulated = true
		}
		v.Cluster.AgentStatus = append(v.Cluster.AgentStatus, st)
	}
	sort.Slice(v.Cluster.AgentStatus, func(i, j int) bool { return v.Cluster.AgentStatus[i].Node < v.Cluster.AgentStatus[j].Node })
	for i := range v.Cluster.AgentStatus {
		status[v.Cluster.AgentStatus[i].Node] = &v.Cluster.AgentStatus[i]
	}

	// The samples (one per unit: most pods hold one), the users and their scales are sized for the pods that hold
	// units now: grown by appending, the samples were the largest garbage of a tick at 20,000 pods (the heap profile
	// of B1), and garbage collection slows the requests. Not for every pod or Hub user: most may hold no GPU.
	holding := 0
	for _, p := range in.Pods {
		if p.Allocated() {
			holding++
		}
	}
	v.Samples = make([]ledger.Sample, 0, holding+len(in.Departed))
	v.Users = make(map[string]*User, holding)
	scales := make(map[string]float64, holding) // by user: the GPU time their units can reach
	var pace yield.Pass                         // on one CPU the API's requests wait for this loop otherwise
	for _, p := range in.Pods {
		pace.Item()
		if !p.Allocated() {
			continue
		}
		node := in.Nodes[p.Node]
		allocs := gpu.Allocations(p.Resources, gpu.Node{Labels: node.Labels})
		srv, scale := buildServer(p, allocs, in.Agents[p.Node], status[p.Node])
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
		if p.User == "" {
			continue // not a Hub server: counted in the cluster view only
		}
		u := v.Users[p.User]
		if u == nil {
			u = &User{Name: p.User, Groups: in.Hub.Users[p.User].Groups, Share: Share{UsedGPUs: new(float64)}}
			v.Users[p.User] = u
		}
		u.Servers = append(u.Servers, srv)
		scales[p.User] += scale
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
	for _, u := range v.Users {
		pace.Item()
		sort.Slice(u.Servers, func(i, j int) bool { return u.Servers[i].Name < u.Servers[j].Name })
		var reasons []string
		for _, srv := range u.Servers {
			if srv.Stale && !slices.Contains(reasons, srv.StaleReason) {
				reasons = append(reasons, srv.StaleReason)
			}
		}
		u.StaleReason = strings.Join(reasons, "; ")
		var used float64 // the known part, for the groups
		for _, s := range u.Servers {
			for _, g := range s.GPUs {
				if g.UsedGPUs != nil {
					used += *g.UsedGPUs
				}
			}
		}
		if u.Share.UsedGPUs != nil && scales[u.Name] > 0 {
			util := min(100, *u.Share.UsedGPUs/scales[u.Name]*100)
			u.SMUtilPercent = &util
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
	sort.Slice(v.Cluster.Classes, func(i, j int) bool { return v.Cluster.Classes[i].Class < v.Cluster.Classes[j].Class })
	v.Samples = append(v.Samples, departedSamples(in)...)
	return v
}

// departedSamples are the ledger's samples of the pods that went since the last tick, one per unit they held, with
// Until: charged up to when they went, whatever the time to the tick that found them gone. They are in no view.
func departedSamples(in Input) []ledger.Sample {
	if len(in.Departed) == 0 {
		return nil
	}
	holding := map[string]bool{} // a pod listed as holding is charged to now: never also up to its departure
	for _, p := range in.Pods {
		if p.Allocated() {
			holding[p.UID] = true
		}
	}
	var out []ledger.Sample
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
// stale even when the agent's clock is ahead.
func judgeAgent(node string, r collect.Result, in Input) AgentStatus {
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
	ageS := math.Round(age.Seconds()*1000) / 1000
	st.SampledAt, st.AgeSeconds = &sampled, &ageS
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
// the node agent's status, nil when no agent runs on the node.
func buildServer(p inventory.Pod, allocs []gpu.Allocation, agent collect.Result, st *AgentStatus) (Server, float64) {
	fresh := st != nil && !st.Stale
	srv := Server{Name: p.Server, Pod: p.Name, Namespace: p.Namespace, Node: p.Node, Ready: p.Ready, UsedGPUs: new(float64)}
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
	var devices map[string][]snapshot.Device // made only for a pod the agent saw: one map per pod at each tick was garbage
	var loose []snapshot.Device
	if ap != nil {
		devices = make(map[string][]snapshot.Device, len(ap.Devices))
		for _, d := range ap.Devices {
			if d.Resource == "" {
				loose = append(loose, d)
			} else {
				devices[d.Resource] = append(devices[d.Resource], d)
			}
		}
	}
	units, scale := 0, 0.0
	for _, a := range allocs {
		units += int(a.Count)
	}
	if units > 0 {
		srv.GPUs = make([]GPU, 0, units)
	}
	for _, a := range allocs {
		for i := range a.Count {
			g := GPU{
				Kind: a.Kind, Resource: a.Resource, Product: a.Product, Profile: a.Profile, Class: a.Class(),
				Share: a.UnitShare(), ShareNumerator: a.Numerator, ShareDenominator: a.Denominator,
				Description: a.Description(), MemoryTotalBytes: a.MemoryTotalBytes, UtilizationSource: snapshot.SourceNone,
				UtilizationScale: a.UtilizationScale(),
				Stale:            srv.Stale, StaleReason: srv.StaleReason, UtilizationUnknownReason: unknown,
			}
			var dev *snapshot.Device
			if ds := devices[a.Resource]; int(i) < len(ds) {
				dev = &ds[i]
			} else if len(loose) > 0 {
				dev, loose = &loose[0], loose[1:]
			}
			if fresh {
				fillMeasured(&g, p.Node, snap, ap, dev, units)
			}
			g.UsedGPUs = usedGPUs(g.SMUtilPercent, a)
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

// usedGPUs is the one definition of "used": the fraction of a physical GPU's time a unit keeps busy,
// utilization / 100 x UtilizationScale; nil when the utilization is unknown.
func usedGPUs(utilPercent *float64, a gpu.Allocation) *float64 {
	if utilPercent == nil {
		return nil
	}
	u := *utilPercent / 100 * a.UtilizationScale()
	return &u
}

// fillMeasured sets utilization and memory of one unit from a fresh snapshot. A fresh snapshot that does not
// list the pod means the agent saw no GPU process of it: utilization 0, measured, not invented.
func fillMeasured(g *GPU, node string, snap *snapshot.Snapshot, ap *snapshot.Pod, dev *snapshot.Device, units int) {
	g.UtilizationUnknownReason = ""
	if ap == nil {
		zero := 0.0
		g.SMUtilPercent, g.UtilizationSource = &zero, string(snap.Backend)
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
		g.SMUtilPercent, g.UtilizationSource = capPct(ap.SMUtilPercent), ap.UtilizationSource
		g.MemoryUsedBytes = ap.MemoryUsedBytes
	} else if dev != nil {
		for _, pr := range ap.Processes {
			if pr.DeviceUUID == dev.UUID {
				g.MemoryUsedBytes += pr.MemoryUsedBytes
			}
		}
		switch {
		case mig != nil:
			g.SMUtilPercent, g.UtilizationSource = capPct(mig.UtilizationPercent), mig.UtilizationSource
		case phys != nil && g.Kind == gpu.KindGPU:
			g.SMUtilPercent, g.UtilizationSource = capPct(phys.UtilizationPercent), string(snap.Backend)
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

func capPct(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v := min(max(*p, 0), 100)
	return &v
}
