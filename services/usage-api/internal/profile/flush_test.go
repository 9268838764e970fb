package profile

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// slowStore holds each write until told, then fails it or writes it.
type slowStore struct {
	*ledger.Store
	entered chan struct{}
	release chan error
}

func (s *slowStore) PutProfiles(ctx context.Context, days []ledger.ProfileDay, keepFrom time.Time) error {
	s.entered <- struct{}{}
	if err := <-s.release; err != nil {
		return err
	}
	return s.Store.PutProfiles(ctx, days, keepFrom)
}

// TestFlushDoesNotHoldTheTick: while a write hangs (a PostgreSQL that stopped answering), Observe (the tick) goes
// on; a write that fails leaves its days, and what was observed meanwhile, to the next flush.
func TestFlushDoesNotHoldTheTick(t *testing.T) {
	ctx := context.Background()
	st := &slowStore{Store: openStore(t, filepath.Join(t.TempDir(), "ledger.db")), entered: make(chan struct{}), release: make(chan error)}
	whole := unit(gpu.KindGPU, "gpu "+h100, 1, 1, 50, 4*gib)
	r := NewRecorder(2 * interval)
	at := t0
	for range 10 {
		at = at.Add(interval)
		r.Observe(view(at, false, whole))
	}
	flushed := make(chan error, 1)
	go func() { flushed <- r.Flush(ctx, st, at) }()
	<-st.entered
	observed := make(chan struct{})
	go func() {
		for range 5 {
			at = at.Add(interval)
			r.Observe(view(at, false, whole))
		}
		close(observed)
	}()
	select {
	case <-observed:
	case <-time.After(5 * time.Second):
		t.Fatal("Observe waited for the write")
	}
	st.release <- errors.New("connection reset")
	if err := <-flushed; err == nil {
		t.Fatal("the failed write was not reported")
	}
	go func() { <-st.entered; st.release <- nil }()
	if err := r.Flush(ctx, st, at); err != nil {
		t.Fatal(err)
	}
	days, err := st.Profiles(ctx, t0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 1 || days[0].BusySamples != 15 {
		t.Fatalf("stored %+v, want one day of 15 busy samples", days)
	}
}
