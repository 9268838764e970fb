package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestWaitlistState: versioned compare-and-swap writes, refused when based on another version, read back by
// another handle on the same database (a restarted service).
func TestWaitlistState(t *testing.T) {
	ctx := context.Background()
	open := testDatabase(t)
	s := open()
	got, err := s.WaitlistState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(WaitlistState{}, got); diff != "" {
		t.Errorf("nothing stored (-want +got):\n%s", diff)
	}
	steps := []struct {
		ifVersion int64
		state     string
		want      WaitlistState
		wantErr   *StaleVersionError
	}{
		{ifVersion: 0, state: `{"queues":{}}`, want: WaitlistState{Version: 1, State: json.RawMessage(`{"queues":{}}`), UpdatedAt: t0}},
		{ifVersion: 0, state: `{"queues":{"h100":["bob"]}}`, wantErr: &StaleVersionError{Asked: 0, Stored: 1}},
		{ifVersion: 1, state: `{"queues":{"h100":["bob"]}}`, want: WaitlistState{Version: 2, State: json.RawMessage(`{"queues":{"h100":["bob"]}}`), UpdatedAt: t0.Add(2 * time.Second)}},
		{ifVersion: 1, state: `{"queues":{}}`, wantErr: &StaleVersionError{Asked: 1, Stored: 2}},
		{ifVersion: 7, state: `{"queues":{}}`, wantErr: &StaleVersionError{Asked: 7, Stored: 2}},
		{ifVersion: 2, state: `{"queues":{"h100":["bob","alice"]}}`, want: WaitlistState{Version: 3, State: json.RawMessage(`{"queues":{"h100":["bob","alice"]}}`), UpdatedAt: t0.Add(5 * time.Second)}},
	}
	for i, st := range steps {
		put, err := s.PutWaitlistState(ctx, st.ifVersion, json.RawMessage(st.state), t0.Add(time.Duration(i)*time.Second))
		var stale *StaleVersionError
		switch {
		case st.wantErr != nil:
			if !errors.As(err, &stale) {
				t.Fatalf("step %d: %v, want %v", i, err, st.wantErr)
			}
			if diff := cmp.Diff(st.wantErr, stale); diff != "" {
				t.Errorf("step %d: stale version (-want +got):\n%s", i, diff)
			}
		case err != nil:
			t.Fatalf("step %d: %v", i, err)
		default:
			if diff := cmp.Diff(st.want, put); diff != "" {
				t.Errorf("step %d: written (-want +got):\n%s", i, diff)
			}
		}
	}
	// A restart: another handle on the same database reads the last write.
	got, err = open().WaitlistState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := steps[len(steps)-1].want
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
}

// TestWaitlistStateRace: writers on separate handles (replicas, or a service and its successor in a rolling
// update) write on the same version at once, round after round: exactly one wins each round, and the others
// are told the winner's version.
func TestWaitlistStateRace(t *testing.T) {
	ctx := context.Background()
	open := testDatabase(t)
	const writers, rounds = 4, 10
	handles := make([]*Store, writers)
	for i := range handles {
		handles[i] = open()
	}
	for round := range int64(rounds) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, writers)
		for i, s := range handles {
			wg.Go(func() {
				<-start
				state := json.RawMessage(fmt.Sprintf(`{"round":%d,"writer":%d}`, round, i))
				_, errs[i] = s.PutWaitlistState(ctx, round, state, t0)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			var stale *StaleVersionError
			switch {
			case err == nil:
				won++
			case errors.As(err, &stale):
				if stale.Stored != round+1 {
					t.Errorf("round %d writer %d: told version %d is stored, want %d", round, i, stale.Stored, round+1)
				}
			default:
				t.Fatalf("round %d writer %d: %v", round, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d writers won, want exactly 1 (%v)", round, won, errs)
		}
	}
	got, err := handles[0].WaitlistState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != rounds {
		t.Errorf("version %d after %d rounds, want %d", got.Version, rounds, rounds)
	}
}
