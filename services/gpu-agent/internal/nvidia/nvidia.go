//go:build cgo

package nvidia

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/dcgm"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// Options configure a Backend: the NVML handle and the Settings.
type Options struct {
	Settings
	Lib nvml.Interface
}

// Open loads libnvidia-ml (from path, or the dynamic loader's search path
// when path is empty), initialises NVML and returns the Backend.
func Open(path string, s Settings) (*Backend, error) {
	var opts []nvml.LibraryOption
	if path != "" {
		opts = append(opts, nvml.WithLibraryPath(path))
	}
	b := New(Options{Settings: s, Lib: nvml.New(opts...)})
	if err := b.Init(); err != nil {
		return nil, err
	}
	return b, nil
}

// Backend samples GPUs through NVML. Not safe for concurrent Sample calls.
type Backend struct {
	opts Options
	// lastSeen is the newest process-utilization timestamp (µs) per GPU
	// UUID, passed back to nvmlDeviceGetProcessUtilization so each sample
	// covers only the time since the previous one.
	lastSeen map[string]uint64
	// dcgmDown: the last dcgm-exporter scrape failed (logged once per outage).
	dcgmDown bool
}

// New returns a Backend. Call Init before Sample.
func New(opts Options) *Backend {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Observe == nil {
		opts.Observe = func(string, time.Duration) {}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{opts: opts, lastSeen: map[string]uint64{}}
}

// Init loads and initialises NVML.
func (b *Backend) Init() error {
	ret := b.opts.Lib.Init()
	switch {
	case ret == nvml.SUCCESS:
		return nil
	case errors.Is(ret, nvml.ERROR_LIBRARY_NOT_FOUND):
		return fmt.Errorf("nvml init: libnvidia-ml.so.1 not found: run on a node with the NVIDIA driver "+
			"(in a container, use the NVIDIA container runtime or mount the driver libraries), "+
			"or start with --backend=simulated: %w", ret)
	case errors.Is(ret, nvml.ERROR_DRIVER_NOT_LOADED):
		return fmt.Errorf("nvml init: the NVIDIA kernel driver is not loaded: %w", ret)
	case errors.Is(ret, nvml.ERROR_NO_PERMISSION):
		return fmt.Errorf("nvml init: no permission to open the NVIDIA devices: %w", ret)
	}
	return fmt.Errorf("nvml init: %w", ret)
}

// Shutdown releases NVML.
func (b *Backend) Shutdown() error {
	if ret := b.opts.Lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %w", ret)
	}
	return nil
}

// call runs one NVML call, records its cost and turns its Return into an error.
func call[T any](b *Backend, name string, f func() (T, nvml.Return)) (T, error) {
	start := b.opts.Now()
	v, ret := f()
	b.opts.Observe(name, b.opts.Now().Sub(start))
	if ret != nvml.SUCCESS {
		return v, fmt.Errorf("%s: %w", name, ret)
	}
	return v, nil
}

// Sample reads every GPU, its MIG devices and the processes on them.
func (b *Backend) Sample(ctx context.Context) (reading.Reading, error) {
	r := reading.Reading{Backend: snapshot.BackendNVML}
	n, err := call(b, "DeviceGetCount", b.opts.Lib.DeviceGetCount)
	if err != nil {
		return r, err
	}
	var migUtil map[dcgm.Key]float64
	var errs []error
	for i := range n {
		g, procs, err := b.device(i)
		if err != nil {
			// One broken GPU (e.g. fallen off the bus) must not blind the agent
			// to the others: report it as failed and keep going.
			err = fmt.Errorf("gpu %d: %w", i, err)
			errs = append(errs, err)
			g = snapshot.GPU{UUID: g.UUID, Index: i, Product: g.Product, UtilizationSource: snapshot.SourceNone,
				MIGDevices: []snapshot.MIGDevice{}, Error: err.Error()}
			r.GPUs = append(r.GPUs, g)
			continue
		}
		if g.MIGMode && b.opts.MIG != nil && migUtil == nil {
			migUtil = b.migUtilization(ctx)
		}
		for j := range g.MIGDevices {
			m := &g.MIGDevices[j]
			if v, ok := migUtil[dcgm.Key{GPUUUID: g.UUID, GPUInstanceID: m.GPUInstanceID}]; ok {
				m.UtilizationPercent, m.UtilizationSource = snapshot.Percent(v), snapshot.SourceDCGM
			}
		}
		r.GPUs = append(r.GPUs, g)
		r.Processes = append(r.Processes, procs...)
	}
	if n > 0 && len(errs) == n {
		return r, errors.Join(errs...)
	}
	for _, err := range errs {
		b.opts.Logger.Warn("gpu sample failed", "err", err)
	}
	return r, nil
}

