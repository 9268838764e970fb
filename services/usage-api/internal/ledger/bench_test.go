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
	s, err := OpenSQLite(ctx, filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l, err := New(ctx, s, Options{Interval: interval}, t0)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]Sample, 20000)
	for i := range batch {
		batch[i] = Sample{Key: Key{User: fmt.Sprintf("user%05d", i), Kind: "gpu", Class: "gpu A100"}, Pod: fmt.Sprintf("uid-%05d", i),
			Since: t0.Add(-time.Hour), Allocated: 1, Used: 0.5, UsedKnown: true}
	}
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
	const pods = 20000
	ctx := context.Background()
	s, err := OpenSQLite(ctx, filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l, err := New(ctx, s, Options{Interval: interval}, t0)
	if err != nil {
		b.Fatal(err)
	}
	samples := make([]Sample, pods)
	for i := range samples {
		samples[i] = Sample{Key: Key{User: fmt.Sprintf("user%05d", i), Kind: "gpu", Class: "gpu A100"}, Pod: fmt.Sprintf("uid-%05d", i),
			Since: t0.Add(-time.Hour), Allocated: 1, Used: float64(i%101) / 100, UsedKnown: true}
	}
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
