package ledger

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDecayed: GPU-hours decayed with a half-life from each hour's midpoint, the current hour's midpoint halfway
// to asOf, hours past the horizon left out; asOf is an injected clock.
func TestDecayed(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	hour := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	aliceH100 := Key{User: "alice", Kind: "gpu", Class: "gpu H100-80GB-HBM3"}
	seed := []Increment{
		{Key: aliceH100, Bucket: hour.Add(-2 * time.Hour), Totals: Totals{Allocated: 3600}}, // 1 GPU-hour, 08:00-09:00
		{Key: bobT4, Bucket: hour.Add(-time.Hour), Totals: Totals{Allocated: 900}},          // 0.25, 09:00-10:00
		{Key: aliceMIG, Bucket: hour, Totals: Totals{Allocated: 900}},                       // 0.25 so far, 10:00-10:30
		{Key: bobT4, Bucket: hour.Add(-30 * 24 * time.Hour), Totals: Totals{Allocated: 3600}},
	}
	var sum Totals
	for _, inc := range seed {
		sum.add(inc.Totals)
	}
	if err := s.Commit(ctx, nil, Checkpoint{At: hour.Add(30 * time.Minute), Ticks: 1, Sums: sum}, seed); err != nil {
		t.Fatal(err)
	}
	l, err := New(ctx, s, Options{Interval: interval}, hour.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	h100, mig, t4 := aliceH100.Class, aliceMIG.Class, bobT4.Class
	cases := map[string]struct {
		halfLife, horizon time.Duration
		asOf              time.Time
		want              map[string]map[string]float64
	}{
		"one GPU-hour one half-life ago counts half": {
			halfLife: 2 * time.Hour, horizon: 16 * time.Hour, asOf: hour.Add(30 * time.Minute),
			// 08:30 is 2 h before 10:30; the current hour's midpoint is 10:15.
			want: map[string]map[string]float64{"alice": {h100: 0.5, mig: 0.25 * math.Exp2(-0.125)}, "bob": {t4: 0.25 * math.Exp2(-0.5)}},
		},
		"two half-lives ago a quarter": {
			halfLife: time.Hour, horizon: 8 * time.Hour, asOf: hour.Add(30 * time.Minute),
			want: map[string]map[string]float64{"alice": {h100: 0.25, mig: 0.25 * math.Exp2(-0.25)}, "bob": {t4: 0.125}},
		},
		"an hour later, no tick since: the 10:00 hour's midpoint is 10:30": {
			halfLife: time.Hour, horizon: 8 * time.Hour, asOf: hour.Add(90 * time.Minute),
			want: map[string]map[string]float64{"alice": {h100: 0.125, mig: 0.125}, "bob": {t4: 0.0625}},
		},
		"the horizon leaves out older hours": {
			halfLife: time.Hour, horizon: time.Hour, asOf: hour.Add(30 * time.Minute),
			want: map[string]map[string]float64{"alice": {mig: 0.25 * math.Exp2(-0.25)}, "bob": {t4: 0.125}},
		},
		"a long horizon reaches back a month": {
			halfLife: 30 * 24 * time.Hour, horizon: 31 * 24 * time.Hour, asOf: hour.Add(30 * time.Minute),
			want: map[string]map[string]float64{
				"alice": {h100: math.Exp2(-2.0 / 720), mig: 0.25 * math.Exp2(-0.25/720)},
				"bob":   {t4: 0.25*math.Exp2(-1.0/720) + 0.5}, // and the hour 30 days ago: one half-life
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := l.Decayed(ctx, tc.halfLife, tc.horizon, tc.asOf)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, approx); diff != "" {
				t.Errorf("decayed (-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range [][2]time.Duration{{0, time.Hour}, {90 * time.Minute, 8 * time.Hour}, {time.Hour, 0}} {
		if _, err := l.Decayed(ctx, bad[0], bad[1], hour); err == nil {
			t.Errorf("Decayed(halfLife %s, horizon %s) answered; want an error", bad[0], bad[1])
		}
	}
}

// TestDecayedFollowsCommits: the cached completed hours are summed again when the hour rolls over and after a
// commit to an earlier hour bucket.
func TestDecayedFollowsCommits(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	start := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	l, err := New(ctx, s, Options{Interval: time.Hour, MaxGap: 1000 * time.Hour}, start)
	if err != nil {
		t.Fatal(err)
	}
	h100 := Key{User: "alice", Kind: "gpu", Class: "gpu H100-80GB-HBM3"}
	record := func(at time.Time, samples ...Sample) {
		t.Helper()
		if _, err := l.Record(ctx, at, samples); err != nil {
			t.Fatal(err)
		}
	}
	decayed := func(asOf time.Time) float64 {
		t.Helper()
		got, err := l.Decayed(ctx, time.Hour, 24*time.Hour, asOf)
		if err != nil {
			t.Fatal(err)
		}
		return got["alice"][h100.Class]
	}
	record(start)
	record(start.Add(time.Hour), Sample{Key: h100, Allocated: 1}) // 09:00-10:00: 1 GPU-hour
	if got, want := decayed(start.Add(90*time.Minute)), 0.5; math.Abs(got-want) > 1e-9 {
		t.Errorf("at 10:30: %v, want %v", got, want)
	}
	// 10:00-11:00, then 11:00-12:00 (a new current hour): 1 GPU-hour each.
	record(start.Add(2*time.Hour), Sample{Key: h100, Allocated: 1})
	record(start.Add(3*time.Hour), Sample{Key: h100, Allocated: 1})
	if got, want := decayed(start.Add(3*time.Hour+30*time.Minute)), 0.125+0.25+0.5; math.Abs(got-want) > 1e-9 {
		t.Errorf("at 12:30: %v, want %v", got, want)
	}
	// Another writer adds an hour at 08:00 behind this ledger's back; its next tick conflicts and re-reads.
	other, err := New(ctx, s, Options{Interval: time.Hour, MaxGap: 1000 * time.Hour}, start.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cp, _ := other.Checkpoint()
	next := cp
	next.Ticks++
	if err := s.Commit(ctx, &cp, next, []Increment{{Key: h100, Bucket: start.Add(-time.Hour), Totals: Totals{Allocated: 3600}}}); err != nil {
		t.Fatal(err)
	}
	record(start.Add(3*time.Hour + 30*time.Minute))
	if got, want := decayed(start.Add(3*time.Hour+30*time.Minute)), 0.125+0.25+0.5+1.0/16; math.Abs(got-want) > 1e-9 {
		t.Errorf("after another writer's late hour: %v, want %v", got, want)
	}
}
