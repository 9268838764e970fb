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
	beforeCommit   func() // runs before each Commit (e.g. a second writer commits first)
	commits        int    // Commit calls that reached the real store
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

func (f *faultyStore) Commit(ctx context.Context, prev *Checkpoint, next Checkpoint, incs []Increment) error {
	f.mu.Lock()
	err, before := f.failCommit, f.beforeCommit
	if err == nil {
		f.commits++
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if before != nil {
		before()
	}
	return f.store.Commit(ctx, prev, next, incs)
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
