//go:build cgo

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/nvidia"
	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
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

// migServer is the DGX A100 mock with GPU 0 in MIG mode holding one 3g.20gb
// instance (GPU instance 1) that runs nothing.
func migServer() *dgxa100.Server {
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 5}, nvml.SUCCESS }
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
		dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		if i != 0 {
			continue
		}
		dev.MigMode = nvml.DEVICE_MIG_ENABLE
		mig := &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return "MIG-hang-test", nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return 1, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
			GetMemoryInfoFunc:        func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 20096 << 20}, nvml.SUCCESS },
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				return nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 3, MemorySizeMB: 20096}, nvml.SUCCESS
			},
			GetComputeRunningProcessesFunc:    func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
			GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED },
		}
		dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
		dev.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
			if j == 0 {
				return mig, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	}
	return s
}

// A dcgm-exporter that accepts the connection and never answers must not
// hold up the sample: the scrape gives up at its own deadline, the DCGM
// timeout lowered to half the 1 s interval, the sample completes and the MIG
// instance's utilization is unknown.
func TestRunDCGMExporterHangs(t *testing.T) {
	hang := make(chan struct{})
	dcgmSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); dcgmSrv.Close() })

	// The caller's context ends only by cancellation, and only if the sample
	// hangs on: a deadline error can then be the scrape's own alone.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer time.AfterFunc(time.Minute, cancel).Stop()
	s := migServer()
	var out bytes.Buffer
	var logs logtest.Buffer
	err := Run(ctx, Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Node:   "bare", Backend: "nvml", Interval: time.Second, SnapshotAuth: AuthNone, DCGMExporterURL: dcgmSrv.URL + "/metrics",
		OpenNVML: func(_ string, set nvidia.Settings) (*nvidia.Backend, error) {
			b := nvidia.New(nvidia.Options{Settings: set, Lib: s})
			return b, b.Init()
		},
		Proc: fstest.MapFS{}, Bench: 1, Out: &out,
	})
	if err != nil || ctx.Err() != nil {
		t.Fatalf("Run = %v, caller's context %v; want the sample done while the caller waits\n%s", err, ctx.Err(), logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "dcgm-exporter unavailable, MIG utilization unknown") ||
		!strings.Contains(l, "(timeout 500ms)") || !strings.Contains(l, "context deadline exceeded") {
		t.Errorf("want the scrape given up at its own 500ms deadline in the log:\n%s", l)
	}
	dec := json.NewDecoder(&out)
	var snap struct {
		GPUs []struct {
			MIGDevices []struct {
				UUID               string   `json:"uuid"`
				UtilizationPercent *float64 `json:"utilizationPercent"`
				UtilizationSource  string   `json:"utilizationSource"`
			} `json:"migDevices"`
		} `json:"gpus"`
	}
	if err := dec.Decode(&snap); err != nil {
		t.Fatalf("decode the snapshot: %v\n%s", err, out.String())
	}
	if len(snap.GPUs) == 0 || len(snap.GPUs[0].MIGDevices) != 1 {
		t.Fatalf("want GPU 0 with one MIG device:\n%s", out.String())
	}
	if m := snap.GPUs[0].MIGDevices[0]; m.UtilizationPercent != nil || m.UtilizationSource != "none" {
		t.Errorf("MIG utilization = %v/%s, want null/none", m.UtilizationPercent, m.UtilizationSource)
	}
}
