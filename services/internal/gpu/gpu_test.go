package gpu

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

func a100MIGNode() Node {
	return Node{Labels: map[string]string{
		LabelProduct: "NVIDIA-A100-SXM4-40GB", LabelMIGStrategy: "mixed", LabelMemoryMiB: "40960",
		"nvidia.com/mig-3g.20gb.slices.gi": "3", "nvidia.com/mig-3g.20gb.memory": "20096",
	}}
}

// labels builds node labels from key/value pairs.
func labels(kv ...string) Node {
	n := Node{Labels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Labels[kv[i]] = kv[i+1]
	}
	return n
}

// TestSharingConfigurations has one row per sharing configuration of the NVIDIA device plugin and GPU Feature
// Discovery, with the labels GFD really sets (k8s-device-plugin internal/lm/resource.go, mig-strategy.go): the
// table in services/usage-api/README.md ("Share model") is this one in words.
func TestSharingConfigurations(t *testing.T) {
	type want struct {
		Kind                   Kind
		Resource, Profile      string
		Product, Class         string
		Count                  int64
		Numerator, Denominator int64
		Share                  float64
		UtilizationScale       float64
		Description            string
		MemoryTotalBytes       uint64
	}
	cases := map[string]struct {
		resources map[string]int64
		node      Node
		want      []want
	}{
		"whole GPU, no sharing": {
			resources: map[string]int64{"nvidia.com/gpu": 1, "cpu": 2},
			node: labels(LabelProduct, "NVIDIA-A100-SXM4-40GB", LabelSharingStrategy, "none", LabelReplicas, "1",
				LabelMemoryMiB, "40960"),
			want: []want{{Kind: KindGPU, Resource: "nvidia.com/gpu", Product: "NVIDIA A100-SXM4-40GB", Class: "gpu A100-SXM4-40GB",
				Count: 1, Numerator: 1, Denominator: 1, Share: 1, UtilizationScale: 1,
				Description: "Whole A100-SXM4-40GB", MemoryTotalBytes: 40960 << 20}},
		},
		"MIG, mixed strategy": {
			resources: map[string]int64{"nvidia.com/mig-3g.20gb": 1},
			node: labels(LabelMIGStrategy, "mixed", LabelProduct, "NVIDIA-A100-SXM4-40GB", LabelReplicas, "0",
				LabelSharingStrategy, "none", LabelMemoryMiB, "40960",
				"nvidia.com/mig-3g.20gb.product", "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb", "nvidia.com/mig-3g.20gb.count", "2",
				"nvidia.com/mig-3g.20gb.replicas", "1", "nvidia.com/mig-3g.20gb.sharing-strategy", "none",
				"nvidia.com/mig-3g.20gb.slices.gi", "3", "nvidia.com/mig-3g.20gb.memory", "20096"),
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/mig-3g.20gb", Profile: "3g.20gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig A100-SXM4-40GB 3g.20gb", Count: 1, Numerator: 3, Denominator: 7, Share: 3.0 / 7, UtilizationScale: 3.0 / 7,
				Description: "MIG 3g.20gb on an A100, 3/7 of a GPU", MemoryTotalBytes: 20096 << 20}},
		},
		"MIG, single strategy: nvidia.com/gpu is an instance, its labels are nvidia.com/gpu.*": {
			resources: map[string]int64{"nvidia.com/gpu": 1},
			node: labels(LabelMIGStrategy, "single", LabelProduct, "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb", LabelCount, "16",
				LabelReplicas, "1", LabelSharingStrategy, "none", LabelMemoryMiB, "20096", "nvidia.com/gpu.slices.gi", "3"),
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/gpu", Profile: "3g.20gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig A100-SXM4-40GB 3g.20gb", Count: 1, Numerator: 3, Denominator: 7, Share: 3.0 / 7, UtilizationScale: 3.0 / 7,
				Description: "MIG 3g.20gb on an A100, 3/7 of a GPU", MemoryTotalBytes: 20096 << 20}},
		},
		"time-slicing, renameByDefault: nvidia.com/gpu.shared, product without -SHARED": {
			resources: map[string]int64{"nvidia.com/gpu.shared": 1},
			node: labels(LabelProduct, "Tesla-T4", LabelSharingStrategy, "time-slicing", LabelReplicas, "4",
				LabelMemoryMiB, "15360", LabelCount, "1"),
			want: []want{{Kind: KindShared, Resource: "nvidia.com/gpu.shared", Product: "Tesla-T4", Class: "shared T4",
				Count: 1, Numerator: 1, Denominator: 4, Share: 0.25, UtilizationScale: 1,
				Description: "1 of 4 time-sliced shares of a T4", MemoryTotalBytes: 15360 << 20}},
		},
		"time-slicing without rename: nvidia.com/gpu is a replica, product -SHARED": {
			resources: map[string]int64{"nvidia.com/gpu": 1},
			node: labels(LabelProduct, "Tesla-T4-SHARED", LabelSharingStrategy, "time-slicing", LabelReplicas, "4",
				LabelMemoryMiB, "15360"),
			want: []want{{Kind: KindShared, Resource: "nvidia.com/gpu", Product: "Tesla-T4", Class: "shared T4",
				Count: 1, Numerator: 1, Denominator: 4, Share: 0.25, UtilizationScale: 1,
				Description: "1 of 4 time-sliced shares of a T4", MemoryTotalBytes: 15360 << 20}},
		},
		"MPS without rename: nvidia.com/gpu, sharing-strategy mps": {
			resources: map[string]int64{"nvidia.com/gpu": 1},
			node: labels(LabelProduct, "NVIDIA-A100-SXM4-40GB-SHARED", LabelSharingStrategy, "mps", LabelReplicas, "2",
				LabelMemoryMiB, "40960", "nvidia.com/mps.capable", "true"),
			want: []want{{Kind: KindMPS, Resource: "nvidia.com/gpu", Product: "NVIDIA A100-SXM4-40GB", Class: "mps A100-SXM4-40GB",
				Count: 1, Numerator: 1, Denominator: 2, Share: 0.5, UtilizationScale: 1,
				Description: "1 of 2 MPS shares of an A100", MemoryTotalBytes: 40960 << 20}},
		},
		"MPS, renameByDefault: nvidia.com/gpu.shared": {
			resources: map[string]int64{"nvidia.com/gpu.shared": 1},
			node: labels(LabelProduct, "NVIDIA-A100-SXM4-40GB", LabelSharingStrategy, "mps", LabelReplicas, "2",
				LabelMemoryMiB, "40960", "nvidia.com/mps.capable", "true"),
			want: []want{{Kind: KindMPS, Resource: "nvidia.com/gpu.shared", Product: "NVIDIA A100-SXM4-40GB", Class: "mps A100-SXM4-40GB",
				Count: 1, Numerator: 1, Denominator: 2, Share: 0.5, UtilizationScale: 1,
				Description: "1 of 2 MPS shares of an A100", MemoryTotalBytes: 40960 << 20}},
		},
		"time-sliced MIG, mixed strategy without rename: nvidia.com/mig-1g.5gb with mig-1g.5gb.replicas": {
			resources: map[string]int64{"nvidia.com/mig-1g.5gb": 1},
			node: labels(LabelMIGStrategy, "mixed", LabelProduct, "NVIDIA-A100-SXM4-40GB", LabelReplicas, "0",
				LabelSharingStrategy, "none",
				"nvidia.com/mig-1g.5gb.product", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", "nvidia.com/mig-1g.5gb.count", "7",
				"nvidia.com/mig-1g.5gb.replicas", "2", "nvidia.com/mig-1g.5gb.sharing-strategy", "time-slicing",
				"nvidia.com/mig-1g.5gb.slices.gi", "1", "nvidia.com/mig-1g.5gb.memory", "4864"),
			want: []want{{Kind: KindSharedMIG, Resource: "nvidia.com/mig-1g.5gb", Profile: "1g.5gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig-shared A100-SXM4-40GB 1g.5gb", Count: 1, Numerator: 1, Denominator: 14, Share: 1.0 / 14,
				UtilizationScale: 1.0 / 7, Description: "1 of 2 time-sliced shares of MIG 1g.5gb on an A100, 1/14 of a GPU",
				MemoryTotalBytes: 4864 << 20}},
		},
		"time-sliced MIG, mixed strategy, renameByDefault: nvidia.com/mig-3g.20gb.shared": {
			resources: map[string]int64{"nvidia.com/mig-3g.20gb.shared": 1},
			node: labels(LabelMIGStrategy, "mixed", LabelProduct, "NVIDIA-A100-SXM4-40GB", LabelReplicas, "0",
				LabelSharingStrategy, "none",
				"nvidia.com/mig-3g.20gb.product", "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb", "nvidia.com/mig-3g.20gb.count", "2",
				"nvidia.com/mig-3g.20gb.replicas", "3", "nvidia.com/mig-3g.20gb.sharing-strategy", "time-slicing",
				"nvidia.com/mig-3g.20gb.slices.gi", "3", "nvidia.com/mig-3g.20gb.memory", "20096"),
			want: []want{{Kind: KindSharedMIG, Resource: "nvidia.com/mig-3g.20gb.shared", Profile: "3g.20gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig-shared A100-SXM4-40GB 3g.20gb", Count: 1, Numerator: 3, Denominator: 21, Share: 3.0 / 21,
				UtilizationScale: 3.0 / 7, Description: "1 of 3 time-sliced shares of MIG 3g.20gb on an A100, 3/21 of a GPU",
				MemoryTotalBytes: 20096 << 20}},
		},
		"time-sliced MIG, single strategy without rename: product -MIG-<profile>-SHARED": {
			resources: map[string]int64{"nvidia.com/gpu": 1},
			node: labels(LabelMIGStrategy, "single", LabelProduct, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", LabelCount, "56",
				LabelReplicas, "4", LabelSharingStrategy, "time-slicing", LabelMemoryMiB, "4864", "nvidia.com/gpu.slices.gi", "1"),
			want: []want{{Kind: KindSharedMIG, Resource: "nvidia.com/gpu", Profile: "1g.5gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig-shared A100-SXM4-40GB 1g.5gb", Count: 1, Numerator: 1, Denominator: 28, Share: 1.0 / 28,
				UtilizationScale: 1.0 / 7, Description: "1 of 4 time-sliced shares of MIG 1g.5gb on an A100, 1/28 of a GPU",
				MemoryTotalBytes: 4864 << 20}},
		},
		"time-sliced MIG, single strategy, renameByDefault: nvidia.com/gpu.shared": {
			resources: map[string]int64{"nvidia.com/gpu.shared": 1},
			node: labels(LabelMIGStrategy, "single", LabelProduct, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", LabelCount, "56",
				LabelReplicas, "4", LabelSharingStrategy, "time-slicing", LabelMemoryMiB, "4864", "nvidia.com/gpu.slices.gi", "1"),
			want: []want{{Kind: KindSharedMIG, Resource: "nvidia.com/gpu.shared", Profile: "1g.5gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig-shared A100-SXM4-40GB 1g.5gb", Count: 1, Numerator: 1, Denominator: 28, Share: 1.0 / 28,
				UtilizationScale: 1.0 / 7, Description: "1 of 4 time-sliced shares of MIG 1g.5gb on an A100, 1/28 of a GPU",
				MemoryTotalBytes: 4864 << 20}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			allocs := Allocations(tc.resources, tc.node)
			got := make([]want, 0, len(allocs))
			for _, a := range allocs {
				got = append(got, want{Kind: a.Kind, Resource: a.Resource, Profile: a.Profile, Product: a.Product, Class: a.Class(),
					Count: a.Count, Numerator: a.Numerator, Denominator: a.Denominator, Share: a.Share(),
					UtilizationScale: a.UtilizationScale(), Description: a.Description(), MemoryTotalBytes: a.MemoryTotalBytes})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Allocations (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAllocations covers what the share model assumes where labels are missing, and requests of several units.
func TestAllocations(t *testing.T) {
	type want struct {
		Kind                   Kind
		Resource, Profile      string
		Product, Class         string
		Count                  int64
		Numerator, Denominator int64
		Share                  float64
		Description            string
		MemoryTotalBytes       uint64
	}
	cases := map[string]struct {
		resources map[string]int64
		node      Node
		want      []want
	}{
		"two whole GPUs": {
			resources: map[string]int64{"nvidia.com/gpu": 2},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-H100-80GB-HBM3"}},
			want: []want{{Kind: KindGPU, Resource: "nvidia.com/gpu", Product: "NVIDIA H100-80GB-HBM3", Class: "gpu H100-80GB-HBM3",
				Count: 2, Numerator: 1, Denominator: 1, Share: 2, Description: "Whole H100-80GB-HBM3"}},
		},
		"MIG 3g.20gb on A100 with slices label": {
			resources: map[string]int64{"nvidia.com/mig-3g.20gb": 1},
			node:      a100MIGNode(),
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/mig-3g.20gb", Profile: "3g.20gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig A100-SXM4-40GB 3g.20gb", Count: 1, Numerator: 3, Denominator: 7, Share: 3.0 / 7,
				Description: "MIG 3g.20gb on an A100, 3/7 of a GPU", MemoryTotalBytes: 20096 << 20}},
		},
		"MIG 1g.5gb without slices label, from the profile name": {
			resources: map[string]int64{"nvidia.com/mig-1g.5gb": 2},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-A100-SXM4-40GB"}},
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/mig-1g.5gb", Profile: "1g.5gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig A100-SXM4-40GB 1g.5gb", Count: 2, Numerator: 1, Denominator: 7, Share: 2.0 / 7,
				Description: "MIG 1g.5gb on an A100, 1/7 of a GPU"}},
		},
		"MIG on A30 has 4 slices": {
			resources: map[string]int64{"nvidia.com/mig-2g.12gb": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-A30"}},
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/mig-2g.12gb", Profile: "2g.12gb", Product: "NVIDIA A30",
				Class: "mig A30 2g.12gb", Count: 1, Numerator: 2, Denominator: 4, Share: 0.5,
				Description: "MIG 2g.12gb on an A30, 2/4 of a GPU"}},
		},
		"MIG on unknown product assumes 7": {
			resources: map[string]int64{"nvidia.com/mig-1g.10gb": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-X999"}},
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/mig-1g.10gb", Profile: "1g.10gb", Product: "NVIDIA X999",
				Class: "mig X999 1g.10gb", Count: 1, Numerator: 1, Denominator: 7, Share: 1.0 / 7,
				Description: "MIG 1g.10gb on an X999, 1/7 of a GPU (assumed 7 slices per GPU)"}},
		},
		"MIG single strategy without slices label: g from the product's profile": {
			resources: map[string]int64{"nvidia.com/gpu": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb", LabelMIGStrategy: "single"}},
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/gpu", Profile: "3g.20gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig A100-SXM4-40GB 3g.20gb", Count: 1, Numerator: 3, Denominator: 7, Share: 3.0 / 7,
				Description: "MIG 3g.20gb on an A100, 3/7 of a GPU"}},
		},
		"MIG compute-instance profile name": {
			resources: map[string]int64{"nvidia.com/mig-1c.3g.20gb": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-A100-SXM4-40GB"}},
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/mig-1c.3g.20gb", Profile: "1c.3g.20gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig A100-SXM4-40GB 1c.3g.20gb", Count: 1, Numerator: 3, Denominator: 7, Share: 3.0 / 7,
				Description: "MIG 1c.3g.20gb on an A100, 3/7 of a GPU"}},
		},
		"MIG profile with media extensions (+me named .me)": {
			resources: map[string]int64{"nvidia.com/mig-1g.10gb.me": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-H100-80GB-HBM3"}},
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/mig-1g.10gb.me", Profile: "1g.10gb.me", Product: "NVIDIA H100-80GB-HBM3",
				Class: "mig H100-80GB-HBM3 1g.10gb.me", Count: 1, Numerator: 1, Denominator: 7, Share: 1.0 / 7,
				Description: "MIG 1g.10gb.me on an H100, 1/7 of a GPU"}},
		},
		"MIG profile unreadable and product unknown": {
			resources: map[string]int64{"nvidia.com/mig-weird": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-X999"}},
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/mig-weird", Profile: "weird", Product: "NVIDIA X999",
				Class: "mig X999 weird", Count: 1, Numerator: 1, Denominator: 7, Share: 1.0 / 7,
				Description: "MIG weird on an X999, 1/7 of a GPU (assumed 7 slices per GPU; profile slices unknown)"}},
		},
		"single strategy, MIG disabled (product without -MIG-): whole GPU": {
			resources: map[string]int64{"nvidia.com/gpu": 1},
			node: Node{Labels: map[string]string{LabelProduct: "NVIDIA-H100-80GB-HBM3", LabelMIGStrategy: "single",
				LabelReplicas: "1", LabelSharingStrategy: "none"}},
			want: []want{{Kind: KindGPU, Resource: "nvidia.com/gpu", Product: "NVIDIA H100-80GB-HBM3", Class: "gpu H100-80GB-HBM3",
				Count: 1, Numerator: 1, Denominator: 1, Share: 1, Description: "Whole H100-80GB-HBM3"}},
		},
		"time-sliced MIG without replicas label is charged as the whole instance": {
			resources: map[string]int64{"nvidia.com/mig-1g.5gb.shared": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-A100-SXM4-40GB"}},
			want: []want{{Kind: KindSharedMIG, Resource: "nvidia.com/mig-1g.5gb.shared", Profile: "1g.5gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig-shared A100-SXM4-40GB 1g.5gb", Count: 1, Numerator: 1, Denominator: 7, Share: 1.0 / 7,
				Description: "1 of 1 time-sliced shares of MIG 1g.5gb on an A100, 1/7 of a GPU (replicas unknown, charged as a whole MIG instance)"}},
		},
		"time-sliced GPUs on a node whose MIG instances are not shared": {
			resources: map[string]int64{"nvidia.com/mig-1g.5gb": 1, "nvidia.com/gpu": 1},
			node: Node{Labels: map[string]string{LabelProduct: "NVIDIA-A100-SXM4-40GB-SHARED", LabelMIGStrategy: "mixed",
				LabelReplicas: "2", LabelSharingStrategy: "time-slicing", "nvidia.com/mig-1g.5gb.replicas": "1",
				"nvidia.com/mig-1g.5gb.sharing-strategy": "none"}},
			want: []want{
				{Kind: KindShared, Resource: "nvidia.com/gpu", Product: "NVIDIA A100-SXM4-40GB", Class: "shared A100-SXM4-40GB",
					Count: 1, Numerator: 1, Denominator: 2, Share: 0.5, Description: "1 of 2 time-sliced shares of an A100"},
				{Kind: KindMIG, Resource: "nvidia.com/mig-1g.5gb", Profile: "1g.5gb", Product: "NVIDIA A100-SXM4-40GB",
					Class: "mig A100-SXM4-40GB 1g.5gb", Count: 1, Numerator: 1, Denominator: 7, Share: 1.0 / 7,
					Description: "MIG 1g.5gb on an A100, 1/7 of a GPU"},
			},
		},
		"shared without replicas label is charged whole": {
			resources: map[string]int64{"nvidia.com/gpu.shared": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "Tesla-T4-SHARED"}},
			want: []want{{Kind: KindShared, Resource: "nvidia.com/gpu.shared", Product: "Tesla-T4", Class: "shared T4",
				Count: 1, Numerator: 1, Denominator: 1, Share: 1, Description: "1 of 1 time-sliced shares of a T4 (replicas unknown, charged as a whole GPU)"}},
		},
		"no GPU": {
			resources: map[string]int64{"cpu": 1, "memory": 1 << 30, "nvidia.com/gpu": 0},
			node:      a100MIGNode(),
			want:      []want{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			allocs := Allocations(tc.resources, tc.node)
			got := make([]want, 0, len(allocs))
			for _, a := range allocs {
				got = append(got, want{Kind: a.Kind, Resource: a.Resource, Profile: a.Profile, Product: a.Product, Class: a.Class(),
					Count: a.Count, Numerator: a.Numerator, Denominator: a.Denominator, Share: a.Share(),
					Description: a.Description(), MemoryTotalBytes: a.MemoryTotalBytes})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Allocations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsGPUResource(t *testing.T) {
	cases := map[string]bool{
		"nvidia.com/gpu": true, "nvidia.com/gpu.shared": true, "nvidia.com/mig-1g.5gb": true,
		"nvidia.com/mig-1g.5gb.shared": true, "nvidia.com/mig-1g.10gb.me": true,
		"nvidia.com/mig-": false, "nvidia.com/gpu.shared.shared": false, "nvidia.com/gpux": false, "cpu": false,
		"example.com/gpu": false, "nvidia.com/vgpu": false,
	}
	for name, want := range cases {
		if got := IsGPUResource(name); got != want {
			t.Errorf("IsGPUResource(%q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzAllocations: whatever the labels say, one unit holds (0, 1] GPU, and a utilization of 100 % of one unit is
// at least what it holds and at most one GPU.
func FuzzAllocations(f *testing.F) {
	f.Add("nvidia.com/mig-3g.20gb", int64(1), "NVIDIA-A100-SXM4-40GB", "4", "time-slicing", "mixed")
	f.Add("nvidia.com/gpu", int64(1), "Tesla-T4-SHARED", "x", "mps", "")
	f.Add("nvidia.com/gpu.shared", int64(1), "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "-3", "none", "single")
	f.Fuzz(func(t *testing.T, res string, n int64, product, replicas, strategy, migStrategy string) {
		node := Node{Labels: map[string]string{LabelProduct: product, LabelReplicas: replicas, LabelSharingStrategy: strategy,
			LabelMIGStrategy: migStrategy, "nvidia.com/mig-3g.20gb.replicas": replicas}}
		for _, a := range Allocations(map[string]int64{res: n}, node) {
			u, s := a.UnitShare(), a.UtilizationScale()
			if u <= 0 || u > 1 {
				t.Fatalf("unit share %v out of (0,1] for %+v", u, a)
			}
			if s < u || s > 1 {
				t.Fatalf("utilization scale %v out of [unit share %v, 1] for %+v", s, u, a)
			}
		}
	})
}

// TestNamesKept: a class's name is built once and shared (the usage API names every unit at each tick), and no
// more than maxNames are kept, whatever labels come and go.
func TestNamesKept(t *testing.T) {
	a := Allocation{Kind: KindMIG, Product: "NVIDIA A100-SXM4-40GB", Profile: "3g.20gb", Numerator: 3, Denominator: 7, Replicas: 1}
	if c1, c2 := a.Class(), a.Class(); c1 != "mig A100-SXM4-40GB 3g.20gb" || unsafe.StringData(c1) != unsafe.StringData(c2) {
		t.Errorf("Class %q then %q: want one kept string", c1, c2)
	}
	if d1, d2 := a.Description(), a.Description(); unsafe.StringData(d1) != unsafe.StringData(d2) {
		t.Errorf("Description %q then %q: want one kept string", d1, d2)
	}
	for i := range maxNames + 10 {
		b := Allocation{Kind: KindGPU, Product: fmt.Sprintf("NVIDIA Model-%d", i)}
		if got, want := b.Class(), fmt.Sprintf("gpu Model-%d", i); got != want {
			t.Fatalf("Class %q, want %q", got, want)
		}
	}
	classNames.mu.RLock()
	n := len(classNames.m)
	classNames.mu.RUnlock()
	if n != maxNames {
		t.Errorf("%d class names kept, want the bound %d", n, maxNames)
	}
}
