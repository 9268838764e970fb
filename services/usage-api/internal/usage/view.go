// Package usage joins pods, nodes, agent snapshots and Hub users into the live view ("who holds what, using how
// much") that the API serves from memory, and the samples the ledger integrates. Build is pure: the caller passes
// the clock's reading.
package usage

import (
	"sort"
	"time"

	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/inventory"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/share"
)

// StaleIntervals is how many sampling intervals an agent snapshot may age before its numbers are stale.
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
}

// Share is a user's live share.
type Share struct {
	AllocatedGPUs float64 `json:"allocatedGPUs"`
	// UsedGPUs is allocated x SM utilization; null when the utilization of any allocated GPU is unknown.
	UsedGPUs         *float64 `json:"usedGPUs"`
	MemoryUsedBytes  uint64   `json:"memoryUsedBytes"`
	MemoryTotalBytes uint64   `json:"memoryTotalBytes"`
}

// GPU is one allocated unit (a whole GPU, a MIG instance or a time-sliced replica).
type GPU struct {
	Kind              share.Kind `json:"kind"`
	Resource          string     `json:"resource"`
	Product           string     `json:"product"`
	Profile           string     `json:"profile,omitempty"`
	Class             string     `json:"class"`
	Share             float64    `json:"share"`
	ShareNumerator    int64      `json:"shareNumerator"`
	ShareDenominator  int64      `json:"shareDenominator"`
	Description       string     `json:"description"`
	UUID              string     `json:"uuid,omitempty"`
	SMUtilPercent     *float64   `json:"smUtilPercent"`
	UtilizationSource string     `json:"utilizationSource"`
	MemoryUsedBytes   uint64     `json:"memoryUsedBytes"`
	MemoryTotalBytes  uint64     `json:"memoryTotalBytes"`
	// Stale is true when the agent's last snapshot is older than StaleIntervals: utilization is then unknown.
	Stale bool `json:"stale"`
}

// Server is one running single-user server that holds GPUs.
type Server struct {
	Name          string   `json:"name"`
	Pod           string   `json:"pod"`
	Namespace     string   `json:"namespace"`
	Node          string   `json:"node"`
	Ready         bool     `json:"ready"`
	AllocatedGPUs float64  `json:"allocatedGPUs"`
	UsedGPUs      *float64 `json:"usedGPUs"`
	Stale         bool     `json:"stale"`
	Simulated     bool     `json:"simulated"`
	GPUs          []GPU    `json:"gpus"`
}

// User is a user's live view.
type User struct {
	Name      string
	Groups    []string
	Simulated bool
	Stale     bool
	Share     Share
	Servers   []Server
}

// GroupShare is the live share of a group's members.
type GroupShare struct {
	AllocatedGPUs, UsedGPUs float64 // UsedGPUs counts only the known part
}

// ClassStats is the cluster's inventory and use of one GPU class.
type ClassStats struct {
	Class            string     `json:"class"`
	Kind             share.Kind `json:"kind"`
	Product          string     `json:"product"`
	Profile          string     `json:"profile,omitempty"`
	CapacityUnits    int64      `json:"capacityUnits"`
	AllocatedUnits   int64      `json:"allocatedUnits"`
	CapacityGPUs     float64    `json:"capacityGPUs"`
	AllocatedGPUs    float64    `json:"allocatedGPUs"`
	UsedGPUs         float64    `json:"usedGPUs"`         // known part
	UsedUnknownGPUs  float64    `json:"usedUnknownGPUs"`  // allocated GPUs whose utilization is unknown
	SMUtilPercent    *float64   `json:"smUtilPercent"`    // used / allocated over the known part
	MemoryUsedBytes  uint64     `json:"memoryUsedBytes"`  // of allocated units
	MemoryTotalBytes uint64     `json:"memoryTotalBytes"` // of allocated units
}

