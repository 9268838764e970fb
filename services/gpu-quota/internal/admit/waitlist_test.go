package admit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
)

// waitPolicy: everyone in lab may hold one whole GPU; lean has a 24h budget of 1 GPU-hour.
const waitPolicy = `
default:
  maxGPUs: 1
  maxServers: 2
groups:
  lab:
    maxGPUs: 1
    allowedKinds: [gpu, mig]
  lean:
    maxGPUs: 1
    allowedKinds: [gpu]
    budgets: [{window: 24h, gpuHours: 1}]
`

type decayedTable struct {
	mu sync.Mutex
	m  map[string]map[string]float64
}

func (d *decayedTable) get() (map[string]map[string]float64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m, d.m != nil
}

func newWaitRig(t *testing.T, decayed *decayedTable) *rig {
	t.Helper()
	return newWaitRigOn(t, decayed, cluster()...)
}

// newWaitRigOn is newWaitRig on the cluster objs.
func newWaitRigOn(t *testing.T, decayed *decayedTable, objs ...runtime.Object) *rig {
	t.Helper()
	r := newRigWith(t, func(o *Options) {
		o.Waitlist = WaitlistOptions{Enabled: true, Hold: 10 * time.Minute, Decayed: decayed.get}
	}, objs...)
	r.pol.Store(mustPolicy(t, waitPolicy))
	dir := map[string][]string{}
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"} {
		dir[u] = []string{"lab"}
	}
	dir["lena"] = []string{"lean"}
	r.dir.Store(&dir)
	r.eng.LoadWaitlist(waitlist.State{})
	return r
}

func created(t time.Time) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.Time{Time: t} }
}

func h100Pod(name, user, server string, at time.Time) *corev1.Pod {
	return pod(name, user, server, "gpu-h100", "nvidia.com/gpu", selector(map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}), created(at))
}

func (r *rig) remove(t *testing.T, name string) {
	t.Helper()
	if err := r.kc.CoreV1().Pods("jhub").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		r.eng.mu.Lock()
		defer r.eng.mu.Unlock()
		_, ok := r.eng.ix.pods["jhub/"+name]
		return !ok
	})
}

func joining(req Request, auto bool) Request {
	req.Waitlist = &WaitlistChoice{Join: true, AutoStart: auto}
	return req
}

// places is who is where, as "user:position" in line order per class.
func places(t *testing.T, r *rig) []string {
	t.Helper()
	ps, err := r.eng.Places("")
	if err != nil {
		t.Fatal(err)
	}
	var out, started []string
	for _, p := range ps {
		if p.State == "started" {
			started = append(started, p.User+":started")
			continue
		}
		s := p.User + ":" + string(rune('0'+p.Position))
		if p.Blocked != "" {
			s += "(blocked)"
		}
		out = append(out, s)
	}
	slices.Sort(started) // served concurrently: any order
	return append(out, started...)
}

