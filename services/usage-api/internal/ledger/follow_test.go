package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Two usage API replicas on one database: the writer records, the other follows; the writer dies (kill -9:
// no last commit) and the follower takes over. A pod that ended between the writer's last commit and the
// takeover is charged up to its end, every instant once: each pod's GPU-seconds are its lifetime x share.
// While following, the follower's answers are the writer's.
func TestFollowThenTakeOver(t *testing.T) {
	ctx := context.Background()
	db := testDatabase(t)
	sW, sF := db(), db()
	bob := Sample{Key: bobT4, Pod: "uid-bob", Since: t0, Allocated: 0.25, Used: 0.1, UsedKnown: true}
	aliceStart, aliceEnd := t0.Add(20*time.Second), t0.Add(47*time.Second)
	alice := Sample{Key: aliceMIG, Pod: "uid-alice", Since: aliceStart, Allocated: 3.0 / 7, Used: 0.2, UsedKnown: true}
	at := func(tick time.Time) []Sample {
		out := []Sample{bob}
		switch {
		case !tick.Before(aliceStart) && tick.Before(aliceEnd):
			out = append(out, alice)
		case !tick.Before(aliceEnd) && tick.Before(aliceEnd.Add(interval)):
			gone := alice
			gone.Until = aliceEnd // the informer's departure, at the first tick after it
			out = append(out, gone)
		}
		return out
	}

	writer, err := New(ctx, sW, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	follower, err := New(ctx, sF, Options{Interval: interval}, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 9 { // t0 .. t0+40 s: the writer commits, the follower follows a second later
		tick := t0.Add(time.Duration(i) * interval)
		if _, err := writer.Record(ctx, tick, at(tick)); err != nil {
			t.Fatalf("writer at t0+%v: %v", tick.Sub(t0), err)
		}
		if err := follower.Follow(ctx, tick.Add(time.Second), at(tick)); err != nil {
			t.Fatalf("follower at t0+%v: %v", tick.Add(time.Second).Sub(t0), err)
		}
		if diff := cmp.Diff(writer.UserWindows("bob"), follower.UserWindows("bob"), approx); diff != "" {
			t.Fatalf("t0+%v: the follower's windows are not the writer's (-writer +follower):\n%s", tick.Sub(t0), diff)
		}
	}
	// The writer is gone after its commit at t0+40. The follower still sees, and sees alice go at t0+47.
	for _, tick := range []time.Time{t0.Add(46 * time.Second), t0.Add(51 * time.Second), t0.Add(56 * time.Second)} {
		if err := follower.Follow(ctx, tick, at(tick)); err != nil {
			t.Fatal(err)
		}
	}
	// It takes the Lease and writes from t0+61 s on.
	last := t0.Add(61 * time.Second)
	for tick := last; !tick.After(t0.Add(81 * time.Second)); tick = tick.Add(interval) {
		if _, err := follower.Record(ctx, tick, at(tick)); err != nil {
			t.Fatalf("new writer at t0+%v: %v", tick.Sub(t0), err)
		}
		last = tick
	}

	rows, err := sF.Sum(ctx, Query{From: t0, To: last.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[Key]float64{}
	for _, r := range rows {
		got[r.Key] = r.Allocated
	}
	want := map[Key]float64{
		bobT4:    0.25 * last.Sub(t0).Seconds(),
		aliceMIG: 3.0 / 7 * aliceEnd.Sub(aliceStart).Seconds(),
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("allocated GPU-seconds, lifetime x share (-want +got):\n%s", diff)
	}
	checkConsistent(t, sF)
}

// A follower's memory of what it saw stays bounded: pods gone before the writer's checkpoint are forgotten
// (the writer saw them go and charged them).
func TestFollowForgetsWhatTheWriterCharged(t *testing.T) {
	ctx := context.Background()
	db := testDatabase(t)
	sW, sF := db(), db()
	writer, err := New(ctx, sW, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	follower, err := New(ctx, sF, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 { // a new short pod every tick
		tick := t0.Add(time.Duration(i) * interval)
		s := []Sample{{Key: bobT4, Pod: "uid-" + tick.Format("150405"), Since: tick.Add(-interval), Allocated: 0.25,
			Until: tick.Add(-time.Second)}}
		if _, err := writer.Record(ctx, tick, s); err != nil {
			t.Fatal(err)
		}
		if err := follower.Follow(ctx, tick.Add(time.Second), s); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(follower.seen); n > 2 {
		t.Errorf("the follower remembers %d holdings; want at most the latest tick's", n)
	}
}
