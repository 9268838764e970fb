// Package sim is the simulated backend for machines without NVIDIA GPUs (the
// demo and the e2e cluster). It emulates the GPUs a Node object advertises
// (GPU Feature Discovery labels and nvidia.com/* capacity), gives each pod the
// devices its resource limits ask for, and derives each pod's "GPU"
// utilization from the CPU time of its processes. Everything it reports is
// marked "simulated".
package sim

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// GFD labels and device-plugin resources read from the Node.
const (
	LabelProduct     = "nvidia.com/gpu.product"
	LabelMemory      = "nvidia.com/gpu.memory" // MiB
	LabelCount       = "nvidia.com/gpu.count"
	LabelReplicas    = "nvidia.com/gpu.replicas"
	LabelMIGStrategy = "nvidia.com/mig.strategy"

	ResourceGPU       = "nvidia.com/gpu"
	ResourceShared    = "nvidia.com/gpu.shared"
	ResourceMIGPrefix = "nvidia.com/mig-"

	defaultProduct   = "Simulated GPU"
	defaultMemoryMiB = 16384
	slicesPerGPU     = 7 // compute slices of an A100/H100
)

// device is one emulated GPU or MIG device that pods can be given.
type device struct {
	dev      snapshot.Device
	replicas int // how many pods may hold it (time-slicing replicas), 1 otherwise
	memTotal uint64
	gi       int
}

// gpu is one emulated physical GPU.
type gpu struct {
	uuid     string
	index    int
	product  string
	memTotal uint64
	mig      bool
	devices  []*device // itself (non-MIG) or its MIG devices
}

// inventory is the emulated hardware of a node.
type inventory struct {
	gpus []*gpu
	// key identifies the Node's GPU labels and capacity: assignments are
	// redone when it changes.
	key string
}

// newInventory builds the emulated GPUs of node. UUIDs derive from the node
// name and the device's position, so they are stable across restarts.
func newInventory(node *corev1.Node) *inventory {
	labels := node.Labels
	capacity := func(name string) int {
		q, ok := node.Status.Capacity[corev1.ResourceName(name)]
		if !ok {
			return 0
		}
		return int(q.Value())
	}
	product := labels[LabelProduct]
	if product == "" {
		product = defaultProduct
	}
	// GFD appends -SHARED under time-slicing and the MIG profile under the
	// single strategy; the product is the same card.
	product = strings.TrimSuffix(product, "-SHARED")
	if i := strings.Index(product, "-MIG-"); i >= 0 {
		product = product[:i]
	}
	memMiB := atoiDefault(labels[LabelMemory], defaultMemoryMiB)
	replicas := max(atoiDefault(labels[LabelReplicas], 1), 1)
	strategy := labels[LabelMIGStrategy]

	inv := &inventory{}
	var keyParts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if strings.HasPrefix(k, "nvidia.com/") {
			keyParts = append(keyParts, k+"="+labels[k])
		}
	}
	for name, q := range node.Status.Capacity {
		if strings.HasPrefix(string(name), "nvidia.com/") {
			keyParts = append(keyParts, string(name)+":"+q.String())
		}
	}
	slices.Sort(keyParts)
	inv.key = strings.Join(keyParts, ",")

	newGPU := func() *gpu {
		g := &gpu{index: len(inv.gpus), product: product, memTotal: uint64(memMiB) << 20}
		g.uuid = "GPU-sim-" + hashUUID(node.Name, "gpu", strconv.Itoa(g.index))
		inv.gpus = append(inv.gpus, g)
		return g
	}
	whole := func(resource string, n, perGPU int) {
		for range ceilDiv(n, perGPU) {
			g := newGPU()
			g.devices = []*device{{
				dev:      snapshot.Device{UUID: g.uuid, Index: g.index, Resource: resource},
				replicas: perGPU, memTotal: g.memTotal,
			}}
		}
	}

	// MIG instances: mixed strategy advertises nvidia.com/mig-<profile>;
	// single advertises them as nvidia.com/gpu with the profile in labels.
	type migReq struct {
		profile, resource string
		n                 int
	}
	var migs []migReq
	if strategy == "single" {
		if p := singleProfile(labels); p != "" {
			migs = append(migs, migReq{profile: p, resource: ResourceGPU, n: capacity(ResourceGPU)})
		}
	} else {
		whole(ResourceGPU, capacity(ResourceGPU), replicasFor(ResourceGPU, replicas, capacity(ResourceShared)))
	}
	whole(ResourceShared, capacity(ResourceShared), replicas)
	for name := range node.Status.Capacity {
		if p, ok := strings.CutPrefix(string(name), ResourceMIGPrefix); ok && strategy != "single" {
			migs = append(migs, migReq{profile: p, resource: string(name), n: capacity(string(name))})
		}
	}
	// Bigger instances first, so first-fit packs them the way an operator
	// would partition the cards.
	slices.SortFunc(migs, func(a, b migReq) int {
		if d := profileSlices(b.profile) - profileSlices(a.profile); d != 0 {
			return d
		}
		return strings.Compare(a.profile, b.profile)
	})
	var migGPUs []*gpu
	used := map[*gpu]int{}
	for _, m := range migs {
		s := profileSlices(m.profile)
		mem := uint64(atoiDefault(labels[ResourceMIGPrefix+m.profile+".memory"], profileMemMiB(m.profile))) << 20
		for range m.n {
			var g *gpu
			for _, c := range migGPUs {
				if used[c]+s <= slicesPerGPU {
					g = c
					break
				}
			}
			if g == nil {
				g = newGPU()
				g.mig = true
				migGPUs = append(migGPUs, g)
			}
			used[g] += s
			gi := len(g.devices) + 1
			g.devices = append(g.devices, &device{
				dev: snapshot.Device{
					UUID:       "MIG-sim-" + hashUUID(node.Name, "mig", strconv.Itoa(g.index), strconv.Itoa(gi)),
					ParentUUID: g.uuid, Index: g.index, Resource: m.resource, Profile: m.profile,
				},
				replicas: 1, memTotal: mem, gi: gi,
			})
		}
	}
	return inv
}

// replicasFor: without renameByDefault, time-sliced replicas are advertised
// as nvidia.com/gpu itself.
func replicasFor(resource string, replicas, sharedCapacity int) int {
	if resource == ResourceGPU && sharedCapacity == 0 {
		return replicas
	}
	return 1
}

func singleProfile(labels map[string]string) string {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if rest, ok := strings.CutPrefix(k, ResourceMIGPrefix); ok {
			if p, ok := strings.CutSuffix(rest, ".count"); ok {
				return p
			}
		}
	}
	return ""
}

// profileSlices reads the compute slices of a profile name such as "3g.20gb"
// or "1c.3g.20gb" (the GPU-instance slices count for packing).
func profileSlices(p string) int {
	for part := range strings.SplitSeq(p, ".") {
		if n, ok := strings.CutSuffix(part, "g"); ok {
			if v, err := strconv.Atoi(n); err == nil {
				return v
			}
		}
	}
	return 1
}

func profileMemMiB(p string) int {
	for part := range strings.SplitSeq(p, ".") {
		if n, ok := strings.CutSuffix(part, "gb"); ok {
			if v, err := strconv.Atoi(n); err == nil {
				return v * 1024
			}
		}
	}
	return 0
}

// hashUUID formats a hash of parts like the tail of a UUID.
func hashUUID(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "/")))
	x := fmt.Sprintf("%x", h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

func atoiDefault(s string, def int) int {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return def
	}
	return v
}

func ceilDiv(a, b int) int {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}