// The story: carol holds both H100s; bob and alice join (alice used more GPU-hours recently, so bob is
// first); one H100 frees: it is held for bob, refused to everyone else with the reason, bob starts; the hold of
// the next one expires unused and passes on.
func TestWaitlistStory(t *testing.T) {
	decayed := &decayedTable{m: map[string]map[string]float64{"alice": {"gpu H100-80GB-HBM3": 30}, "bob": {"gpu H100-80GB-HBM3": 2}, "carol": {"gpu H100-80GB-HBM3": 50}}}
	r := newWaitRig(t, decayed)
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))

	// alice joins first; bob, who used less, goes before her after the next fair-share refresh.
	res := r.admit(t, joining(h100("alice", "", 1), false))
	if res.Allow || res.Waitlist == nil || res.Waitlist.Position != 1 || res.JoinOffered {
		t.Fatalf("alice: %+v", res)
	}
	r.clock.Add(time.Minute)
	res = r.admit(t, joining(h100("bob", "", 1), true))
	if res.Allow || res.Waitlist == nil {
		t.Fatalf("bob: %+v", res)
	}
	r.eng.WaitlistTick(r.clock.Now())
	if diff := cmp.Diff([]string{"bob:1", "alice:2"}, places(t, r)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if c, _ := r.eng.Contended(); len(c) != 1 || c[0].Class != "gpu H100-80GB-HBM3" || c[0].Waiting != 2 {
		t.Errorf("contended: %+v", c)
	}

	// Not queued: dave is told that people wait, and where he would be.
	res = r.admit(t, h100("dave", "", 1))
	if res.Allow || res.Reason != "none_free" || !res.JoinOffered {
		t.Errorf("dave while none free (the form may offer him to join): %+v", res)
	}

	// One H100 frees: held for bob (auto-start), not for alice; dave is refused with the reason.
	r.clock.Add(time.Minute)
	r.remove(t, "carol-2")
	tick := r.eng.WaitlistTick(r.clock.Now())
	if len(tick.Held) != 1 || tick.Held[0].User != "bob" || len(tick.Start) != 1 {
		t.Fatalf("tick after a GPU freed: %+v", tick)
	}
	if diff := cmp.Diff([]string{"bob:0", "alice:1"}, places(t, r)); diff != "" {
		t.Errorf("after the hold (-want +got):\n%s", diff)
	}
	res = r.admit(t, h100("dave", "", 1))
	if res.Allow || res.Reason != string(ReasonWaitlist) || !strings.Contains(res.Message, "held for the next person") ||
		!strings.Contains(res.Message, "number 2 in line") || !res.JoinOffered {
		t.Errorf("dave while held for bob: %+v", res)
	}
	res = r.admit(t, h100("alice", "", 1))
	if res.Allow || res.Reason != string(ReasonWaitlist) {
		t.Errorf("alice while held for bob: %+v", res)
	}
	r.eng.MarkStartRequested("bob", "", true)
	if tick := r.eng.WaitlistTick(r.clock.Now()); len(tick.Start) != 0 {
		t.Errorf("bob's start asked twice: %+v", tick)
	}

	// bob's server is admitted (the Hub starts it): he leaves the queue; alice is first.
	res = r.admit(t, h100("bob", "", 1))
	if !res.Allow || res.Reservation == "" {
		t.Fatalf("bob with his hold: %+v", res)
	}
	if diff := cmp.Diff([]string{"alice:1", "bob:started"}, places(t, r)); diff != "" {
		t.Errorf("after bob started (-want +got):\n%s", diff)
	}
	if ps, _ := r.eng.Places("bob"); len(ps) != 1 || !strings.Contains(ps[0].Message, "Your server was started for you at") {
		t.Errorf("bob's place once started: %+v", ps)
	}

	// The other H100 frees; alice's hold expires unused: the unit passes on (to nobody: dave never joined).
	r.remove(t, "carol-1")
	if tick := r.eng.WaitlistTick(r.clock.Now()); len(tick.Held) != 1 || tick.Held[0].User != "alice" {
		t.Fatalf("alice's turn: %+v", tick)
	}
	r.clock.Add(10 * time.Minute)
	tick = r.eng.WaitlistTick(r.clock.Now())
	if len(tick.Expired) != 1 || tick.Expired[0].User != "alice" {
		t.Errorf("alice's hold did not expire: %+v", tick)
	}
	if res := r.admit(t, h100("dave", "", 1)); !res.Allow {
		t.Errorf("dave once nobody waits: %+v", res)
	}
}

