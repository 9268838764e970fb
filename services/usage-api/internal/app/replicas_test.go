package app

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Two replicas on one ledger database: one writes, the other follows and answers the same GPU-hours; when the
// writer goes and the follower takes the Lease, the hours go on growing from where the writer left them.
func TestTwoReplicasOneWriter(t *testing.T) {
	hub := newHub(t)
	var busy atomic.Int64
	busy.Store(50)
	port := fakeAgent(t, &busy)
	db := filepath.Join(t.TempDir(), "ledger.db")
	var followerWrites atomic.Bool
	writer := start(t, hub, db, port, func(o *Options) { o.LedgerWriter = func() bool { return true } })
	follower := start(t, hub, db, port, func(o *Options) { o.LedgerWriter = followerWrites.Load })
	defer follower.stop(t)
	hours := func(r *running) (float64, string) {
		var m meHours
		getJSON(t, r.url+"/services/gpu-usage/api/v1/me", "alice-token", &m)
		if m.GPUHours["today"] == nil { // unavailable: not connected yet
			return 0, m.GPUHoursStatus
		}
		return m.GPUHours["today"].Allocated, m.GPUHoursStatus
	}
	eventually(t, "the writer charges alice", func() (bool, string) {
		h, status := hours(writer)
		return status == "ok" && h > 0, fmt.Sprint(h, status)
	})
	eventually(t, "the follower answers the writer's hours", func() (bool, string) {
		w, _ := hours(writer)
		f, status := hours(follower)
		// The follower re-reads at its own ticks: within two of the writer's increments (3/7 GPU x 0.1 s each).
		return status == "ok" && f > 0 && f <= w+1e-9 && w-f < 2*3.0/7*0.1/3600+1e-12, fmt.Sprintf("writer %v, follower %v (%s)", w, f, status)
	})
	// A follower never writes: the writer's commits never find the checkpoint moved by another.
	if n := metric(t, writer.registry, "gpuhub_usage_ledger_conflicts_total"); n != 0 {
		t.Errorf("the writer met %v conflicts: the follower wrote", n)
	}
	writer.stop(t)
	before, _ := hours(follower)
	followerWrites.Store(true) // it takes the Lease
	eventually(t, "the new writer goes on charging", func() (bool, string) {
		h, _ := hours(follower)
		return h > before, fmt.Sprint(h, " vs ", before)
	})
}

// metric is the value of a gauge or counter without labels in reg (0 when it has no sample yet).
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}
