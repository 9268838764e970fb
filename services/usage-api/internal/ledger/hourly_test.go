package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestHourly: per-bucket sums over every user or one, the window's first bucket rounded down to its hour, and
// idle-but-held counted per user and class: a time-sliced share busier than it holds offsets nobody's idle GPU,
// and time whose use is unknown is not idle.
func TestHourly(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	hour := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	carolH100 := Key{User: "carol", Kind: "gpu", Class: "gpu H100-80GB-HBM3"}
	seed := []Increment{
		// 08:00: alice holds 1 GPU-hour and uses half; bob's T4 share holds 0.25 and keeps the whole T4 busy.
		{Key: aliceMIG, Bucket: hour.Add(-2 * time.Hour), Totals: Totals{Allocated: 3600, Used: 1800}},
		{Key: bobT4, Bucket: hour.Add(-2 * time.Hour), Totals: Totals{Allocated: 900, Used: 3600}},
		// 09:00: carol holds an H100 she never uses; alice's use is unknown.
		{Key: carolH100, Bucket: hour.Add(-time.Hour), Totals: Totals{Allocated: 3600}},
		{Key: aliceMIG, Bucket: hour.Add(-time.Hour), Totals: Totals{Allocated: 1800, UsedUnknown: 1800}},
		// 10:00, the current hour: outside a window that ends at 10:00.
		{Key: carolH100, Bucket: hour, Totals: Totals{Allocated: 600}},
		// 06:00: before the window.
		{Key: carolH100, Bucket: hour.Add(-4 * time.Hour), Totals: Totals{Allocated: 3600}},
	}
	var sum Totals
	for _, inc := range seed {
		sum.add(inc.Totals)
	}
	if err := s.Commit(ctx, nil, Checkpoint{At: hour.Add(10 * time.Minute), Ticks: 1, Sums: sum}, seed); err != nil {
		t.Fatal(err)
	}
	l, err := New(ctx, s, Options{Interval: interval}, hour.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		q    Query
		want []HourTotals
	}{
		"every user": {
			q: Query{From: hour.Add(-3*time.Hour + 30*time.Minute), To: hour},
			want: []HourTotals{
				{Bucket: hour.Add(-2 * time.Hour), Totals: Totals{Allocated: 1.25, Used: 1.5}, Idle: 0.5},
				{Bucket: hour.Add(-time.Hour), Totals: Totals{Allocated: 1.5, UsedUnknown: 0.5}, Idle: 1},
			},
		},
		"one user, current hour included": {
			q: Query{From: hour.Add(-2 * time.Hour), To: hour.Add(time.Hour), User: "carol"},
			want: []HourTotals{
				{Bucket: hour.Add(-time.Hour), Totals: Totals{Allocated: 1}, Idle: 1},
				{Bucket: hour, Totals: Totals{Allocated: 600.0 / 3600}, Idle: 600.0 / 3600},
			},
		},
		"nothing": {q: Query{From: hour.Add(-48 * time.Hour), To: hour.Add(-24 * time.Hour)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := l.Hourly(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-9), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Hourly (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHourlyBreakdown: Breakdown is Hours with each key's idle time, clamped hour bucket by hour bucket.
func TestHourlyBreakdown(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	hour := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	seed := []Increment{
		// bob's share is busier than it holds at 08:00 and idle at 09:00: 08:00 does not make up for 09:00.
		{Key: bobT4, Bucket: hour.Add(-2 * time.Hour), Totals: Totals{Allocated: 900, Used: 3600}},
		{Key: bobT4, Bucket: hour.Add(-time.Hour), Totals: Totals{Allocated: 900}},
		{Key: aliceMIG, Bucket: hour.Add(-time.Hour), Totals: Totals{Allocated: 3600, Used: 1800, UsedUnknown: 900}},
	}
	var sum Totals
	for _, inc := range seed {
		sum.add(inc.Totals)
	}
	if err := s.Commit(ctx, nil, Checkpoint{At: hour, Ticks: 1, Sums: sum}, seed); err != nil {
		t.Fatal(err)
	}
	l, err := New(ctx, s, Options{Interval: interval}, hour)
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Breakdown(ctx, Query{From: hour.Add(-3 * time.Hour), To: hour})
	if err != nil {
		t.Fatal(err)
	}
	want := []Usage{
		{Row: Row{Key: aliceMIG, Totals: Totals{Allocated: 1, Used: 0.5, UsedUnknown: 0.25}}, Idle: 0.25},
		{Row: Row{Key: bobT4, Totals: Totals{Allocated: 0.5, Used: 1}}, Idle: 0.25},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("Breakdown (-want +got):\n%s", diff)
	}
	rows, err := l.Hours(ctx, Query{From: hour.Add(-3 * time.Hour), To: hour})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Row{want[0].Row, want[1].Row}, rows, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("Hours (-want +got):\n%s", diff)
	}
}
