package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A pod that went since the last tick (Sample.Until: deleted, or no longer Running, when the informer told) is
// charged up to when it went, not up to the last tick that saw it, which can be more than an interval before its
// end (issue 34's chaos flake: a tick delayed by a slow agent poll); never past the tick, never twice, also when
// the tick that is told commits nothing or comes after a long gap.
func TestRecordChargesDepartedPodUntilItWent(t *testing.T) {
	held := func(since time.Duration) Sample {
		return Sample{Key: bobT4, Pod: "uid-p", Since: t0.Add(since), Allocated: 0.25, Used: 0.25, UsedKnown: true}
	}
	went := func(since, until time.Duration) Sample {
		s := held(since)
		s.Until, s.Used, s.UsedKnown = t0.Add(until), 0, false
		return s
	}
	type tick struct {
		at      time.Duration
		samples []Sample
		fail    bool // the commit fails (the database is down)
	}
	const s = time.Second
	tests := map[string]struct {
		ticks    []tick
		want     float64 // allocated GPU-seconds of bobT4
		wantLeft []Departure
		wantGap  float64
	}{
		"gone between two ticks": {
			// Held at :00 (the ledger's first tick) and :05, gone at :07, found gone at :10: 7 s, not 5.
			ticks:    []tick{{0, []Sample{held(-time.Minute)}, false}, {5 * s, []Sample{held(-time.Minute)}, false}, {10 * s, []Sample{went(-time.Minute, 7*s)}, false}},
			want:     7 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(7 * s)}},
		},
		"started and gone between two ticks": {
			ticks:    []tick{{0, nil, false}, {5 * s, nil, false}, {10 * s, []Sample{went(6*s, 8*s)}, false}},
			want:     2 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(8 * s)}},
		},
		"told a tick late": {
			// Found gone at :10 before the informer told; told at :15 that it went at :07.
			ticks:    []tick{{0, []Sample{held(-time.Minute)}, false}, {5 * s, []Sample{held(-time.Minute)}, false}, {10 * s, nil, false}, {15 * s, []Sample{went(-time.Minute, 7*s)}, false}},
			want:     7 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(7 * s)}},
		},
		"told after a tick that charged it": {
			// A tick at :10 still held it: charged to :10 once.
			ticks:    []tick{{0, []Sample{held(-time.Minute)}, false}, {5 * s, []Sample{held(-time.Minute)}, false}, {10 * s, []Sample{held(-time.Minute)}, false}, {15 * s, []Sample{went(-time.Minute, 7*s)}, false}},
			want:     10 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(10 * s)}},
		},
		"went after the tick by its clock": {
			ticks:    []tick{{0, []Sample{held(-time.Minute)}, false}, {5 * s, []Sample{went(-time.Minute, 9*s)}, false}},
			want:     5 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(5 * s)}},
		},
		"told while the database is down": {
			// The tick at :10 that is told commits nothing; the one at :15 charges it up to :07.
			ticks:    []tick{{0, []Sample{held(-time.Minute)}, false}, {5 * s, []Sample{held(-time.Minute)}, false}, {10 * s, []Sample{went(-time.Minute, 7*s)}, true}, {15 * s, nil, false}},
			want:     7 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(7 * s)}},
		},
		"after a gap longer than MaxGap": {
			// Its end is known: charged to :40, not only to the checkpoint; no gap of unknowns.
			ticks:    []tick{{0, []Sample{held(-time.Minute)}, false}, {5 * s, []Sample{held(-time.Minute)}, false}, {60 * s, []Sample{went(-time.Minute, 40*s)}, false}},
			want:     40 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(40 * s)}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := testDatabase(t)
			fs := &faultyStore{store: db()}
			l, err := New(ctx, fs, Options{Interval: interval}, t0)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range tc.ticks {
				fs.set(func(f *faultyStore) {
					f.failCommit = nil
					if tk.fail {
						f.failCommit = errDown
					}
				})
				_, err := l.Record(ctx, t0.Add(tk.at), tk.samples)
				if tk.fail != (err != nil) {
					t.Fatalf("tick at %s: error %v, want failing %v", tk.at, err, tk.fail)
				}
			}
			s := db()
			if got := allocated(t, s, bobT4); !approxEqual(got, tc.want) {
				t.Errorf("allocated %.3f GPU-s, want %.3f", got, tc.want)
			}
			cp := checkConsistent(t, s)
			if diff := cmp.Diff(tc.wantLeft, cp.Left); diff != "" {
				t.Errorf("departures (-want +got):\n%s", diff)
			}
			if len(cp.Held) != 0 {
				t.Errorf("held at the end: %+v, want none", cp.Held)
			}
			if cp.GapSeconds != tc.wantGap {
				t.Errorf("gap %v s, want %v", cp.GapSeconds, tc.wantGap)
			}
		})
	}
}
