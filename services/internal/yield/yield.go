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
//
// A pass can also stand behind a Foreground (gpu-quota's admissions): then it does not start its next slice
// while that work runs, so that a burst of requests is served without the pass's slices between them.
package yield

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Slice is how long a pass runs between two yields of the processor: a request arriving meanwhile waits at
// most about that long for it (or for the item in progress, when one takes longer).
const Slice = 250 * time.Microsecond

// pause is how long a yield on one processor parks the pass: long enough that its timer has not fired when the
// scheduler, finding nothing runnable, polls the network (a few µs later).
const pause = 50 * time.Microsecond

// Pass paces one pass over many items; its zero value is ready. Not for use by several goroutines.
type Pass struct {
	// Behind, when set, is the foreground work the pass steps aside for (see Foreground).
	Behind *Foreground
	since  time.Time
	env    *env // nil: the real clock and processor
}

// Item is called after each item (or chunk of items): it gives up the processor when Slice has gone by since
// the pass last did (since its first Item). An item that blocked (a network call) counts as time gone by: the
// next Item gives up the processor, which costs a pause and lets waiting requests in.
func (p *Pass) Item() {
	now := p.env.now()
	if p.since.IsZero() {
		p.since = now
		return
	}
	if now.Sub(p.since) < Slice {
		return
	}
	p.env.give()
	p.Behind.wait()
	p.since = p.env.now()
}

// Foreground is latency-critical work (gpu-quota's admissions) that passes step aside for: a Pass whose Behind
// it is does not start its next slice while such work runs or ended less than Quiet ago, for up to MaxHold per
// slice. Giving up the processor every Slice still lets a burst's requests in, but then the pass takes its
// turn between them: on one processor a burst of 64 admissions arriving during a usage refresh waited several
// milliseconds longer, slice after slice. Between bursts the pass runs as before; under sustained load it
// still gets a slice every MaxHold (about 2 % of the processor), so it ends, later. It holds with several
// processors too: a container's CPU limit is shared by all of them, and the pass is not urgent (a usage
// answer is good for three refreshes). Its zero value is ready.
type Foreground struct {
	running atomic.Int64
	ended   atomic.Int64 // when work last ended: nanoseconds since epoch, plus one (0: never)
	env     *env         // nil: the real clock
}

const (
	// Quiet is how long after foreground work ends a pass still waits: the next request of a burst is often
	// a few tens of microseconds behind.
	Quiet = time.Millisecond
	// MaxHold bounds how long a pass waits for the foreground before its next slice.
	MaxHold = 10 * time.Millisecond
	// holdPoll is how often a waiting pass looks again (on one processor the scheduler's shortest network
	// wait is 1 ms anyway).
	holdPoll = 500 * time.Microsecond
)

// epoch is what Foreground's clock counts from: monotonic, unlike wall-clock nanoseconds.
var epoch = time.Now()

// Start marks foreground work as begun; call Done when it ends. Safe for concurrent use; nil does nothing.
func (f *Foreground) Start() {
	if f != nil {
		f.running.Add(1)
	}
}

// Done marks foreground work begun with Start as ended.
func (f *Foreground) Done() {
	if f != nil {
		f.ended.Store(int64(f.env.now().Sub(epoch)) + 1) // before running goes down: Busy reads them the other way
		f.running.Add(-1)
	}
}

// Busy reports whether foreground work runs now or ended less than Quiet ago.
func (f *Foreground) Busy() bool {
	if f == nil {
		return false
	}
	if f.running.Load() > 0 {
		return true
	}
	ended := f.ended.Load()
	return ended != 0 && f.env.now().Sub(epoch)-time.Duration(ended-1) < Quiet
}

// wait holds the caller while f is busy, up to MaxHold.
func (f *Foreground) wait() {
	if f == nil {
		return
	}
	for deadline := f.env.now().Add(MaxHold); f.Busy() && f.env.now().Before(deadline); {
		f.env.sleep(holdPoll)
	}
}

// env is the clock a Pass or a Foreground reads and waits on, and the processor a Pass gives up; nil is the
// real ones. Tests set a fake, so that slices and holds are counted rather than timed.
type env struct {
	clock func() time.Time
	wait  func(time.Duration)
	yield func()
}

func (e *env) now() time.Time {
	if e == nil {
		return time.Now()
	}
	return e.clock()
}

func (e *env) sleep(d time.Duration) {
	if e == nil {
		time.Sleep(d)
		return
	}
	e.wait(d)
}

func (e *env) give() {
	if e == nil {
		giveUp()
		return
	}
	e.yield()
}

// giveUp gives up the processor once: to runnable goroutines, and on one processor to requests that have
// arrived.
func giveUp() {
	if runtime.GOMAXPROCS(0) > 1 {
		runtime.Gosched()
		return
	}
	time.Sleep(pause)
	runtime.Gosched()
}
