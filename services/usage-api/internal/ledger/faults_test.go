package ledger

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var errDown = errors.New("database is down")

// faultyStore is a real store whose calls a test can make fail, or precede with another writer's tick.
type faultyStore struct {
	store
	mu             sync.Mutex
	failCommit     error
	failCheckpoint error
	// lostCommit is returned by the next Commit after it committed: the transaction went through but its
	// answer was lost (the connection dropped on COMMIT). It applies once.
	lostCommit   error
	beforeCommit func() // runs once, before the next Commit (e.g. a second writer commits first)
}

func (f *faultyStore) set(fn func(f *faultyStore)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *faultyStore) Checkpoint(ctx context.Context) (Checkpoint, bool, error) {
	f.mu.Lock()
	err := f.failCheckpoint
	f.mu.Unlock()
	if err != nil {
		return Checkpoint{}, false, err
	}
	return f.store.Checkpoint(ctx)
}

func (f *faultyStore) checkpoint(ctx context.Context, prev *Checkpoint, scratch *heldScratch) (Checkpoint, bool, error) {
	f.mu.Lock()
	err := f.failCheckpoint
	f.mu.Unlock()
	if err != nil {
		return Checkpoint{}, false, err
	}
	return f.store.checkpoint(ctx, prev, scratch)
}

