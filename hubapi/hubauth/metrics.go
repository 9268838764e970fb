package hubauth

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	results   *prometheus.CounterVec // result: ok, no_token, invalid, no_service_access, other_users_server, hub_unavailable
	cacheHits *prometheus.CounterVec // kind: positive, negative
	lookups   *prometheus.CounterVec // result: ok, rejected, error
	entries   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpuhub", Subsystem: "hubauth", Name: "authentications_total",
			Help: "Token authentications by result (ok, no_token, invalid, no_service_access, other_users_server, hub_unavailable).",
		}, []string{"result"}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpuhub", Subsystem: "hubauth", Name: "cache_hits_total",
			Help: "Authentications answered from the token cache, by kind (positive, negative).",
		}, []string{"kind"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpuhub", Subsystem: "hubauth", Name: "hub_lookups_total",
			Help: "GET /hub/api/user calls by result (ok, rejected, error).",
		}, []string{"result"}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gpuhub", Subsystem: "hubauth", Name: "cache_entries",
			Help: "Tokens in the cache (positive and negative).",
		}),
	}
	if reg != nil {
		m.results = register(reg, m.results)
		m.cacheHits = register(reg, m.cacheHits)
		m.lookups = register(reg, m.lookups)
		m.entries = register(reg, m.entries)
	}
	return m
}

// register registers c or reuses the collector already registered under its
// name; any other failure keeps c unregistered (metrics are optional, auth is not).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	return c
}

func resultLabel(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNoToken):
		return "no_token"
	case errors.Is(err, ErrInvalidToken):
		return "invalid"
	case errors.Is(err, ErrNoServiceAccess):
		return "no_service_access"
	case errors.Is(err, ErrOtherUsersServer):
		return "other_users_server"
	default:
		return "hub_unavailable"
	}
}
