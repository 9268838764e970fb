// Package bench measures the usage API (benchmarks.md B1 and B5): a synthetic cluster (10,000 users, 1,000 GPUs,
// 10,000 pods) served by the real handler stack, an open-loop load generator, a real JupyterHub as the anchor,
// and the footprint of the history.
package bench

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// Cluster is a synthetic cluster.
type Cluster struct {
	Nodes  map[string]inventory.Node
	Pods   []inventory.Pod
	Agents map[string]collect.Result
	Hub    usage.Directory
}

// UserName is the name of synthetic user i.
func UserName(i int) string { return fmt.Sprintf("user%05d", i) }

// Synthesize builds gpus GPUs on 8-GPU nodes: a fifth are A100s split in 7 MIG 1g.5gb slices, the rest T4s
// time-sliced in `replicas` replicas; pods are spread over the users round-robin and fill the units in order;
// pods beyond the cluster's units stay Pending (they hold nothing, as in a real cluster).
func Synthesize(users, gpus, pods, replicas int, now time.Time) Cluster {
	c := Cluster{Nodes: map[string]inventory.Node{}, Agents: map[string]collect.Result{}, Hub: usage.Directory{Users: map[string]usage.HubUser{}, FetchedAt: now}}
	for i := range users {
		n := UserName(i)
		c.Hub.Users[n] = usage.HubUser{Name: n, Groups: []string{fmt.Sprintf("course%02d", i%50)}}
	}
	type unit struct {
		node, res, uuid string
	}
	var units []unit
	migGPUs := gpus / 5
	for g := 0; g < gpus; g += 8 {
		mig := g < migGPUs
		name := fmt.Sprintf("gpu-node-%04d", g/8)
		n := inventory.Node{Name: name, Allocatable: map[string]int64{}}
		snap := &snapshot.Snapshot{Node: name, Backend: "simulated", SampledAt: now, IntervalSeconds: 5}
		count := min(8, gpus-g)
		if mig {
			n.Labels = map[string]string{gpu.LabelProduct: "NVIDIA-A100-SXM4-40GB", gpu.LabelMIGStrategy: "mixed",
				gpu.LabelMIGSlicesGI("1g.5gb"): "1", gpu.LabelMIGMemoryMiB("1g.5gb"): "4864"}
			n.Allocatable[gpu.MIGResource("1g.5gb")] = int64(7 * count)
		} else {
			n.Labels = map[string]string{gpu.LabelProduct: "Tesla-T4-SHARED", gpu.LabelSharingStrategy: "time-slicing",
				gpu.LabelReplicas: fmt.Sprint(replicas), gpu.LabelMemoryMiB: "15360"}
			n.Allocatable[gpu.ResourceGPUShared] = int64(replicas * count)
		}
		for k := range count {
			uuid := fmt.Sprintf("GPU-%04d", g+k)
			card := snapshot.GPU{UUID: uuid, Index: k, Product: "Tesla T4", MemoryTotalBytes: 15 << 30}
			if mig {
				card.Product, card.MIGMode, card.MemoryTotalBytes = "NVIDIA A100-SXM4-40GB", true, 40<<30
				for s := range 7 {
					m := snapshot.MIGDevice{UUID: fmt.Sprintf("MIG-%04d-%d", g+k, s), Profile: "1g.5gb", MemoryTotalBytes: 4864 << 20, UtilizationSource: "simulated"}
					card.MIGDevices = append(card.MIGDevices, m)
					units = append(units, unit{name, gpu.MIGResource("1g.5gb"), m.UUID})
				}
			} else {
				for range replicas {
					units = append(units, unit{name, gpu.ResourceGPUShared, uuid})
				}
			}
			snap.GPUs = append(snap.GPUs, card)
		}
		c.Nodes[name] = n
		c.Agents[name] = collect.Result{Agent: collect.Agent{Node: name}, Snapshot: snap, FetchedAt: now}
	}
	for i := range pods {
		u := UserName(i % users)
		p := inventory.Pod{UID: fmt.Sprintf("uid-%05d", i), Namespace: "jhub", Name: "jupyter-" + u, User: u, Phase: corev1.PodPending}
		if i >= users {
			p.Server = fmt.Sprintf("s%d", i/users)
			p.Name += "--" + p.Server
		}
		res := gpu.ResourceGPUShared
		if i < len(units) {
			un := units[i]
			res = un.res
			p.Node, p.Phase, p.Ready = un.node, corev1.PodRunning, true
			util := float64(i % 101)
			snap := c.Agents[un.node].Snapshot
			snap.Pods = append(snap.Pods, snapshot.Pod{UID: p.UID, Namespace: p.Namespace, Name: p.Name, User: u, Server: p.Server,
				Devices:       []snapshot.Device{{UUID: un.uuid, Resource: un.res}},
				SMUtilPercent: &util, UtilizationSource: "simulated", MemoryUsedBytes: uint64(i%16) << 28})
		}
		p.Resources = map[string]int64{res: 1}
		c.Pods = append(c.Pods, p)
	}
	return c
}

// Input is the tick input at now.
func (c Cluster) Input(now time.Time, interval time.Duration) usage.Input {
	agents := make(map[string]collect.Result, len(c.Agents))
	for k, r := range c.Agents {
		// Agents that sample at every tick: telemetry is judged by sampledAt, so a frozen one would go stale.
		snap := *r.Snapshot
		snap.SampledAt = now
		r.Snapshot, r.FetchedAt, r.SampleSeenAt = &snap, now, now
		agents[k] = r
	}
	return usage.Input{Now: now, Interval: interval, Pods: c.Pods, Nodes: c.Nodes, Agents: agents, Hub: c.Hub}
}
