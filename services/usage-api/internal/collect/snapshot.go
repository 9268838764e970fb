// Package collect polls the gpu-agents' snapshots. Agents are found through the Kubernetes API (pods labelled
// app.kubernetes.io/component=gpu-agent); their snapshot JSON is the contract in docs/architecture.md, defined
// once in services/internal/snapshot (the agent writes it with the same types), not in the agent's code.
package collect

import "github.com/gpuhub/gpuhub/services/internal/snapshot"

// The snapshot contract's types, under the names this package's callers use.
type (
	Snapshot  = snapshot.Snapshot
	GPU       = snapshot.GPU
	MIGDevice = snapshot.MIGDevice
	Pod       = snapshot.Pod
	Device    = snapshot.Device
	Process   = snapshot.Process
)
