// Package snapshot holds the JSON document the agent serves at /api/v1/snapshot
// (docs/architecture.md, "Contract: agent snapshot"). Both backends fill it.
package snapshot

import "time"

// Backend names as they appear in the snapshot and in metric labels.
const (
	BackendNVML      = "nvml"
	BackendSimulated = "simulated"
)

// Utilization sources: where a utilization number comes from.
const (
	SourceNVML      = "nvml"
	SourceDCGM      = "dcgm"
	SourceSimulated = "simulated"
	// SourceNone means no component could measure it (MIG without DCGM):
	// the number is null rather than a guess.
	SourceNone = "none"
)

// Snapshot is one sample of a node.
type Snapshot struct {
	Node            string    `json:"node"`
	Backend         string    `json:"backend"`
	SampledAt       time.Time `json:"sampledAt"`
	IntervalSeconds float64   `json:"intervalSeconds"`
	GPUs            []GPU     `json:"gpus"`
	Pods            []Pod     `json:"pods"`
}

// GPU is a physical (or emulated) GPU.
type GPU struct {
	UUID               string   `json:"uuid"`
	Index              int      `json:"index"`
	Product            string   `json:"product"`
	MemoryTotalBytes   uint64   `json:"memoryTotalBytes"`
	MemoryUsedBytes    uint64   `json:"memoryUsedBytes"`
	UtilizationPercent *float64 `json:"utilizationPercent"`
	// UtilizationSource is an addition to the contract: "nvml", "simulated",
	// or "none" when UtilizationPercent is null.
	UtilizationSource string      `json:"utilizationSource"`
	MIGMode           bool        `json:"migMode"`
	MIGDevices        []MIGDevice `json:"migDevices"`
	// Error is an addition to the contract: set when this GPU could not be
	// read in this sample (the other GPUs still were); its numbers are then
	// absent, and so are its processes.
	Error string `json:"error,omitempty"`
}

// MIGDevice is one MIG instance (GPU instance + compute instance).
type MIGDevice struct {
	UUID               string   `json:"uuid"`
	Profile            string   `json:"profile"`
	GPUInstanceID      int      `json:"gpuInstanceId"`
	ComputeInstanceID  int      `json:"computeInstanceId"`
	MemoryTotalBytes   uint64   `json:"memoryTotalBytes"`
	MemoryUsedBytes    uint64   `json:"memoryUsedBytes"`
	UtilizationPercent *float64 `json:"utilizationPercent"`
	UtilizationSource  string   `json:"utilizationSource"`
}

// Pod is a pod on this node that holds or uses a GPU.
type Pod struct {
	UID       string    `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	User      string    `json:"user"`
	Server    string    `json:"server"`
	Devices   []Device  `json:"devices"`
	Processes []Process `json:"processes"`
	// SMUtilPercent is the mean over the pod's devices of what the pod uses
	// on each (0-100), null when unknown.
	SMUtilPercent     *float64 `json:"smUtilPercent"`
	UtilizationSource string   `json:"utilizationSource"`
	MemoryUsedBytes   uint64   `json:"memoryUsedBytes"`
}

// Device is a device a pod holds or runs on.
type Device struct {
	UUID       string `json:"uuid"`
	ParentUUID string `json:"parentUUID,omitempty"`
	Resource   string `json:"resource,omitempty"`
	// Index and Profile are additions to the contract so consumers (and the
	// metrics) can label a device without joining on the GPU list.
	Index   int    `json:"index"`
	Profile string `json:"profile,omitempty"`
	// SMUtilPercent and MemoryUsedBytes are additions to the contract: what
	// this pod uses on this device.
	SMUtilPercent     *float64 `json:"smUtilPercent"`
	UtilizationSource string   `json:"utilizationSource"`
	MemoryUsedBytes   uint64   `json:"memoryUsedBytes"`
}

// Process is a process running on a GPU.
type Process struct {
	PID             int      `json:"pid"`
	DeviceUUID      string   `json:"deviceUUID"`
	MemoryUsedBytes uint64   `json:"memoryUsedBytes"`
	SMUtilPercent   *float64 `json:"smUtilPercent"`
}

// Percent returns a pointer to v, for the nullable percent fields.
func Percent(v float64) *float64 { return &v }

// Reading is what a backend measured in one sample, before the agent
// attributes processes to pods.
type Reading struct {
	Backend   string
	GPUs      []GPU
	Processes []ProcessReading
	// Holdings lists the devices each pod (by UID) holds, when the backend
	// knows it (the simulated backend assigns them). NVML alone does not
	// know which device an idle pod holds.
	Holdings map[string][]Device
}

// ProcessReading is one process on one device.
type ProcessReading struct {
	PID int
	// PodUID is set when the backend knows the pod (simulated); otherwise
	// the agent finds it from /proc/<pid>/cgroup.
	PodUID          string
	Device          Device
	MemoryUsedBytes uint64
	SMUtilPercent   *float64
	// UtilizationSource says where SMUtilPercent comes from, "none" when nil.
	UtilizationSource string
}