func (b *Backend) device(i int) (snapshot.GPU, []reading.Process, error) {
	dev, err := call(b, "DeviceGetHandleByIndex", func() (nvml.Device, nvml.Return) { return b.opts.Lib.DeviceGetHandleByIndex(i) })
	if err != nil {
		return snapshot.GPU{}, nil, err
	}
	return b.gpu(i, dev)
}

func (b *Backend) migUtilization(ctx context.Context) map[dcgm.Key]float64 {
	m, err := b.opts.MIG.MIGUtilization(ctx)
	if err != nil {
		// MIG utilization is optional: report it as unknown, not the sample
		// as failed. Said once per outage, not every interval.
		log := b.opts.Logger.Debug
		if !b.dcgmDown {
			log = b.opts.Logger.Warn
		}
		log("dcgm-exporter unavailable, MIG utilization unknown", "err", err)
		b.dcgmDown = true
		return map[dcgm.Key]float64{}
	}
	if b.dcgmDown {
		b.opts.Logger.Info("dcgm-exporter answers again, MIG utilization known")
		b.dcgmDown = false
	}
	return m
}

func (b *Backend) gpu(index int, dev nvml.Device) (snapshot.GPU, []reading.Process, error) {
	g := snapshot.GPU{Index: index, UtilizationSource: snapshot.SourceNone, MIGDevices: []snapshot.MIGDevice{}}
	var err error
	if g.UUID, err = call(b, "DeviceGetUUID", dev.GetUUID); err != nil {
		return g, nil, err
	}
	if g.Product, err = call(b, "DeviceGetName", dev.GetName); err != nil {
		return g, nil, err
	}
	mem, err := call(b, "DeviceGetMemoryInfo", dev.GetMemoryInfo)
	if err != nil {
		return g, nil, err
	}
	g.MemoryTotalBytes, g.MemoryUsedBytes = mem.Total, mem.Used

	mode, err := call(b, "DeviceGetMigMode", func() (int, nvml.Return) {
		cur, _, ret := dev.GetMigMode()
		return cur, ret
	})
	switch {
	case err == nil:
		g.MIGMode = mode == nvml.DEVICE_MIG_ENABLE
	case errors.Is(err, nvml.ERROR_NOT_SUPPORTED):
		// Not a MIG-capable GPU.
	default:
		return g, nil, err
	}
	self := snapshot.Device{UUID: g.UUID, Index: index}
	if g.MIGMode {
		procs, err := b.migDevices(&g, dev)
		return g, procs, err
	}

	util, err := call(b, "DeviceGetUtilizationRates", dev.GetUtilizationRates)
	switch {
	case err == nil:
		g.UtilizationPercent, g.UtilizationSource = snapshot.Percent(float64(util.Gpu)), snapshot.SourceNVML
	case errors.Is(err, nvml.ERROR_NOT_SUPPORTED):
	default:
		return g, nil, err
	}
	infos, err := b.processes(dev)
	if err != nil {
		return g, nil, err
	}
	smUtil, supported, err := b.processUtilization(g.UUID, dev)
	if err != nil {
		return g, nil, err
	}
	procs := make([]reading.Process, 0, len(infos))
	for _, p := range infos {
		pr := reading.Process{
			PID: int(p.Pid), Device: self, MemoryUsedBytes: usedMemory(p),
			UtilizationSource: snapshot.SourceNone,
		}
		if supported {
			// No sample since lastSeen means the process ran no kernel.
			pr.SMUtilPercent, pr.UtilizationSource = snapshot.Percent(smUtil[p.Pid]), snapshot.SourceNVML
		}
		procs = append(procs, pr)
	}
	return g, procs, nil
}

