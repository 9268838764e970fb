// Package yield lets a long pass over many items share the processor with request handlers: Go takes the
// processor from a goroutine only after 10 ms, and on one processor a request that arrives during a pass would
// otherwise wait for it.
//
// With more than one processor (GOMAXPROCS > 1: any machine with two CPUs, and any container with a CPU limit,
// for which Go picks at least two) an idle processor takes arrivals, and a yield only lets already runnable
// handlers go first (runtime.Gosched).
//
// With GOMAXPROCS=1 (a CPU affinity of one CPU: taskset, the kubelet's static CPU manager) that is not enough:
// the scheduler takes the yielding goroutine back from the global run queue before it polls the network (Go
// 1.26, runtime findRunnable), so a request that has just arrived waits for the pass to end or for sysmon's
// network poll, which comes only when none happened for 10 ms. So there a yield parks the pass on a timer
// instead: with nothing else runnable the scheduler polls the network before it waits for the timer, and the
// arrivals' handlers run first. The price, when nothing arrives, is the scheduler's shortest network wait (1
// ms, epoll's unit) per yield: a pass of 10,000 items takes ~40 ms longer.
package yield

import (
	"runtime"
	"time"
)

// Every is how many items a pass handles between two yields of the processor.
const Every = 256

// pause is how long a yield on one processor parks the pass: long enough that its timer has not fired when the
// scheduler, finding nothing runnable, polls the network (a few µs later).
const pause = 50 * time.Microsecond

// After gives up the processor after every Every-th item; i counts the items handled, from 0.
func After(i int) {
	if i%Every == Every-1 {
		give()
	}
}

// give gives up the processor once: to runnable goroutines, and on one processor to requests that have arrived.
func give() {
	if runtime.GOMAXPROCS(0) > 1 {
		runtime.Gosched()
		return
	}
	time.Sleep(pause)
}
