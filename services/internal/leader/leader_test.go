package leader

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
)

// replica is one candidate; leading records what its OnStartedLeading saw.
type replica struct {
	e       *Elector
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan struct{}
	logs    logtest.Buffer
	mu      sync.Mutex
	started int
	stopped int
}

func startReplica(t *testing.T, kc *fake.Clientset, id string, opts ...func(*Options)) *replica {
	t.Helper()
	r := &replica{reg: prometheus.NewRegistry(), done: make(chan struct{})}
	o := Options{Client: kc, Namespace: "gpuhub", Name: "gpu-quota", Identity: id,
		// The Lease counts whole seconds: a shorter duration would never be valid.
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond,
		Registerer: r.reg, Subsystem: "quota", Logger: slog.New(slog.NewTextHandler(&r.logs, nil)),
		OnStartedLeading: func(ctx context.Context) {
			r.mu.Lock()
			r.started++
			r.mu.Unlock()
			<-ctx.Done()
		},
		OnStoppedLeading: func() {
			r.mu.Lock()
			r.stopped++
			r.mu.Unlock()
		},
	}
	for _, f := range opts {
		f(&o)
	}
	var err error
	r.e, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		if err := r.e.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOneLeaderAndHandover(t *testing.T) {
	kc := fake.NewClientset()
	// Every read of the Lease, a's renewals and b's tries alike (set before any replica runs: the fake's
	// reactor list is not safe to change while it is used).
	var reads atomic.Int64
	kc.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		reads.Add(1)
		return false, nil, nil
	})
	a := startReplica(t, kc, "gpu-quota-a")
	eventually(t, "a leads", a.e.IsLeader)
	b := startReplica(t, kc, "gpu-quota-b")
	// b has read the Lease and found a holding it; then both go on for several retry periods (50 ms each).
	eventually(t, "b sees a leading", func() bool { return strings.Contains(b.logs.String(), "another replica leads") })
	seen := reads.Load()
	eventually(t, "b and a read the Lease several times more", func() bool { return reads.Load() >= seen+8 })
	if b.e.IsLeader() {
		t.Fatal("b leads while a holds the lease")
	}
	if v := testutil.ToFloat64(a.e.gauge); v != 1 {
		t.Errorf("a's gpuhub_quota_leader = %v, want 1", v)
	}
	lease, err := kc.CoordinationV1().Leases("gpuhub").Get(context.Background(), "gpu-quota", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != "gpu-quota-a" {
		t.Errorf("holder %v, want gpu-quota-a", h)
	}

	// a stops: it releases the lease, b takes over, a's work was cancelled.
	a.stop()
	eventually(t, "b leads", b.e.IsLeader)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started != 1 || a.stopped != 1 || a.e.IsLeader() {
		t.Errorf("a started %d, stopped %d, leader %v; want 1, 1, false", a.started, a.stopped, a.e.IsLeader())
	}
	if v := testutil.ToFloat64(a.e.gauge); v != 0 {
		t.Errorf("a's gauge %v after stopping, want 0", v)
	}
}

// TestLeaderObserved: every replica knows who holds the Lease, the holder itself included; after a handover, the
// new one.
func TestLeaderObserved(t *testing.T) {
	kc := fake.NewClientset()
	a := startReplica(t, kc, "gpu-quota-a@http://10.0.0.1:8080")
	eventually(t, "a leads", a.e.IsLeader)
	b := startReplica(t, kc, "gpu-quota-b@http://10.0.0.2:8080")
	for name, r := range map[string]*replica{"a": a, "b": b} {
		eventually(t, name+" sees a", func() bool { return r.e.Leader() == "gpu-quota-a@http://10.0.0.1:8080" })
	}
	a.stop()
	eventually(t, "b sees itself", func() bool { return b.e.Leader() == "gpu-quota-b@http://10.0.0.2:8080" && b.e.IsLeader() })
}