// Two GPUs free at once with five waiters: exactly the first two in line get them, nobody twice, nobody
// skipped, even when all five race to start.
func TestWaitlistTwoFreedFiveWaiters(t *testing.T) {
	decayed := &decayedTable{m: map[string]map[string]float64{}}
	r := newWaitRig(t, decayed)
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
	users := []string{"dave", "erin", "frank", "grace", "heidi"}
	for _, u := range users {
		r.clock.Add(time.Second)
		if res := r.admit(t, joining(h100(u, "", 1), false)); res.Waitlist == nil {
			t.Fatalf("%s did not join: %+v", u, res)
		}
	}
	r.remove(t, "carol-1")
	r.remove(t, "carol-2")
	tick := r.eng.WaitlistTick(r.clock.Now())
	var held []string
	for _, h := range tick.Held {
		held = append(held, h.User)
	}
	if diff := cmp.Diff([]string{"dave", "erin"}, held); diff != "" {
		t.Fatalf("held (-want +got):\n%s", diff)
	}

	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for range 4 { // every waiter tries four times at once
		for _, u := range users {
			wg.Go(func() {
				res, err := r.eng.Admit(context.Background(), h100(u, "", 1))
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allow {
					mu.Lock()
					admitted[u]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// A server admitted again replaces its own reservation, so a holder may be admitted more than once: it
	// still holds one unit. What matters is who.
	var who []string
	for _, u := range users {
		if admitted[u] > 0 {
			who = append(who, u)
		}
	}
	if diff := cmp.Diff([]string{"dave", "erin"}, who); diff != "" {
		t.Errorf("admitted (-want +got):\n%s", diff)
	}
	if got := r.reservations(); got != 2 {
		t.Errorf("reservations = %d, want 2", got)
	}
	if diff := cmp.Diff([]string{"frank:1", "grace:2", "heidi:3", "dave:started", "erin:started"}, places(t, r)); diff != "" {
		t.Errorf("left in line (-want +got):\n%s", diff)
	}
}

// TestWaitlistRestartKeepsOwnUnit: a server admitted on its hold whose start failed before its pod appeared
// is admitted again on its own reservation, although others still wait for the class; each of them gets the
// next unit that frees, and a refusal to one of them takes nothing from the admitted server.
func TestWaitlistRestartKeepsOwnUnit(t *testing.T) {
	decayed := &decayedTable{m: map[string]map[string]float64{}}
	r := newWaitRig(t, decayed)
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
	for _, u := range []string{"dave", "erin", "frank"} {
		r.clock.Add(time.Second)
		if res := r.admit(t, joining(h100(u, "", 1), false)); res.Waitlist == nil {
			t.Fatalf("%s did not join: %+v", u, res)
		}
	}
	r.remove(t, "carol-1")
	r.eng.WaitlistTick(r.clock.Now())
	if res := r.admit(t, h100("dave", "", 1)); !res.Allow {
		t.Fatalf("dave on his hold: %s %s", res.Reason, res.Message)
	}
	for i := range 3 { // his start failed; he starts the server again, erin and frank still in line
		r.clock.Add(10 * time.Second)
		if res := r.admit(t, h100("dave", "", 1)); !res.Allow {
			t.Fatalf("dave's start %d on his own reservation: %s %s", i+2, res.Reason, res.Message)
		}
	}
	if res := r.admit(t, h100("erin", "", 1)); res.Allow {
		t.Fatalf("erin admitted with no unit free: %+v", res)
	}
	if n := r.reservations(); n != 1 {
		t.Errorf("%d reservations, want dave's", n)
	}
	r.remove(t, "carol-2")
	r.eng.WaitlistTick(r.clock.Now())
	if res := r.admit(t, h100("frank", "", 1)); res.Allow {
		t.Errorf("frank took the unit held for erin")
	}
	if res := r.admit(t, h100("erin", "", 1)); !res.Allow {
		t.Errorf("erin on her hold: %s %s", res.Reason, res.Message)
	}
}

// A user over budget is told so when joining, and one whose budget runs out while waiting keeps the place but
// is passed over when a unit frees.
func TestWaitlistQuota(t *testing.T) {
	decayed := &decayedTable{m: map[string]map[string]float64{}}
	r := newWaitRig(t, decayed)
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
	r.hours.hours = map[string]map[time.Duration]map[string]float64{"lena": {24 * time.Hour: {"gpu H100-80GB-HBM3": 5}}}

	_, err := r.eng.Join(h100("lena", "", 1))
	var je *JoinError
	if err == nil || !errors.As(err, &je) || !strings.Contains(je.Message, "GPU-hour") {
		t.Fatalf("lena over budget joined: %v", err)
	}

	r.hours.hours = nil
	if _, err := r.eng.Join(h100("lena", "", 1)); err != nil {
		t.Fatal(err)
	}
	r.clock.Add(time.Second)
	if _, err := r.eng.Join(h100("dave", "", 1)); err != nil {
		t.Fatal(err)
	}
	// lena spends her budget while waiting.
	r.hours.hours = map[string]map[time.Duration]map[string]float64{"lena": {24 * time.Hour: {"gpu H100-80GB-HBM3": 5}}}
	r.remove(t, "carol-1")
	tick := r.eng.WaitlistTick(r.clock.Now())
	if len(tick.Held) != 1 || tick.Held[0].User != "dave" {
		t.Fatalf("held: %+v", tick.Held)
	}
	if diff := cmp.Diff([]string{"dave:0", "lena:1(blocked)"}, places(t, r)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Leaving passes nothing on while dave holds; lena leaves.
	if err := r.eng.Leave("lena", ""); err != nil {
		t.Fatal(err)
	}
	if err := r.eng.Leave("lena", ""); !errors.Is(err, ErrNotQueued) {
		t.Errorf("second leave: %v", err)
	}
}

// TestToldGroupsWhileJoining: admissions change a user's told groups in place while the waitlist reads them
// (Join without groups): under -race, every read is of a whole, consistent set.
func TestToldGroupsWhileJoining(t *testing.T) {
	r := newWaitRig(t, &decayedTable{})
	sets := [][]string{{"lab"}, {"lab", "lean"}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			req := h100("alice", "", 1)
			req.Groups = sets[i%2]
			r.admit(t, req)
		}
	})
	wg.Go(func() {
		for range 200 {
			groups, err := r.eng.groupsOf("alice", nil)
			if err != nil {
				t.Error(err)
				return
			}
			if !slices.Equal(groups, sets[0]) && !slices.Equal(groups, sets[1]) {
				t.Errorf("groups %q: neither set the Hub sent", groups)
				return
			}
		}
	})
	wg.Wait()
}

// TestWaitlistJoinReleasesReservation: a server admitted whose start failed before its pod appeared is started
// again asking for another class, none of which is free, and joins that class's waitlist: what the first
// admission reserved is released (the Hub will not start the server on this answer), so it is free for others.
func TestWaitlistJoinReleasesReservation(t *testing.T) {
	r := newWaitRig(t, &decayedTable{m: map[string]map[string]float64{}})
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	for _, u := range []string{"erin", "frank"} {
		r.create(t, pod(u+"-slice", u, "", "gpu-a100", "nvidia.com/mig-3g.20gb"))
	}
	if res := r.admit(t, h100("dave", "", 1)); !res.Allow || res.Reservation == "" {
		t.Fatalf("dave's H100: %+v", res)
	}
	if res := r.admit(t, h100("heidi", "", 1)); res.Allow {
		t.Fatalf("heidi admitted while dave's reservation keeps the last H100: %+v", res)
	}
	res := r.admit(t, joining(mig("dave", "", "3g.20gb"), false))
	if res.Allow || res.Waitlist == nil || res.Waitlist.Position != 1 {
		t.Fatalf("dave's server again, for a 3g.20gb slice, none free: %+v", res)
	}
	if n := r.reservations(); n != 0 {
		t.Errorf("%d reservations after dave's server joined the waitlist, want 0", n)
	}
	if res := r.admit(t, h100("heidi", "", 1)); !res.Allow {
		t.Errorf("heidi after dave's reservation was released: %s %s", res.Reason, res.Message)
	}
}
