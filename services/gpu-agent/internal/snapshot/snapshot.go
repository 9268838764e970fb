// Package snapshot is what the agent's backends measure (Reading) and, through aliases, the wire document the
// agent serves, defined once in services/internal/snapshot for the agent and the usage API.
package snapshot

import wire "github.com/gpuhub/gpuhub/services/internal/snapshot"

// The wire types and names of the snapshot contract.
type (
	Snapshot  = wire.Snapshot
	GPU       = wire.GPU
	MIGDevice = wire.MIGDevice
	Pod       = wire.Pod
	Device    = wire.Device
	Process   = wire.Process
)

// Backend names and utilization sources, as in the contract.
const (
	BackendNVML      = wire.BackendNVML
	BackendSimulated = wire.BackendSimulated
	SourceNVML       = wire.SourceNVML
	SourceDCGM       = wire.SourceDCGM
	SourceSimulated  = wire.SourceSimulated
	SourceNone       = wire.SourceNone
)

// Percent returns a pointer to v, for the nullable percent fields.
func Percent(v float64) *float64 { return wire.Percent(v) }

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
