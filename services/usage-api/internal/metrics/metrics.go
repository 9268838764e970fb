// Package metrics exposes the live shares and the GPU-hours of users and groups to Prometheus. Gauges are read
// from the latest view at scrape time (no stale series for users who left); GPU-hours counters accumulate what
// the ledger committed since the process started.
package metrics

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/internal/yield"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

const (
	namespace = "gpuhub"
	subsystem = "usage"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, labels, nil)
}

var (
	userAllocated  = desc("user_allocated_gpus", "GPU-equivalents allocated to the user's running servers.", "user")
	userUsed       = desc("user_used_gpus", "Fraction of a physical GPU's time the user's processes keep busy, summed over their units (may exceed allocated on time-sliced GPUs); absent when unknown.", "user")
	groupAllocated = desc("group_allocated_gpus", "GPU-equivalents allocated to the group's members.", "group")
	groupUsed      = desc("group_used_gpus", "Fraction of a physical GPU's time the group's members keep busy, over the part whose utilization is known.", "group")
	userAllocH     = desc("user_allocated_gpu_seconds_total", "Allocated GPU-seconds (GPU-hours x 3600) integrated by the ledger since the process started.", "user", "kind", "class")
	userUsedH      = desc("user_used_gpu_seconds_total", "Used GPU-seconds integrated by the ledger since the process started.", "user", "kind", "class")
	userUnknownH   = desc("user_used_unknown_gpu_seconds_total", "Allocated GPU-seconds whose utilization was unknown, since the process started.", "user", "kind", "class")
	groupAllocH    = desc("group_allocated_gpu_seconds_total", "Allocated GPU-seconds of the group's members (membership at the time of the tick) since the process started.", "group", "kind", "class")
	groupUsedH     = desc("group_used_gpu_seconds_total", "Used GPU-seconds of the group's members since the process started.", "group", "kind", "class")
	clusterCap     = desc("cluster_capacity_gpus", "GPU-equivalents the nodes offer, by GPU class.", "kind", "class")
	clusterAlloc   = desc("cluster_allocated_gpus", "GPU-equivalents allocated to running pods, by GPU class.", "kind", "class")
	saveable       = desc("rightsize_saveable_gpus", "GPU-equivalents that taking every right-size advice would free, on average over the last 7 days: the GPU-hours per day it would save, / 24; absent until first computed.")
	agentAge       = desc("agent_snapshot_age_seconds", "Age of the node agent's GPU telemetry at the last tick: the longer of now - sampledAt and the time since that sample was first fetched; absent when the agent never answered.", "node")
)

type seriesKey struct{ who, kind, class string }

// Metrics is a prometheus.Collector over the live state plus the loop metrics.
type Metrics struct {
	state *usage.State

	mu         sync.Mutex
	userHours  map[seriesKey]ledger.Totals
	groupHours map[seriesKey]ledger.Totals

	lastSuccess  *prometheus.GaugeVec
	duration     *prometheus.GaugeVec
	agentErrors  prometheus.Counter
	staleAgents  prometheus.Gauge
	ledgerGapSec prometheus.Counter
	clockSteps   prometheus.Counter
	conflicts    prometheus.Counter
	untracked    prometheus.Counter
	// saveableGPUs is the right-size gauge's value; nil until computed.
	saveableGPUs *float64
}

// New registers the metrics on reg.
func New(reg prometheus.Registerer, state *usage.State) (*Metrics, error) {
	m := &Metrics{
		state: state, userHours: map[seriesKey]ledger.Totals{}, groupHours: map[seriesKey]ledger.Totals{},
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: "last_run_success",
			Help: "1 if the loop's last run succeeded, else 0."}, []string{"loop"}),
		duration: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: "run_duration_seconds",
			Help: "Duration of the loop's last run."}, []string{"loop"}),
		agentErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: "agent_poll_errors_total",
			Help: "Agent snapshot polls that failed."}),
		staleAgents: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: "stale_agents",
			Help: "Agents whose telemetry is stale (not sampled for --stale-after, failing to sample, or unreachable)."}),
		ledgerGapSec: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: "ledger_gap_seconds_total",
			Help: "Seconds since the checkpoint that the ledger did not integrate because the service was down too long."}),
		clockSteps: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: "ledger_clock_steps_total",
			Help: "Wall-clock steps (forward or back) the ledger detected; it integrated monotonic time and re-anchored its checkpoint."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: "ledger_conflicts_total",
			Help: "Ticks that found the checkpoint moved by another writer (a rolling update) and continued from it."}),
		untracked: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: "ledger_untracked_holdings_total",
			Help: "Holdings (pod and class) seen during a database outage beyond the in-memory bound: charged as after a restart."}),
	}
	for _, c := range []prometheus.Collector{m, m.lastSuccess, m.duration, m.agentErrors, m.staleAgents, m.ledgerGapSec, m.clockSteps, m.conflicts, m.untracked} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObserveRun records one run of a loop ("collect", "ledger", "hub").
func (m *Metrics) ObserveRun(loop string, d time.Duration, err error) {
	m.duration.WithLabelValues(loop).Set(d.Seconds())
	ok := 1.0
	if err != nil {
		ok = 0
	}
	m.lastSuccess.WithLabelValues(loop).Set(ok)
}

