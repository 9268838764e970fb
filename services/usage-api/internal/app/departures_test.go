package app

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/logging"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/metrics"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// fakeClock is the service's injected clock; the test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// migPod is carol's single-user pod holding one MIG 1g.5gb instance (1/7 of an A100) on gpu-a100-0, its
// container started at started.
func migPod(started time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: "jupyter-carol", UID: "uid-carol",
			Annotations: map[string]string{inventory.AnnotationUser: "carol"}},
		Spec: corev1.PodSpec{NodeName: "gpu-a100-0", RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{{Name: "notebook",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-1g.5gb": *resource.NewQuantity(1, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.2",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "notebook",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}},
	}
}

// tickRig is the usage API's tick with everything it joins under the test's control: a fake cluster, one agent
// whose poll can be made slow (onPoll runs inside it), a SQLite ledger and the clock.
type tickRig struct {
	s      *service
	kube   kubernetes.Interface
	clock  *fakeClock
	led    Ledger
	mu     sync.Mutex
	onPoll func()
}

func newTickRig(t *testing.T, interval time.Duration, t0 time.Time, pods ...*corev1.Pod) *tickRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	objs := []runtime.Object{
		node("gpu-a100-0", map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed"}, "nvidia.com/mig-1g.5gb", 8),
		agentPod("gpu-a100-0"),
	}
	for _, p := range pods {
		objs = append(objs, p)
	}
	r := &tickRig{kube: fake.NewClientset(objs...), clock: &fakeClock{t: t0}}
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		f := r.onPoll
		r.onPoll = nil
		r.mu.Unlock()
		if f != nil {
			f()
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"node": "gpu-a100-0", "backend": "simulated",
			"sampledAt": r.clock.Now(), "intervalSeconds": interval.Seconds(), "gpus": []any{}, "pods": []any{}})
	}))
	t.Cleanup(agent.Close)
	_, p, _ := net.SplitHostPort(agent.Listener.Addr().String())
	port, _ := strconv.Atoi(p)

	reg := prometheus.NewRegistry()
	o := Options{Logger: logging.Discard(), Registry: reg, Interval: interval, Now: r.clock.Now}
	inv := inventory.New(inventory.Options{Client: r.kube, Now: r.clock.Now})
	inv.Start(ctx)
	if err := inv.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	led, closer, err := OpenDatabase(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{Interval: interval}, o.Logger)(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	conn, err := newLedgerConn(o)
	if err != nil {
		t.Fatal(err)
	}
	conn.led.Store(&ledgerBox{led})
	conn.ok.Store(true)
	state := usage.NewState(usage.NewHistory(time.Hour, interval))
	mets, err := metrics.New(reg, state)
	if err != nil {
		t.Fatal(err)
	}
	r.led = led
	r.s = &service{o: o, inv: inv, led: conn, state: state, mets: mets,
		coll: collect.New(collect.Options{Port: port, Now: r.clock.Now})}
	return r
}

// tick runs one tick that starts at start.
func (r *tickRig) tick(t *testing.T, start time.Time) {
	t.Helper()
	r.clock.Set(start)
	if err := r.s.tickOnce(context.Background()); err != nil {
		t.Fatalf("tick at %s: %v", start.Format("15:04:05.000"), err)
	}
}

// slowPoll makes the next agent poll take until at, running end there (the pod's end, while the poll waits).
func (r *tickRig) slowPoll(at time.Time, end func()) {
	r.mu.Lock()
	r.onPoll = func() { r.clock.Set(at); end() }
	r.mu.Unlock()
}

