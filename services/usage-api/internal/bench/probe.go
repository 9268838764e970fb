package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Probe records what the SUT does besides answering requests (its ticks) and reads the Go runtime's own
// histograms, so a latency tail can be traced to a cause: a long tick, a GC pause, or goroutines waiting for the
// one CPU (scheduler latency). It serves them, and net/http/pprof, on a second loopback listener.
type Probe struct {
	mu    sync.Mutex
	ticks []time.Duration
	// Mapped, when set, reports the memory the SUT holds outside the Go heap (the history's full rings).
	Mapped func() int64
}

// ObserveTick records the duration of one tick.
func (p *Probe) ObserveTick(d time.Duration) {
	p.mu.Lock()
	p.ticks = append(p.ticks, d)
	p.mu.Unlock()
}

// Stats is the SUT's self-report.
type Stats struct {
	Ticks                        int
	TickP50, TickMax             time.Duration
	SchedLatencyP50              time.Duration // goroutine ready -> running
	SchedLatencyP99              time.Duration
	SchedLatencyP999             time.Duration
	GCPauseP99, GCPauseMax       time.Duration
	GCCycles                     uint64
	GCCPUFraction                float64 // of all CPU time since start
	HeapLiveBytes, HeapGoalBytes uint64
	HeapObjects                  uint64
	TotalAllocBytes              uint64
	MappedBytes                  int64 // outside the Go heap: the history's full rings
}

// Stats reads the probe and the runtime's histograms (cumulative since the process started).
func (p *Probe) Stats() Stats {
	p.mu.Lock()
	ticks := slices.Clone(p.ticks)
	p.mu.Unlock()
	slices.Sort(ticks)
	var s Stats
	s.Ticks = len(ticks)
	if len(ticks) > 0 {
		s.TickP50, s.TickMax = ticks[len(ticks)/2], ticks[len(ticks)-1]
	}
	samples := []metrics.Sample{
		{Name: "/sched/latencies:seconds"},
		{Name: "/gc/pauses:seconds"},
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/gc/heap/objects:objects"},
		{Name: "/gc/heap/allocs:bytes"},
	}
	metrics.Read(samples)
	h := samples[0].Value.Float64Histogram()
	s.SchedLatencyP50, s.SchedLatencyP99, s.SchedLatencyP999 = quantile(h, 0.5), quantile(h, 0.99), quantile(h, 0.999)
	g := samples[1].Value.Float64Histogram()
	s.GCPauseP99, s.GCPauseMax = quantile(g, 0.99), quantile(g, 1)
	s.GCCycles = samples[2].Value.Uint64()
	if total := samples[4].Value.Float64(); total > 0 {
		s.GCCPUFraction = samples[3].Value.Float64() / total
	}
	s.HeapLiveBytes, s.HeapGoalBytes = samples[5].Value.Uint64(), samples[6].Value.Uint64()
	s.HeapObjects, s.TotalAllocBytes = samples[7].Value.Uint64(), samples[8].Value.Uint64()
	if p.Mapped != nil {
		s.MappedBytes = p.Mapped()
	}
	return s
}

// quantile returns the upper bound of the bucket holding quantile q of a runtime histogram.
func quantile(h *metrics.Float64Histogram, q float64) time.Duration {
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= want && c > 0 {
			b := h.Buckets[i+1]
			if math.IsInf(b, 1) {
				b = h.Buckets[i]
			}
			return time.Duration(b * float64(time.Second))
		}
	}
	return 0
}

// Serve serves /debug/stats (JSON Stats) and /debug/pprof/ on ln until ctx ends.
func (p *Probe) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Stats())
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s Stats) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }
	return fmt.Sprintf("ticks %d (p50 %s ms, max %s ms); scheduler latency p50 %s / p99 %s / p99.9 %s ms; GC %d cycles, pause p99 %s ms max %s ms, %.1f%% of CPU; heap live %.1f MiB, %d objects; history outside the heap %.1f MiB",
		s.Ticks, ms(s.TickP50), ms(s.TickMax), ms(s.SchedLatencyP50), ms(s.SchedLatencyP99), ms(s.SchedLatencyP999),
		s.GCCycles, ms(s.GCPauseP99), ms(s.GCPauseMax), 100*s.GCCPUFraction, float64(s.HeapLiveBytes)/(1<<20), s.HeapObjects, float64(s.MappedBytes)/(1<<20))
}

// ServeFloor serves the same path as the usage API with a fixed body of size bytes and nothing else: the
// fastest a Go HTTP server can answer on this machine, the floor the usage API's latency is compared with.
func ServeFloor(ctx context.Context, ln net.Listener, size int) error {
	body := make([]byte, max(size, 2))
	body[0] = '"'
	for i := 1; i < len(body)-1; i++ {
		body[i] = 'x'
	}
	body[len(body)-1] = '"'
	clen := strconv.Itoa(len(body))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /services/gpu-usage/api/v1/me", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", clen)
		_, _ = w.Write(body)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
