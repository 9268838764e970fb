package admit

import "testing"

// TestResolveKey: resolve's cache key names the GPU resources asked for (counts above 0) and the whole selector,
// sorted, so that requests with the same content share an entry and any difference in content does not.
func TestResolveKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  map[string]int64
		sel  map[string]string
		want string
	}{
		{name: "nothing", want: "|"},
		{name: "CPU only", res: map[string]int64{"cpu": 2, "memory": 1 << 30}, want: "|"},
		{name: "a zero count is not asked", res: map[string]int64{"nvidia.com/gpu": 0}, want: "|"},
		{name: "whole GPU", res: map[string]int64{"nvidia.com/gpu": 2, "cpu": 4},
			sel:  map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
			want: "nvidia.com/gpu=2;|nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3;"},
		{name: "sorted", res: map[string]int64{"nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-1g.5gb": 2},
			sel:  map[string]string{"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
			want: "nvidia.com/mig-1g.5gb=2;nvidia.com/mig-3g.20gb=1;|nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB;nvidia.com/mig.strategy=mixed;"},
		{name: "every label of the selector", res: map[string]int64{"nvidia.com/gpu.shared": 1},
			sel:  map[string]string{"zone": "a", "nvidia.com/gpu.product": "Tesla-T4-SHARED", "a": ""},
			want: "nvidia.com/gpu.shared=1;|a=;nvidia.com/gpu.product=Tesla-T4-SHARED;zone=a;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendResolveKey(nil, tc.res, tc.sel)); got != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
		})
	}
}
