package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stepClock is a wall clock that can step while its monotonic clock runs on.
type stepClock struct {
	wall time.Time
	mono time.Duration
}

func (c *stepClock) advance(d time.Duration)  { c.wall, c.mono = c.wall.Add(d), c.mono+d }
func (c *stepClock) monotonic() time.Duration { return c.mono }

// A wall-clock step (NTP correcting a clock, an operator setting it) neither stops accrual nor charges the step:
// the ledger integrates monotonic time, re-anchors the checkpoint on the new wall clock and counts the step.
func TestRecordClockSteps(t *testing.T) {
	cases := map[string]struct {
		step time.Duration
		// restart: the step happens while the usage API restarts (no monotonic reading spans it).
		restart bool
		// wantSeconds the pod is charged: true time, less what a restart across a step back cannot know.
		wantSeconds float64
		wantSteps   int64
	}{
		// 10 min before, 70 min after: the wall clock passes the old checkpoint again after an hour.
		"steps back 1 h":    {step: -time.Hour, wantSeconds: 80 * 60, wantSteps: 1},
		"steps forward 1 h": {step: time.Hour, wantSeconds: 80 * 60, wantSteps: 1},
		"steps back 10 s":   {step: -10 * time.Second, wantSeconds: 80 * 60, wantSteps: 1},
		// The first tick after the restart finds the checkpoint 1 h ahead: it re-anchors and charges nothing,
		// as the time since the last tick cannot be known; the next ticks accrue.
		"steps back 1 h across a restart": {step: -time.Hour, restart: true, wantSeconds: 80*60 - 5, wantSteps: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := testDatabase(t)
			s := db()
			clk := &stepClock{wall: t0}
			opts := Options{Interval: interval, Monotonic: clk.monotonic}
			l, err := New(ctx, s, opts, clk.wall)
			if err != nil {
				t.Fatal(err)
			}
			pod := []Sample{{Key: bobT4, Pod: "uid-bob", Since: t0.Add(-time.Minute), Allocated: 0.25, Used: 0.25, UsedKnown: true}}
			for i := range 80 * 60 / 5 {
				if i == 10*60/5 {
					clk.wall = clk.wall.Add(tc.step)
					if tc.restart {
						if l, err = New(ctx, db(), opts, clk.wall); err != nil {
							t.Fatal(err)
						}
					}
				}
				res, err := l.Record(ctx, clk.wall, pod)
				if err != nil {
					t.Fatalf("tick %d at %v: %v", i, clk.wall, err)
				}
				if i > 0 && (!tc.restart || i != 10*60/5) && res.Charged != interval {
					t.Fatalf("tick %d at %v: charged %v, want %v", i, clk.wall, res.Charged, interval)
				}
				clk.advance(interval)
			}
			// The ticks ran from t0 for 80 min of true time (the last at 79:55): the pod, started before the
			// ledger, is charged from the ledger's first tick.
			want := Totals{Allocated: 0.25 * (tc.wantSeconds - 5), Used: 0.25 * (tc.wantSeconds - 5)}
			cp := checkConsistent(t, s)
			if diff := cmp.Diff(want, cp.Sums, approx); diff != "" {
				t.Errorf("GPU-seconds (-want +got):\n%s", diff)
			}
			if got := l.ClockSteps(); got != tc.wantSteps {
				t.Errorf("ClockSteps() = %d, want %d", got, tc.wantSteps)
			}
			if last := clk.wall.Add(-interval); !cp.At.Equal(last) {
				t.Errorf("checkpoint at %v, want the last tick's wall time %v", cp.At, last)
			}
			wantWin := Windows{Today: want.scale(1.0 / 3600)}
			wantWin.Days7, wantWin.Days30 = wantWin.Today, wantWin.Today
			if diff := cmp.Diff(wantWin, l.UserWindows("bob"), approx); diff != "" {
				t.Errorf("UserWindows (-want +got):\n%s", diff)
			}
		})
	}
}

// By default the monotonic reading comes from the now passed to Record: time.Now() carries one, a fake clock's
// time.Date does not (then wall time alone is integrated, as before).
func TestMonotonicReading(t *testing.T) {
	l := &Ledger{}
	clockNow := time.Now()
	if _, ok := l.monotonic(clockNow); !ok {
		t.Error("time.Now(): no monotonic reading found")
	}
	if d, ok := l.monotonic(clockNow.Add(3 * time.Second)); !ok || d != 3*time.Second {
		t.Errorf("3 s later: reading %v %v, want 3s true", d, ok)
	}
	if _, ok := l.monotonic(t0); ok {
		t.Error("time.Date(...): a monotonic reading found")
	}
	if _, ok := l.monotonic(clockNow.Round(0)); ok {
		t.Error("a stripped reading still found")
	}
}

// The database is down while the wall clock steps back 1 h: what the ticks saw before the step is placed on
// the monotonic clock, so a pod that ended before the step is charged up to its last tick, not up to the
// stepped clock's now (which lies before its last tick on the wall clock).
func TestRecordDatabaseDownAcrossClockStep(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	f := &faultyStore{store: s}
	clk := &stepClock{wall: t0}
	l, err := New(ctx, f, Options{Interval: interval, Monotonic: clk.monotonic}, clk.wall)
	if err != nil {
		t.Fatal(err)
	}
	const a = 3.0 / 7
	erinT4 := Key{User: "erin", Kind: "shared", Class: "shared T4"}
	alice := Sample{Key: aliceMIG, Pod: "uid-alice", Since: t0.Add(-time.Minute), Allocated: a, Used: a, UsedKnown: true}
	bob := Sample{Key: bobT4, Pod: "uid-bob", Since: t0.Add(-time.Minute), Allocated: 0.25, Used: 0.25, UsedKnown: true}
	erin := Sample{Key: erinT4, Pod: "uid-erin", Allocated: 0.25} // start time unknown
	// Ticks every 5 s: the database refuses ticks 13 .. 99; bob is seen until tick 30, erin at ticks 20 .. 30;
	// the wall clock steps back 1 h before tick 40.
	for i := range 121 {
		if i == 40 {
			clk.wall = clk.wall.Add(-time.Hour)
		}
		outage := i > 12 && i < 100
		f.set(func(f *faultyStore) {
			f.failCommit = nil
			if outage {
				f.failCommit = errDown
			}
		})
		tick := []Sample{alice}
		if i <= 30 {
			tick = append(tick, bob)
		}
		if i >= 20 && i <= 30 {
			tick = append(tick, erin)
		}
		res, err := l.Record(ctx, clk.wall, tick)
		if outage != (err != nil) {
			t.Fatalf("tick %d: err = %v", i, err)
		}
		if i == 100 && (res.ClockStep != -time.Hour || res.Ended != 0 || res.Gap != 0) {
			t.Errorf("first tick after the outage: step %v ended %d gap %v, want -1h 0 0", res.ClockStep, res.Ended, res.Gap)
		}
		clk.advance(interval)
	}
	// alice: ticks 0 .. 120 = 600 s. bob: up to tick 30 = 150 s. erin: first seen at tick 20, so from then
	// (a lower bound: her start is unknown) to tick 30 = 50 s.
	for k, want := range map[Key]float64{aliceMIG: 600 * a, bobT4: 150 * 0.25, erinT4: 50 * 0.25} {
		if got := allocated(t, s, k); !cmp.Equal(want, got, approx) {
			t.Errorf("%s allocated = %v GPU-s, want %v", k.User, got, want)
		}
	}
	checkConsistent(t, s)
}
