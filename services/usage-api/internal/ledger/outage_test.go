package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// An outage longer than MaxGap (usage API restarted, or the database down) is filled from what the API server
// knows: a pod running through it is charged its whole lifetime x share, a pod that ended during it up to the
// last time it was seen, a pod that started during it from its start. Utilization over the outage is unknown.
func TestRecordAcrossOutage(t *testing.T) {
	hour10 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	hour11 := hour10.Add(time.Hour)
	start := hour10.Add(50 * time.Minute)             // 10:50:00, the ledger's first tick
	down := hour10.Add(55 * time.Minute)              // 10:55:00, the last tick committed before the outage
	back := hour11.Add(5*time.Minute + 3*time.Second) // 11:05:03, the first tick after it
	end := hour11.Add(7*time.Minute + 3*time.Second)  // 11:07:03, the last tick

	carolGPU := Key{User: "carol", Kind: "gpu", Class: "gpu A100-SXM4-40GB"}
	alice := Sample{Key: aliceMIG, Pod: "uid-alice", Since: start.Add(2 * time.Second), Allocated: 3.0 / 7, Used: 3.0 / 7 * 0.5, UsedKnown: true}
	bob := Sample{Key: bobT4, Pod: "uid-bob", Since: start.Add(12 * time.Second), Allocated: 0.25}          // ends at 11:01
	carol := Sample{Key: carolGPU, Pod: "uid-carol", Since: hour11, Allocated: 1, Used: 1, UsedKnown: true} // starts at 11:00
	observed := func(at time.Time) []Sample {
		var out []Sample
		if !at.Before(alice.Since) {
			out = append(out, alice)
		}
		if !at.Before(bob.Since) && at.Before(hour11.Add(time.Minute)) {
			out = append(out, bob)
		}
		if !at.Before(carol.Since) {
			out = append(out, carol)
		}
		return out
	}

	// Expected GPU-seconds per hour bucket. Over the outage (10:55:00 .. 11:04:58) utilization is unknown; the
	// state observed at 11:05:03 stands for the last interval, as for any tick.
	const a = 3.0 / 7
	wantHour10 := []Row{
		// 10:50:02 .. 11:00:00 = 598 s: 298 s observed at 50 %, 300 s (10:55 .. 11:00) unknown.
		{Key: aliceMIG, Totals: Totals{Allocated: 598 * a, Used: 298 * a * 0.5, UsedUnknown: 300 * a}},
		// 10:50:12 .. 10:55:00 = 288 s, utilization never known; nothing after it was last seen.
		{Key: bobT4, Totals: Totals{Allocated: 288 * 0.25, UsedUnknown: 288 * 0.25}},
	}
	wantHour11 := []Row{
		// 11:00:00 .. 11:07:03 = 423 s: 298 s (.. 11:04:58) unknown, 125 s observed.
		{Key: aliceMIG, Totals: Totals{Allocated: 423 * a, Used: 125 * a * 0.5, UsedUnknown: 298 * a}},
		// From its start at 11:00:00: the same split.
		{Key: carolGPU, Totals: Totals{Allocated: 423, Used: 125, UsedUnknown: 298}},
	}

	for name, restart := range map[string]bool{"usage API restarted": true, "database down": false} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := testDatabase(t)
			s := db()
			f := &faultyStore{store: s}
			l, err := New(ctx, f, Options{Interval: interval}, start)
			if err != nil {
				t.Fatal(err)
			}
			var ticks []time.Time // every 5 s from 10:50:00 to the outage's end, then every 5 s from 11:05:03
			for at := start; at.Before(back); at = at.Add(interval) {
				ticks = append(ticks, at)
			}
			for at := back; !at.After(end); at = at.Add(interval) {
				ticks = append(ticks, at)
			}
			for _, at := range ticks {
				if at.After(down) && at.Before(back) {
					if restart {
						continue // the usage API is not running
					}
					f.set(func(f *faultyStore) { f.failCommit = errDown })
				} else {
					f.set(func(f *faultyStore) { f.failCommit = nil })
				}
				if at.Equal(back) && restart {
					if l, err = New(ctx, db(), Options{Interval: interval}, at); err != nil {
						t.Fatal(err)
					}
				}
				res, err := l.Record(ctx, at, observed(at))
				if down := at.After(down) && at.Before(back); down != (err != nil) {
					t.Fatalf("tick at %s: err = %v", at.Format(time.TimeOnly), err)
				}
				if at.Equal(back) && (res.Charged != back.Sub(down) || res.Gap != back.Sub(down)-interval || res.Ended != 1) {
					t.Errorf("first tick after the outage: charged %v gap %v ended %d, want %v %v 1",
						res.Charged, res.Gap, res.Ended, back.Sub(down), back.Sub(down)-interval)
				}
			}
			for _, h := range []struct {
				from time.Time
				want []Row
			}{{hour10, wantHour10}, {hour11, wantHour11}} {
				got, err := s.Sum(ctx, Query{From: h.from, To: h.from.Add(time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(h.want, got, approx); diff != "" {
					t.Errorf("GPU-seconds in the %s bucket (-want +got):\n%s", h.from.Format("15:04"), diff)
				}
			}
			// alice ran throughout: her GPU-hours are her lifetime x share (1e-9 relative: float rounding only).
			if got, want := l.UserWindows("alice").Today.Allocated, end.Sub(alice.Since).Hours()*a; !cmp.Equal(want, got, approx) {
				t.Errorf("alice today = %v GPU-h, want lifetime x share = %v", got, want)
			}
			// bob ended at an unknown moment of the outage: that part (beyond the last interval) is the gap.
			cp := checkConsistent(t, s)
			if want := (back.Sub(down) - interval).Seconds(); cp.GapSeconds != want {
				t.Errorf("gap = %v s, want %v", cp.GapSeconds, want)
			}
		})
	}
}