// processUtilization returns the mean SM utilization per PID over the
// samples NVML took since the previous call.
func (b *Backend) processUtilization(uuid string, dev nvml.Device) (map[uint32]float64, bool, error) {
	last, ok := b.lastSeen[uuid]
	if !ok {
		// Without a timestamp NVML averages over its whole buffer; start one
		// interval back instead.
		last = uint64(max(b.opts.Now().Add(-b.opts.Interval).UnixMicro(), 0))
	}
	samples, err := call(b, "DeviceGetProcessUtilization", func() ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return dev.GetProcessUtilization(last)
	})
	switch {
	case err == nil:
	case errors.Is(err, nvml.ERROR_NOT_FOUND):
		// No samples since last: nothing ran.
		b.lastSeen[uuid] = last
		return map[uint32]float64{}, true, nil
	case errors.Is(err, nvml.ERROR_NOT_SUPPORTED):
		return nil, false, nil
	default:
		return nil, false, err
	}
	sum := map[uint32]float64{}
	count := map[uint32]float64{}
	newest := last
	for _, s := range samples {
		if s.TimeStamp <= last {
			continue
		}
		sum[s.Pid] += float64(s.SmUtil)
		count[s.Pid]++
		newest = max(newest, s.TimeStamp)
	}
	b.lastSeen[uuid] = newest
	for pid := range sum {
		sum[pid] = math.Min(sum[pid]/count[pid], 100)
	}
	return sum, true, nil
}

func (b *Backend) migDevices(g *snapshot.GPU, parent nvml.Device) ([]reading.Process, error) {
	g.UtilizationPercent, g.UtilizationSource = nil, snapshot.SourceNone
	maxCount, err := call(b, "DeviceGetMaxMigDeviceCount", parent.GetMaxMigDeviceCount)
	if err != nil {
		return nil, err
	}
	var procs []reading.Process
	for j := range maxCount {
		mdev, err := call(b, "DeviceGetMigDeviceHandleByIndex", func() (nvml.Device, nvml.Return) {
			return parent.GetMigDeviceHandleByIndex(j)
		})
		if errors.Is(err, nvml.ERROR_NOT_FOUND) || errors.Is(err, nvml.ERROR_INVALID_ARGUMENT) {
			continue // no MIG device in this slot
		}
		if err != nil {
			return nil, fmt.Errorf("mig device %d: %w", j, err)
		}
		m, mprocs, err := b.migDevice(g, mdev)
		if err != nil {
			return nil, fmt.Errorf("mig device %d: %w", j, err)
		}
		g.MIGDevices = append(g.MIGDevices, m)
		procs = append(procs, mprocs...)
	}
	return procs, nil
}

