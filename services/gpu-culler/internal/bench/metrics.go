package bench

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

// Metrics are the culler's own counters that the benchmark reads (contract C5).
type Metrics struct {
	PassCount, PassSum float64            // gpuhub_culler_pass_duration_seconds _count and _sum
	Passes             map[string]float64 // gpuhub_culler_passes_total by result
	HubRequests        map[string]float64 // gpuhub_culler_hub_requests_total by op
	Decisions          map[string]float64 // gpuhub_culler_decisions_total by "action/reason"
}

// ParseMetrics reads the Prometheus text exposition (benchkit.ParseMetrics) into the culler's counters.
func ParseMetrics(r io.Reader) (Metrics, error) {
	series, err := benchkit.ParseMetrics(r)
	return fold(series), err
}

// fold sums the series the benchmark reads by the labels it reads.
func fold(series map[string]float64) Metrics {
	m := Metrics{Passes: map[string]float64{}, HubRequests: map[string]float64{}, Decisions: map[string]float64{}}
	for s, v := range series {
		name, labels := s, ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = name[:i], name[i:]
		}
		switch name {
		case "gpuhub_culler_pass_duration_seconds_count":
			m.PassCount = v
		case "gpuhub_culler_pass_duration_seconds_sum":
			m.PassSum = v
		case "gpuhub_culler_passes_total":
			m.Passes[label(labels, "result")] += v
		case "gpuhub_culler_hub_requests_total":
			m.HubRequests[label(labels, "op")] += v
		case "gpuhub_culler_decisions_total":
			m.Decisions[label(labels, "action")+"/"+label(labels, "reason")] += v
		}
	}
	return m
}

// label is the value of key in a {k="v",...} label set.
func label(set, key string) string {
	i := strings.Index(set, key+`="`)
	if i < 0 {
		return ""
	}
	rest := set[i+len(key)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// ScrapeMetrics reads url (the culler's /metrics) with c.
func ScrapeMetrics(ctx context.Context, c *http.Client, url string) (Metrics, error) {
	series, err := benchkit.Metrics(ctx, c, url)
	if err != nil {
		return Metrics{}, err
	}
	return fold(series), nil
}

// Pass is one culler pass as its metrics tell it.
type Pass struct {
	Ended    time.Time // when the watcher saw it (within its poll period)
	Duration time.Duration
}

// PassWatcher polls the culler's metrics and turns the pass histogram's count and sum into one duration per
// pass (the sum's increase over the count's).
type PassWatcher struct {
	URL    string
	Client *http.Client
	Every  time.Duration

	mu     sync.Mutex
	passes []Pass
	last   Metrics
	err    error
}

// Run polls until ctx ends. Passes done before the first scrape are recorded at it, with their mean duration.
func (w *PassWatcher) Run(ctx context.Context) {
	for ctx.Err() == nil {
		m, err := ScrapeMetrics(ctx, w.Client, w.URL)
		now := time.Now()
		w.mu.Lock()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				w.err = err
			}
		case m.PassCount > w.last.PassCount:
			n := m.PassCount - w.last.PassCount
			d := time.Duration((m.PassSum - w.last.PassSum) / n * float64(time.Second))
			for range int(n) {
				w.passes = append(w.passes, Pass{Ended: now, Duration: d})
			}
		}
		if err == nil {
			w.last = m
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(w.Every):
		}
	}
}

// Passes are the passes seen so far, the last scrape, and the last scrape error.
func (w *PassWatcher) Passes() ([]Pass, Metrics, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Pass(nil), w.passes...), w.last, w.err
}
