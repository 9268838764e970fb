package ledger

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkRecord measures one steady tick of 20,000 pods (each its own user) on SQLite: held rows unchanged.
func BenchmarkRecord(b *testing.B) {
	ctx := context.Background()
	l := benchLedger(b, filepath.Join(b.TempDir(), "ledger.db"))
	batch := holdingSamples(20000, func(int) float64 { return 0.5 })
	at := t0
	for b.Loop() {
		if _, err := l.Record(ctx, at, batch); err != nil {
			b.Fatal(err)
		}
		at = at.Add(interval)
	}
}

// BenchmarkRecordSteadyTick measures the garbage of one steady tick at B1's scale: 20,000 users each holding a
// GPU in its own pod, the same pods every tick, on SQLite. The first tick (a new ledger writes every held row) and
// one steady tick run before the timer; the hour bucket stays the same for 700 ticks (-benchtime 20x). Utilization
// differs from user to user, as it does in a cluster.
func BenchmarkRecordSteadyTick(b *testing.B) {
	ctx := context.Background()
	l := benchLedger(b, filepath.Join(b.TempDir(), "ledger.db"))
	samples := holdingSamples(20000, variedUse)
	at := t0
	for range 2 {
		if _, err := l.Record(ctx, at, samples); err != nil {
			b.Fatal(err)
		}
		at = at.Add(interval)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Record(ctx, at, samples); err != nil {
			b.Fatal(err)
		}
		at = at.Add(interval)
	}
}

// BenchmarkFollowSteadyTick measures the garbage of one steady Follow at B1's scale: a writer and a follower on
// one SQLite file (each its own handle, as two replicas), 20,000 users each holding a GPU in its own pod. Each
// round the writer records a tick (not timed), then the follower follows it a second later: it re-reads the
// checkpoint and re-sums the current hour. Two rounds run before the timer; the hour stays the same.
func BenchmarkFollowSteadyTick(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	writer, follower := benchLedger(b, path), benchLedger(b, path)
	samples := holdingSamples(20000, variedUse)
	at := t0
	round := func() {
		if _, err := writer.Record(ctx, at, samples); err != nil {
			b.Fatal(err)
		}
	}
	follow := func() {
		if err := follower.Follow(ctx, at.Add(time.Second), samples); err != nil {
			b.Fatal(err)
		}
		at = at.Add(interval)
	}
	for range 2 {
		round()
		follow()
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		round()
		b.StartTimer()
		follow()
	}
	if late := follower.late.Load(); late != 1 { // the first Follow (no checkpoint before it) only: every other re-summed the current hour alone
		b.Fatalf("the follower re-summed every window %d times, want 1", late)
	}
}

// benchLedger is a Ledger on the SQLite file at path, a store (handle) of its own, closed when b ends.
func benchLedger(b *testing.B, path string) *Ledger {
	b.Helper()
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	l, err := New(context.Background(), s, Options{Interval: interval}, t0)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// holdingSamples are n users each holding one A100 in a pod of their own since an hour before t0, user i using
// used(i) of it.
func holdingSamples(n int, used func(i int) float64) []Sample {
	samples := make([]Sample, n)
	for i := range samples {
		samples[i] = Sample{Key: Key{User: fmt.Sprintf("user%05d", i), Kind: "gpu", Class: "gpu A100"}, Pod: fmt.Sprintf("uid-%05d", i),
			Since: t0.Add(-time.Hour), Allocated: 1, Used: used(i), UsedKnown: true}
	}
	return samples
}

// variedUse differs from user to user, as utilization does in a cluster.
func variedUse(i int) float64 { return float64(i%101) / 100 }
