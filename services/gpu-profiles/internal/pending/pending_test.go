package pending

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/internal/golden"
)

// rig is an Explainer on a fake clientset, a fake clock and a fake Hub.
type rig struct {
	e      *Explainer
	client *fake.Clientset
	clock  *fakeClock
	hub    *fakeHub
	cap    *fakeCapacity
	reg    *prometheus.Registry
	h      cache.ResourceEventHandler
}

func newRig(t *testing.T, c *fakeCapacity, mod func(*Options)) *rig {
	t.Helper()
	r := &rig{client: fake.NewClientset(), clock: &fakeClock{t: t0}, hub: &fakeHub{}, cap: c, reg: prometheus.NewRegistry()}
	opts := Options{Client: r.client, Capacity: c, Hub: r.hub, Now: r.clock.now, Registerer: r.reg,
		EndAfter: DefaultEndAfter, Host: "gpu-profiles-0"}
	if mod != nil {
		mod(&opts)
	}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.e, r.h = e, e.PodHandler()
	return r
}

// check moves the clock by d and runs one pass.
func (r *rig) check(d time.Duration) {
	r.clock.advance(d)
	r.e.Check(context.Background())
}

// events are the GPUhubPending Events in jhub, oldest first.
func (r *rig) events(t *testing.T) []corev1.Event {
	t.Helper()
	l, err := r.client.CoreV1().Events("jhub").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(l.Items)
	slices.SortFunc(out, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// brief is an Event as the tests compare it.
type brief struct {
	Type, Message string
	Count         int32
	Last          time.Time
}

func (r *rig) briefs(t *testing.T) []brief {
	var out []brief
	for _, ev := range r.events(t) {
		out = append(out, brief{Type: ev.Type, Message: ev.Message, Count: ev.Count, Last: ev.LastTimestamp.UTC()})
	}
	return out
}

var (
	blockedH100 = avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 0, 0, 0, 0).blocked(map[string]string{"gpu-h100-0": "cordoned"})
	freeH100    = avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 2, 1, 1, 2)
)

// TestEvent: the Event is one KubeSpawner shows: involvedObject the pod, reason GPUhubPending, source
// gpu-profiles, lastTimestamp set (KubeSpawner sorts and prints by it), count 1.
func TestEvent(t *testing.T) {
	r := newRig(t, newCapacity(freeKind...).with(resGPU, h100Labels, h100), nil)
	pod := newPod("bob", "lab").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0)
	r.h.OnAdd(pod.obj(), false)
	r.check(time.Second)
	evs := r.events(t)
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	ev := evs[0]
	ev.Name, ev.TypeMeta, ev.ManagedFields = "", metav1.TypeMeta{}, nil // set by the fake clientset
	want := corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "jhub", Name: "jupyter-bob--lab",
			UID: "uid-jupyter-bob--lab"},
		Reason: EventReason, Type: corev1.EventTypeNormal, Count: 1,
		Message:        "No whole H100 is free right now (2 of 2 in use). Your server starts as soon as one frees up. Free now: six MIG 1g.5gb slices on an A100 and three time-sliced shares of a T4.",
		FirstTimestamp: metav1.NewTime(t0.Add(time.Second)), LastTimestamp: metav1.NewTime(t0.Add(time.Second)),
		Source: corev1.EventSource{Component: "gpu-profiles", Host: "gpu-profiles-0"},
	}
	if diff := cmp.Diff(want, ev); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"bob"}, r.cap.users); diff != "" {
		t.Errorf("FreeNow asked for (-want +got):\n%s", diff)
	}
}

