package agent

import (
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

func TestResourceFor(t *testing.T) {
	cases := map[string]struct {
		dev       snapshot.Device
		requested map[string]int64
		want      string
	}{
		"MIG instance by its profile": {
			dev:       snapshot.Device{UUID: "MIG-1", Profile: "1g.5gb"},
			requested: map[string]int64{"nvidia.com/mig-1g.5gb": 1, "nvidia.com/mig-3g.20gb": 1},
			want:      "nvidia.com/mig-1g.5gb",
		},
		"time-sliced MIG instance, renamed": {
			dev:       snapshot.Device{UUID: "MIG-1", Profile: "1g.5gb"},
			requested: map[string]int64{"nvidia.com/mig-1g.5gb.shared": 1, "nvidia.com/mig-3g.20gb": 1},
			want:      "nvidia.com/mig-1g.5gb.shared",
		},
		"the only resource": {
			dev:       snapshot.Device{UUID: "GPU-1"},
			requested: map[string]int64{"nvidia.com/gpu.shared": 1},
			want:      "nvidia.com/gpu.shared",
		},
		"cannot tell": {
			dev:       snapshot.Device{UUID: "GPU-1"},
			requested: map[string]int64{"nvidia.com/gpu": 1, "nvidia.com/mig-1g.5gb": 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := resourceFor(tc.dev, tc.requested); got != tc.want {
				t.Errorf("resourceFor = %q, want %q", got, tc.want)
			}
		})
	}
}
