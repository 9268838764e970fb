//go:build cgo

package nvidia

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/dcgm"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

var now = time.Date(2026, 11, 22, 10, 0, 5, 0, time.UTC)

func gpuUUID(i int) string { return fmt.Sprintf("GPU-00000000-0000-0000-0000-00000000000%d", i) }

// server returns the DGX A100 mock with deterministic UUIDs. The mock leaves
// utilization, process and MIG-handle calls unset; each GPU gets them here:
// no processes and 0 % unless a test sets otherwise.
func server(t *testing.T) *dgxa100.Server {
	t.Helper()
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.UUID = gpuUUID(i)
		dev.MemoryInfo = nvml.Memory{Total: 42949672960, Used: 1 << 30}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.SUCCESS }
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return nil, nvml.ERROR_NOT_FOUND
		}
	}
	return s
}

// enableMIG puts a GPU in MIG mode and creates one GPU instance with one
// full compute instance per given GPU-instance profile, using the mock's MIG
// profiles, and exposes them as MIG device handles (which the mock lacks).
func enableMIG(t *testing.T, dev *dgxa100.Device, procs map[int][]nvml.ProcessInfo, profiles ...int) {
	t.Helper()
	if _, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	var handles []nvml.Device
	for slot, profile := range profiles {
		giInfo, ret := dev.GetGpuInstanceProfileInfo(profile)
		if ret != nvml.SUCCESS {
			t.Fatalf("profile %d: %v", profile, ret)
		}
		gi, _ := dev.CreateGpuInstance(&giInfo)
		giID := int(gi.(*dgxa100.GpuInstance).Info.Id) + 1 // real GI IDs start at 1
		ciProfile := map[uint32]int{1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
			3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, 7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE}[giInfo.SliceCount]
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			t.Fatalf("ci profile for %d slices: %v", giInfo.SliceCount, ret)
		}
		ci, _ := gi.CreateComputeInstance(&ciInfo)
		ciID := int(ci.(*dgxa100.ComputeInstance).Info.Id)
		uuid := fmt.Sprintf("MIG-00000000-0000-0000-0000-0000000000%d%d", dev.Index, slot)
		p := procs[slot]
		handles = append(handles, &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return giID, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ciID, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: giInfo.MemorySizeMB << 20, Used: 1 << 20}, nvml.SUCCESS
			},
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				return nvml.DeviceAttributes{GpuInstanceSliceCount: giInfo.SliceCount, ComputeInstanceSliceCount: ciInfo.SliceCount,
					MemorySizeMB: giInfo.MemorySizeMB, MultiprocessorCount: giInfo.MultiprocessorCount}, nvml.SUCCESS
			},
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return p, nvml.SUCCESS },
			GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				return nil, nvml.ERROR_FUNCTION_NOT_FOUND // an older driver
			},
		})
	}
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < len(handles) {
			return handles[i], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
}

type fakeDCGM struct {
	util map[dcgm.Key]float64
	err  error
}

func (f fakeDCGM) MIGUtilization(context.Context) (map[dcgm.Key]float64, error) { return f.util, f.err }

func newBackend(t *testing.T, s *dgxa100.Server, mig MIGUtilizationSource, calls map[string]int) *Backend {
	t.Helper()
	b := New(Options{Lib: s, Settings: Settings{Now: func() time.Time { return now }, Interval: 5 * time.Second, MIG: mig,
		Observe: func(call string, _ time.Duration) {
			if calls != nil {
				calls[call]++
			}
		}}})
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSampleFullGPU(t *testing.T) {
	s := server(t)
	d0 := s.Devices[0].(*dgxa100.Device)
	d0.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 37}, nvml.SUCCESS }
	d0.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1 << 20}, {Pid: 4343, UsedGpuMemory: 2 << 20}}, nvml.SUCCESS
	}
	start := uint64(now.Add(-5 * time.Second).UnixMicro())
	var gotLastSeen []uint64
	d0.GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		gotLastSeen = append(gotLastSeen, lastSeen)
		if len(gotLastSeen) > 1 {
			return nil, nvml.ERROR_NOT_FOUND // nothing ran since
		}
		return []nvml.ProcessUtilizationSample{
			{Pid: 4242, TimeStamp: start + 1_000_000, SmUtil: 40},
			{Pid: 4242, TimeStamp: start + 2_000_000, SmUtil: 60},
			{Pid: 4242, TimeStamp: start - 1, SmUtil: 99}, // older than the window: ignored
		}, nvml.SUCCESS
	}
	calls := map[string]int{}
	b := newBackend(t, s, nil, calls)

	r, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GPUs) != 8 {
		t.Fatalf("got %d GPUs, want 8", len(r.GPUs))
	}
	wantGPU := snapshot.GPU{
		UUID: gpuUUID(0), Index: 0, Product: "Mock NVIDIA A100-SXM4-40GB",
		MemoryTotalBytes: 42949672960, MemoryUsedBytes: 1 << 30,
		UtilizationPercent: snapshot.Percent(37), UtilizationSource: "nvml", MIGDevices: []snapshot.MIGDevice{},
	}
	if diff := cmp.Diff(wantGPU, r.GPUs[0]); diff != "" {
		t.Errorf("GPU 0 (-want +got):\n%s", diff)
	}
	dev := snapshot.Device{UUID: gpuUUID(0)}
	wantProcs := []reading.Process{
		{PID: 4242, Device: dev, MemoryUsedBytes: 1 << 20, SMUtilPercent: snapshot.Percent(50), UtilizationSource: "nvml"},
		{PID: 4343, Device: dev, MemoryUsedBytes: 2 << 20, SMUtilPercent: snapshot.Percent(0), UtilizationSource: "nvml"},
	}
	if diff := cmp.Diff(wantProcs, r.Processes); diff != "" {
		t.Errorf("processes (-want +got):\n%s", diff)
	}

	r, err = b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{start, start + 2_000_000}, gotLastSeen); diff != "" {
		t.Errorf("lastSeenTimeStamp passed to GetProcessUtilization (-want +got):\n%s", diff)
	}
	if got := *r.Processes[0].SMUtilPercent; got != 0 {
		t.Errorf("second sample with NOT_FOUND: util = %v, want 0", got)
	}
	if calls["DeviceGetProcessUtilization"] != 16 || calls["DeviceGetCount"] != 2 {
		t.Errorf("observed calls = %v", calls)
	}
}

