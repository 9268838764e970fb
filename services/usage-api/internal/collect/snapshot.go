// Package collect polls the gpu-agents' snapshots. Agents are found through the Kubernetes API (pods labelled
// app.kubernetes.io/component=gpu-agent); their snapshot JSON is the contract in docs/architecture.md, decoded
// into this package's own types so that the usage API does not depend on the agent's code.
package collect

import "time"

// Snapshot is an agent's GET /api/v1/snapshot answer.
type Snapshot struct {
	Node            string    `json:"node"`
	Backend         string    `json:"backend"` // nvml | simulated
	SampledAt       time.Time `json:"sampledAt"`
	IntervalSeconds float64   `json:"intervalSeconds"`
	GPUs            []GPU     `json:"gpus"`
	Pods            []Pod     `json:"pods"`
}

// GPU is a physical GPU.
type GPU struct {
	UUID               string      `json:"uuid"`
	Index              int         `json:"index"`
	Product            string      `json:"product"`
	MemoryTotalBytes   uint64      `json:"memoryTotalBytes"`
	MemoryUsedBytes    uint64      `json:"memoryUsedBytes"`
	UtilizationPercent *float64    `json:"utilizationPercent"`
	UtilizationSource  string      `json:"utilizationSource,omitempty"`
	MIGMode            bool        `json:"migMode"`
	MIGDevices         []MIGDevice `json:"migDevices"`
}

// MIGDevice is a MIG instance of a GPU.
type MIGDevice struct {
	UUID               string   `json:"uuid"`
	Profile            string   `json:"profile"`
	MemoryTotalBytes   uint64   `json:"memoryTotalBytes"`
	MemoryUsedBytes    uint64   `json:"memoryUsedBytes"`
	UtilizationPercent *float64 `json:"utilizationPercent"`
	UtilizationSource  string   `json:"utilizationSource"` // none | dcgm | simulated
}

// Pod is what the agent attributed to one pod.
type Pod struct {
	UID               string    `json:"uid"`
	Namespace         string    `json:"namespace"`
	Name              string    `json:"name"`
	User              string    `json:"user"`
	Server            string    `json:"server"`
	Devices           []Device  `json:"devices"`
	Processes         []Process `json:"processes"`
	SMUtilPercent     *float64  `json:"smUtilPercent"`
	UtilizationSource string    `json:"utilizationSource"` // nvml | dcgm | simulated | none
	MemoryUsedBytes   uint64    `json:"memoryUsedBytes"`
}

// Device is a GPU or MIG device assigned to a pod.
type Device struct {
	UUID       string `json:"uuid"`
	ParentUUID string `json:"parentUUID,omitempty"`
	Resource   string `json:"resource,omitempty"`
}

// Process is a GPU process of a pod.
type Process struct {
	PID             int      `json:"pid"`
	DeviceUUID      string   `json:"deviceUUID"`
	MemoryUsedBytes uint64   `json:"memoryUsedBytes"`
	SMUtilPercent   *float64 `json:"smUtilPercent"`
}
