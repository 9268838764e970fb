package admit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// mirror applies every line waiting on sub to standby, through JSON as the stream sends them; it returns them.
func mirror(t *testing.T, sub *Subscription, standby *Engine) []ReplicaLine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var out []ReplicaLine
	for {
		lines, err := sub.Next(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			data, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			var back ReplicaLine
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			standby.ApplyReplica(back)
			out = append(out, back)
		}
	}
}

// unclaimed is what each class has left for admission, as the engine counts it.
func unclaimed(e *Engine) map[string]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int64{}
	for _, c := range e.ix.classes {
		out[c] = e.unclaimedLocked(c)
	}
	return out
}

func crowdT4(user string) Request {
	r := t4(user, "")
	r.Groups = []string{"crowd"}
	return r
}

// TestReplicaMirrorsReservations: after the snapshot and the changes that follow it, a standby counts what the
// decider counts, per class; a refusal's release applies; a match does not come from the decider: the standby
// keeps counting until its own informer shows the pod.
func TestReplicaMirrorsReservations(t *testing.T) {
	leader, standby := newRig(t, cluster()...), newRig(t, cluster()...)
	standby.eng.SetDeciding(false)
	leader.admit(t, crowdT4("ann")) // before the subscription: in the snapshot
	sub := leader.eng.Subscribe()
	defer sub.Close()
	leader.admit(t, crowdT4("ben"))
	leader.admit(t, crowdT4("cat"))
	lines := mirror(t, sub, standby.eng)
	if len(lines) != 5 || !lines[0].Reset || !lines[2].Synced {
		t.Errorf("lines %+v, want reset, ann, synced, ben, cat", lines)
	}
	if diff := cmp.Diff(unclaimed(leader.eng), unclaimed(standby.eng)); diff != "" {
		t.Errorf("free units, decider -want +standby:\n%s", diff)
	}

	// ben's server is asked again and refused (his groups now allow no T4 share): the decider releases the
	// reservation, and so does the standby.
	ask := t4("ben", "")
	ask.Groups = []string{"researchers"}
	ask.Arrived = time.Now()
	if res := leader.admit(t, ask); res.Allow {
		t.Fatalf("ben asked again: %+v", res)
	}
	mirror(t, sub, standby.eng)
	if l, s := leader.reservations(), standby.reservations(); l != 2 || s != 2 {
		t.Errorf("after ben's refusal: decider %d, standby %d reservations; want 2 and 2", l, s)
	}

	// cat's pod appears on the decider only: the decider matches it; the standby still counts her reservation.
	leader.create(t, pod("cat-1", "cat", "", "gpu-t4", "nvidia.com/gpu.shared"))
	mirror(t, sub, standby.eng)
	if l, s := leader.reservations(), standby.reservations(); l != 1 || s != 2 {
		t.Errorf("cat's pod on the decider only: decider %d, standby %d reservations; want 1 and 2", l, s)
	}
	standby.create(t, pod("cat-1", "cat", "", "gpu-t4", "nvidia.com/gpu.shared"))
	if diff := cmp.Diff(unclaimed(leader.eng), unclaimed(standby.eng)); diff != "" {
		t.Errorf("once both see cat's pod, decider -want +standby:\n%s", diff)
	}

	// A line that comes after this replica's informer showed the pod is matched at once.
	standby.create(t, pod("dan-1", "dan", "", "gpu-t4", "nvidia.com/gpu.shared"))
	leader.admit(t, crowdT4("dan"))
	mirror(t, sub, standby.eng)
	if s := standby.reservations(); s != 1 {
		t.Errorf("dan's reservation after his pod: standby %d reservations, want 1 (ann's)", s)
	}

	// A deciding replica ignores lines.
	standby.eng.SetDeciding(true)
	standby.eng.ApplyReplica(ReplicaLine{Reset: true})
	if s := standby.reservations(); s != 1 {
		t.Errorf("a reset applied while deciding: %d reservations", s)
	}
}

// TestTakeoverCountsInFlight: the decider admits 3 of the T4's 4 shares and no pod has appeared yet; the standby
// takes over with its copy and admits exactly one more; then the pods appear in its informer: the reservations
// end and the count stays exact.
func TestTakeoverCountsInFlight(t *testing.T) {
	leader, standby := newRig(t, cluster()...), newRig(t, cluster()...)
	standby.eng.SetDeciding(false)
	sub := leader.eng.Subscribe()
	defer sub.Close()
	for _, u := range []string{"ann", "ben", "cat"} {
		if res := leader.admit(t, crowdT4(u)); !res.Allow {
			t.Fatalf("%s: %+v", u, res)
		}
	}
	leader.eng.SetDeciding(false)
	leader.eng.FinalLine()
	if lines := mirror(t, sub, standby.eng); !lines[len(lines)-1].Final {
		t.Errorf("the last line is not final: %+v", lines[len(lines)-1])
	}

	standby.eng.SetDeciding(true)
	admitted := 0
	for i := range 10 {
		if res := standby.admit(t, crowdT4(fmt.Sprint("new-", i))); res.Allow {
			admitted++
		} else if res.Reason != string(ReasonNoneFree) {
			t.Errorf("refused for %s", res.Reason)
		}
	}
	if admitted != 1 {
		t.Errorf("the new decider admitted %d of the last share, want exactly 1", admitted)
	}
	for _, u := range []string{"ann", "ben", "cat"} {
		standby.create(t, pod(u+"-1", u, "", "gpu-t4", "nvidia.com/gpu.shared"))
	}
	if n := standby.reservations(); n != 1 {
		t.Errorf("%d reservations once the pods are there, want 1 (the new decider's own)", n)
	}
	if res := standby.admit(t, crowdT4("late")); res.Allow {
		t.Errorf("admitted a fifth share: %+v", res)
	}
}

// TestReplicaSlowSubscriberDropped: a standby that falls maxBacklog lines behind is dropped, and told so.
func TestReplicaSlowSubscriberDropped(t *testing.T) {
	leader := newRig(t, cluster()...)
	sub := leader.eng.Subscribe()
	leader.eng.mu.Lock()
	for range maxBacklog {
		leader.eng.publishLocked(ReplicaLine{Final: true})
	}
	leader.eng.mu.Unlock()
	if _, err := sub.Next(context.Background()); !errors.Is(err, ErrReplicaDropped) {
		t.Errorf("err %v, want ErrReplicaDropped", err)
	}
}
