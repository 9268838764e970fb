package bench

import (
	"context"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// LoadOptions configure an open-loop run.
type LoadOptions struct {
	Rate     float64       // requests per second, scheduled at constant intervals
	Duration time.Duration // measured part
	Warmup   time.Duration // sent at the same rate, not measured
	Timeout  time.Duration // per request
	// Request builds request i.
	Request func(ctx context.Context, i int) (*http.Request, error)
}

// LoadResult summarizes a run. Latency is measured from each request's scheduled send time, so a slow server
// cannot hide queueing by slowing the generator down (no coordinated omission).
type LoadResult struct {
	Sent, OK, Errors   int
	AchievedRate       float64
	P50, P90, P99, Max time.Duration
}

// Load runs an open-loop constant-rate load.
func Load(ctx context.Context, o LoadOptions) LoadResult {
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.Timeout}
	period := time.Duration(float64(time.Second) / o.Rate)
	total := int((o.Warmup + o.Duration) / period)
	warm := int(o.Warmup / period)
	lat := make([]time.Duration, total)
	var okN, errN atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range total {
		at := start.Add(time.Duration(i) * period)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := o.Request(ctx, i)
			ok := false
			if err == nil {
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					ok = resp.StatusCode == http.StatusOK
				}
			}
			lat[i] = time.Since(at)
			if i >= warm {
				if ok {
					okN.Add(1)
				} else {
					errN.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start.Add(o.Warmup))
	m := append([]time.Duration(nil), lat[warm:]...)
	sort.Slice(m, func(a, b int) bool { return m[a] < m[b] })
	q := func(p float64) time.Duration {
		if len(m) == 0 {
			return 0
		}
		return m[min(len(m)-1, int(p*float64(len(m))))]
	}
	r := LoadResult{Sent: len(m), OK: int(okN.Load()), Errors: int(errN.Load()), P50: q(0.50), P90: q(0.90), P99: q(0.99)}
	if len(m) > 0 {
		r.Max = m[len(m)-1]
		r.AchievedRate = float64(r.OK) / elapsed.Seconds()
	}
	return r
}