// TestNoSpam: one Event per explanation; an unchanged one only has its count and lastTimestamp refreshed
// every Repeat; a change in what else is free waits for MinChange; a new cause is written at once.
func TestNoSpam(t *testing.T) {
	c := newCapacity(freeKind...).with(resGPU, h100Labels, h100)
	r := newRig(t, c, nil)
	r.h.OnAdd(newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0).obj(), false)
	r.check(0)
	for range 11 { // 55 s of rechecks
		r.check(5 * time.Second)
	}
	r.check(5 * time.Second) // 60 s: refreshed
	none1 := "No whole H100 is free right now (2 of 2 in use). Your server starts as soon as one frees up. Free now: six MIG 1g.5gb slices on an A100 and three time-sliced shares of a T4."
	want := []brief{{Type: "Normal", Message: none1, Count: 2, Last: t0.Add(time.Minute)}}
	if diff := cmp.Diff(want, r.briefs(t)); diff != "" {
		t.Fatalf("after 60 s unchanged (-want +got):\n%s", diff)
	}

	// What else is free changes at 65 s: the last Event was written at 0 s, more than MinChange ago.
	c.setFree([]Availability{mig1g})
	r.check(5 * time.Second)
	none2 := "No whole H100 is free right now (2 of 2 in use). Your server starts as soon as one frees up. Free now: six MIG 1g.5gb slices on an A100."
	want = append(want, brief{Type: "Normal", Message: none2, Count: 1, Last: t0.Add(65 * time.Second)})
	if diff := cmp.Diff(want, r.briefs(t)); diff != "" {
		t.Fatalf("free list changed (-want +got):\n%s", diff)
	}
	// And again 5 s later: held back for MinChange.
	c.setFree([]Availability{t4})
	r.check(5 * time.Second)
	if got := len(r.events(t)); got != 2 {
		t.Fatalf("free list changed again within MinChange: %d events, want 2", got)
	}
	// The cause changes (the node is cordoned): at once.
	c.set(resGPU, h100Labels, blockedH100)
	r.check(time.Second)
	evs := r.briefs(t)
	if len(evs) != 3 || evs[2].Type != "Warning" || !strings.HasPrefix(evs[2].Message, "Your server cannot start: the only node with whole H100s (gpu-h100-0) is cordoned.") {
		t.Fatalf("after cordon: %+v", evs)
	}
	assertMetric(t, r.reg, "gpuhub_profiles_pending_explanations_total", map[string]float64{ReasonNoneFree: 2, ReasonBlocked: 1})
}

// TestEndEarly: a hopeless spawn is explained at once (Warning, with when it ends), ended after EndAfter
// through the Hub (remove=false) after a Warning that says so, and only once.
func TestEndEarly(t *testing.T) {
	r := newRig(t, newCapacity(mig1g).with(resGPU, h100Labels, blockedH100), nil)
	r.h.OnAdd(newPod("bob", "lab").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0).obj(), false)
	r.check(time.Second)
	r.check(59 * time.Second)
	if calls := r.hub.called(); len(calls) != 0 {
		t.Fatalf("stopped before EndAfter: %v", calls)
	}
	r.check(time.Second)
	if calls := r.hub.called(); len(calls) != 0 {
		t.Fatalf("stopped with the Event that says so, before KubeSpawner could relay it: %v", calls)
	}
	r.check(5 * time.Second)
	r.check(5 * time.Second)
	if diff := cmp.Diff([]string{"bob/lab"}, r.hub.called()); diff != "" {
		t.Errorf("StopServer calls (-want +got):\n%s", diff)
	}
	want := []brief{
		{Type: "Warning", Count: 1, Last: t0.Add(time.Second),
			Message: "Your server cannot start: the only node with whole H100s (gpu-h100-0) is cordoned. Waiting will not help: unless this changes, the spawn ends at 14:03:12 UTC. Free now: six MIG 1g.5gb slices on an A100."},
		{Type: "Warning", Count: 1, Last: t0.Add(61 * time.Second),
			Message: "Your spawn was ended: waiting would not help. The only node with whole H100s (gpu-h100-0) is cordoned. Pick another choice instead. Free now: six MIG 1g.5gb slices on an A100."},
	}
	if diff := cmp.Diff(want, r.briefs(t)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	assertMetric(t, r.reg, "gpuhub_profiles_pending_spawns_ended_total", map[string]float64{"": 1})
	assertMetric(t, r.reg, "gpuhub_profiles_pending_explanations_total", map[string]float64{ReasonBlocked: 1, ReasonEnded: 1})
}

// TestHopelessResets: the time to the end counts from when the pod became hopeless, and starts again when it
// stops being hopeless (the node came back) and becomes so again.
func TestHopelessResets(t *testing.T) {
	c := newCapacity().with(resGPU, h100Labels, blockedH100)
	r := newRig(t, c, nil)
	r.h.OnAdd(newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0).obj(), false)
	r.check(0)
	r.check(50 * time.Second)
	c.set(resGPU, h100Labels, h100) // uncordoned; both in use
	r.check(5 * time.Second)
	c.set(resGPU, h100Labels, blockedH100)
	r.check(5 * time.Second) // hopeless again from 60 s
	r.check(55 * time.Second)
	if calls := r.hub.called(); len(calls) != 0 {
		t.Fatalf("stopped 55 s into the second hopeless run: %v", calls)
	}
	r.check(5 * time.Second)
	r.check(5 * time.Second) // EndNotice after the Event
	if calls := r.hub.called(); len(calls) != 1 {
		t.Fatalf("StopServer calls at 65 s into the second run: %v, want one", calls)
	}
}

