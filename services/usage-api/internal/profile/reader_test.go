package profile

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// TestReadEqualsDays: merged while scanning is what the days read and then merged were, for everyone and for
// one user, over days with gaps, several classes and servers.
func TestReadEqualsDays(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "ledger.db"))
	days := benchDays(30, 9)
	for i := range days {
		if i%4 == 1 {
			days[i].Class = "mig " + h100 + " 1g.10gb" // a second class on some days
		}
		if i%7 == 3 {
			days[i].Last = days[i].Day.Add(23 * time.Hour) // the latest sample on an earlier day
			days[i].Scale = 0
		}
	}
	if err := st.PutProfiles(ctx, days, ledger.DayOf(t0).AddDate(0, 0, -30)); err != nil {
		t.Fatal(err)
	}
	from := ledger.DayOf(t0).AddDate(0, 0, -7)
	for _, user := range []string{"", "user0003"} {
		stored, err := st.Profiles(ctx, from, user)
		if err != nil {
			t.Fatal(err)
		}
		want := Profiles(stored)
		got, err := Read(ctx, st, from, user)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			t.Fatalf("user %q: no profiles", user)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("user %q (-want +got):\n%s", user, diff)
		}
	}
}

type countingScanner struct {
	Scanner
	n    atomic.Int32
	wait chan struct{}
}

func (c *countingScanner) ScanProfiles(ctx context.Context, from time.Time, user string, fn func(*ledger.ProfileDay) error) error {
	c.n.Add(1)
	if c.wait != nil {
		<-c.wait
	}
	return c.Scanner.ScanProfiles(ctx, from, user, fn)
}

// TestReaderShares: everyone's profiles are read once per period for Every, however many ask at once; one user's
// are read each time.
func TestReaderShares(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "ledger.db"))
	if err := st.PutProfiles(ctx, benchDays(4, 3), ledger.DayOf(t0).AddDate(0, 0, -30)); err != nil {
		t.Fatal(err)
	}
	src := &countingScanner{Scanner: st, wait: make(chan struct{})}
	r := NewReader(src, 10*time.Minute)
	from := ledger.DayOf(t0).AddDate(0, 0, -7)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if ps, err := r.Profiles(ctx, from, t0, ""); err != nil || len(ps) != 4 {
				t.Errorf("%d profiles, %v", len(ps), err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(src.wait)
	wg.Wait()
	if n := src.n.Load(); n != 1 {
		t.Errorf("8 at once read %d times, want once", n)
	}
	if _, err := r.Profiles(ctx, from, t0.Add(9*time.Minute), ""); err != nil {
		t.Fatal(err)
	}
	if n := src.n.Load(); n != 1 {
		t.Errorf("within 10 minutes: read %d times, want once", n)
	}
	if _, err := r.Profiles(ctx, from.AddDate(0, 0, -23), t0, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Profiles(ctx, from, t0.Add(10*time.Minute), ""); err != nil {
		t.Fatal(err)
	}
	if n := src.n.Load(); n != 3 {
		t.Errorf("another period and 10 minutes on: read %d times, want 3", n)
	}
	if _, err := r.Profiles(ctx, from, t0, "user0001"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Profiles(ctx, from, t0, "user0001"); err != nil {
		t.Fatal(err)
	}
	if n := src.n.Load(); n != 5 {
		t.Errorf("one user twice: read %d times in all, want 5", n)
	}
}