// allocated is carol's allocated GPU-seconds in the ledger.
func (r *tickRig) allocated(t *testing.T, around time.Time) float64 {
	t.Helper()
	rows, err := r.led.Hours(context.Background(), ledger.Query{From: around.Add(-2 * time.Hour), To: around.Add(2 * time.Hour), User: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for _, row := range rows {
		s += row.Allocated * 3600
	}
	return s
}

// waitFor polls the inventory until cond holds for carol's pod (ok false: not listed).
func waitFor(t *testing.T, inv *inventory.Inventory, what string, cond func(p inventory.Pod, ok bool) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pods, err := inv.GPUPods()
		if err != nil {
			t.Fatal(err)
		}
		var p inventory.Pod
		ok := false
		for _, q := range pods {
			if q.UID == "uid-carol" {
				p, ok = q, true
			}
		}
		if cond(p, ok) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the inventory never showed carol's pod %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSlowTickChargesPodToItsEnd reproduces the chaos flake of issue 34 (seed 20261123: carol 5.750 GPU-s in the
// ledger against 6.108 from her pods' lives, one MIG 1g.5gb pod on gpu-a100-0). A tick reads the pods after it
// polled the agents, and the poll takes up to an interval; a tick also starts late when the one before it
// overran (a slow commit). So the last tick that saw a pod can be more than an interval before its end, and the
// ledger charged a pod that went only up to there: carol's pod, started at :00 and gone at :03.5 while the tick
// due at :03 waited for a slow agent, was charged 2 s of its 3.5 (the chaos run allows one tick, 1 s, per pod). A
// pod is charged up to when the informer saw it go.
func TestSlowTickChargesPodToItsEnd(t *testing.T) {
	const interval = time.Second
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	const share = 1.0 / 7
	tests := map[string]struct {
		end func(t *testing.T, r *tickRig)
	}{
		"deleted": {
			end: func(t *testing.T, r *tickRig) {
				if err := r.kube.CoreV1().Pods("jhub").Delete(context.Background(), "jupyter-carol", metav1.DeleteOptions{}); err != nil {
					t.Error(err)
				}
				waitFor(t, r.s.inv, "gone", func(_ inventory.Pod, ok bool) bool { return !ok })
			},
		},
		"its container exited (Succeeded)": {
			end: func(t *testing.T, r *tickRig) {
				p := migPod(t0)
				p.Status.Phase = corev1.PodSucceeded
				p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					StartedAt: metav1.NewTime(t0), FinishedAt: metav1.NewTime(r.clock.Now())}}
				if _, err := r.kube.CoreV1().Pods("jhub").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
					t.Error(err)
				}
				waitFor(t, r.s.inv, "Succeeded", func(p inventory.Pod, ok bool) bool { return ok && !p.Allocated() })
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := newTickRig(t, interval, t0, migPod(t0))
			r.tick(t, t0)
			r.tick(t, t0.Add(time.Second))
			r.tick(t, t0.Add(2*time.Second))
			end := t0.Add(3500 * time.Millisecond)
			r.slowPoll(end, func() { tc.end(t, r) })
			r.tick(t, t0.Add(3*time.Second)) // due at :03, reads the pods at :03.5 after the slow poll
			r.tick(t, t0.Add(4500*time.Millisecond))
			r.tick(t, t0.Add(5500*time.Millisecond))

			// Its life x share; the chaos run allows it to be short by share x one interval at most.
			life := end.Sub(t0).Seconds()
			if got, want := r.allocated(t, t0), share*life; math.Abs(got-want) > 1e-9 {
				t.Errorf("carol's pod (1/7, %.1f s from its start to its end) charged %.4f GPU-s (%.2f s), want %.4f (the chaos bound: at least %.4f)",
					life, got, got/share, want, share*(life-interval.Seconds()))
			}
		})
	}
}

// The departures a tick is handed: each pod it does not list as holding, when the informer told or, if that is
// later, at the first tick that found it gone; one it still lists waits for the next tick; a pod's first end
// stands; a deletion a relist found (its time unknown) is none.
func TestDeparturesTake(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	running := migPod(t0)
	succeeded := running.DeepCopy()
	succeeded.Status.Phase = corev1.PodSucceeded
	listed, _ := inventory.PodFrom(running)
	type step struct {
		clock  time.Time
		tell   func(d *departures) // an informer event at clock
		tick   bool                // a tick at clock
		listed bool                // the tick lists carol's pod as holding
	}
	tests := map[string]struct {
		steps []step
		want  []time.Time // the departures' times handed to the ticks, in order
	}{
		"told before the tick": {
			steps: []step{{clock: at(3000), tick: true, listed: true}, {clock: at(3500), tell: func(d *departures) { d.deleted(running) }}, {clock: at(4000), tick: true}},
			want:  []time.Time{at(3500)},
		},
		"told after a tick found it gone": {
			steps: []step{{clock: at(3000), tick: true, listed: true}, {clock: at(4000), tick: true}, {clock: at(4700), tell: func(d *departures) { d.deleted(running) }}, {clock: at(5000), tick: true}},
			want:  []time.Time{at(4000)},
		},
		"told between a tick's list and the tick": {
			steps: []step{{clock: at(3000), tell: func(d *departures) { d.deleted(running) }}, {clock: at(3000), tick: true, listed: true}, {clock: at(4000), tick: true}},
			want:  []time.Time{at(3000)},
		},
		"no longer Running, then deleted": {
			steps: []step{{clock: at(3000), tick: true, listed: true}, {clock: at(3200), tell: func(d *departures) { d.updated(running, succeeded) }},
				{clock: at(3600), tell: func(d *departures) { d.deleted(succeeded) }}, {clock: at(4000), tick: true}},
			want: []time.Time{at(3200)},
		},
		"deleted after it ended": {
			steps: []step{{clock: at(3000), tell: func(d *departures) { d.deleted(succeeded) }}, {clock: at(4000), tick: true}},
		},
		"a deletion a relist found": {
			steps: []step{{clock: at(3000), tick: true, listed: true},
				{clock: at(3500), tell: func(d *departures) {
					d.deleted(cache.DeletedFinalStateUnknown{Key: "jhub/jupyter-carol", Obj: running})
				}},
				{clock: at(4000), tick: true}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := &fakeClock{}
			d := &departures{now: clock.Now}
			var got []time.Time
			for _, st := range tc.steps {
				clock.Set(st.clock)
				if st.tell != nil {
					st.tell(d)
				}
				if st.tick {
					var pods []inventory.Pod
					if st.listed {
						pods = append(pods, listed)
					}
					for _, dep := range d.take(pods, st.clock) {
						if dep.Pod.UID != "uid-carol" || !dep.Pod.Allocated() {
							t.Errorf("departure of %+v, want carol's pod as it held", dep.Pod)
						}
						got = append(got, dep.At)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("departures (-want +got):\n%s", diff)
			}
		})
	}
}
