package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type rollingHours = map[time.Duration]map[string]map[string]float64

// TestRolling: rolling windows from hour buckets, the first bucket prorated, the current hour from memory,
// and the hourly sums computed again after a commit to an earlier bucket.
func TestRolling(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	now := time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC) // a quarter into the 10:00 bucket
	hour := now.Truncate(time.Hour)
	aliceH100 := Key{User: "alice", Kind: "gpu", Class: "gpu H100-80GB-HBM3"}
	seed := []Increment{
		// 24h window: [09:15 yesterday, 10:15]. The 09:00 bucket of yesterday is its first, 3/4 inside.
		{Key: aliceMIG, Bucket: hour.Add(-24 * time.Hour), Totals: Totals{Allocated: 3600}},
		{Key: aliceMIG, Bucket: hour.Add(-25 * time.Hour), Totals: Totals{Allocated: 3600}}, // outside 24h, inside 7d
		{Key: aliceMIG, Bucket: hour.Add(-5 * time.Hour), Totals: Totals{Allocated: 1800}},
		{Key: aliceH100, Bucket: hour.Add(-time.Hour), Totals: Totals{Allocated: 7200}},
		{Key: bobT4, Bucket: hour.Add(-8 * 24 * time.Hour), Totals: Totals{Allocated: 900}}, // outside both
		// A 1h window's first bucket is the previous hour: 3/4 of it.
	}
	var sum Totals
	for _, inc := range seed {
		sum.add(inc.Totals)
	}
	if err := s.Commit(ctx, nil, Checkpoint{At: now.Add(-time.Minute), Ticks: 1, Sums: sum}, seed); err != nil {
		t.Fatal(err)
	}
	counting := &countingStore{store: s}
	l, err := New(ctx, counting, Options{Interval: interval}, now)
	if err != nil {
		t.Fatal(err)
	}
	// A tick in the current hour: bob holds a T4 share (60 s since the checkpoint > MaxGap: 5 s are charged).
	if _, err := l.Record(ctx, now, []Sample{{Key: bobT4, Allocated: 0.25}}); err != nil {
		t.Fatal(err)
	}
	bobNow := 0.25 * 5 / 3600
	want := rollingHours{
		time.Hour: {"alice": {"gpu H100-80GB-HBM3": 2 * 0.75}, "bob": {"shared T4": bobNow}},
		24 * time.Hour: {
			"alice": {"mig A100-SXM4-40GB 3g.20gb": 0.75 + 0.5, "gpu H100-80GB-HBM3": 2},
			"bob":   {"shared T4": bobNow},
		},
		7 * 24 * time.Hour: {
			"alice": {"mig A100-SXM4-40GB 3g.20gb": 2.5, "gpu H100-80GB-HBM3": 2},
			"bob":   {"shared T4": bobNow},
		},
	}
	got, err := l.Rolling(ctx, []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("Rolling (-want +got):\n%s", diff)
	}

	// A late write to an earlier bucket (the first tick after an outage): the sums are computed again.
	late := []Increment{{Key: aliceMIG, Bucket: hour.Add(-2 * time.Hour), Totals: Totals{Allocated: 3600}}}
	cp, _ := l.Checkpoint()
	next := cp
	next.Sums.add(late[0].Totals)
	if err := s.Commit(ctx, &cp, next, late); err != nil {
		t.Fatal(err)
	}
	l.applyToCache(ctx, now, late)
	got, err = l.Rolling(ctx, []time.Duration{24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(1.25+1, got[24*time.Hour]["alice"]["mig A100-SXM4-40GB 3g.20gb"], approx); diff != "" {
		t.Errorf("after a late write (-want +got):\n%s", diff)
	}

	// At the end of the hour the first bucket is out of the window; bad windows are refused.
	got, err = l.Rolling(ctx, []time.Duration{24 * time.Hour}, hour.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(0.5+1, got[24*time.Hour]["alice"]["mig A100-SXM4-40GB 3g.20gb"], approx); diff != "" {
		t.Errorf("end of the hour (-want +got):\n%s", diff)
	}
	// The hour rolls over with ticks: the cache is rolled forward (no second scan) and answers what a fresh
	// ledger computes from scratch.
	windows := []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}
	if _, err := l.Rolling(ctx, windows, now); err != nil { // the windows the late write made it forget
		t.Fatal(err)
	}
	scans := counting.scans
	at := now
	for range 3 {
		at = at.Add(25 * time.Minute)
		for i := range 5 { // a few ticks that charge, then the rollover
			if _, err := l.Record(ctx, at.Add(time.Duration(i)*interval), []Sample{{Key: bobT4, Allocated: 0.25}, {Key: aliceH100, Allocated: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		at = at.Add(4 * interval)
		rolled, err := l.Rolling(ctx, windows, at)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := New(ctx, s, Options{Interval: interval}, at)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fresh.Rolling(ctx, windows, at)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, rolled, approx); diff != "" {
			t.Errorf("rolled at %s (-fresh +rolled):\n%s", at.Format("15:04"), diff)
		}
	}
	if counting.scans != scans {
		t.Errorf("the rolling windows were scanned again %d times as the hours rolled; want rolled forward", counting.scans-scans)
	}

	for _, bad := range [][]time.Duration{{90 * time.Minute}, {30 * time.Minute}, make([]time.Duration, MaxRollingWindows+1)} {
		if _, err := l.Rolling(ctx, bad, now); err == nil {
			t.Errorf("Rolling(%v) accepted", bad)
		}
	}
}

// TestRollingManyUsers: 10,000 users with two hours of use each answer from the hourly cache, the
// expensive scan done once (what gpu-quota's refresh every few seconds costs).
func TestRollingManyUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 10,000 users")
	}
	ctx := context.Background()
	s := openTestStore(t)
	now := time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)
	hour := now.Truncate(time.Hour)
	const users, hours = 10000, 2
	var seed []Increment
	var sum Totals
	for u := range users {
		k := Key{User: fmt.Sprintf("user%05d", u), Kind: "gpu", Class: "gpu A100"}
		for h := 1; h <= hours; h++ {
			inc := Increment{Key: k, Bucket: hour.Add(-time.Duration(h) * time.Hour), Totals: Totals{Allocated: 3600}}
			seed = append(seed, inc)
			sum.add(inc.Totals)
		}
	}
	if err := s.Commit(ctx, nil, Checkpoint{At: now.Add(-time.Minute), Ticks: 1, Sums: sum}, seed); err != nil {
		t.Fatal(err)
	}
	l, err := New(ctx, s, Options{Interval: interval}, now)
	if err != nil {
		t.Fatal(err)
	}
	windows := []time.Duration{24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour}
	start := time.Now()
	got, err := l.Rolling(ctx, windows, now)
	first := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got[24*time.Hour]); n != users {
		t.Fatalf("users in 24h = %d, want %d", n, users)
	}
	if diff := cmp.Diff(2.0, got[24*time.Hour]["user00042"]["gpu A100"], approx); diff != "" {
		t.Errorf("24h of a user (-want +got):\n%s", diff)
	}
	start = time.Now()
	if _, err := l.Rolling(ctx, windows, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	cached := time.Since(start)
	t.Logf("%d users x %d hours: first answer %v (one grouped query), cached %v", users, hours, first, cached)
	if cached > time.Second {
		t.Errorf("a cached answer took %v", cached)
	}
}

// countingStore counts the full scans of the rolling windows.
type countingStore struct {
	store
	scans int
}

func (c *countingStore) rollingSums(ctx context.Context, current time.Time, windows []time.Duration) (map[time.Duration]*RollingSums, error) {
	c.scans++
	return c.store.rollingSums(ctx, current, windows)
}
