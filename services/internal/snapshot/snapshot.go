// Package snapshot is the JSON document a gpu-agent serves at /api/v1/snapshot (docs/architecture.md,
// "Contract: agent snapshot"). The agent writes it and the usage API reads it: one definition keeps the two
// sides of the wire from drifting apart.
package snapshot

import "time"

// Backend is the agent's GPU backend, as it appears in the snapshot and in
// metric labels.
type Backend string

// The backends.
const (
	BackendNVML      Backend = "nvml"
	BackendSimulated Backend = "simulated"
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
	Node    string  `json:"node"`
	Backend Backend `json:"backend"`
	// SampledAt is when the agent took this sample (agent clock). After a
	// failed sample the agent keeps serving the last good one: SampledAt
	// says how old it is, Health says how the latest attempt went.
	SampledAt       time.Time     `json:"sampledAt"`
	IntervalSeconds float64       `json:"intervalSeconds"`
	Health          SamplerHealth `json:"health"`
	GPUs            []GPU         `json:"gpus"`
	Pods            []Pod         `json:"pods"`
}

// SamplerHealth is the state of the agent's sampler at the time the
// snapshot was served, which can be later than SampledAt.
type SamplerHealth struct {
	// OK is whether the latest attempt succeeded.
	OK bool `json:"ok"`
	// ConsecutiveFailures counts the failed attempts since the last success.
	ConsecutiveFailures int       `json:"consecutiveFailures"`
	LastAttemptAt       time.Time `json:"lastAttemptAt"`
	LastSuccessAt       time.Time `json:"lastSuccessAt"`
	// LastError is the latest attempt's error, empty when it succeeded.
	LastError string `json:"lastError,omitempty"`
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
