// Package sim is the simulated backend for machines without NVIDIA GPUs (the
// demo and the e2e cluster). It emulates the GPUs a Node object advertises
// (GPU Feature Discovery labels and NVIDIA GPU capacity), gives each pod the
// devices its resource limits ask for (or, given the kubelet's pod-resources
// API, names the devices and their holders as the kubelet does), and derives
// each pod's "GPU" utilization from the CPU time of its processes (the node
// emulator's by their environment, a real kubelet's containers by their
// cgroup). Everything it reports is marked "simulated".
package sim

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/podresources"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// What the simulator assumes where the Node's labels say nothing.
const (
	defaultProduct   = "Simulated GPU"
	defaultMemoryMiB = 16384
)

// device is one emulated GPU or MIG device that pods can be given.
type device struct {
	dev      snapshot.Device
	replicas int // how many pods may hold it (time-slicing replicas), 1 otherwise
	memTotal uint64
	gi       int
}

// card is one emulated physical GPU.
type card struct {
	uuid     string
	index    int
	product  string
	memTotal uint64
	mig      bool
	devices  []*device // itself (non-MIG) or its MIG devices
}

// inventory is the emulated hardware of a node.
type inventory struct {
	gpus []*card
	// key identifies the Node's GPU labels and capacity (and the kubelet's
	// device IDs): assignments are redone when it changes.
	key string
	// byID maps the kubelet's device IDs, replica IDs included, to devices
	// (adopt).
	byID map[string]*device
}

// newInventory builds the emulated GPUs of node. UUIDs derive from the node
// name and the device's position, so they are stable across restarts.
func newInventory(node *corev1.Node) *inventory {
	labels := node.Labels
	product := labels[gpu.LabelProduct]
	if product == "" {
		product = defaultProduct
	}
	// GFD appends -SHARED under time-slicing and the MIG profile under the
	// single strategy; the product is the same card.
	product = gpu.BaseProduct(product)
	memMiB := atoiDefault(labels[gpu.LabelMemoryMiB], defaultMemoryMiB)

	inv := &inventory{}
	var keyParts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if gpu.IsNVIDIAName(k) {
			keyParts = append(keyParts, k+"="+labels[k])
		}
	}
	capacity := map[string]int64{}
	for name, q := range node.Status.Capacity {
		if gpu.IsNVIDIAName(string(name)) {
			keyParts = append(keyParts, string(name)+":"+q.String())
			capacity[string(name)] = q.Value()
		}
	}
	slices.Sort(keyParts)
	inv.key = strings.Join(keyParts, ",")

	newGPU := func() *card {
		g := &card{index: len(inv.gpus), product: product, memTotal: uint64(memMiB) << 20}
		g.uuid = "GPU-sim-" + hashUUID(node.Name, "gpu", strconv.Itoa(g.index))
		inv.gpus = append(inv.gpus, g)
		return g
	}

	// What each advertised resource is (whole GPU, replica, MIG instance, ...)
	// is the share model's call; the emulator builds the cards behind it:
	// count/replicas physical units, each shared by replicas pods.
	var migs []gpu.Allocation
	for _, a := range gpu.Allocations(capacity, gpu.Node{Labels: labels}) {
		if a.Kind.MIG() {
			migs = append(migs, a)
			continue
		}
		for range ceilDiv(a.Count, a.Replicas) {
			g := newGPU()
			g.devices = []*device{{
				dev:      snapshot.Device{UUID: g.uuid, Index: g.index, Resource: a.Resource},
				replicas: int(a.Replicas), memTotal: g.memTotal,
			}}
		}
	}
	// MIG instances, bigger first, so first-fit packs them the way an
	// operator would partition the cards.
	slices.SortFunc(migs, func(a, b gpu.Allocation) int {
		if d := cmp.Compare(b.Numerator, a.Numerator); d != 0 {
			return d
		}
		return strings.Compare(a.Resource, b.Resource)
	})
	var migGPUs []*card
	used := map[*card]int64{}
	for _, m := range migs {
		g := m.Numerator                     // GPU-instance slices of one instance
		perGPU := m.Denominator / m.Replicas // slices of a whole card
		mem := m.MemoryTotalBytes
		if mem == 0 {
			mem = uint64(gpu.MIGProfileMemoryGB(m.Profile)) << 30
		}
		for range ceilDiv(m.Count, m.Replicas) {
			var c *card
			for _, cand := range migGPUs {
				if used[cand]+g <= perGPU {
					c = cand
					break
				}
			}
			if c == nil {
				c = newGPU()
				c.mig = true
				migGPUs = append(migGPUs, c)
			}
			used[c] += g
			gi := len(c.devices) + 1
			c.devices = append(c.devices, &device{
				dev: snapshot.Device{
					UUID:       "MIG-sim-" + hashUUID(node.Name, "mig", strconv.Itoa(c.index), strconv.Itoa(gi)),
					ParentUUID: c.uuid, Index: c.index, Resource: m.Resource, Profile: m.Profile,
				},
				replicas: int(m.Replicas), memTotal: mem, gi: gi,
			})
		}
	}
	return inv
}

// adopt names the emulated devices after the IDs the kubelet hands out per
// resource (podresources.Client.Allocatable), so that the UUIDs reported are
// the ones pods get: the n-th device behind a resource's IDs (replica IDs
// "<uuid>::<n>" name one device) becomes the n-th emulated device of that
// resource in index order. It returns the resources whose device counts
// differ: their surplus devices keep simulated UUIDs, their surplus IDs
// name no device.
func (inv *inventory) adopt(ids map[string][]string) (mismatched []string) {
	inv.byID = map[string]*device{}
	keyParts := []string{inv.key}
	for _, res := range slices.Sorted(maps.Keys(ids)) {
		keyParts = append(keyParts, res+"="+strings.Join(ids[res], ";"))
		replicas := map[string][]string{}
		for _, id := range ids[res] {
			base := podresources.BaseID(id)
			replicas[base] = append(replicas[base], id)
		}
		bases := slices.Sorted(maps.Keys(replicas))
		var devs []*device
		for _, g := range inv.gpus {
			for _, d := range g.devices {
				if d.dev.Resource == res {
					devs = append(devs, d)
				}
			}
		}
		if len(devs) != len(bases) {
			mismatched = append(mismatched, res)
		}
		for i, d := range devs[:min(len(devs), len(bases))] {
			d.dev.UUID = bases[i]
			if d.dev.ParentUUID == "" { // a whole GPU: the card is the device
				inv.gpus[d.dev.Index].uuid = bases[i]
			}
			for _, id := range replicas[bases[i]] {
				inv.byID[id] = d
			}
		}
	}
	inv.key = strings.Join(keyParts, "|")
	return mismatched
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

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	b = max(b, 1)
	return (a + b - 1) / b
}
