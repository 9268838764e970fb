package sim

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/cluster"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/podresources"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// Cluster is the node-local view the backend needs (cluster.Watcher).
type Cluster interface {
	Node() (*corev1.Node, bool)
	Pods() []cluster.Pod
}

// Kubelet is the kubelet's pod-resources API (podresources.Client).
type Kubelet interface {
	Allocatable(ctx context.Context) (map[string][]string, error)
	Allocations(ctx context.Context) ([]podresources.Allocation, error)
}

// Options configure a Backend.
type Options struct {
	Node    string
	Cluster Cluster
	// Kubelet, when set, names the devices (Allocatable) and says which pod
	// holds which (Allocations), as on a node whose kubelet runs a device
	// plugin; nil: the simulator makes up UUIDs and assigns devices itself.
	Kubelet Kubelet
	// Proc is the proc filesystem, e.g. os.DirFS("/proc").
	Proc   fs.FS
	Now    func() time.Time
	Logger *slog.Logger
}

type cpuSample struct {
	ticks uint64
	at    time.Time
}

// Backend emulates the node's GPUs. Not safe for concurrent Sample calls.
type Backend struct {
	opts Options
	inv  *inventory
	// holdings: which emulated devices each pod (by UID) holds. Kept across
	// samples so a running pod never moves; new pods are served in UID order,
	// which makes the assignment reproducible after a restart. With a
	// Kubelet, the kubelet's answer of each sample.
	holdings map[string][]*device
	prev     map[int]cpuSample
	// warned: pods already reported as unservable, so the log says it once.
	warned map[string]bool
}

// New returns a simulated Backend.
func New(opts Options) *Backend {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{opts: opts, holdings: map[string][]*device{}, prev: map[int]cpuSample{}, warned: map[string]bool{}}
}

// Sample emulates one sample: the utilization of a pod's devices is the CPU
// time its processes used since the previous sample over the wall time, capped
// at 100 %; its memory is their resident set size.
func (b *Backend) Sample(ctx context.Context) (reading.Reading, error) {
	r := reading.Reading{Backend: snapshot.BackendSimulated, Holdings: map[string][]snapshot.Device{}}
	node, ok := b.opts.Cluster.Node()
	if !ok {
		return r, fmt.Errorf("node %q is not in the cache: the simulated backend needs its labels and capacity", b.opts.Node)
	}
	inv := newInventory(node)
	var allocs []podresources.Allocation
	var mismatched []string
	if k := b.opts.Kubelet; k != nil {
		// Without the kubelet's answer there is nothing true to report: the
		// sample fails rather than fall back to made-up UUIDs for a while.
		ids, err := k.Allocatable(ctx)
		if err != nil {
			return r, err
		}
		if allocs, err = k.Allocations(ctx); err != nil {
			return r, err
		}
		mismatched = inv.adopt(ids)
	}
	if b.inv == nil || inv.key != b.inv.key {
		if b.inv != nil {
			b.opts.Logger.Info("node GPU inventory changed, reassigning emulated devices", "node", b.opts.Node)
		}
		if len(mismatched) > 0 {
			b.opts.Logger.Warn("the kubelet's devices differ in number from the node's GPU capacity: the surplus keep simulated UUIDs or hold nothing",
				"node", b.opts.Node, "resources", mismatched)
		}
		b.inv, b.holdings = inv, map[string][]*device{}
	}
	if b.opts.Kubelet != nil {
		b.holdings = b.held(allocs, b.opts.Cluster.Pods())
	} else {
		b.assign(b.opts.Cluster.Pods())
	}

	procs, err := scan(b.opts.Proc, b.opts.Node, func(uid string) bool { return len(b.holdings[uid]) > 0 })
	if err != nil {
		return r, err
	}
	now := b.opts.Now()
	util := map[int]float64{}
	next := make(map[int]cpuSample, len(procs))
	for _, p := range procs {
		next[p.pid] = cpuSample{ticks: p.cpuTicks, at: now}
		prev, seen := b.prev[p.pid]
		if !seen || p.cpuTicks < prev.ticks || !now.After(prev.at) {
			util[p.pid] = 0 // first sight: no interval to measure yet
			continue
		}
		cpu := float64(p.cpuTicks-prev.ticks) / userHZ
		// One decimal: finer digits would only be noise from tick granularity.
		util[p.pid] = min(math.Round(cpu/now.Sub(prev.at).Seconds()*1000)/10, 100)
	}
	b.prev = next

	devUtil := map[*device]float64{}
	devMem := map[*device]uint64{}
	for _, p := range procs {
		devs := b.holdings[p.podUID]
		for i, d := range devs {
			var mem uint64
			if i == 0 { // memory counted once, on the pod's first device
				mem = min(p.rssBytes, d.memTotal)
			}
			r.Processes = append(r.Processes, reading.Process{
				PID: p.pid, PodUID: p.podUID, Device: d.dev, MemoryUsedBytes: mem,
				SMUtilPercent: snapshot.Percent(util[p.pid]), UtilizationSource: snapshot.SourceSimulated,
			})
			devUtil[d] = min(devUtil[d]+util[p.pid], 100)
			devMem[d] = min(devMem[d]+mem, d.memTotal)
		}
	}
	for uid, devs := range b.holdings {
		for _, d := range devs {
			r.Holdings[uid] = append(r.Holdings[uid], d.dev)
		}
	}
	for _, g := range b.inv.gpus {
		out := snapshot.GPU{
			UUID: g.uuid, Index: g.index, Product: g.product, MemoryTotalBytes: g.memTotal,
			MIGMode: g.mig, MIGDevices: []snapshot.MIGDevice{},
		}
		for _, d := range g.devices {
			out.MemoryUsedBytes = min(out.MemoryUsedBytes+devMem[d], g.memTotal)
			if !g.mig {
				out.UtilizationPercent, out.UtilizationSource = snapshot.Percent(devUtil[d]), snapshot.SourceSimulated
				continue
			}
			out.MIGDevices = append(out.MIGDevices, snapshot.MIGDevice{
				UUID: d.dev.UUID, Profile: d.dev.Profile, GPUInstanceID: d.gi, ComputeInstanceID: 0,
				MemoryTotalBytes: d.memTotal, MemoryUsedBytes: devMem[d],
				UtilizationPercent: snapshot.Percent(devUtil[d]), UtilizationSource: snapshot.SourceSimulated,
			})
		}
		if g.mig {
			// As on real hardware, a GPU in MIG mode has no whole-GPU utilization.
			out.UtilizationSource = snapshot.SourceNone
		} else if len(g.devices) == 0 {
			out.UtilizationPercent, out.UtilizationSource = snapshot.Percent(0), snapshot.SourceSimulated
		}
		r.GPUs = append(r.GPUs, out)
	}
	return r, nil
}