// Cluster is the cluster-wide view; it names no user.
type Cluster struct {
	SampledAt       time.Time    `json:"sampledAt"`
	IntervalSeconds float64      `json:"intervalSeconds"`
	Simulated       bool         `json:"simulated"`
	Nodes           int          `json:"gpuNodes"`
	Agents          int          `json:"agents"`
	StaleAgents     int          `json:"staleAgents"`
	CapacityGPUs    float64      `json:"capacityGPUs"`
	AllocatedGPUs   float64      `json:"allocatedGPUs"`
	UsedGPUs        float64      `json:"usedGPUs"`
	UsedUnknownGPUs float64      `json:"usedUnknownGPUs"`
	Classes         []ClassStats `json:"classes"`
}

// View is one tick's immutable join.
type View struct {
	SampledAt time.Time
	Interval  time.Duration
	Users     map[string]*User // users holding GPUs
	Groups    map[string]GroupShare
	Hub       Directory
	Cluster   Cluster
	// Samples for the ledger: one per allocated unit of a Hub user's running pod.
	Samples []ledger.Sample
}

// Build joins one tick's input.
func Build(in Input) *View {
	v := &View{SampledAt: in.Now, Interval: in.Interval, Users: map[string]*User{}, Groups: map[string]GroupShare{}, Hub: in.Hub}
	classes := map[string]*ClassStats{}
	classOf := func(a share.Allocation) *ClassStats {
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
		for _, a := range share.Allocations(n.Allocatable, share.Node{Labels: n.Labels}) {
			c := classOf(a)
			c.CapacityUnits += a.Count
			c.CapacityGPUs += a.Share()
		}
	}
	stale := map[string]bool{}
	for node, r := range in.Agents {
		v.Cluster.Agents++
		if isStale(r, in.Now, in.Interval) {
			stale[node] = true
			v.Cluster.StaleAgents++
		}
		if r.Snapshot != nil && r.Snapshot.Backend == "simulated" {
			v.Cluster.Simulated = true
		}
	}

	for _, p := range in.Pods {
		if !p.Allocated() {
			continue
		}
		node := in.Nodes[p.Node]
		allocs := share.Allocations(p.Resources, share.Node{Labels: node.Labels})
		agent, hasAgent := in.Agents[p.Node]
		srv := buildServer(p, allocs, agent, hasAgent && !stale[p.Node], hasAgent && stale[p.Node])
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
			if g.SMUtilPercent != nil {
				c.UsedGPUs += g.Share * *g.SMUtilPercent / 100
			} else {
				c.UsedUnknownGPUs += g.Share
			}
			if p.User != "" {
				s := ledger.Sample{Key: ledger.Key{User: p.User, Kind: string(g.Kind), Class: g.Class}, Allocated: g.Share}
				if g.SMUtilPercent != nil {
					s.Used, s.UsedKnown = g.Share**g.SMUtilPercent/100, true
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
		sort.Slice(u.Servers, func(i, j int) bool { return u.Servers[i].Name < u.Servers[j].Name })
		var used float64
		for _, s := range u.Servers {
			for _, g := range s.GPUs {
				if g.SMUtilPercent != nil {
					used += g.Share * *g.SMUtilPercent / 100
				}
			}
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
		if known := c.AllocatedGPUs - c.UsedUnknownGPUs; known > 1e-12 {
			u := min(100, c.UsedGPUs/known*100)
			c.SMUtilPercent = &u
		}
		v.Cluster.CapacityGPUs += c.CapacityGPUs
		v.Cluster.AllocatedGPUs += c.AllocatedGPUs
		v.Cluster.UsedGPUs += c.UsedGPUs
		v.Cluster.UsedUnknownGPUs += c.UsedUnknownGPUs
		v.Cluster.Classes = append(v.Cluster.Classes, *c)
	}
	sort.Slice(v.Cluster.Classes, func(i, j int) bool { return v.Cluster.Classes[i].Class < v.Cluster.Classes[j].Class })
	return v
}

func isStale(r collect.Result, now time.Time, interval time.Duration) bool {
	if r.Snapshot == nil {
		return true
	}
	return now.Sub(r.FetchedAt) > StaleIntervals*interval
}

// buildServer details one pod. fresh: the node's agent snapshot is recent; stale: it exists but is old.
func buildServer(p inventory.Pod, allocs []share.Allocation, agent collect.Result, fresh, stale bool) Server {
	srv := Server{Name: p.Server, Pod: p.Name, Namespace: p.Namespace, Node: p.Node, Ready: p.Ready, Stale: stale, UsedGPUs: new(float64)}
	var ap *collect.Pod
	var snap *collect.Snapshot
	if fresh {
		snap = agent.Snapshot
		srv.Simulated = snap.Backend == "simulated"
		for i := range snap.Pods {
			if snap.Pods[i].UID == p.UID || (snap.Pods[i].UID == "" && snap.Pods[i].Namespace == p.Namespace && snap.Pods[i].Name == p.Name) {
				ap = &snap.Pods[i]
				break
			}
		}
	}
	devices := map[string][]collect.Device{}
	var loose []collect.Device
	if ap != nil {
		for _, d := range ap.Devices {
			if d.Resource == "" {
				loose = append(loose, d)
			} else {
				devices[d.Resource] = append(devices[d.Resource], d)
			}
		}
	}
	units := 0
	for _, a := range allocs {
		units += int(a.Count)
	}
	for _, a := range allocs {
		for i := range a.Count {
			g := GPU{
				Kind: a.Kind, Resource: a.Resource, Product: a.Product, Profile: a.Profile, Class: a.Class(),
				Share: a.UnitShare(), ShareNumerator: a.Numerator, ShareDenominator: a.Denominator,
				Description: a.Description(), MemoryTotalBytes: a.MemoryTotalBytes, UtilizationSource: "none", Stale: stale,
			}
			var dev *collect.Device
			if ds := devices[a.Resource]; int(i) < len(ds) {
				dev = &ds[i]
			} else if len(loose) > 0 {
				dev, loose = &loose[0], loose[1:]
			}
			if fresh {
				fillMeasured(&g, snap, ap, dev, units)
			}
			srv.GPUs = append(srv.GPUs, g)
			srv.AllocatedGPUs += g.Share
			if g.SMUtilPercent == nil {
				srv.UsedGPUs = nil
			} else if srv.UsedGPUs != nil {
				*srv.UsedGPUs += g.Share * *g.SMUtilPercent / 100
			}
		}
	}
	if !fresh {
		srv.UsedGPUs = nil
	}
	return srv
}

// fillMeasured sets utilization and memory of one unit from a fresh snapshot. A fresh snapshot that does not
// list the pod means the agent saw no GPU process of it: utilization 0, measured, not invented.
func fillMeasured(g *GPU, snap *collect.Snapshot, ap *collect.Pod, dev *collect.Device, units int) {
	if ap == nil {
		zero := 0.0
		g.SMUtilPercent, g.UtilizationSource = &zero, string(snap.Backend)
		return
	}
	var gpu *collect.GPU
	var mig *collect.MIGDevice
	if dev != nil {
		g.UUID = dev.UUID
		for i := range snap.GPUs {
			sg := &snap.GPUs[i]
			if sg.UUID == dev.UUID || sg.UUID == dev.ParentUUID {
				gpu = sg
			}
			for j := range sg.MIGDevices {
				if sg.MIGDevices[j].UUID == dev.UUID {
					gpu, mig = sg, &sg.MIGDevices[j]
				}
			}
		}
	}
	if gpu != nil && g.Product == "" {
		g.Product = gpu.Product
	}
	switch {
	case mig != nil && mig.MemoryTotalBytes > 0:
		g.MemoryTotalBytes = mig.MemoryTotalBytes
	case gpu != nil && gpu.MemoryTotalBytes > 0 && g.Kind != share.KindMIG:
		g.MemoryTotalBytes = gpu.MemoryTotalBytes
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
		case gpu != nil && g.Kind == share.KindGPU:
			g.SMUtilPercent, g.UtilizationSource = capPct(gpu.UtilizationPercent), string(snap.Backend)
		}
	}
	if g.SMUtilPercent == nil {
		g.UtilizationSource = "none"
	} else if g.UtilizationSource == "" || g.UtilizationSource == "none" {
		g.UtilizationSource = string(snap.Backend)
	}
}

func capPct(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v := min(max(*p, 0), 100)
	return &v
}
