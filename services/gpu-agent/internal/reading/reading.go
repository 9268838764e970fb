// Package reading is what a backend (nvidia, sim) measured in one sample,
// before the agent attributes processes to pods and builds the snapshot. It
// sits apart from package agent so that the backends, which agent imports,
// can name it without an import cycle.
package reading

import "github.com/gpuhub/gpuhub/services/internal/snapshot"

// Reading is one sample of a backend.
type Reading struct {
	Backend   snapshot.Backend
	GPUs      []snapshot.GPU
	Processes []Process
	// Holdings lists the devices each pod (by UID) holds, when the backend
	// knows it (the simulated backend assigns them). NVML alone does not
	// know which device an idle pod holds.
	Holdings map[string][]snapshot.Device
}

// Process is one process on one device.
type Process struct {
	PID int
	// PodUID is set when the backend knows the pod (simulated); otherwise
	// the agent finds it from /proc/<pid>/cgroup.
	PodUID          string
	Device          snapshot.Device
	MemoryUsedBytes uint64
	SMUtilPercent   *float64
	// UtilizationSource says where SMUtilPercent comes from, "none" when nil.
	UtilizationSource string
}