func (f *faultyStore) Commit(ctx context.Context, prev *Checkpoint, next Checkpoint, incs []Increment) error {
	f.mu.Lock()
	err, before := f.failCommit, f.beforeCommit
	if err == nil {
		f.beforeCommit = nil
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if before != nil {
		before()
	}
	if err := f.store.Commit(ctx, prev, next, incs); err != nil {
		return err
	}
	f.mu.Lock()
	lost := f.lostCommit
	f.lostCommit = nil
	f.mu.Unlock()
	return lost
}

// allocated sums a key's allocated GPU-seconds over the whole table.
func allocated(t *testing.T, s *Store, k Key) float64 {
	t.Helper()
	rows, err := s.Sum(context.Background(), Query{From: time.Unix(0, 0), To: time.Unix(1<<40, 0), User: k.User})
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, r := range rows {
		if r.Key == k {
			sum += r.Allocated
		}
	}
	return sum
}

func TestNewCheckpointReadFails(t *testing.T) {
	f := &faultyStore{store: openTestStore(t), failCheckpoint: errDown}
	if _, err := New(context.Background(), f, Options{Interval: interval}, t0); !errors.Is(err, errDown) {
		t.Fatalf("New: err = %v, want %v", err, errDown)
	}
}

// A database that refuses commits for a while (within MaxGap) loses nothing: the first tick that commits
// again charges the whole time since the last committed checkpoint, and failed ticks leave no trace.
func TestRecordCommitFailsThenRecovers(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	f := &faultyStore{store: s}
	l, err := New(ctx, f, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	one := []Sample{{Key: aliceMIG, Allocated: 1, Used: 0.5, UsedKnown: true}}
	for i, down := range []bool{false, false, true, true, false, false} {
		at := t0.Add(time.Duration(i) * interval)
		f.set(func(f *faultyStore) {
			f.failCommit = nil
			if down {
				f.failCommit = errDown
			}
		})
		_, err := l.Record(ctx, at, one)
		if down != errors.Is(err, errDown) {
			t.Fatalf("tick %d (down=%v): err = %v", i, down, err)
		}
		cp, _ := l.Checkpoint()
		if want := t0.Add(time.Duration(i) * interval); !down && !cp.At.Equal(want) {
			t.Fatalf("tick %d: checkpoint at %v, want %v", i, cp.At, want)
		}
	}
	// Ticks 1..5 cover 25 s, all charged once.
	if got := allocated(t, s, aliceMIG); got != 25 {
		t.Errorf("allocated = %v GPU-s, want 25", got)
	}
	want := Windows{Today: Totals{Allocated: 25.0 / 3600, Used: 12.5 / 3600}}
	want.Days7, want.Days30 = want.Today, want.Today
	if diff := cmp.Diff(want, l.UserWindows("alice"), approx); diff != "" {
		t.Errorf("UserWindows (-want +got):\n%s", diff)
	}
	checkConsistent(t, s)
}

// The moment of a rolling update: the old and the new usage API both write to one database for a while, then
// the old one stops. Every instant is charged exactly once (no loss, no double count), each writer recovers
// from the other's commits, and the survivor's window cache matches the table.
func TestRecordTwoWritersDuringRollingUpdate(t *testing.T) {
	ctx := context.Background()
	db := testDatabase(t)
	sOld, sNew := db(), db()
	held := []Sample{{Key: bobT4, Allocated: 0.25, Used: 0.1, UsedKnown: true}}
	tick := func(l *Ledger, at time.Time, who string) Result {
		t.Helper()
		res, err := l.Record(ctx, at, held)
		if err != nil {
			t.Fatalf("%s writer, tick at t0+%v: %v", who, at.Sub(t0), err)
		}
		return res
	}

	old, err := New(ctx, sOld, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 { // t0 .. t0+30 s
		tick(old, t0.Add(time.Duration(i)*interval), "old")
	}
	upd, err := New(ctx, sNew, Options{Interval: interval}, t0.Add(32*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var oldConflicts, newConflicts int
	for k := range 12 { // both write: old at t0+35+5k, new 2 s later
		at := t0.Add(35*time.Second + time.Duration(k)*interval)
		if tick(old, at, "old").Conflict {
			oldConflicts++
		}
		if tick(upd, at.Add(2*time.Second), "new").Conflict {
			newConflicts++
		}
	}
	last := t0.Add(92 * time.Second)
	for k := range 6 { // the old one is gone
		last = t0.Add(97*time.Second + time.Duration(k)*interval)
		tick(upd, last, "new")
	}
	if oldConflicts != 11 || newConflicts != 12 {
		t.Errorf("conflicts seen: old %d, new %d; want 11, 12 (every overlapping tick but the old one's first)", oldConflicts, newConflicts)
	}

	// Tolerance: only the floating-point rounding of 0.1 x seconds.
	secs := last.Sub(t0).Seconds()
	want := Totals{Allocated: 0.25 * secs, Used: 0.1 * secs}
	rows, err := sNew.Sum(ctx, Query{From: t0, To: last.Add(time.Hour), User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Row{{Key: bobT4, Totals: want}}, rows, approx); diff != "" {
		t.Errorf("GPU-seconds (-want +got):\n%s", diff)
	}
	wantWin := Windows{Today: want.scale(1.0 / 3600)}
	wantWin.Days7, wantWin.Days30 = wantWin.Today, wantWin.Today
	if diff := cmp.Diff(wantWin, upd.UserWindows("bob"), approx); diff != "" {
		t.Errorf("survivor's UserWindows (-want +got):\n%s", diff)
	}
	checkConsistent(t, sNew)
}

// A conflict whose checkpoint re-read fails returns the error; the next tick re-reads and continues without
// charging twice the other writer's interval.
func TestRecordConflictThenCheckpointReadFails(t *testing.T) {
	ctx := context.Background()
	db := testDatabase(t)
	s := db()
	f := &faultyStore{store: s}
	l, err := New(ctx, f, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(ctx, db(), Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	one := []Sample{{Key: aliceMIG, Allocated: 1, Used: 1, UsedKnown: true}}
	for _, at := range []time.Duration{0, interval} {
		if _, err := l.Record(ctx, t0.Add(at), one); err != nil {
			t.Fatal(err)
		}
	}
	f.set(func(f *faultyStore) {
		f.failCheckpoint = errDown
		f.beforeCommit = func() {
			if _, err := other.Record(ctx, t0.Add(7*time.Second), one); err != nil {
				t.Error(err)
			}
		}
	})
	if _, err := l.Record(ctx, t0.Add(10*time.Second), one); !errors.Is(err, errDown) {
		t.Fatalf("conflict with a failing re-read: err = %v, want %v", err, errDown)
	}
	f.set(func(f *faultyStore) { f.failCheckpoint = nil })
	if _, err := l.Record(ctx, t0.Add(15*time.Second), one); err != nil {
		t.Fatalf("tick after the database answers again: %v", err)
	}
	if got := allocated(t, s, aliceMIG); got != 15 {
		t.Errorf("allocated = %v GPU-s, want 15 (t0..t0+15 s once)", got)
	}
	checkConsistent(t, s)
}
