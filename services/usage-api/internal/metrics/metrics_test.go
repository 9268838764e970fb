package metrics

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

func TestMetricsGolden(t *testing.T) {
	reg := prometheus.NewRegistry()
	state := usage.NewState(usage.NewHistory(time.Hour, 5*time.Second))
	m, err := New(reg, state)
	if err != nil {
		t.Fatal(err)
	}
	used, fresh, old := 0.2, 1.5, 600.0
	state.Publish(&usage.View{
		SampledAt: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Users: map[string]*usage.User{
			"alice": {Name: "alice", Share: usage.Share{AllocatedGPUs: 3.0 / 7, UsedGPUs: &used}},
			"dave":  {Name: "dave", Share: usage.Share{AllocatedGPUs: 1}}, // used unknown: no used series
		},
		Groups: map[string]usage.GroupShare{"physics": {AllocatedGPUs: 3.0 / 7, UsedGPUs: 0.2}},
		Cluster: usage.Cluster{Classes: []usage.ClassStats{
			{Class: "mig A100-SXM4-40GB 3g.20gb", Kind: "mig", CapacityGPUs: 6.0 / 7, AllocatedGPUs: 3.0 / 7},
		}, AgentStatus: []usage.AgentStatus{
			{Node: "gpu-a100-0", AgeSeconds: &fresh},
			{Node: "gpu-t4-0", AgeSeconds: &old, Stale: true, StaleReason: "the GPU agent on node gpu-t4-0 has not sampled since 09:50:00 UTC (10 min)"},
			{Node: "gpu-t4-1", Stale: true, StaleReason: "the GPU agent on node gpu-t4-1 is unreachable: refused"}, // never answered: no age
		}},
	})
	dir := usage.Directory{Users: map[string]usage.HubUser{"alice": {Name: "alice", Groups: []string{"physics"}}}}
	k := ledger.Key{User: "alice", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}
	for range 2 {
		m.ObserveLedger(ledger.Result{PerKey: map[ledger.Key]ledger.Totals{k: {Allocated: 1800, Used: 360}}}, dir)
	}
	m.ObserveLedger(ledger.Result{Gap: 30 * time.Second}, dir)
	m.ObserveRun("collect", 250*time.Millisecond, nil)
	m.ObserveAgents(1, 2)
	m.ObserveRightSize(12) // GPU-hours per day: 0.5 GPU

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), "GET", "/metrics", nil))
	got := rec.Body.String()
	golden.Check(t, "metrics.golden", got)
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
}

func mustGather(t *testing.T, g prometheus.Gatherer) []*dto {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func TestLedgerClockStepsAndConflicts(t *testing.T) {
	m, err := New(prometheus.NewRegistry(), usage.NewState(usage.NewHistory(time.Hour, 5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveLedger(ledger.Result{ClockStep: -time.Hour}, usage.Directory{})
	m.ObserveLedger(ledger.Result{Conflict: true, Untracked: 3}, usage.Directory{})
	m.ObserveLedger(ledger.Result{}, usage.Directory{})
	if got := testutil.ToFloat64(m.clockSteps); got != 1 {
		t.Errorf("clock steps = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.conflicts); got != 1 {
		t.Errorf("conflicts = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.untracked); got != 3 {
		t.Errorf("untracked holdings = %v, want 3", got)
	}
}
