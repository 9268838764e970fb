package hubapi

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of a Client, labelled by operation (never by user or path, which
// would make one series per user).
type metrics struct {
	requests *prometheus.CounterVec   // op, code ("error" when no answer came)
	duration *prometheus.HistogramVec // op
	retries  *prometheus.CounterVec   // op
	inFlight prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpuhub", Subsystem: "hubapi", Name: "requests_total",
			Help: "JupyterHub API request attempts by operation and HTTP status code (\"error\" when no answer came).",
		}, []string{"op", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gpuhub", Subsystem: "hubapi", Name: "request_duration_seconds",
			Help:    "Duration of JupyterHub API request attempts by operation.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpuhub", Subsystem: "hubapi", Name: "retries_total",
			Help: "JupyterHub API request retries by operation.",
		}, []string{"op"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gpuhub", Subsystem: "hubapi", Name: "in_flight_requests",
			Help: "JupyterHub API requests being sent now (capped by MaxConcurrent).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.requests, err = register(reg, m.requests)
	if err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.retries, err = register(reg, m.retries); err != nil {
		return nil, err
	}
	if m.inFlight, err = register(reg, m.inFlight); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name, so several clients can share one registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	var zero C
	return zero, fmt.Errorf("hubapi: register metrics: %w", err)
}

func codeLabel(code int) string {
	if code == 0 {
		return "error"
	}
	return strconv.Itoa(code)
}
