package ledger

import (
	"context"
	"database/sql"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A pod is charged from its start even when the first tick that sees it comes more than an interval later (an
// informer's lag, a slow tick); one that a tick missed (a second writer whose informer lagged) from where its
// charge stopped; and never twice: a pod the checkpoint cannot tell about is charged from where the ledger's
// memory of departures begins (Checkpoint.LeftSince) or, for a checkpoint written before that memory existed,
// from the checkpoint.
func TestRecordChargesFromStart(t *testing.T) {
	pod := func(since time.Duration) Sample {
		return Sample{Key: bobT4, Pod: "uid-p", Since: t0.Add(since), Allocated: 0.25, Used: 0.25, UsedKnown: true}
	}
	every := func(n int, s []Sample) [][]Sample {
		out := make([][]Sample, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	concat := func(parts ...[][]Sample) [][]Sample {
		var out [][]Sample
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	one := func(s ...Sample) [][]Sample { return [][]Sample{s} }
	const minute = 60 / 5 // ticks

	tests := map[string]struct {
		oldCheckpoint bool        // the first tick's checkpoint is written as a release before Left did
		ticks         [][]Sample  // tick i at t0 + i x interval
		want          float64     // allocated GPU-seconds of bobT4
		wantLeft      []Departure // at the end
	}{
		"first seen two ticks after its start": {
			// Started 10:00:07, seen at :15 and :20, gone at :25: 13 s, not the 10 s since the checkpoint at :10.
			ticks:    concat(every(3, nil), every(2, []Sample{pod(7 * time.Second)}), one()),
			want:     13 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(20 * time.Second)}},
		},
		"missed by one tick": {
			// Held from the ledger's first tick at 10:00:00, missed at :10, seen at :15 and :20: 20 s, once.
			ticks:    concat(every(2, []Sample{pod(-time.Minute)}), one(), every(2, []Sample{pod(-time.Minute)}), one()),
			want:     20 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(20 * time.Second)}},
		},
		"started before the ledger": {
			// First seen at 10:00:10: from the ledger's start at 10:00:00 to :15.
			ticks:    concat(every(2, nil), every(2, []Sample{pod(-time.Minute)}), one()),
			want:     15 * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(15 * time.Second)}},
		},
		"started longer ago than the memory of departures": {
			// Started 10:01:00, first seen at 10:15:00: from 10:04:55 (10 minutes before the checkpoint) to 10:15:05.
			ticks:    concat(every(15*minute, nil), every(2, []Sample{pod(time.Minute)}), one()),
			want:     (10*60 + 10) * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(15*time.Minute + 5*time.Second)}},
		},
		"back after the memory of departures": {
			// Held at 10:00:00 only (the ledger's first tick charges nothing), back from 10:11:00 to 10:11:05: the
			// departure is forgotten at 10:10:05, so from 10:00:55 (10 minutes before the checkpoint at 10:10:55).
			ticks:    concat(one(pod(-time.Minute)), every(11*minute-1, nil), every(2, []Sample{pod(-time.Minute)}), one()),
			want:     (10*60 + 10) * 0.25,
			wantLeft: []Departure{{Pod: "uid-p", Until: t0.Add(11*time.Minute + 5*time.Second)}},
		},
		"checkpoint from before the memory of departures": {
			// The checkpoint at 10:00:00 does not say whether the pod (started 09:59:30, not held then) was charged
			// before: from it, 10 s to 10:00:10.
			oldCheckpoint: true,
			ticks:         concat(one(), every(2, []Sample{pod(-30 * time.Second)}), one()),
			want:          10 * 0.25,
			wantLeft:      []Departure{{Pod: "uid-p", Until: t0.Add(10 * time.Second)}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := testDatabase(t)
			s := db()
			ticks := tc.ticks
			if tc.oldCheckpoint {
				if err := s.Commit(ctx, nil, Checkpoint{At: t0, Ticks: 1}, nil); err != nil {
					t.Fatal(err)
				}
				ticks = ticks[1:]
			}
			l, err := New(ctx, s, Options{Interval: interval}, t0)
			if err != nil {
				t.Fatal(err)
			}
			first := 0
			if tc.oldCheckpoint {
				first = 1
			}
			for i, samples := range ticks {
				if _, err := l.Record(ctx, t0.Add(time.Duration(first+i)*interval), samples); err != nil {
					t.Fatal(err)
				}
			}
			if got := allocated(t, s, bobT4); !approxEqual(got, tc.want) {
				t.Errorf("allocated %.3f GPU-s, want %.3f", got, tc.want)
			}
			mem, _ := l.Checkpoint()
			stored, _, err := db().Checkpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantLeft, stored.Left); diff != "" {
				t.Errorf("stored departures (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(mem.Left, stored.Left); diff != "" {
				t.Errorf("departures (-memory +stored):\n%s", diff)
			}
			if !mem.LeftSince.Equal(stored.LeftSince) {
				t.Errorf("LeftSince in memory %v, stored %v", mem.LeftSince, stored.LeftSince)
			}
			checkConsistent(t, s)
		})
	}
}

