package agent

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/attribution"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/cluster"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// PodSource is the node-local pod cache (cluster.Watcher).
type PodSource interface {
	Pod(uid string) (cluster.Pod, bool)
	Pods() []cluster.Pod
}

// CgroupResolver maps a PID to its pod through /proc (attribution.Resolver).
type CgroupResolver interface {
	Cgroup(pid int) (attribution.Cgroup, error)
}

type deviceAcc struct {
	dev      snapshot.Device
	procs    int
	util     float64
	utilProc int // processes with a known utilization
	source   string
	mem      uint64
}

type podAcc struct {
	pod     snapshot.Pod
	devices []*deviceAcc
}

func (p *podAcc) device(d snapshot.Device) *deviceAcc {
	for _, a := range p.devices {
		if a.dev.UUID == d.UUID {
			return a
		}
	}
	a := &deviceAcc{dev: d}
	p.devices = append(p.devices, a)
	return a
}

// assembly is the outcome of attributing one reading.
type assembly struct {
	snap         snapshot.Snapshot
	unattributed int
}

// assemble attributes a backend reading to pods and builds the snapshot.
//
// A pod's utilization on a device is the sum of its processes' SM
// utilization there (capped at 100); on a MIG device without per-process
// numbers it is the instance's utilization from DCGM when known (a MIG
// instance belongs to one pod); a device with none of the pod's processes
// on it is idle (0); otherwise it is unknown (null, source "none"). The
// pod's number is the mean over its devices, null if any is unknown.
func assemble(r reading.Reading, node string, sampledAt time.Time, interval time.Duration,
	pods PodSource, resolver CgroupResolver,
) assembly {
	idleSource := snapshot.SourceNVML
	if r.Backend == snapshot.BackendSimulated {
		idleSource = snapshot.SourceSimulated
	}
	out := assembly{snap: snapshot.Snapshot{
		Node: node, Backend: r.Backend, SampledAt: sampledAt.UTC().Truncate(time.Millisecond), IntervalSeconds: interval.Seconds(),
		GPUs: r.GPUs, Pods: []snapshot.Pod{},
	}}
	if out.snap.GPUs == nil {
		out.snap.GPUs = []snapshot.GPU{}
	}
	migUtil := map[string]snapshot.MIGDevice{}
	partial := false // a GPU could not be read: "no process seen" no longer means idle
	failed := map[string]bool{}
	for _, g := range r.GPUs {
		partial = partial || g.Error != ""
		if g.Error != "" && g.UUID != "" {
			failed[g.UUID] = true
		}
		for _, m := range g.MIGDevices {
			migUtil[m.UUID] = m
		}
	}

	acc := map[string]*podAcc{}
	get := func(uid string) *podAcc {
		if a, ok := acc[uid]; ok {
			return a
		}
		a := &podAcc{pod: snapshot.Pod{UID: uid, Devices: []snapshot.Device{}, Processes: []snapshot.Process{}}}
		if p, ok := pods.Pod(uid); ok {
			a.pod.Namespace, a.pod.Name, a.pod.User, a.pod.Server = p.Namespace, p.Name, p.User, p.Server
		}
		acc[uid] = a
		return a
	}
	for uid, devs := range r.Holdings {
		a := get(uid)
		for _, d := range devs {
			a.device(d)
		}
	}
	for _, pr := range r.Processes {
		uid := pr.PodUID
		if uid == "" {
			cg, err := resolver.Cgroup(pr.PID)
			if err != nil {
				out.unattributed++ // a host process, or one that just exited
				continue
			}
			uid = cg.PodUID
		}
		a := get(uid)
		a.pod.Processes = append(a.pod.Processes, snapshot.Process{
			PID: pr.PID, DeviceUUID: pr.Device.UUID, MemoryUsedBytes: pr.MemoryUsedBytes, SMUtilPercent: pr.SMUtilPercent,
		})
		d := a.device(pr.Device)
		d.procs++
		d.mem += pr.MemoryUsedBytes
		if pr.SMUtilPercent != nil {
			d.util += *pr.SMUtilPercent
			d.utilProc++
			d.source = pr.UtilizationSource
		}
	}
	// Pods that ask for NVIDIA resources but neither run anything on a GPU
	// nor hold a device the kubelet named: NVML cannot say which device they
	// hold, but it can say they use none.
	for _, p := range pods.Pods() {
		if len(p.GPUResources) > 0 {
			get(p.UID)
		}
	}

	for uid, a := range acc {
		if p, ok := pods.Pod(uid); ok {
			for _, d := range a.devices {
				if d.dev.Resource == "" {
					d.dev.Resource = resourceFor(d.dev, p.GPUResources)
				}
			}
		}
		known, sum := true, 0.0
		source := idleSource
		for _, d := range a.devices {
			switch m, isMIG := migUtil[d.dev.UUID]; {
			case d.utilProc > 0:
				d.dev.SMUtilPercent, d.dev.UtilizationSource = snapshot.Percent(min(d.util, 100)), d.source
			case isMIG && m.UtilizationPercent != nil:
				d.dev.SMUtilPercent, d.dev.UtilizationSource = m.UtilizationPercent, m.UtilizationSource
			case failed[d.dev.UUID] || failed[d.dev.ParentUUID]:
				d.dev.UtilizationSource = snapshot.SourceNone // held (the kubelet says) on a GPU that could not be read
			case d.procs == 0:
				d.dev.SMUtilPercent, d.dev.UtilizationSource = snapshot.Percent(0), idleSource
			default:
				d.dev.UtilizationSource = snapshot.SourceNone
			}
			d.dev.MemoryUsedBytes = d.mem
			a.pod.MemoryUsedBytes += d.mem
			a.pod.Devices = append(a.pod.Devices, d.dev)
			if d.dev.SMUtilPercent == nil {
				known = false
				continue
			}
			sum += *d.dev.SMUtilPercent
			if d.dev.UtilizationSource != idleSource {
				source = d.dev.UtilizationSource
			}
		}
		switch {
		case !known:
			a.pod.UtilizationSource = snapshot.SourceNone
		case len(a.devices) == 0 && partial:
			a.pod.UtilizationSource = snapshot.SourceNone
		case len(a.devices) == 0:
			a.pod.SMUtilPercent, a.pod.UtilizationSource = snapshot.Percent(0), idleSource
		default:
			a.pod.SMUtilPercent, a.pod.UtilizationSource = snapshot.Percent(sum/float64(len(a.devices))), source
		}
		slices.SortFunc(a.pod.Processes, func(x, y snapshot.Process) int {
			return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.DeviceUUID, y.DeviceUUID))
		})
		out.snap.Pods = append(out.snap.Pods, a.pod)
	}
	slices.SortFunc(out.snap.Pods, func(x, y snapshot.Pod) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name), cmp.Compare(x.UID, y.UID))
	})
	return out
}

// resourceFor names the resource through which a pod holds dev, when NVML
// alone cannot say: the MIG resource of the device's profile, or the pod's
// only GPU resource.
func resourceFor(dev snapshot.Device, requested map[string]int64) string {
	if dev.Profile != "" {
		for _, r := range slices.Sorted(maps.Keys(requested)) {
			if p, ok := gpu.MIGProfile(r); ok && p == dev.Profile {
				return r // the MIG resource of the profile, time-sliced (.shared) or not
			}
		}
	}
	if len(requested) == 1 {
		for r := range requested {
			return r
		}
	}
	return ""
}