// TestNeverEnded: a provisionable kind, EndAfter 0 and no Hub client never end a spawn; a kind merely all in
// use never does either.
func TestNeverEnded(t *testing.T) {
	cases := map[string]struct {
		av   Availability
		want int64 // H100s asked for (default 1)
		mod  func(*Options)
	}{
		"provisionable":  {av: blockedH100.provisionable()},
		"EndAfter 0":     {av: blockedH100, mod: func(o *Options) { o.EndAfter = 0 }},
		"no Hub":         {av: blockedH100, mod: func(o *Options) { o.Hub = nil }},
		"all in use":     {av: h100},
		"too big, never": {av: avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 2, 2, 1, 2), want: 4, mod: func(o *Options) { o.EndAfter = 0 }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, newCapacity().with(resGPU, h100Labels, tc.av), tc.mod)
			r.h.OnAdd(newPod("bob", "").wants(resGPU, max(tc.want, 1), h100Labels).unschedulable(schedCordoned, t0).obj(), false)
			for range 60 {
				r.check(5 * time.Second)
			}
			if calls := r.hub.called(); len(calls) != 0 {
				t.Errorf("StopServer called: %v", calls)
			}
			if n := len(r.events(t)); n != 1 {
				t.Errorf("%d events in 5 minutes, want 1 (refreshed, not repeated)", n)
			}
		})
	}
}

// TestHubFails: a Hub that refuses is asked again at each check, at most maxStopAttempts times.
func TestHubFails(t *testing.T) {
	r := newRig(t, newCapacity().with(resGPU, h100Labels, blockedH100), nil)
	r.hub.err = errors.New("hub: 503")
	r.h.OnAdd(newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0).obj(), false)
	r.check(0)
	for range 20 {
		r.check(5 * time.Second)
	}
	if got := len(r.hub.called()); got != maxStopAttempts {
		t.Errorf("StopServer called %d times, want %d", got, maxStopAttempts)
	}
	if n := len(r.events(t)); n != 2 {
		t.Errorf("%d events, want 2 (the explanation and one that the spawn ends)", n)
	}
	assertMetric(t, r.reg, "gpuhub_profiles_pending_errors_total", map[string]float64{"hub_stop": maxStopAttempts, "event_create": 0, "event_patch": 0})
	assertMetric(t, r.reg, "gpuhub_profiles_pending_spawns_ended_total", map[string]float64{"": 0})
}

// TestWriteFails: a refused Event is counted and written at the next check.
func TestWriteFails(t *testing.T) {
	r := newRig(t, newCapacity().with(resGPU, h100Labels, h100), nil)
	var refuse atomic.Bool
	refuse.Store(true)
	r.client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			return true, nil, errors.New("forbidden")
		}
		return false, nil, nil
	})
	r.h.OnAdd(newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0).obj(), false)
	r.check(0)
	if n := len(r.events(t)); n != 0 {
		t.Fatalf("%d events while refused", n)
	}
	refuse.Store(false)
	r.check(5 * time.Second)
	if n := len(r.events(t)); n != 1 {
		t.Fatalf("%d events after the refusal ended, want 1", n)
	}
	assertMetric(t, r.reg, "gpuhub_profiles_pending_errors_total", map[string]float64{"event_create": 1, "event_patch": 0, "hub_stop": 0})
}

// TestGates: nothing is written by a replica that does not lead, or before the capacity is synced; once it
// leads, the waiting pods are explained.
func TestGates(t *testing.T) {
	var leading, synced atomic.Bool
	r := newRig(t, newCapacity().with(resGPU, h100Labels, blockedH100), func(o *Options) {
		o.IsLeader, o.Synced = leading.Load, synced.Load
	})
	r.h.OnAdd(newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0).obj(), false)
	synced.Store(true)
	for range 20 {
		r.check(5 * time.Second)
	}
	leading.Store(true)
	synced.Store(false)
	r.check(5 * time.Second)
	if n, calls := len(r.events(t)), r.hub.called(); n != 0 || len(calls) != 0 {
		t.Fatalf("not leading or not synced: %d events, stop calls %v", n, calls)
	}
	synced.Store(true)
	r.check(5 * time.Second)
	if n := len(r.events(t)); n != 1 {
		t.Fatalf("leading and synced: %d events, want 1", n)
	}
}

// TestGapRestartsCountdown: after a gap (another replica led, or the data was incomplete) a hopeless spawn gets
// a fresh warning and a full EndAfter before it is ended, never a stop decided before the gap.
func TestGapRestartsCountdown(t *testing.T) {
	var leading atomic.Bool
	leading.Store(true)
	r := newRig(t, newCapacity(mig1g).with(resGPU, h100Labels, blockedH100), func(o *Options) { o.IsLeader = leading.Load })
	r.h.OnAdd(newPod("bob", "lab").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0).obj(), false)
	r.check(time.Second)
	r.check(55 * time.Second)
	leading.Store(false)
	r.check(30 * time.Second)
	leading.Store(true)
	r.check(time.Second) // 86 s after the first warning, but only just leading again
	r.check(5 * time.Second)
	if calls := r.hub.called(); len(calls) != 0 {
		t.Fatalf("stopped right after leading again: %v", calls)
	}
	r.check(60 * time.Second)
	r.check(5 * time.Second)
	if calls := r.hub.called(); len(calls) != 1 {
		t.Fatalf("StopServer calls a full EndAfter after leading again: %v, want one", calls)
	}
}

