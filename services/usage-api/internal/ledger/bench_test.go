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

// BenchmarkFollowSteadyTick measures the garbage of one steady Follow at B1's scale: a writer and a follower on
// one SQLite file (each its own handle, as two replicas), 20,000 users each holding a GPU in its own pod. Each
// round the writer records a tick (not timed), then the follower follows it a second later: it re-reads the
// checkpoint and re-sums the current hour. Two rounds run before the timer; the hour stays the same.
func BenchmarkFollowSteadyTick(b *testing.B) {
	const pods = 20000
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	open := func() *Store {
		s, err := OpenSQLite(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	writer, err := New(ctx, open(), Options{Interval: interval}, t0)
	if err != nil {
		b.Fatal(err)
	}
	follower, err := New(ctx, open(), Options{Interval: interval}, t0)
	if err != nil {
		b.Fatal(err)
	}
	samples := make([]Sample, pods)
	for i := range samples {
		samples[i] = Sample{Key: Key{User: fmt.Sprintf("user%05d", i), Kind: "gpu", Class: "gpu A100"}, Pod: fmt.Sprintf("uid-%05d", i),
			Since: t0.Add(-time.Hour), Allocated: 1, Used: float64(i%101) / 100, UsedKnown: true}
	}
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