func (b *Backend) migDevice(g *snapshot.GPU, mdev nvml.Device) (snapshot.MIGDevice, []reading.Process, error) {
	// NVML has no utilization counter for MIG devices: unknown unless DCGM says.
	m := snapshot.MIGDevice{UtilizationSource: snapshot.SourceNone}
	var err error
	if m.UUID, err = call(b, "DeviceGetUUID", mdev.GetUUID); err != nil {
		return m, nil, err
	}
	if m.GPUInstanceID, err = call(b, "DeviceGetGpuInstanceId", mdev.GetGpuInstanceId); err != nil {
		return m, nil, err
	}
	if m.ComputeInstanceID, err = call(b, "DeviceGetComputeInstanceId", mdev.GetComputeInstanceId); err != nil {
		return m, nil, err
	}
	mem, err := call(b, "DeviceGetMemoryInfo", mdev.GetMemoryInfo)
	if err != nil {
		return m, nil, err
	}
	m.MemoryTotalBytes, m.MemoryUsedBytes = mem.Total, mem.Used
	attr, err := call(b, "DeviceGetAttributes", mdev.GetAttributes)
	if err != nil {
		return m, nil, err
	}
	m.Profile = ProfileName(attr, g.MemoryTotalBytes)
	infos, err := b.processes(mdev)
	if err != nil {
		return m, nil, err
	}
	dev := snapshot.Device{UUID: m.UUID, ParentUUID: g.UUID, Index: g.Index, Profile: m.Profile}
	procs := make([]reading.Process, 0, len(infos))
	for _, p := range infos {
		procs = append(procs, reading.Process{
			PID: int(p.Pid), Device: dev, MemoryUsedBytes: usedMemory(p),
			UtilizationSource: snapshot.SourceNone,
		})
	}
	return m, procs, nil
}

// ProfileName names a MIG device the way the device plugin names its
// resource ("3g.20gb", or "1c.3g.20gb" for a compute instance smaller than
// its GPU instance). Memory is rounded up to eighths of the whole GPU's
// memory, then given in whole GB, as NVIDIA's profile names are.
func ProfileName(attr nvml.DeviceAttributes, parentTotalBytes uint64) string {
	const gib = 1 << 30
	memGB := (attr.MemorySizeMB + 1023) / 1024
	if parentTotalBytes > 0 {
		frac := float64(attr.MemorySizeMB<<20) / float64(parentTotalBytes)
		frac = math.Ceil(frac*8) / 8
		totalGB := float64((parentTotalBytes + gib - 1) / gib)
		memGB = uint64(math.Round(frac * totalGB))
	}
	name := strconv.Itoa(int(attr.GpuInstanceSliceCount)) + "g." + strconv.FormatUint(memGB, 10) + "gb"
	if attr.ComputeInstanceSliceCount != 0 && attr.ComputeInstanceSliceCount < attr.GpuInstanceSliceCount {
		name = strconv.Itoa(int(attr.ComputeInstanceSliceCount)) + "c." + name
	}
	return name
}

// processes lists the compute processes on dev, including MPS clients, which
// NVML lists separately (under MPS the compute list shows only the server).
func (b *Backend) processes(dev nvml.Device) ([]nvml.ProcessInfo, error) {
	infos, err := call(b, "DeviceGetComputeRunningProcesses", dev.GetComputeRunningProcesses)
	if err != nil {
		return nil, err
	}
	mps, err := call(b, "DeviceGetMPSComputeRunningProcesses", dev.GetMPSComputeRunningProcesses)
	switch {
	case err == nil:
	case errors.Is(err, nvml.ERROR_NOT_SUPPORTED), errors.Is(err, nvml.ERROR_FUNCTION_NOT_FOUND):
		return infos, nil // no MPS on this GPU or driver
	default:
		return nil, err
	}
	seen := make(map[uint32]bool, len(infos))
	for _, p := range infos {
		seen[p.Pid] = true
	}
	for _, p := range mps {
		if !seen[p.Pid] {
			infos = append(infos, p)
			seen[p.Pid] = true
		}
	}
	return infos, nil
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE: the driver cannot report a
// process's memory (e.g. without permission); counted as 0, not 16 EiB.
const notAvailable = math.MaxUint64

func usedMemory(p nvml.ProcessInfo) uint64 {
	if p.UsedGpuMemory == notAvailable {
		return 0
	}
	return p.UsedGpuMemory
}