// The held rows written as differences read back as the in-memory checkpoint's, through pods that come, go,
// change what they hold and hold several units of one class.
func TestRecordHeldRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	l, err := New(ctx, s, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	since := t0.Add(-time.Minute)
	a := Sample{Key: aliceMIG, Pod: "uid-a", Since: since, Allocated: 3.0 / 7}
	b := Sample{Key: bobT4, Pod: "uid-b", Since: since, Allocated: 0.25}
	b2 := Sample{Key: Key{User: "bob", Kind: "gpu", Class: "gpu T4"}, Pod: "uid-b", Since: since, Allocated: 1}
	c := Sample{Key: bobT4, Pod: "uid-c", Allocated: 0.25} // start time unknown
	anon := Sample{Key: bobT4, Allocated: 0.25}            // no pod: not held
	for i, tick := range [][]Sample{
		{a, b},
		{a, b, a, c},    // a holds two units; c comes
		{a, a, c, anon}, // b goes
		{a, a, b2, c},   // b comes back holding another class
		{a, b2},
		nil,
	} {
		if _, err := l.Record(ctx, t0.Add(time.Duration(i)*interval), tick); err != nil {
			t.Fatal(err)
		}
		stored, _, err := s.Checkpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mem, _ := l.Checkpoint()
		if diff := cmp.Diff(mem.Held, stored.Held); diff != "" {
			t.Fatalf("tick %d: held (-memory +stored):\n%s", i, diff)
		}
		if i == 1 {
			want := []Holding{
				{Pod: "uid-a", Key: aliceMIG, Allocated: 6.0 / 7, Since: since},
				{Pod: "uid-b", Key: bobT4, Allocated: 0.25, Since: since},
				{Pod: "uid-c", Key: bobT4, Allocated: 0.25},
			}
			if diff := cmp.Diff(want, stored.Held); diff != "" {
				t.Errorf("held at tick 1 (-want +got):\n%s", diff)
			}
		}
	}
}
