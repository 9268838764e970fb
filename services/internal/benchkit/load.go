package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Latencies summarises one measured run.
type Latencies struct {
	N, Errors     int
	P50, P99, Max time.Duration
	Throughput    float64 // calls per second
	Elapsed       time.Duration
	ServerReads   float64 // API-server reads (GET + LIST of pods and nodes) during the run
	ReadsPerCall  float64 // ServerReads / N
	// MachineBusy is the share of all CPUs' time not idle during the run (Measured; 0 without /proc/stat): well
	// above what the load and the system under test need, something else ran meanwhile.
	MachineBusy float64
	// Bursts are the slowest call of each burst, sorted (Bursts and Interleaved only). With bursts of 64 in a
	// run of 100, the p99 is about the slowest bursts': whether a few bursts were slow (something else ran
	// then: a collection, a background pass) or all of them (the calls' own cost) shows here.
	Bursts []time.Duration `json:"-"`
}

// SlowBursts is how many of l's bursts had a call slower than d.
func (l Latencies) SlowBursts(d time.Duration) int {
	i, _ := slices.BinarySearch(l.Bursts, d+1)
	return len(l.Bursts) - i
}

// Closed runs fn from `concurrency` workers for d (or until n calls when n > 0), each call timed on its own.
// Spawns arrive at most concurrentSpawnLimit at a time in z2jh, so the concurrency is the realistic bound.
func Closed(ctx context.Context, concurrency int, d time.Duration, n int, fn func(ctx context.Context, i int) error) Latencies {
	var (
		mu     sync.Mutex
		lat    []time.Duration
		errs   int
		next   atomic.Int64
		wg     sync.WaitGroup
		cctx   = ctx
		cancel = func() {}
	)
	if d > 0 {
		cctx, cancel = context.WithTimeout(ctx, d)
	}
	defer cancel()
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1024)
			bad := 0
			for cctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if n > 0 && i >= n {
					break
				}
				t0 := time.Now()
				if err := fn(ctx, i); err != nil {
					bad++
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			errs += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarize(lat, errs, time.Since(start))
}

// Bursts fires `size` calls of fn at once, waits for all of them, and starts the next burst `gap` after the
// previous one started (at once when it took longer), for d: spawns arriving together, as when a class starts.
func Bursts(ctx context.Context, size int, gap, d time.Duration, fn func(ctx context.Context, i int) error) Latencies {
	return Interleaved(ctx, size, gap, d, fn)[0]
}

// Interleaved is Bursts for several systems at once, in turns: each gets a burst every gap, spaced evenly
// between the others' (with two, one burst every gap/2, alternating). Systems measured in the same seconds see
// the same machine: a shared machine's slow minutes land on all of them, not on whichever ran then.
func Interleaved(ctx context.Context, size int, gap, d time.Duration, fns ...func(ctx context.Context, i int) error) []Latencies {
	if len(fns) == 0 {
		return nil
	}
	defer quietCollector()()
	type result struct {
		mu     sync.Mutex
		lat    []time.Duration
		errs   int
		next   int
		bursts []time.Duration // each burst's slowest call
	}
	results := make([]*result, len(fns))
	for j := range results {
		results[j] = &result{}
	}
	slot := gap / time.Duration(len(fns))
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		round := time.Now()
		for j, fn := range fns {
			if ctx.Err() != nil { // no burst of calls that would fail at once and count as fast
				break
			}
			if rest := time.Duration(j)*slot - time.Since(round); rest > 0 {
				time.Sleep(rest)
			}
			r := results[j]
			var wg sync.WaitGroup
			var slowest atomic.Int64
			for range size {
				i := r.next
				r.next++
				wg.Go(func() {
					c0 := time.Now()
					err := fn(ctx, i)
					took := time.Since(c0)
					for s := slowest.Load(); int64(took) > s && !slowest.CompareAndSwap(s, int64(took)); s = slowest.Load() {
					}
					r.mu.Lock()
					r.lat = append(r.lat, took)
					if err != nil {
						r.errs++
					}
					r.mu.Unlock()
				})
			}
			wg.Wait()
			r.bursts = append(r.bursts, time.Duration(slowest.Load()))
		}
		if rest := gap - time.Since(round); rest > 0 {
			time.Sleep(rest)
		}
	}
	out := make([]Latencies, len(fns))
	elapsed := time.Since(start)
	for j, r := range results {
		out[j] = summarize(r.lat, r.errs, elapsed)
		slices.Sort(r.bursts)
		out[j].Bursts = r.bursts
	}
	return out
}

// quietCollector collects the load generator's garbage now and then not again until restore (unless its heap
// grows by a GiB): a collection during a burst pauses the client's goroutines, and the calls in flight would
// count the pause as the service's latency, which the Hub's spawns never wait on. Only for the load
// generator's own process: a system under test keeps its collector.
func quietCollector() (restore func()) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	limit := debug.SetMemoryLimit(int64(ms.HeapAlloc) + 1<<30)
	percent := debug.SetGCPercent(-1)
	return func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	}
}

func summarize(lat []time.Duration, errs int, elapsed time.Duration) Latencies {
	slices.Sort(lat)
	l := Latencies{N: len(lat), Errors: errs, Elapsed: elapsed}
	if len(lat) == 0 {
		return l
	}
	at := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	l.P50, l.P99, l.Max = at(0.50), at(0.99), lat[len(lat)-1]
	l.Throughput = float64(len(lat)) / elapsed.Seconds()
	return l
}

// ServerReads is the API server's own count of read requests (verbs GET and LIST) on pods and nodes, from
// apiserver_request_total on its /metrics: what the server served, whoever asked.
func ServerReads(ctx context.Context, c kubernetes.Interface) (float64, error) {
	raw, err := c.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("read kube-apiserver metrics: %w", err)
	}
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		read := strings.Contains(line, `verb="LIST"`) || strings.Contains(line, `verb="GET"`)
		podsOrNodes := strings.Contains(line, `resource="pods"`) || strings.Contains(line, `resource="nodes"`)
		if !read || !podsOrNodes {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			total += v
		}
	}
	return total, sc.Err()
}

// Measured runs load and sets the API server's reads of pods and nodes meanwhile on its result.
//
// It first waits (Settle) for what the run before left behind to end.
func Measured(ctx context.Context, c kubernetes.Interface, load func() Latencies) Latencies {
	return MeasuredAll(ctx, c, func() []Latencies { return []Latencies{load()} })[0]
}

// MeasuredAll is Measured for loads run together (Interleaved): each result gets the reads and the machine's
// busy share of the whole run, whoever made them (its ReadsPerCall divides all the run's reads by its own calls:
// measure together only systems of which at most one reads).
func MeasuredAll(ctx context.Context, c kubernetes.Interface, load func() []Latencies) []Latencies {
	Settle(ctx)
	before, _ := ServerReads(ctx, c)
	cpu0, cpuErr := readCPUTimes()
	ls := load()
	busy := 0.0
	if cpu1, err := readCPUTimes(); err == nil && cpuErr == nil {
		busy = busyFraction(cpu0, cpu1)
	}
	after, _ := ServerReads(ctx, c)
	for i := range ls {
		l := &ls[i]
		l.MachineBusy = busy
		l.ServerReads = after - before
		if l.N > 0 {
			l.ReadsPerCall = l.ServerReads / float64(l.N)
		}
	}
	return ls
}