// Under MPS the clients are listed by a separate call; the server may also
// appear in the plain compute list.
func TestSampleMPSClients(t *testing.T) {
	s := server(t)
	d0 := s.Devices[0].(*dgxa100.Device)
	d0.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 10, UsedGpuMemory: 1}}, nvml.SUCCESS
	}
	d0.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 10, UsedGpuMemory: 1}, {Pid: 11, UsedGpuMemory: 2}, {Pid: 12, UsedGpuMemory: math.MaxUint64}}, nvml.SUCCESS
	}
	r, err := newBackend(t, s, nil, nil).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, p := range r.Processes {
		pids = append(pids, fmt.Sprintf("%d:%d", p.PID, p.MemoryUsedBytes))
	}
	// 12's memory is NVML_VALUE_NOT_AVAILABLE: 0, not 16 EiB.
	if diff := cmp.Diff([]string{"10:1", "11:2", "12:0"}, pids); diff != "" {
		t.Errorf("processes (-want +got):\n%s", diff)
	}
}

func TestSampleProcessUtilizationNotSupported(t *testing.T) {
	s := server(t)
	d0 := s.Devices[0].(*dgxa100.Device)
	d0.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 1}}, nvml.SUCCESS
	}
	d0.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	r, err := newBackend(t, s, nil, nil).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []reading.Process{{PID: 7, Device: snapshot.Device{UUID: gpuUUID(0)}, MemoryUsedBytes: 1, UtilizationSource: "none"}}
	if diff := cmp.Diff(want, r.Processes); diff != "" {
		t.Errorf("processes (-want +got):\n%s", diff)
	}
}