// TestFollowAfterStop: a replica that stopped (and gave the Lease back) still learns the next holder while it
// drains.
func TestFollowAfterStop(t *testing.T) {
	kc := fake.NewClientset()
	a := startReplica(t, kc, "gpu-quota-a")
	eventually(t, "a leads", a.e.IsLeader)
	b := startReplica(t, kc, "gpu-quota-b")
	eventually(t, "b sees a", func() bool { return b.e.Leader() == "gpu-quota-a" })
	a.stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.e.Follow(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "the stopped a sees b", func() bool { return a.e.Leader() == "gpu-quota-b" })
}

// TestReadyGate: a standby that is not ready does not campaign while the holder lives, nor at once when it gives
// the Lease back; it campaigns once ready. Meanwhile it still knows the holder.
func TestReadyGate(t *testing.T) {
	kc := fake.NewClientset()
	a := startReplica(t, kc, "gpu-quota-a")
	eventually(t, "a leads", a.e.IsLeader)
	var ready atomic.Bool
	b := startReplica(t, kc, "gpu-quota-b", func(o *Options) { o.Ready = ready.Load })
	eventually(t, "b, gated, sees a", func() bool { return b.e.Leader() == "gpu-quota-a" })
	a.stop()
	eventually(t, "b sees the Lease given back", func() bool { return b.e.Leader() == "" })
	// The cold-start escape is 2 × LeaseDuration = 4 s away: for a second b must keep out.
	time.Sleep(time.Second)
	if b.e.IsLeader() {
		t.Fatal("b leads although not ready")
	}
	ready.Store(true)
	eventually(t, "b leads once ready", b.e.IsLeader)
}

// TestCampaignCalledOff: a standby that was ready and campaigns stops campaigning when it is no longer ready (a
// new snapshot), so it does not win the Lease given back meanwhile; ready again, it wins it.
func TestCampaignCalledOff(t *testing.T) {
	kc := fake.NewClientset()
	a := startReplica(t, kc, "gpu-quota-a")
	eventually(t, "a leads", a.e.IsLeader)
	var ready atomic.Bool
	ready.Store(true)
	b := startReplica(t, kc, "gpu-quota-b", func(o *Options) { o.Ready = ready.Load })
	eventually(t, "b campaigns", func() bool { return strings.Contains(b.logs.String(), "another replica leads") })
	ready.Store(false)
	eventually(t, "b stops campaigning", func() bool { return strings.Contains(b.logs.String(), "campaigning no longer") })
	a.stop()
	// The cold-start escape is 2 × LeaseDuration = 4 s away: for a second b must keep out.
	time.Sleep(time.Second)
	if b.e.IsLeader() {
		t.Fatal("b leads although it stopped being ready")
	}
	ready.Store(true)
	eventually(t, "b leads once ready again", b.e.IsLeader)
}

// TestReadyGateColdStart: when no replica holds the Lease for 2 × LeaseDuration, a replica that cannot become
// ready (nobody to copy from) campaigns anyway.
func TestReadyGateColdStart(t *testing.T) {
	kc := fake.NewClientset()
	began := time.Now()
	a := startReplica(t, kc, "gpu-quota-a", func(o *Options) { o.Ready = func() bool { return false } })
	eventually(t, "a leads", a.e.IsLeader)
	// LeaseDuration is 2 s; a margin for the retry period and a slow machine below.
	if d := time.Since(began); d < 3500*time.Millisecond {
		t.Errorf("led after %v, want no earlier than 2 × LeaseDuration (4 s)", d)
	}
	if !strings.Contains(a.logs.String(), "campaigning without a copy") {
		t.Errorf("the cold start was not logged:\n%s", a.logs.String())
	}
}

func TestOptionsRequired(t *testing.T) {
	if _, err := New(Options{Client: fake.NewClientset(), Namespace: "ns", Name: "x"}); err == nil {
		t.Error("no identity: no error")
	}
	if _, err := New(Options{Client: fake.NewClientset(), Namespace: "ns", Name: "x", Identity: "a"}); err == nil {
		t.Error("no OnStartedLeading: no error")
	}
}

