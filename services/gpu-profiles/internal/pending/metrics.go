package pending

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are gpuhub_<subsystem>_pending_*.
type metrics struct {
	explanations *prometheus.CounterVec
	ended        prometheus.Counter
	errors       *prometheus.CounterVec
	pods         prometheus.GaugeFunc
}

func newMetrics(subsystem string, pods func() float64) *metrics {
	m := &metrics{
		explanations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: subsystem,
			Name: "pending_explanations_total",
			Help: "Events written on Pending GPU pods of Hub users to explain why they wait, by reason (ended: the spawn is ended)."},
			[]string{"reason"}),
		ended: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: subsystem,
			Name: "pending_spawns_ended_total",
			Help: "Spawns ended through the Hub because nothing could free up for them."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: subsystem,
			Name: "pending_errors_total",
			Help: "Failed calls while explaining Pending pods, by operation (event_create, event_patch, hub_stop)."},
			[]string{"op"}),
		pods: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: subsystem,
			Name: "pending_pods",
			Help: "Pending GPU pods of Hub users now."}, pods),
	}
	for _, r := range Reasons() {
		m.explanations.WithLabelValues(r)
	}
	for _, op := range []string{"event_create", "event_patch", "hub_stop"} {
		m.errors.WithLabelValues(op)
	}
	return m
}

func (m *metrics) register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.explanations, m.ended, m.errors, m.pods} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}
