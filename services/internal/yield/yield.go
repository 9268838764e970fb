// Package yield lets a long pass over many items share one processor with request handlers that are already
// runnable: Go takes the processor from a goroutine only after 10 ms.
//
// What it does not do: with GOMAXPROCS=1 a yield does not let a request that has just arrived in. The scheduler
// takes the yielding goroutine back from the global run queue before it polls the network (Go 1.26, runtime
// findRunnable), so a new connection's data waits for the pass to end or for the runtime's own network poll
// (sysmon's, when none happened for 10 ms). GOMAXPROCS=1 comes only from a CPU affinity of one CPU (taskset, the
// kubelet's static CPU manager): Go gives a container limited to one CPU two processors, and the idle one takes
// arrivals.
package yield

import "runtime"

// Every is how many items a pass handles between two yields of the processor.
const Every = 256

// After gives up the processor after every Every-th item; i counts the items handled, from 0.
func After(i int) {
	if i%Every == Every-1 {
		runtime.Gosched()
	}
}
