package pending

import (
	"strings"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// schedulerVerdict is what the scheduler's Unschedulable message says ran short. The message is the
// scheduler's own text, per node ("0/4 nodes are available: 1 Insufficient memory, 1 Insufficient
// nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. preemption: ..."); it is read only to
// classify and never shown.
type schedulerVerdict struct {
	cpu, memory, gpu bool
}

func parseScheduler(msg string) schedulerVerdict {
	var v schedulerVerdict
	// Only the part before "preemption:" describes the nodes; the rest repeats it for preemption.
	if i := strings.Index(msg, "preemption:"); i >= 0 {
		msg = msg[:i]
	}
	for {
		i := strings.Index(msg, "Insufficient ")
		if i < 0 {
			return v
		}
		msg = msg[i+len("Insufficient "):]
		end := strings.IndexAny(msg, ", ")
		if end < 0 {
			end = len(msg)
		}
		switch name := strings.TrimRight(msg[:end], "."); {
		case name == "cpu":
			v.cpu = true
		case name == "memory":
			v.memory = true
		case gpu.IsGPUResource(name):
			v.gpu = true
		}
		msg = msg[end:]
	}
}
