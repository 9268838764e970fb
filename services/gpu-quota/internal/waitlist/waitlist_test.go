package waitlist

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)

func TestFactorAndDecay(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		usage, total, shares, allShares float64
		want                            float64
	}{
		{"used nothing", 0, 100, 1, 2, 1},
		{"nobody used anything", 0, 0, 1, 2, 1},
		{"used exactly its share", 50, 100, 1, 2, 0.5},
		{"used everything with half the shares", 100, 100, 1, 2, 0.25},
		{"twice the shares halves the exponent", 100, 100, 2, 2, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Factor(tc.usage, tc.total, tc.shares, tc.allShares); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("Factor = %v, want %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		age, halfLife time.Duration
		want          float64
	}{{0, 7 * 24 * time.Hour, 1}, {7 * 24 * time.Hour, 7 * 24 * time.Hour, 0.5}, {14 * 24 * time.Hour, 7 * 24 * time.Hour, 0.25}} {
		if got := Decay(tc.age, tc.halfLife); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Decay(%v, %v) = %v, want %v", tc.age, tc.halfLife, got, tc.want)
		}
	}
	for p, want := range map[int]float64{0: 1, 1: 2, 3: 4, -1: 0.5, -3: 0.25} {
		if got := Shares(p); got != want {
			t.Errorf("Shares(%d) = %v, want %v", p, got, want)
		}
	}
}

// The README's worked example: a half-life of 7 days; alice used 20 GPU-hours 7 days ago and 10 today, bob 8
// today, carol nothing; all at the default priority.
func TestWorkedExample(t *testing.T) {
	week := 7 * 24 * time.Hour
	usage := map[string]float64{
		"alice": 20*Decay(week, week) + 10*Decay(0, week), // 20
		"bob":   8 * Decay(0, week),                       // 8
		"carol": 0,
	}
	total := usage["alice"] + usage["bob"] + usage["carol"] // 28
	factor := func(u string) float64 { return Factor(usage[u], total, 1, 3) }
	var s State
	for i, u := range []string{"alice", "bob", "carol"} {
		s.Join(Entry{User: u, Class: "gpu H100"}, t0.Add(time.Duration(i)*time.Minute))
	}
	var got []string
	for _, e := range s.Order("gpu H100", factor) {
		got = append(got, e.User)
	}
	if diff := cmp.Diff([]string{"carol", "bob", "alice"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	for u, want := range map[string]float64{"alice": 0.2264, "bob": 0.5520, "carol": 1} {
		if got := math.Round(factor(u)*1e4) / 1e4; got != want {
			t.Errorf("F(%s) = %v, want %v", u, got, want)
		}
	}
}

func TestOrder(t *testing.T) {
	flat := func(string) float64 { return 1 }
	var s State
	s.Join(Entry{User: "a", Class: "x"}, t0)
	s.Join(Entry{User: "b", Class: "x"}, t0) // same instant: arrival (Seq) breaks the tie
	s.Join(Entry{User: "c", Class: "y"}, t0)
	s.Join(Entry{User: "d", Class: "x"}, t0.Add(time.Second))
	order := func(class string, f Standing) []string {
		var out []string
		for _, e := range s.Order(class, f) {
			out = append(out, e.User)
		}
		return out
	}
	if diff := cmp.Diff([]string{"a", "b", "d"}, order("x", flat)); diff != "" {
		t.Errorf("ties by arrival (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"d", "a", "b"}, order("x", func(u string) float64 {
		if u == "d" {
			return 0.9
		}
		return 0.5
	})); diff != "" {
		t.Errorf("fair share first (-want +got):\n%s", diff)
	}
	// A held entry goes first whatever its factor; rejoining the same class keeps the place.
	if _, err := s.Hold("b", "", t0.Add(time.Minute), 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	s.Join(Entry{User: "a", Class: "x", AutoStart: true}, t0.Add(time.Hour))
	if diff := cmp.Diff([]string{"b", "a", "d"}, order("x", flat)); diff != "" {
		t.Errorf("held first (-want +got):\n%s", diff)
	}
	// Joining another class starts again at the end of that queue.
	s.Join(Entry{User: "a", Class: "y"}, t0.Add(2*time.Hour))
	if diff := cmp.Diff([]string{"c", "a"}, order("y", flat)); diff != "" {
		t.Errorf("moved (-want +got):\n%s", diff)
	}
	if ex := s.Expire(t0.Add(11 * time.Minute)); len(ex) != 1 || ex[0].User != "b" {
		t.Errorf("expired: %+v", ex)
	}
	if diff := cmp.Diff([]string{"d"}, order("x", flat)); diff != "" {
		t.Errorf("after expiry (-want +got):\n%s", diff)
	}
	if _, err := s.Remove("zed", ""); !errors.Is(err, ErrNotQueued) {
		t.Errorf("Remove unknown: %v", err)
	}
}

func TestEstimate(t *testing.T) {
	now := t0
	ds := []time.Time{now.Add(30 * time.Minute), now.Add(-time.Minute), now.Add(10 * time.Minute)}
	for _, tc := range []struct {
		pos      int
		turnover time.Duration
		want     time.Time
	}{
		{1, 0, now}, // a deadline already past: now
		{2, 0, now.Add(10 * time.Minute)},
		{3, 0, now.Add(30 * time.Minute)},
		{4, 0, time.Time{}}, // nothing tells
		{5, time.Hour, now.Add(30*time.Minute + 2*time.Hour)},
	} {
		if got := Estimate(tc.pos, ds, tc.turnover, now); !got.Equal(tc.want) {
			t.Errorf("Estimate(%d, %v) = %v, want %v", tc.pos, tc.turnover, got, tc.want)
		}
	}
	tu := NewTurnover(now, 24*time.Hour)
	if m := tu.Mean("x", now.Add(time.Hour)); m != 0 {
		t.Errorf("no release: %v", m)
	}
	tu.Freed("x", now.Add(time.Hour), 2)
	if m := tu.Mean("x", now.Add(4*time.Hour)); m != 2*time.Hour {
		t.Errorf("two in four hours: %v", m)
	}
	if m := tu.Mean("x", now.Add(26*time.Hour)); m != 0 {
		t.Errorf("forgotten after a day: %v", m)
	}
}
