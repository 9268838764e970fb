package agent

import (
	"context"
	"log/slog"
	"slices"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/podresources"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// Allocations lists the devices the kubelet allocated to containers
// (podresources.Client).
type Allocations interface {
	Allocations(ctx context.Context) ([]podresources.Allocation, error)
}

// kubeletHolders adds to a backend's reading which pod holds which device, as
// the kubelet allocated them, when the backend cannot tell: NVML sees only
// processes, and an idle notebook that holds a GPU runs none. Not safe for
// concurrent Sample calls (nor are the backends).
type kubeletHolders struct {
	Sampler
	kubelet Allocations
	pods    PodSource
	logger  *slog.Logger
	// down: the last call failed (logged once per outage).
	down bool
}

// Sample samples the backend, then asks the kubelet. A kubelet that cannot be
// asked costs the holdings of that sample only: the GPU readings are as good,
// and processes still name their pods.
func (k *kubeletHolders) Sample(ctx context.Context) (reading.Reading, error) {
	r, err := k.Sampler.Sample(ctx)
	if err != nil || r.Holdings != nil {
		return r, err
	}
	allocs, err := k.kubelet.Allocations(ctx)
	if err != nil {
		if !k.down {
			k.logger.Warn("cannot ask the kubelet which pod holds which GPU: idle pods are listed without their devices", "err", err)
		}
		k.down = true
		return r, nil
	}
	if k.down {
		k.logger.Info("the kubelet answers again: idle pods are listed with their devices")
	}
	k.down = false
	r.Holdings = holdings(r.GPUs, podresources.ByPod(allocs, k.pods.Pods()))
	return r, nil
}

// holdings maps the kubelet's device IDs to the devices of a reading, by UUID
// (the NVIDIA device plugin's default device-id-strategy; replica suffixes
// "::<n>" stripped). IDs of no device in the reading (another ID strategy, a
// MIG device of a GPU that could not be read) are left out.
func holdings(gpus []snapshot.GPU, byPod map[string][]podresources.Allocation) map[string][]snapshot.Device {
	devs := map[string]snapshot.Device{}
	for _, g := range gpus {
		if !g.MIGMode && g.UUID != "" {
			devs[g.UUID] = snapshot.Device{UUID: g.UUID, Index: g.Index}
		}
		for _, m := range g.MIGDevices {
			devs[m.UUID] = snapshot.Device{UUID: m.UUID, ParentUUID: g.UUID, Index: g.Index, Profile: m.Profile}
		}
	}
	out := map[string][]snapshot.Device{}
	for uid, allocs := range byPod {
		for _, a := range allocs {
			for _, id := range a.DeviceIDs {
				d, ok := devs[podresources.BaseID(id)]
				if !ok || slices.ContainsFunc(out[uid], func(h snapshot.Device) bool { return h.UUID == d.UUID }) {
					continue
				}
				d.Resource = a.Resource
				out[uid] = append(out[uid], d)
			}
		}
	}
	return out
}