func TestSampleMIG(t *testing.T) {
	cases := map[string]struct {
		dcgm       MIGUtilizationSource
		wantUtil   [2]*float64
		wantSource [2]string
	}{
		"no dcgm: null and none": {
			wantSource: [2]string{"none", "none"},
		},
		"dcgm for one instance": {
			dcgm:       fakeDCGM{util: map[dcgm.Key]float64{{GPUUUID: gpuUUID(1), GPUInstanceID: 1}: 49}},
			wantUtil:   [2]*float64{snapshot.Percent(49), nil},
			wantSource: [2]string{"dcgm", "none"},
		},
		"dcgm down: unknown, sample still succeeds": {
			dcgm:       fakeDCGM{err: errors.New("connection refused")},
			wantSource: [2]string{"none", "none"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := server(t)
			d1 := s.Devices[1].(*dgxa100.Device)
			enableMIG(t, d1, map[int][]nvml.ProcessInfo{0: {{Pid: 5000, UsedGpuMemory: 3 << 20}}},
				nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			r, err := newBackend(t, s, tc.dcgm, nil).Sample(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			g := r.GPUs[1]
			if !g.MIGMode || g.UtilizationPercent != nil || g.UtilizationSource != "none" {
				t.Errorf("MIG GPU: migMode=%v util=%v source=%q, want true, nil, none", g.MIGMode, g.UtilizationPercent, g.UtilizationSource)
			}
			want := []snapshot.MIGDevice{
				{UUID: "MIG-00000000-0000-0000-0000-000000000010", Profile: "3g.20gb", GPUInstanceID: 1, ComputeInstanceID: 0,
					MemoryTotalBytes: 19968 << 20, MemoryUsedBytes: 1 << 20, UtilizationPercent: tc.wantUtil[0], UtilizationSource: tc.wantSource[0]},
				{UUID: "MIG-00000000-0000-0000-0000-000000000011", Profile: "1g.5gb", GPUInstanceID: 2, ComputeInstanceID: 0,
					MemoryTotalBytes: 4864 << 20, MemoryUsedBytes: 1 << 20, UtilizationPercent: tc.wantUtil[1], UtilizationSource: tc.wantSource[1]},
			}
			if diff := cmp.Diff(want, g.MIGDevices); diff != "" {
				t.Errorf("MIG devices (-want +got):\n%s", diff)
			}
			wantProcs := []reading.Process{{
				PID: 5000, MemoryUsedBytes: 3 << 20, UtilizationSource: "none",
				Device: snapshot.Device{UUID: "MIG-00000000-0000-0000-0000-000000000010", ParentUUID: gpuUUID(1), Index: 1, Profile: "3g.20gb"},
			}}
			if diff := cmp.Diff(wantProcs, r.Processes); diff != "" {
				t.Errorf("processes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSampleErrors(t *testing.T) {
	lost := func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }

	// One GPU lost: reported as failed, the other seven still sampled.
	s := server(t)
	s.Devices[3].(*dgxa100.Device).GetComputeRunningProcessesFunc = lost
	r, err := newBackend(t, s, nil, nil).Sample(context.Background())
	if err != nil {
		t.Fatalf("one lost GPU failed the whole sample: %v", err)
	}
	g := r.GPUs[3]
	if len(r.GPUs) != 8 || !strings.Contains(g.Error, "gpu 3") || !strings.Contains(g.Error, "ERROR_GPU_IS_LOST") ||
		g.UUID != gpuUUID(3) || g.UtilizationPercent != nil || g.UtilizationSource != "none" {
		t.Errorf("lost GPU = %+v, want it listed with its error and no numbers", g)
	}
	if r.GPUs[4].Error != "" || r.GPUs[4].UtilizationPercent == nil {
		t.Errorf("GPU 4 = %+v, want it sampled", r.GPUs[4])
	}

	// Every GPU lost: the sample fails.
	for _, d := range s.Devices {
		d.(*dgxa100.Device).GetComputeRunningProcessesFunc = lost
	}
	_, err = newBackend(t, s, nil, nil).Sample(context.Background())
	if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Errorf("all GPUs lost: error = %v, want ERROR_GPU_IS_LOST", err)
	}
}

func TestInitErrors(t *testing.T) {
	cases := map[string]struct {
		ret  nvml.Return
		want string
	}{
		"library missing": {ret: nvml.ERROR_LIBRARY_NOT_FOUND, want: "--backend=simulated"},
		"driver":          {ret: nvml.ERROR_DRIVER_NOT_LOADED, want: "driver is not loaded"},
		"other":           {ret: nvml.ERROR_UNKNOWN, want: "nvml init"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lib := &mock.Interface{InitFunc: func() nvml.Return { return tc.ret }}
			err := New(Options{Lib: lib}).Init()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.ret) {
				t.Errorf("Init() = %v, want an error wrapping %v that says %q", err, tc.ret, tc.want)
			}
		})
	}
}

// The real library, absent here, must fail Init with the clear message, not crash.
func TestInitRealLibraryMissing(t *testing.T) {
	_, err := Open("/nonexistent/libnvidia-ml.so.1", Settings{})
	if err == nil || !strings.Contains(err.Error(), "--backend=simulated") {
		t.Errorf("Init() with no library = %v, want the not-found message", err)
	}
}

func TestProfileName(t *testing.T) {
	const a100_40 = 42949672960
	const a100_80 = 85899345920
	cases := map[string]struct {
		attr   nvml.DeviceAttributes
		parent uint64
		want   string
	}{
		"1g.5gb":     {nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}, a100_40, "1g.5gb"},
		"2g.10gb":    {nvml.DeviceAttributes{GpuInstanceSliceCount: 2, ComputeInstanceSliceCount: 2, MemorySizeMB: 9856}, a100_40, "2g.10gb"},
		"3g.20gb":    {nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 3, MemorySizeMB: 20096}, a100_40, "3g.20gb"},
		"7g.40gb":    {nvml.DeviceAttributes{GpuInstanceSliceCount: 7, ComputeInstanceSliceCount: 7, MemorySizeMB: 40192}, a100_40, "7g.40gb"},
		"1c.3g.20gb": {nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 1, MemorySizeMB: 20096}, a100_40, "1c.3g.20gb"},
		"80GB 1g":    {nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 9728}, a100_80, "1g.10gb"},
		"80GB 3g":    {nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 3, MemorySizeMB: 40192}, a100_80, "3g.40gb"},
		"no parent":  {nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}, 0, "1g.5gb"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ProfileName(tc.attr, tc.parent); got != tc.want {
				t.Errorf("ProfileName = %q, want %q", got, tc.want)
			}
		})
	}
}
