// Package yield lets a long pass over many items share the processor with request handlers: Go takes the
// processor from a goroutine only after 10 ms, and a request that arrives during a pass would otherwise wait
// for it.
//
// A Pass gives up the processor once Slice has gone by (wall-clock time) since it last did. With more than one
// processor (GOMAXPROCS > 1: any machine with two CPUs, and a container whose CPU limit is one CPU but whose
// affinity allows two or more, for which Go picks at least two) an idle processor takes arrivals, and giving up
// only lets the handlers that are already runnable go first (runtime.Gosched).
//
// With GOMAXPROCS=1 (a one-CPU machine, a CPU affinity of one CPU: taskset, the kubelet's static CPU manager;
// or GOMAXPROCS=1 in the environment) that is not enough: the scheduler takes the yielding goroutine back from
// the global run queue before it polls the network (Go 1.26, runtime findRunnable), so a request that has just
// arrived waits for the pass to end or for sysmon's network poll, which comes only when none happened for 10 ms
// and when sysmon wakes (it sleeps up to 10 ms): up to ~20 ms. So there the pass first parks on a short timer:
// with nothing else runnable the scheduler polls the network before it waits for the timer. The timer readies
// the pass ahead of everything else (the run queue's next slot), so it then yields once more, behind the
// handlers the poll made runnable. The price, when nothing arrives, is the scheduler's shortest network wait (1
// ms, epoll's unit) per Slice: a pass of 50 ms of work takes about 250 ms.
package yield

import (
	"runtime"
	"time"
)

// Slice is how long a pass runs between two yields of the processor: a request arriving meanwhile waits at
// most about that long for it (or for the item in progress, when one takes longer).
const Slice = 250 * time.Microsecond

// pause is how long a yield on one processor parks the pass: long enough that its timer has not fired when the
// scheduler, finding nothing runnable, polls the network (a few µs later).
const pause = 50 * time.Microsecond

// Pass paces one pass over many items; its zero value is ready. Not for use by several goroutines.
type Pass struct{ since time.Time }

// Item is called after each item (or chunk of items): it gives up the processor when Slice has gone by since
// the pass last did (since its first Item). An item that blocked (a network call) counts as time gone by: the
// next Item gives up the processor, which costs a pause and lets waiting requests in.
func (p *Pass) Item() {
	now := time.Now()
	if p.since.IsZero() {
		p.since = now
		return
	}
	if now.Sub(p.since) < Slice {
		return
	}
	give()
	p.since = time.Now()
}

// give gives up the processor once: to runnable goroutines, and on one processor to requests that have arrived.
func give() {
	if runtime.GOMAXPROCS(0) > 1 {
		runtime.Gosched()
		return
	}
	time.Sleep(pause)
	runtime.Gosched()
}