func TestLeaseOwner(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-quota", UID: "uid-1"}
	old := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-quota", UID: "uid-0"}
	holder, duration := "gpu-quota-old", int32(1)
	lease := func(refs ...metav1.OwnerReference) *coordinationv1.Lease {
		// Held by a replica that is gone: the one under test takes it over once it expires.
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gpuhub", Name: "gpu-quota", OwnerReferences: refs},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration}}
	}
	tests := map[string]struct {
		existing *coordinationv1.Lease
		// withOwner sets Options.Owner, which answers owner.
		withOwner bool
		owner     *metav1.OwnerReference
		want      []metav1.OwnerReference
		// wantCreates: how many times the Lease is created (by this package or by client-go).
		wantCreates int
	}{
		"no Lease: created with the owner": {
			withOwner: true, owner: &owner, want: []metav1.OwnerReference{owner}, wantCreates: 1,
		},
		"a Lease without it gets it": {
			existing: lease(), withOwner: true, owner: &owner, want: []metav1.OwnerReference{owner},
		},
		"a Lease of an earlier Deployment keeps that reference too": {
			existing: lease(old), withOwner: true, owner: &owner, want: []metav1.OwnerReference{old, owner},
		},
		"no owner: the Lease as today": {
			wantCreates: 1,
		},
		"no owner found (a nil reference): the Lease as today": {
			existing: lease(), withOwner: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kc := fake.NewClientset()
			if tc.existing != nil {
				kc = fake.NewClientset(tc.existing)
			}
			var creates atomic.Int64
			kc.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				creates.Add(1)
				return false, nil, nil
			})
			o := Options{Client: kc, Namespace: "gpuhub", Name: "gpu-quota", Identity: "gpu-quota-a",
				LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond,
				OnStartedLeading: func(ctx context.Context) { <-ctx.Done() }}
			if tc.withOwner {
				o.Owner = func(context.Context) *metav1.OwnerReference { return tc.owner }
			}
			e, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = e.Run(ctx) }()
			defer func() { cancel(); <-done }()
			eventually(t, "leads", e.IsLeader)

			got, err := kc.CoordinationV1().Leases("gpuhub").Get(context.Background(), "gpu-quota", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.OwnerReferences, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Lease owners while leading (-want +got):\n%s", diff)
			}
			if h := got.Spec.HolderIdentity; h == nil || *h != "gpu-quota-a" {
				t.Errorf("holder %v, want gpu-quota-a: the election goes on as before", h)
			}
			if n := creates.Load(); n != int64(tc.wantCreates) {
				t.Errorf("Lease created %d times, want %d", n, tc.wantCreates)
			}
		})
	}
}

// TestLeaseOwnerRace: another replica creates the Lease between this one's read and create; this one then
// gives the Lease it finds its owner.
func TestLeaseOwnerRace(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-culler", UID: "uid-1"}
	kc := fake.NewClientset()
	var raced atomic.Bool
	kc.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if raced.Swap(true) {
			return false, nil, nil
		}
		// The other replica's Lease (client-go's, without an owner) lands first.
		other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gpuhub", Name: "gpu-culler"}}
		if err := kc.Tracker().Add(other); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(coordinationv1.Resource("leases"), "gpu-culler")
	})
	e, err := New(Options{Client: kc, Namespace: "gpuhub", Name: "gpu-culler", Identity: "a",
		Owner: func(context.Context) *metav1.OwnerReference { return &owner }, OnStartedLeading: func(context.Context) {}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.own(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := kc.CoordinationV1().Leases("gpuhub").Get(context.Background(), "gpu-culler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{owner}, got.OwnerReferences); diff != "" {
		t.Errorf("Lease owners (-want +got):\n%s", diff)
	}
}