// ObserveAgents records a poll's failures and the stale count.
func (m *Metrics) ObserveAgents(failed, stale int) {
	m.agentErrors.Add(float64(failed))
	m.staleAgents.Set(float64(stale))
}

// ObserveLedger adds one committed tick to the GPU-hours counters; groups are those of the user now.
func (m *Metrics) ObserveLedger(res ledger.Result, dir usage.Directory) {
	m.ledgerGapSec.Add(res.Gap.Seconds())
	if res.ClockStep != 0 {
		m.clockSteps.Inc()
	}
	if res.Conflict {
		m.conflicts.Inc()
	}
	m.untracked.Add(float64(res.Untracked))
	// A chunk of keys per hold of the lock, the processor given up in between: on one CPU the API's requests
	// wait for a loop over 10,000 users otherwise, and a scrape (Collect takes the lock) need not wait for the
	// yields. A scrape may count part of a tick's GPU-seconds; the rest comes with the next.
	var pace yield.Pass
	n := 0
	m.mu.Lock()
	for k, t := range res.PerKey {
		if n++; n%observeChunk == 0 {
			m.mu.Unlock()
			pace.Item()
			m.mu.Lock()
		}
		h := t // GPU-seconds: Prometheus base unit
		uk := seriesKey{k.User, string(k.Kind), k.Class}
		m.userHours[uk] = addTotals(m.userHours[uk], h)
		for _, g := range dir.Users[k.User].Groups {
			gk := seriesKey{g, string(k.Kind), k.Class}
			m.groupHours[gk] = addTotals(m.groupHours[gk], h)
		}
	}
	m.mu.Unlock()
}

// observeChunk is how many keys ObserveLedger adds under one hold of the lock.
const observeChunk = 256

// ObserveRightSize sets the GPU-hours per day that right-sizing would save (the gauge exports it / 24, in GPUs).
func (m *Metrics) ObserveRightSize(gpuHoursPerDay float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := gpuHoursPerDay / 24
	m.saveableGPUs = &g
}

func addTotals(a, b ledger.Totals) ledger.Totals {
	return ledger.Totals{Allocated: a.Allocated + b.Allocated, Used: a.Used + b.Used, UsedUnknown: a.UsedUnknown + b.UsedUnknown}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{userAllocated, userUsed, groupAllocated, groupUsed, userAllocH, userUsedH, userUnknownH, groupAllocH, groupUsedH, clusterCap, clusterAlloc, agentAge, saveable} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	if v := m.state.View(); v != nil {
		for name, u := range v.Users {
			ch <- prometheus.MustNewConstMetric(userAllocated, prometheus.GaugeValue, u.Share.AllocatedGPUs, name)
			if u.Share.UsedGPUs != nil {
				ch <- prometheus.MustNewConstMetric(userUsed, prometheus.GaugeValue, *u.Share.UsedGPUs, name)
			}
		}
		for g, s := range v.Groups {
			ch <- prometheus.MustNewConstMetric(groupAllocated, prometheus.GaugeValue, s.AllocatedGPUs, g)
			ch <- prometheus.MustNewConstMetric(groupUsed, prometheus.GaugeValue, s.UsedGPUs, g)
		}
		for _, c := range v.Cluster.Classes {
			ch <- prometheus.MustNewConstMetric(clusterCap, prometheus.GaugeValue, c.CapacityGPUs, string(c.Kind), c.Class)
			ch <- prometheus.MustNewConstMetric(clusterAlloc, prometheus.GaugeValue, c.AllocatedGPUs, string(c.Kind), c.Class)
		}
		for _, a := range v.Cluster.AgentStatus {
			if a.AgeSeconds != nil {
				ch <- prometheus.MustNewConstMetric(agentAge, prometheus.GaugeValue, *a.AgeSeconds, a.Node)
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.saveableGPUs != nil {
		ch <- prometheus.MustNewConstMetric(saveable, prometheus.GaugeValue, *m.saveableGPUs)
	}
	for _, k := range sortedKeys(m.userHours) {
		t := m.userHours[k]
		ch <- prometheus.MustNewConstMetric(userAllocH, prometheus.CounterValue, t.Allocated, k.who, k.kind, k.class)
		ch <- prometheus.MustNewConstMetric(userUsedH, prometheus.CounterValue, t.Used, k.who, k.kind, k.class)
		ch <- prometheus.MustNewConstMetric(userUnknownH, prometheus.CounterValue, t.UsedUnknown, k.who, k.kind, k.class)
	}
	for _, k := range sortedKeys(m.groupHours) {
		t := m.groupHours[k]
		ch <- prometheus.MustNewConstMetric(groupAllocH, prometheus.CounterValue, t.Allocated, k.who, k.kind, k.class)
		ch <- prometheus.MustNewConstMetric(groupUsedH, prometheus.CounterValue, t.Used, k.who, k.kind, k.class)
	}
}

func sortedKeys(m map[seriesKey]ledger.Totals) []seriesKey {
	out := make([]seriesKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].who != out[j].who {
			return out[i].who < out[j].who
		}
		return out[i].class < out[j].class
	})
	return out
}
