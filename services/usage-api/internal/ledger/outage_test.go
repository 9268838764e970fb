package ledger

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// An outage longer than MaxGap (usage API restarted, or the database down) is filled from what the API server
// knows: a pod running through it is charged its whole lifetime x share, a pod that ended during it up to the
// last time it was seen (by the usage API that restarted: the checkpoint; by the one that ran on while the
// database was down: its last tick), a pod that started during it from its start. Utilization over the outage
// is unknown.
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
		// 10:50:12 .. 10:55:00 = 288 s, utilization never known; nothing after it was last seen. With the
		// database down, see bobSeen.
		{Key: bobT4, Totals: Totals{Allocated: 288 * 0.25, UsedUnknown: 288 * 0.25}},
	}
	// With the database down the usage API saw bob until its tick at 11:00:55: 10:50:12 .. 11:00:00 = 588 s and
	// 11:00:00 .. 11:00:55 = 55 s, utilization never known.
	bobSeen10 := Row{Key: bobT4, Totals: Totals{Allocated: 588 * 0.25, UsedUnknown: 588 * 0.25}}
	bobSeen11 := Row{Key: bobT4, Totals: Totals{Allocated: 55 * 0.25, UsedUnknown: 55 * 0.25}}
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
				// bob's end is unknown after a restart; with the database down the ticks that saw it and then
				// found it gone were 5 s apart.
				wantGap, wantEnded := back.Sub(down)-interval, 1
				if !restart {
					wantGap, wantEnded = 0, 0
				}
				if at.Equal(back) && (res.Charged != back.Sub(down) || res.Gap != wantGap || res.Ended != wantEnded) {
					t.Errorf("first tick after the outage: charged %v gap %v ended %d, want %v %v %d",
						res.Charged, res.Gap, res.Ended, back.Sub(down), wantGap, wantEnded)
				}
			}
			want10, want11 := wantHour10, wantHour11
			if !restart {
				want10 = []Row{wantHour10[0], bobSeen10}
				want11 = []Row{wantHour11[0], bobSeen11, wantHour11[1]}
			}
			for _, h := range []struct {
				from time.Time
				want []Row
			}{{hour10, want10}, {hour11, want11}} {
				checkBucket(ctx, t, s, h.from, h.want)
			}
			// alice ran throughout: her GPU-hours are her lifetime x share (1e-9 relative: float rounding only).
			if got, want := l.UserWindows("alice").Today.Allocated, end.Sub(alice.Since).Hours()*a; !cmp.Equal(want, got, approx) {
				t.Errorf("alice today = %v GPU-h, want lifetime x share = %v", got, want)
			}
			// After a restart bob ended at an unknown moment of the outage: that part (beyond the last interval)
			// is the gap. With the database down there is none.
			cp := checkConsistent(t, s)
			want := (back.Sub(down) - interval).Seconds()
			if !restart {
				want = 0
			}
			if cp.GapSeconds != want {
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

var errLost = errors.New("connection lost while committing")

// The database is down for 10 minutes while the usage API runs on, ticking every 5 s: every commit fails, but
// the ledger keeps what this process saw since its last commit. When a commit goes through again, a pod that
// ended during the outage is charged up to the last tick that saw it (bob), a pod that started and ended inside
// it for the life the ticks saw (carol), a pod running throughout for all of it, once (alice). Utilization over
// the span no tick committed is unknown. Each instant is still charged once when the first commit after the
// outage goes through but its answer is lost (the next tick finds the checkpoint moved), and when another
// writer reached the database and committed part of the outage. Bounded to two holdings, the ledger keeps
// alice's and bob's and counts carol's as untracked: she is not charged, and the outage counts as a gap.
func TestRecordDatabaseDownChargesWhatWasSeen(t *testing.T) {
	start := t0.Add(50 * time.Minute)  // 10:50:00, the first tick
	down := start.Add(5 * time.Minute) // 10:55:00, the last tick committed before the database goes down
	back := down.Add(10 * time.Minute) // 11:05:00, the first tick it takes again
	end := back.Add(2 * time.Minute)   // 11:07:00, the last tick
	hour11 := t0.Add(time.Hour)

	const a = 3.0 / 7
	carolGPU := Key{User: "carol", Kind: "gpu", Class: "gpu A100-SXM4-40GB"}
	alice := Sample{Key: aliceMIG, Pod: "uid-alice", Since: start.Add(2 * time.Second), Allocated: a, Used: a * 0.5, UsedKnown: true}
	bob := Sample{Key: bobT4, Pod: "uid-bob", Since: start.Add(12 * time.Second), Allocated: 0.25, Used: 0.1, UsedKnown: true}
	carol := Sample{Key: carolGPU, Pod: "uid-carol", Since: down.Add(2*time.Minute + 2*time.Second), Allocated: 1, Used: 1, UsedKnown: true}
	bobEnd := down.Add(4 * time.Minute)   // 10:59:00, 4 min into the outage: last seen at 10:58:55
	carolEnd := down.Add(6 * time.Minute) // 11:01:00, 6 min into it: seen from 10:57:05 to 11:00:55
	observed := func(at time.Time) []Sample {
		var out []Sample
		if !at.Before(alice.Since) {
			out = append(out, alice)
		}
		if !at.Before(bob.Since) && at.Before(bobEnd) {
			out = append(out, bob)
		}
		if !at.Before(carol.Since) && at.Before(carolEnd) {
			out = append(out, carol)
		}
		return out
	}

	// GPU-seconds per hour bucket. Committed tick by tick: up to 10:55:00 and from 11:04:55 (the last interval
	// before the first commit stands for itself); between them utilization is unknown.
	wantHour10 := []Row{
		// 10:50:02 .. 11:00:00 = 598 s: 298 s observed at 50 %, 300 s unknown.
		{Key: aliceMIG, Totals: Totals{Allocated: 598 * a, Used: 298 * a * 0.5, UsedUnknown: 300 * a}},
		// 10:50:12 .. 10:58:55, its last tick = 523 s: 288 s observed at 0.1, 235 s unknown.
		{Key: bobT4, Totals: Totals{Allocated: 523 * 0.25, Used: 288 * 0.1, UsedUnknown: 235 * 0.25}},
		// From its start at 10:57:02 to 11:00:00 = 178 s, unknown.
		{Key: carolGPU, Totals: Totals{Allocated: 178, UsedUnknown: 178}},
	}
	wantHour11 := []Row{
		// 11:00:00 .. 11:07:00 = 420 s: 295 s (.. 11:04:55) unknown, 125 s observed.
		{Key: aliceMIG, Totals: Totals{Allocated: 420 * a, Used: 125 * a * 0.5, UsedUnknown: 295 * a}},
		// 11:00:00 .. 11:00:55, its last tick = 55 s, unknown.
		{Key: carolGPU, Totals: Totals{Allocated: 55, UsedUnknown: 55}},
	}

	cases := map[string]struct {
		lost   bool // the first commit after the outage goes through, but its answer is lost
		other  bool // another writer commits 10:57:30 .. 10:58:00 and stops
		capped bool // MaxSeen is 2
	}{
		"commits again":                   {},
		"first commit's answer lost":      {lost: true},
		"another writer committed a part": {other: true},
		"memory bound":                    {capped: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := testDatabase(t)
			s := db()
			f := &faultyStore{store: s}
			opts := Options{Interval: interval}
			want10, want11 := wantHour10, wantHour11
			var wantGap time.Duration
			wantUntracked := 0
			if tc.capped {
				opts.MaxSeen = 2
				want10, want11 = wantHour10[:2], wantHour11[:1] // carol's life is not known
				wantGap, wantUntracked = back.Sub(down)-interval, 1
			}
			l, err := New(ctx, f, opts, start)
			if err != nil {
				t.Fatal(err)
			}
			var other *Ledger
			otherFrom, otherTo := down.Add(150*time.Second), down.Add(180*time.Second)
			first := back // the first tick whose commit is answered
			if tc.lost {
				first = back.Add(interval)
			}
			for at := start; !at.After(end); at = at.Add(interval) {
				outage := at.After(down) && at.Before(back)
				f.set(func(f *faultyStore) {
					f.failCommit = nil
					if outage {
						f.failCommit = errDown
					}
					if tc.lost && at.Equal(back) {
						f.lostCommit = errLost
					}
				})
				if tc.other && !at.Before(otherFrom) && !at.After(otherTo) {
					if other == nil {
						if other, err = New(ctx, db(), Options{Interval: interval}, at); err != nil {
							t.Fatal(err)
						}
					}
					if _, err := other.Record(ctx, at, observed(at)); err != nil {
						t.Fatalf("other writer at %s: %v", at.Format(time.TimeOnly), err)
					}
				}
				res, err := l.Record(ctx, at, observed(at))
				if wantErr := outage || at.Before(first) && !at.Before(back); wantErr != (err != nil) {
					t.Fatalf("tick at %s: err = %v", at.Format(time.TimeOnly), err)
				}
				if at.Equal(first) && (res.Gap != wantGap || res.Ended != 0 || res.Untracked != wantUntracked || res.Conflict != (tc.lost || tc.other)) {
					t.Errorf("first tick after the outage: gap %v ended %d untracked %d conflict %v, want %v 0 %d %v",
						res.Gap, res.Ended, res.Untracked, res.Conflict, wantGap, wantUntracked, tc.lost || tc.other)
				}
			}
			if tc.other {
				// The other writer observed utilization over its part: compare what was held.
				for _, k := range []Key{aliceMIG, bobT4, carolGPU} {
					var want float64
					for _, r := range append(slices.Clone(wantHour10), wantHour11...) {
						if r.Key == k {
							want += r.Allocated
						}
					}
					if got := allocated(t, s, k); !cmp.Equal(want, got, approx) {
						t.Errorf("%s allocated = %v GPU-s, want %v", k.User, got, want)
					}
				}
			} else {
				for _, h := range []struct {
					from time.Time
					want []Row
				}{{t0, want10}, {hour11, want11}} {
					checkBucket(ctx, t, s, h.from, h.want)
				}
			}
			// alice ran throughout: lifetime x share, once.
			if got, want := l.UserWindows("alice").Today.Allocated, end.Sub(alice.Since).Hours()*a; !cmp.Equal(want, got, approx) {
				t.Errorf("alice today = %v GPU-h, want lifetime x share = %v", got, want)
			}
			if cp := checkConsistent(t, s); cp.GapSeconds != wantGap.Seconds() {
				t.Errorf("gap = %v s, want %v", cp.GapSeconds, wantGap.Seconds())
			}
		})
	}
}

// checkBucket compares the usage rows of the hour bucket starting at from with want (1e-9 relative).
func checkBucket(ctx context.Context, t *testing.T, s *Store, from time.Time, want []Row) {
	t.Helper()
	got, err := s.Sum(ctx, Query{From: from, To: from.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("GPU-seconds in the %s bucket (-want +got):\n%s", from.Format("15:04"), diff)
	}
}