// held is which devices each pod holds according to the kubelet. IDs of no
// emulated device (a count mismatch, logged with the inventory) are left out.
func (b *Backend) held(allocs []podresources.Allocation, pods []cluster.Pod) map[string][]*device {
	out := map[string][]*device{}
	for uid, as := range podresources.ByPod(allocs, pods) {
		for _, a := range as {
			for _, id := range a.DeviceIDs {
				if d := b.inv.byID[id]; d != nil && !slices.Contains(out[uid], d) {
					out[uid] = append(out[uid], d)
				}
			}
		}
	}
	return out
}

// assign gives devices to pods that ask for NVIDIA resources and hold none yet.
func (b *Backend) assign(pods []cluster.Pod) {
	live := map[string]bool{}
	for _, p := range pods {
		if len(p.GPUResources) > 0 {
			live[p.UID] = true
		}
	}
	holders := map[*device]int{}
	for uid := range b.warned {
		if !live[uid] {
			delete(b.warned, uid)
		}
	}
	for uid, devs := range b.holdings {
		if !live[uid] {
			delete(b.holdings, uid)
			continue
		}
		for _, d := range devs {
			holders[d]++
		}
	}
	for _, p := range pods { // sorted by UID
		if !live[p.UID] || len(b.holdings[p.UID]) > 0 {
			continue
		}
		var got []*device
		for _, res := range slices.Sorted(maps.Keys(p.GPUResources)) {
			for range p.GPUResources[res] {
				d := b.pick(res, holders, got)
				if d == nil {
					if !b.warned[p.UID] {
						b.opts.Logger.Warn("no emulated device left for pod", "pod", p.Namespace+"/"+p.Name, "resource", res)
						b.warned[p.UID] = true
					}
					break
				}
				holders[d]++
				got = append(got, d)
			}
		}
		if len(got) > 0 {
			b.holdings[p.UID] = got
		}
	}
}

// pick returns the first device of resource with a free replica, preferring
// one the pod does not hold yet.
func (b *Backend) pick(resource string, holders map[*device]int, mine []*device) *device {
	var fallback *device
	for _, g := range b.inv.gpus {
		for _, d := range g.devices {
			if d.dev.Resource != resource || holders[d] >= d.replicas {
				continue
			}
			if !slices.Contains(mine, d) {
				return d
			}
			if fallback == nil {
				fallback = d
			}
		}
	}
	return fallback
}