func approxEqual(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// A ledger created by a release before the departures' memory opens: its checkpoint gains left_since_ns (0, so
// LeftSince is unknown) and the ledger_left table, and it integrates on from its checkpoint. Opening it again
// changes nothing.
func TestOpenMigratesCheckpoint(t *testing.T) {
	ctx := context.Background()
	driver, dsn := "sqlite", ""
	var open func() *Store
	if url := testPostgresURL(); url != "" {
		url = testPostgresSchema(t, url)
		driver, dsn = "pgx", url
		open = func() *Store {
			s, err := OpenPostgres(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	} else {
		path := filepath.Join(t.TempDir(), "ledger.db")
		dsn = "file:" + path
		open = func() *Store {
			s, err := OpenSQLite(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}
	old, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE TABLE ledger_checkpoint (id INTEGER PRIMARY KEY, at_ns BIGINT NOT NULL, ticks BIGINT NOT NULL,
			allocated_s DOUBLE PRECISION NOT NULL, used_s DOUBLE PRECISION NOT NULL, unknown_s DOUBLE PRECISION NOT NULL,
			gap_s DOUBLE PRECISION NOT NULL)`,
		`CREATE TABLE ledger_held (pod TEXT NOT NULL, user_name TEXT NOT NULL, kind TEXT NOT NULL, class TEXT NOT NULL,
			allocated DOUBLE PRECISION NOT NULL, since_ns BIGINT NOT NULL, PRIMARY KEY (pod, user_name, kind, class))`,
		`INSERT INTO ledger_checkpoint VALUES (1, ` + strconv.FormatInt(t0.UnixNano(), 10) + `, 7, 0, 0, 0, 0)`,
		`INSERT INTO ledger_held VALUES ('uid-a', 'alice', 'mig', 'mig A100-SXM4-40GB 3g.20gb', 0.42857142857142855, 0)`,
	} {
		if _, err := old.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	_ = old.Close()

	s := open()
	open() // again: the column is there
	cp, ok, err := s.Checkpoint(ctx)
	if err != nil || !ok {
		t.Fatalf("checkpoint: ok %v, err %v", ok, err)
	}
	want := Checkpoint{At: t0, Ticks: 7, Held: []Holding{{Pod: "uid-a", Key: aliceMIG, Allocated: 3.0 / 7}}}
	if diff := cmp.Diff(want, cp, approx); diff != "" {
		t.Fatalf("migrated checkpoint (-want +got):\n%s", diff)
	}
	l, err := New(ctx, s, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Record(ctx, t0.Add(interval), nil); err != nil {
		t.Fatal(err)
	}
	cp, _, err = s.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want = Checkpoint{At: t0.Add(interval), Ticks: 8, LeftSince: t0, Left: []Departure{{Pod: "uid-a", Until: t0}}}
	if diff := cmp.Diff(want, cp, approx); diff != "" {
		t.Fatalf("checkpoint after a tick (-want +got):\n%s", diff)
	}
}
