package bench

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// ProbeResult is one probe of the Hub: when it was due, how long it took from then, whether it failed.
type ProbeResult struct {
	At      time.Time
	Latency time.Duration
	Failed  bool
}

// Prober sends GET probes at a fixed rate, open loop: each is timed from when it was due, so a Hub that falls
// behind shows in the latencies instead of slowing the probes down.
type Prober struct {
	URL    string
	Rate   float64 // per second
	Client *http.Client

	mu      sync.Mutex
	results []ProbeResult
}

// Run probes until ctx ends and waits for the probes in flight.
func (p *Prober) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	interval := time.Duration(float64(time.Second) / p.Rate)
	due := time.Now()
	for {
		due = due.Add(interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(due)):
		}
		at := due
		wg.Go(func() {
			r := ProbeResult{At: at}
			req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, p.URL, nil)
			if err == nil {
				var resp *http.Response
				if resp, err = p.Client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					r.Failed = resp.StatusCode != http.StatusOK
				}
			}
			r.Failed = r.Failed || err != nil
			r.Latency = time.Since(at)
			p.mu.Lock()
			p.results = append(p.results, r)
			p.mu.Unlock()
		})
	}
}

// Between returns the probes due in [from, to).
func (p *Prober) Between(from, to time.Time) []ProbeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ProbeResult
	for _, r := range p.results {
		if !r.At.Before(from) && r.At.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// During returns the probes due inside one of the bursts.
func (p *Prober) During(bursts []Burst) []ProbeResult {
	var out []ProbeResult
	for _, b := range bursts {
		out = append(out, p.Between(b.Start, b.End)...)
	}
	return out
}

// P99 is the 99th percentile latency of rs and how many failed; 0 for none.
func P99(rs []ProbeResult) (p99 time.Duration, failed int) {
	lat := make([]time.Duration, 0, len(rs))
	for _, r := range rs {
		lat = append(lat, r.Latency)
		if r.Failed {
			failed++
		}
	}
	if len(lat) == 0 {
		return 0, failed
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, int(0.99*float64(len(lat))))], failed
}
