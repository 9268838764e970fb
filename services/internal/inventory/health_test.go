package inventory

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// fakeClock is a settable clock for the health bookkeeping (the reflector keeps its own real-time backoff).
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// refused is what a watch gets while the kube-apiserver restarts.
var refused = &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}

// eventually polls cond for up to 20 s of real time (the reflector retries with a real 0.8 s .. 30 s backoff).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: still not true after 20 s: %s", what, last)
}

func healthOf(inv *Inventory, name string) InformerHealth {
	for _, h := range inv.Health() {
		if h.Name == name {
			return h
		}
	}
	return InformerHealth{}
}

// TestInformerHealth (fault 9): a watch that keeps failing is visible in Health, the readiness check (after the
// threshold) and the metrics, and clears when the watch works again. The failure is "connection refused", as
// during a kube-apiserver restart: the reflector retries such watches by itself without calling the informer's
// watch error handler, so the handler alone would never see it.
func TestInformerHealth(t *testing.T) {
	client := fake.NewClientset(newPod("jhub", "jupyter-alice").user("alice", "").limit("nvidia.com/gpu", 1).running("n1", "10.0.0.1", true).obj())
	var failing atomic.Bool
	failing.Store(true)
	client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		wa, ok := a.(k8stesting.WatchAction)
		if ok && wa.GetWatchRestrictions().Labels.Empty() && failing.Load() { // the user-pods informer, not the agents'
			return true, nil, refused
		}
		return false, nil, nil
	})
	var clock fakeClock
	t0 := time.Date(2026, 11, 22, 14, 2, 11, 0, time.UTC)
	clock.set(t0)
	reg := prometheus.NewRegistry()
	inv := New(Options{Client: client, Now: clock.now, UnhealthyAfter: time.Minute})
	reg.MustRegister(inv.Metrics())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv.Start(ctx)
	if err := inv.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}

	eventually(t, "pods watch failures recorded", func() (bool, string) {
		h := healthOf(inv, "pods")
		return h.Errors >= 1 && h.FailingSince.Equal(t0) && strings.Contains(h.LastError, "connection refused"), ""
	})
	if h := healthOf(inv, "nodes"); h.Errors != 0 || !h.FailingSince.IsZero() || !h.LastSync.Equal(t0) {
		t.Errorf("nodes informer: %+v, want healthy and synced at %v", h, t0)
	}
	if err := inv.Healthy(ctx); err != nil {
		t.Errorf("Healthy after failing for 0 s (threshold 1 min): %v", err)
	}

	clock.advance(75 * time.Second)
	err := inv.Healthy(ctx)
	if err == nil {
		t.Fatal("Healthy after failing for 75 s: nil, want an error")
	}
	for _, want := range []string{"pods", "failing since 2026-11-22T14:02:11Z (1m15s", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Healthy = %q, want it to say %q", err, want)
		}
	}
	if got := testutil.ToFloat64(inv.metrics.errors.WithLabelValues("pods")); got < 1 {
		t.Errorf("watch_errors_total{informer=pods} = %v, want >= 1", got)
	}
	lastSync := func(name string) float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "gpuhub_usage_informer_last_sync_timestamp_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == name {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	if got := lastSync("pods"); got != float64(t0.Unix()) {
		t.Errorf("last_sync_timestamp_seconds{informer=pods} = %v, want the list at %d", got, t0.Unix())
	}

	if problems, err := testutil.CollectAndLint(inv.Metrics()); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %+v", err, problems)
	}

	failing.Store(false)
	eventually(t, "pods watch recovers", func() (bool, string) {
		h := healthOf(inv, "pods")
		return h.FailingSince.IsZero() && inv.Healthy(ctx) == nil, ""
	})
	if got, want := lastSync("pods"), float64(clock.now().Unix()); got != want {
		t.Errorf("last_sync_timestamp_seconds{informer=pods} after recovery = %v, want %v", got, want)
	}
}

// TestObservedClientKeepsWatchListSemantics: wrapping the clientset must not hide that the fake does not
// support watch-list streaming (the reflector would then wait for a bookmark the fake never sends).
func TestObservedClientKeepsWatchListSemantics(t *testing.T) {
	c := observedClient{Interface: fake.NewClientset()}
	if !c.IsWatchListSemanticsUnSupported() {
		t.Error("the wrapped fake clientset claims watch-list support")
	}
}

// TestWatchErrorHandler: an error that a failed call already reported is not counted again when it reaches the
// reflector's handler; one that only the handler sees is.
func TestWatchErrorHandler(t *testing.T) {
	var clock fakeClock
	clock.set(time.Date(2026, 11, 22, 14, 0, 0, 0, time.UTC))
	h := &informerHealth{now: clock.now, state: InformerHealth{Name: "pods"}}
	r := cache.NewReflector(&cache.ListWatch{}, &corev1.Pod{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0)
	h.observe(refused)
	h.watchErrorHandler(context.Background(), r, fmt.Errorf("failed to list *v1.Pod: %w", refused))
	if got := h.snapshot(); got.Errors != 1 {
		t.Errorf("a listed error seen twice: Errors = %d, want 1", got.Errors)
	}
	h.watchErrorHandler(context.Background(), r, errors.New("very short watch"))
	if got := h.snapshot(); got.Errors != 2 || got.LastError != "very short watch" || got.Failures != 2 {
		t.Errorf("an error only the handler saw: %+v", got)
	}
}
