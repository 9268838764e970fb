package ledger

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

const interval = 5 * time.Second

func openTestStore(t *testing.T) *Store {
	t.Helper()
	return testDatabase(t)()
}

// testDatabase creates an empty ledger database (PostgreSQL when GPUHUB_TEST_POSTGRES_URL is set, else a SQLite
// file) and returns a function that opens one more handle on it, as another process would.
func testDatabase(t *testing.T) func() *Store {
	t.Helper()
	if url := testPostgresURL(); url != "" {
		url = testPostgresSchema(t, url)
		return func() *Store {
			t.Helper()
			s, err := OpenPostgres(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	return func() *Store {
		t.Helper()
		s, err := OpenSQLite(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

var (
	aliceMIG = Key{User: "alice", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}
	bobT4    = Key{User: "bob", Kind: "shared", Class: "shared T4"}
)

func samples() []Sample {
	return []Sample{
		{Key: aliceMIG, Allocated: 3.0 / 7, Used: 3.0 / 7 * 0.5, UsedKnown: true},
		{Key: bobT4, Allocated: 0.25}, // utilization unknown
	}
}

// podSamples are samples() held by two pods that started at since.
func podSamples(since time.Time) []Sample {
	out := samples()
	for i := range out {
		out[i].Pod, out[i].Since = "uid-"+out[i].User, since
	}
	return out
}

var approx = cmpopts.EquateApprox(0, 1e-9)

func TestRecord(t *testing.T) {
	type tick struct {
		at      time.Time
		samples []Sample
	}
	cases := map[string]struct {
		ticks       []tick
		wantRows    []Row // GPU-seconds
		wantGap     float64
		wantTicks   int64
		wantCharged time.Duration // of the last tick
	}{
		"first tick only sets the checkpoint": {
			ticks:     []tick{{t0, samples()}},
			wantTicks: 1,
		},
		"two ticks charge one interval with the second observation": {
			ticks: []tick{{t0, nil}, {t0.Add(interval), samples()}},
			wantRows: []Row{
				{Key: aliceMIG, Totals: Totals{Allocated: 5 * 3.0 / 7, Used: 5 * 1.5 / 7}},
				{Key: bobT4, Totals: Totals{Allocated: 1.25, UsedUnknown: 1.25}},
			},
			wantTicks: 2, wantCharged: interval,
		},
		"a gap longer than MaxGap charges one interval to a sample of no known pod": {
			ticks: []tick{{t0, nil}, {t0.Add(10 * time.Minute), samples()[1:]}},
			wantRows: []Row{
				{Key: bobT4, Totals: Totals{Allocated: 1.25, UsedUnknown: 1.25}},
			},
			wantGap: 600 - 5, wantTicks: 2, wantCharged: 10 * time.Minute,
		},
		"a gap longer than MaxGap is charged in full to a pod held before and after it, start time unknown": {
			ticks: []tick{{t0, podSamples(time.Time{})}, {t0.Add(10 * time.Minute), podSamples(time.Time{})}},
			wantRows: []Row{
				// Utilization over the gap is unknown; the observation (50 %) stands for the last interval.
				{Key: aliceMIG, Totals: Totals{Allocated: 600 * 3.0 / 7, Used: 5 * 1.5 / 7, UsedUnknown: 595 * 3.0 / 7}},
				{Key: bobT4, Totals: Totals{Allocated: 150, UsedUnknown: 150}},
			},
			wantTicks: 2, wantCharged: 10 * time.Minute,
		},
		"a pod that started between ticks is charged from its start": {
			ticks: []tick{{t0, nil}, {t0.Add(interval), podSamples(t0.Add(3 * time.Second))}},
			wantRows: []Row{
				{Key: aliceMIG, Totals: Totals{Allocated: 2 * 3.0 / 7, Used: 2 * 1.5 / 7}},
				{Key: bobT4, Totals: Totals{Allocated: 0.5, UsedUnknown: 0.5}},
			},
			wantTicks: 2, wantCharged: interval,
		},
		"a gap within MaxGap is charged in full": {
			ticks: []tick{{t0, nil}, {t0.Add(20 * time.Second), samples()[1:]}},
			wantRows: []Row{
				{Key: bobT4, Totals: Totals{Allocated: 5, UsedUnknown: 5}},
			},
			wantTicks: 2, wantCharged: 20 * time.Second,
		},
		"a wall clock within MaxGap behind the checkpoint waits for it (another writer's clock ahead)": {
			ticks:     []tick{{t0, nil}, {t0.Add(-20 * time.Second), samples()}, {t0.Add(-time.Second), samples()}},
			wantTicks: 1,
		},
		"... and charges from it once the wall clock passes it: nothing lost": {
			ticks:     []tick{{t0, nil}, {t0.Add(-20 * time.Second), samples()}, {t0.Add(2 * time.Second), samples()[1:]}},
			wantRows:  []Row{{Key: bobT4, Totals: Totals{Allocated: 0.5, UsedUnknown: 0.5}}},
			wantTicks: 2, wantCharged: 2 * time.Second,
		},
		"a wall clock far behind the checkpoint, no monotonic reading: re-anchored, nothing charged": {
			ticks:     []tick{{t0, nil}, {t0.Add(-time.Hour), samples()}, {t0.Add(-time.Hour + interval), samples()[1:]}},
			wantRows:  []Row{{Key: bobT4, Totals: Totals{Allocated: 1.25, UsedUnknown: 1.25}}},
			wantTicks: 3, wantCharged: interval,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTestStore(t)
			l, err := New(ctx, s, Options{Interval: interval}, t0)
			if err != nil {
				t.Fatal(err)
			}
			var res Result
			for _, tk := range tc.ticks {
				if res, err = l.Record(ctx, tk.at, tk.samples); err != nil {
					t.Fatal(err)
				}
			}
			if res.Charged != tc.wantCharged {
				t.Errorf("charged = %v, want %v", res.Charged, tc.wantCharged)
			}
			rows, err := s.Sum(ctx, Query{From: t0.Add(-24 * time.Hour), To: t0.Add(24 * time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantRows, rows, approx); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			cp, _, err := s.Checkpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if cp.Ticks != tc.wantTicks || math.Abs(cp.GapSeconds-tc.wantGap) > 1e-9 {
				t.Errorf("checkpoint ticks=%d gap=%v, want %d %v", cp.Ticks, cp.GapSeconds, tc.wantTicks, tc.wantGap)
			}
			checkConsistent(t, s)
		})
	}
}

// checkConsistent asserts the checkpoint's running sums equal the sums over the usage table: increments and
// checkpoint were committed together.
func checkConsistent(t *testing.T, s *Store) Checkpoint {
	t.Helper()
	cp, _, err := s.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.Sum(context.Background(), Query{From: time.Unix(0, 0), To: time.Unix(1<<40, 0)})
	if err != nil {
		t.Fatal(err)
	}
	var sum Totals
	for _, r := range rows {
		sum.add(r.Totals)
	}
	if diff := cmp.Diff(cp.Sums, sum, cmpopts.EquateApprox(1e-9, 1e-6)); diff != "" {
		t.Fatalf("checkpoint sums vs table sums (-checkpoint +table):\n%s", diff)
	}
	return cp
}

func TestSplitHours(t *testing.T) {
	cases := map[string]struct {
		from, to time.Time
		want     []span
	}{
		"inside one hour":      {t0.Add(time.Minute), t0.Add(2 * time.Minute), []span{{t0, time.Minute}}},
		"starts at a boundary": {t0, t0.Add(5 * time.Second), []span{{t0, 5 * time.Second}}},
		"crosses a boundary":   {t0.Add(-2 * time.Second), t0.Add(3 * time.Second), []span{{t0.Add(-time.Hour), 2 * time.Second}, {t0, 3 * time.Second}}},
		"ends at a boundary":   {t0.Add(-2 * time.Second), t0, []span{{t0.Add(-time.Hour), 2 * time.Second}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, splitHours(tc.from, tc.to), cmp.AllowUnexported(span{})); diff != "" {
				t.Errorf("splitHours (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRestartContinuesWithoutDoubleCounting(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(ctx, s, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	one := []Sample{{Key: aliceMIG, Allocated: 1, Used: 1, UsedKnown: true}}
	for i := range 4 {
		if _, err := l.Record(ctx, t0.Add(time.Duration(i)*interval), one); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()

	// A second instance resumes from the checkpoint: the 7 s restart is charged, nothing is charged twice.
	s2, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s2.Close() }()
	restart := t0.Add(3*interval + 7*time.Second)
	l2, err := New(ctx, s2, Options{Interval: interval}, restart)
	if err != nil {
		t.Fatal(err)
	}
	if got := l2.UserWindows("alice").Today.Allocated; math.Abs(got-15.0/3600) > 1e-12 {
		t.Errorf("today after restart = %v GPU-h, want %v", got, 15.0/3600)
	}
	if _, err := l2.Record(ctx, restart, one); err != nil {
		t.Fatal(err)
	}
	if got := l2.UserWindows("alice").Today.Allocated; math.Abs(got-22.0/3600) > 1e-12 {
		t.Errorf("today after first tick = %v GPU-h, want %v", got, 22.0/3600)
	}
	checkConsistent(t, s2)

	// The stale first instance finds the checkpoint moved, re-reads it and charges nothing twice: its tick
	// (t0+20 s) lies before the second instance's checkpoint (t0+22 s).
	s3, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s3.Close() }()
	l.store = s3
	res, err := l.Record(ctx, t0.Add(4*interval), one)
	if err != nil || !res.Conflict || len(res.PerKey) != 0 {
		t.Errorf("stale writer: conflict=%v perKey=%v err=%v, want a conflict that charges nothing", res.Conflict, res.PerKey, err)
	}
	if got := allocated(t, s2, aliceMIG); got != 22 {
		t.Errorf("allocated after the stale writer's tick = %v GPU-s, want 22", got)
	}
	checkConsistent(t, s2)
}

func TestUserWindows(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	// Old usage: 40 days ago (outside), 10 days ago (30d only), 3 days ago (7d and 30d), today at 01:00.
	now := time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC)
	seed := []Increment{
		{Key: aliceMIG, Bucket: now.Add(-40 * 24 * time.Hour).Truncate(time.Hour), Totals: Totals{Allocated: 3600}},
		{Key: aliceMIG, Bucket: now.Add(-10 * 24 * time.Hour).Truncate(time.Hour), Totals: Totals{Allocated: 7200, Used: 3600}},
		{Key: aliceMIG, Bucket: now.Add(-3 * 24 * time.Hour).Truncate(time.Hour), Totals: Totals{Allocated: 3600}},
		{Key: aliceMIG, Bucket: time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC), Totals: Totals{Allocated: 1800, UsedUnknown: 1800}},
	}
	var sum Totals
	for _, inc := range seed {
		sum.add(inc.Totals)
	}
	if err := s.Commit(ctx, nil, Checkpoint{At: now.Add(-time.Minute), Ticks: 1, Sums: sum}, seed); err != nil {
		t.Fatal(err)
	}
	l, err := New(ctx, s, Options{Interval: interval}, now)
	if err != nil {
		t.Fatal(err)
	}
	// And live ticks in the current hour.
	if _, err := l.Record(ctx, now, []Sample{{Key: aliceMIG, Allocated: 1, Used: 0.5, UsedKnown: true}}); err != nil {
		t.Fatal(err)
	}
	// 60 s since the checkpoint > MaxGap (30 s): only one interval (5 s) is charged.
	live := Totals{Allocated: 5.0 / 3600, Used: 2.5 / 3600}
	want := Windows{
		Today:  Totals{Allocated: 0.5 + live.Allocated, Used: live.Used, UsedUnknown: 0.5},
		Days7:  Totals{Allocated: 1.5 + live.Allocated, Used: live.Used, UsedUnknown: 0.5},
		Days30: Totals{Allocated: 3.5 + live.Allocated, Used: 1 + live.Used, UsedUnknown: 0.5},
	}
	if diff := cmp.Diff(want, l.UserWindows("alice"), approx); diff != "" {
		t.Errorf("UserWindows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Windows{}, l.UserWindows("nobody")); diff != "" {
		t.Errorf("UserWindows(nobody) (-want +got):\n%s", diff)
	}
	// The hour rolls over: the cache re-sums from the store and stays equal.
	next := now.Add(30 * time.Minute)
	if _, err := l.Record(ctx, next, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, l.UserWindows("alice"), approx); diff != "" {
		t.Errorf("UserWindows after rollover (-want +got):\n%s", diff)
	}
	rows, err := l.Hours(ctx, Query{From: now.Add(-11 * 24 * time.Hour), To: now.Add(-9 * 24 * time.Hour), User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Row{{Key: aliceMIG, Totals: Totals{Allocated: 2, Used: 1}}}, rows, approx); diff != "" {
		t.Errorf("Hours custom window (-want +got):\n%s", diff)
	}
}

// TestCacheInChunks: a tick of more increments than one hold of the cache's lock adds (cacheChunk), with users
// whose two classes straddle a chunk's end, leaves every user's windows and the rolling sums as the store has them.
func TestCacheInChunks(t *testing.T) {
	ctx := context.Background()
	l, err := New(ctx, openTestStore(t), Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	users := cacheChunk + 100 // two increments each: every chunk's end falls between a user's two
	var tick []Sample
	for i := range users {
		user := fmt.Sprintf("user%04d", i)
		tick = append(tick,
			Sample{Key: Key{User: user, Kind: "gpu", Class: "gpu A100"}, Pod: user + "-a", Since: t0, Allocated: 1, Used: 0.5, UsedKnown: true},
			Sample{Key: Key{User: user, Kind: "mig", Class: "mig 1g.10gb"}, Pod: user + "-b", Since: t0, Allocated: float64(i%3+1) / 7})
	}
	for i := range 3 {
		if _, err := l.Record(ctx, t0.Add(time.Duration(i)*interval), tick); err != nil {
			t.Fatal(err)
		}
	}
	for i := range users {
		user := fmt.Sprintf("user%04d", i)
		want := 2 * interval.Seconds() / 3600 * (1 + float64(i%3+1)/7) // two intervals charged, both classes
		if got := l.UserWindows(user).Today.Allocated; math.Abs(got-want) > 1e-12 {
			t.Fatalf("%s's today = %v GPU-h, want %v", user, got, want)
		}
	}
}
