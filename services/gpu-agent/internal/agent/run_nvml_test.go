//go:build cgo

package agent

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/nvidia"
)

// TestRunBenchDGXA100 runs --bench against the DGX A100 mock without a
// cluster: the snapshot and the per-call cost table come out.
func TestRunBenchDGXA100(t *testing.T) {
	s := dgxa100.New()
	for _, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 5}, nvml.SUCCESS }
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: 1 << 20}}, nvml.SUCCESS
		}
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
		dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	}
	var out bytes.Buffer
	err := Run(context.Background(), Options{
		Node: "bare", Backend: "nvml", Interval: time.Millisecond, SnapshotAuth: AuthNone,
		OpenNVML: func(_ string, set nvidia.Settings) (*nvidia.Backend, error) {
			b := nvidia.New(nvidia.Options{Settings: set, Lib: s})
			return b, b.Init()
		},
		Proc: fstest.MapFS{"1/cgroup": {Data: []byte("0::/init.scope\n")}}, Bench: 3, Out: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"backend": "nvml"`, "DeviceGetProcessUtilization", "(whole sample)", "of one core"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, out.String())
		}
	}
	if i := strings.Index(out.String(), "call "); i >= 0 {
		t.Logf("per-call table:\n%s", out.String()[i:])
	}
}