// TestStartedMeanwhileNotStopped: a pod bound between the Event that the spawn ends and the Hub call (the node
// came back) is never stopped.
func TestStartedMeanwhileNotStopped(t *testing.T) {
	r := newRig(t, newCapacity(mig1g).with(resGPU, h100Labels, blockedH100), nil)
	pod := newPod("bob", "lab").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0)
	r.h.OnAdd(pod.obj(), false)
	r.check(time.Second)
	r.check(60 * time.Second) // the "ended" Event is written; the Hub is asked EndNotice later
	r.h.OnUpdate(pod.obj(), pod.bound("gpu-h100-0", t0.Add(61*time.Second)).obj())
	r.check(5 * time.Second)
	if calls := r.hub.called(); len(calls) != 0 {
		t.Fatalf("a pod that was placed meanwhile was stopped: %v", calls)
	}
}

// TestPodLifecycle: pods that are not Pending GPU pods of Hub users are not kept; a pod that starts or goes
// away is forgotten (a new pod of the same name starts afresh).
func TestPodLifecycle(t *testing.T) {
	r := newRig(t, newCapacity().with(resGPU, h100Labels, h100), nil)
	bob := newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0)
	r.h.OnAdd(bob.obj(), false)
	r.h.OnAdd(newPod("carol", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0).noUser().obj(), false)
	r.h.OnAdd(newPod("dave", "").wants(resGPU, 1, h100Labels).bound("gpu-h100-0", t0).phase(corev1.PodRunning).obj(), false)
	cpu := newPod("erin", "").unschedulable(schedGPU, t0)
	r.h.OnAdd(cpu.obj(), false)
	assertMetric(t, r.reg, "gpuhub_profiles_pending_pods", map[string]float64{"": 1})
	r.check(0)
	if n := len(r.e.states); n != 1 {
		t.Fatalf("%d pod states, want 1", n)
	}
	r.h.OnUpdate(bob.obj(), bob.bound("gpu-h100-0", t0).phase(corev1.PodRunning).obj())
	r.check(0)
	assertMetric(t, r.reg, "gpuhub_profiles_pending_pods", map[string]float64{"": 0})
	if n := len(r.e.states); n != 0 {
		t.Fatalf("%d pod states after bob started, want 0", n)
	}
	again := newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0)
	again.p.UID = "uid-2"
	r.h.OnAdd(again.obj(), false)
	r.check(time.Second)
	r.h.OnDelete(cache.DeletedFinalStateUnknown{Key: "jhub/jupyter-bob", Obj: again.obj()})
	r.check(0)
	if n, s := len(r.events(t)), len(r.e.states); n != 2 || s != 0 {
		t.Fatalf("after a second pod and its deletion: %d events (want 2), %d states (want 0)", n, s)
	}
}

// TestRunReacts: a pod update wakes Run at once, without waiting for the recheck.
func TestRunReacts(t *testing.T) {
	r := newRig(t, newCapacity().with(resGPU, h100Labels, h100), func(o *Options) { o.Recheck = time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.e.Run(ctx) }()
	pod := newPod("bob", "").wants(resGPU, 1, h100Labels)
	r.h.OnAdd(pod.obj(), false) // the scheduler has not looked yet: nothing to say
	r.h.OnUpdate(pod.obj(), pod.unschedulable(schedGPU, t0).obj())
	deadline := time.Now().Add(5 * time.Second)
	for len(r.events(t)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if n := len(r.events(t)); n != 1 {
		t.Fatalf("%d events after the update, want 1 at once", n)
	}
}

// TestMetrics: /metrics as Prometheus scrapes it (golden; `make monitoring-test` runs promtool check metrics on it).
func TestMetrics(t *testing.T) {
	r := newRig(t, newCapacity().with(resGPU, h100Labels, freeH100), nil)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), "GET", "/metrics", nil))
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if problems, err := testutil.GatherAndLint(r.reg, mf.GetName()); err != nil || len(problems) > 0 {
			t.Errorf("lint %s: %v %v", mf.GetName(), problems, err)
		}
	}
	golden.Check(t, "metrics.golden", rec.Body.String())
}

// assertMetric compares a metric's values by its one label's value ("" for an unlabelled metric).
func assertMetric(t *testing.T, reg *prometheus.Registry, name string, want map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			label := ""
			if len(m.GetLabel()) > 0 {
				label = m.GetLabel()[0].GetValue()
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			if _, asked := want[label]; asked || v != 0 {
				got[label] = v
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}
