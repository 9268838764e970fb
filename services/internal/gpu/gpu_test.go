package gpu

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func a100MIGNode() Node {
	return Node{Labels: map[string]string{
		LabelProduct: "NVIDIA-A100-SXM4-40GB", LabelMIGStrategy: "mixed", LabelMemoryMiB: "40960",
		"nvidia.com/mig-3g.20gb.slices.gi": "3", "nvidia.com/mig-3g.20gb.memory": "20096",
	}}
}

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
		"whole GPU": {
			resources: map[string]int64{"nvidia.com/gpu": 1, "cpu": 2},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-A100-SXM4-40GB", LabelSharingStrategy: "none", LabelReplicas: "1", LabelMemoryMiB: "40960"}},
			want: []want{{Kind: KindGPU, Resource: "nvidia.com/gpu", Product: "NVIDIA A100-SXM4-40GB", Class: "gpu A100-SXM4-40GB",
				Count: 1, Numerator: 1, Denominator: 1, Share: 1, Description: "Whole A100-SXM4-40GB", MemoryTotalBytes: 40960 << 20}},
		},
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
		"MIG single strategy: nvidia.com/gpu is a slice": {
			resources: map[string]int64{"nvidia.com/gpu": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb", LabelMIGStrategy: "single"}},
			want: []want{{Kind: KindMIG, Resource: "nvidia.com/gpu", Profile: "3g.20gb", Product: "NVIDIA A100-SXM4-40GB",
				Class: "mig A100-SXM4-40GB 3g.20gb", Count: 1, Numerator: 3, Denominator: 7, Share: 3.0 / 7,
				Description: "MIG 3g.20gb on an A100, 3/7 of a GPU"}},
		},
		"time-sliced T4 renamed resource": {
			resources: map[string]int64{"nvidia.com/gpu.shared": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "Tesla-T4-SHARED", LabelSharingStrategy: "time-slicing", LabelReplicas: "4", LabelMemoryMiB: "15360"}},
			want: []want{{Kind: KindShared, Resource: "nvidia.com/gpu.shared", Product: "Tesla-T4", Class: "shared T4",
				Count: 1, Numerator: 1, Denominator: 4, Share: 0.25, Description: "1 of 4 time-sliced shares of a T4", MemoryTotalBytes: 15360 << 20}},
		},
		"time-sliced without rename: nvidia.com/gpu is a replica": {
			resources: map[string]int64{"nvidia.com/gpu": 1},
			node:      Node{Labels: map[string]string{LabelProduct: "Tesla-T4-SHARED", LabelSharingStrategy: "time-slicing", LabelReplicas: "4"}},
			want: []want{{Kind: KindShared, Resource: "nvidia.com/gpu", Product: "Tesla-T4", Class: "shared T4",
				Count: 1, Numerator: 1, Denominator: 4, Share: 0.25, Description: "1 of 4 time-sliced shares of a T4"}},
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

func FuzzAllocations(f *testing.F) {
	f.Add("nvidia.com/mig-3g.20gb", int64(1), "NVIDIA-A100-SXM4-40GB", "4")
	f.Add("nvidia.com/gpu", int64(1), "Tesla-T4-SHARED", "x")
	f.Fuzz(func(t *testing.T, res string, n int64, product, replicas string) {
		for _, a := range Allocations(map[string]int64{res: n}, Node{Labels: map[string]string{LabelProduct: product, LabelReplicas: replicas}}) {
			if u := a.UnitShare(); u <= 0 || u > 1 {
				t.Fatalf("unit share %v out of (0,1] for %+v", u, a)
			}
		}
	})
}
