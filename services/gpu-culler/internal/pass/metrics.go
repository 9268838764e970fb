package pass

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a pass's counters (gpuhub_culler_*).
type Metrics struct {
	passes   *prometheus.CounterVec
	duration prometheus.Histogram
	lastPass prometheus.Gauge
	servers  *prometheus.GaugeVec
	skips    *prometheus.CounterVec
	stopped  *prometheus.CounterVec
	// contendedStops and contended: stops and servers under idleWhenContended (someone waits for the class).
	contendedStops *prometheus.CounterVec
	// reclaimed are the GPU-hours contended stops freed earlier than the normal idle period.
	reclaimed    *prometheus.CounterVec
	contended    prometheus.Gauge
	saved        *prometheus.CounterVec
	stopErrors   prometheus.Counter
	noticeErrors prometheus.Counter
	conflicts    prometheus.Counter
	hubRequests  *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg (nil: not registered, for tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "gpuhub", "culler"
	m := &Metrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "passes_total",
			Help: "Passes over every ready server by result: ok, or error (the Hub's list or the pod list could not be read; nobody was acted on)."}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "pass_duration_seconds",
			Help: "How long a pass took, from the first Hub request to the last action.", Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60}}),
		lastPass: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "last_pass_timestamp_seconds",
			Help: "When the last good pass ended (Unix time)."}),
		servers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "servers",
			Help: "Ready servers in the last good pass by what was decided: none, warn, stop, skip."}, []string{"state"}),
		skips: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "skips_total",
			Help: "Servers left alone in a pass, by reason (telemetry_stale, usage_unreachable, exempt, snoozed, dry_run, ...) and GPU kind (cpu for CPU-only), counted every pass."}, []string{"reason", "kind"}),
		stopped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stops_total",
			Help: "Servers stopped, by reason (idle, max_age) and GPU kind."}, []string{"reason", "kind"}),
		contendedStops: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "contended_stops_total",
			Help: "Servers stopped for idleness under idleWhenContended, while someone waited for their GPU class, by GPU kind; also in stops_total."}, []string{"kind"}),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "reclaimed_gpu_seconds_total",
			Help: "GPU time (GPU-equivalents x seconds; divide by 3600 for GPU-hours) handed to people waiting earlier than the normal idle period would have: per stop under idleWhenContended, its GPUs x (idlePeriod - idleWhenContended); 0 when idlePeriod is 0 (see gpu_seconds_saved_total)."}, []string{"kind"}),
		contended: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "contended_servers",
			Help: "GPU servers the last good pass judged under idleWhenContended: someone waits for their GPU class."}),
		saved: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "gpu_seconds_saved_total",
			Help: "GPU time (GPU-equivalents x seconds; divide by 3600 for GPU-hours) the stopped GPU servers did not hold: from each stop until the same server runs again, at most 24 h a stop; counted by the replica that stopped it."}, []string{"kind"}),
		stopErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stop_errors_total",
			Help: "Stops the Hub refused or did not answer; the next pass tries again."}),
		noticeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "notice_errors_total",
			Help: "Notices that could not be written on the pod; no server is stopped before its notice is shown."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "notice_conflicts_total",
			Help: "Notices not written because the pod changed since it was read (a snooze); the next pass decides again."}),
		hubRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "hub_requests_total",
			Help: "Requests the passes sent to the Hub, retries included, by operation: users_list (a page of the ready servers), server_stop, other."}, []string{"op"}),
	}
	for _, r := range []string{"ok", "error"} {
		m.passes.WithLabelValues(r)
	}
	for _, op := range []string{"users_list", "server_stop"} {
		m.hubRequests.WithLabelValues(op)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.passes, m.duration, m.lastPass, m.servers, m.skips, m.stopped, m.contendedStops, m.reclaimed, m.contended, m.saved,
			m.stopErrors, m.noticeErrors, m.conflicts, m.hubRequests} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *Metrics) pass(s Summary, err error, end time.Time) {
	if err != nil {
		m.passes.WithLabelValues("error").Inc()
		return
	}
	m.passes.WithLabelValues("ok").Inc()
	m.duration.Observe(s.Duration.Seconds())
	m.lastPass.Set(float64(end.UnixNano()) / 1e9)
	states := map[string]float64{"none": 0, "warn": 0, "stop": 0, "skip": 0}
	for k, n := range s.Decisions {
		for a := range states {
			if len(k) > len(a) && k[:len(a)+1] == a+"/" {
				states[a] += float64(n)
			}
		}
	}
	for a, n := range states {
		m.servers.WithLabelValues(a).Set(n)
	}
	m.contended.Set(float64(s.Contended))
}

func (m *Metrics) skip(reason, kind string) { m.skips.WithLabelValues(reason, kind).Inc() }
