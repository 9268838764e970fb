package admit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/decision"
)

// TestNotDecidingDecidesNothing: a replica that does not decide answers ErrNotLeader to admissions, joins and
// leaves, and its tick moves nothing; nothing it holds changes. Turned on again, it decides as before.
func TestNotDecidingDecidesNothing(t *testing.T) {
	r := newWaitRig(t, &decayedTable{})
	r.create(t, h100Pod("carol-1", "carol", "", t0))
	r.create(t, h100Pod("carol-2", "carol", "two", t0))
	if res := r.admit(t, joining(h100("alice", "", 1), false)); res.Waitlist == nil {
		t.Fatalf("alice did not join: %+v", res)
	}
	before := places(t, r)
	decisions := len(r.log.List(decision.Filter{}))

	r.eng.SetDeciding(false)
	if r.eng.Deciding() {
		t.Error("Deciding() after SetDeciding(false)")
	}
	calls := map[string]func() error{
		"admit": func() error { _, err := r.eng.Admit(context.Background(), h100("dave", "", 1)); return err },
		"admit and join": func() error {
			_, err := r.eng.Admit(context.Background(), joining(h100("bob", "", 1), false))
			return err
		},
		"join":  func() error { _, err := r.eng.Join(h100("bob", "", 1)); return err },
		"leave": func() error { return r.eng.Leave("alice", "") },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: err %v, want ErrNotLeader (an ErrUnavailable: 503)", name, err)
		}
	}
	r.remove(t, "carol-2") // a unit frees: a deciding tick would hold it for alice
	if tick := r.eng.WaitlistTick(r.clock.Now()); len(tick.Held) != 0 {
		t.Errorf("a tick while not deciding held %+v", tick.Held)
	}
	if diff := cmp.Diff(before, places(t, r)); diff != "" {
		t.Errorf("the queue changed while not deciding (-before +after):\n%s", diff)
	}
	if n := len(r.log.List(decision.Filter{})); n != decisions {
		t.Errorf("%d decisions recorded while not deciding", n-decisions)
	}
	r.eng.mu.Lock()
	live := r.eng.res.live
	r.eng.mu.Unlock()
	if live != 0 {
		t.Errorf("%d reservations made while not deciding", live)
	}

	r.eng.SetDeciding(true)
	if tick := r.eng.WaitlistTick(r.clock.Now()); len(tick.Held) != 1 || tick.Held[0].User != "alice" {
		t.Errorf("deciding again, the freed unit: %+v", tick)
	}
	if res := r.admit(t, h100("alice", "", 1)); !res.Allow {
		t.Errorf("alice with her hold: %+v", res)
	}
}

// TestStepDownOrdersDecisions: admissions racing a step-down are each either decided before it or refused
// with ErrNotLeader; none reserves anything once SetDeciding(false) has returned.
func TestStepDownOrdersDecisions(t *testing.T) {
	r := newRig(t, cluster()...)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		decided int
	)
	start := make(chan struct{})
	for i := range 500 {
		wg.Go(func() {
			<-start
			req := t4("racer", fmt.Sprint(i))
			req.Groups = []string{"crowd"}
			_, err := r.eng.Admit(context.Background(), req)
			switch {
			case err == nil:
				mu.Lock()
				decided++
				mu.Unlock()
			case !errors.Is(err, ErrNotLeader):
				t.Error(err)
			}
		})
	}
	close(start)
	r.eng.SetDeciding(false)
	r.eng.mu.Lock()
	made := r.eng.res.seq
	r.eng.mu.Unlock()
	wg.Wait()
	r.eng.mu.Lock()
	after := r.eng.res.seq
	r.eng.mu.Unlock()
	if after != made {
		t.Errorf("%d reservations made after the step-down returned", after-made)
	}
	if n := len(r.log.List(decision.Filter{})); n != decided {
		t.Errorf("%d decisions recorded, %d answered", n, decided)
	}
}
