package quota

import (
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// mustPolicy decodes a policy written in a test.
func mustPolicy(t testing.TB, yaml string) *Policy {
	t.Helper()
	var p Policy
	if err := policy.Decode("test.yaml", []byte(yaml), &p); err != nil {
		t.Fatalf("policy:\n%v", err)
	}
	return &p
}

// Allocations as the vocabulary describes them (gpu.Allocations on real node labels gives the same values;
// services/internal/gpu tests that).
const (
	a100 = "NVIDIA A100-SXM4-40GB"
	h100 = "NVIDIA H100-80GB-HBM3"
	t4   = "Tesla-T4"
)

func whole(product string, count int64) gpu.Allocation {
	return gpu.Allocation{Kind: gpu.KindGPU, Resource: gpu.ResourceGPU, Count: count, Product: product,
		Numerator: 1, Denominator: 1, Replicas: 1}
}

func mig(profile string, g int64) gpu.Allocation {
	return gpu.Allocation{Kind: gpu.KindMIG, Resource: gpu.MIGResource(profile), Count: 1, Product: a100,
		Profile: profile, Numerator: g, Denominator: 7, Replicas: 1}
}

func timeSliced(product string, replicas int64) gpu.Allocation {
	return gpu.Allocation{Kind: gpu.KindShared, Resource: gpu.ResourceGPUShared, Count: 1, Product: product,
		Numerator: 1, Denominator: replicas, Replicas: replicas}
}

func mps(product string, replicas int64) gpu.Allocation {
	a := timeSliced(product, replicas)
	a.Kind = gpu.KindMPS
	return a
}

func allocs(as ...gpu.Allocation) []gpu.Allocation { return as }
