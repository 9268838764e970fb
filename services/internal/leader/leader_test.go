package leader

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// replica is one candidate; leading records what its OnStartedLeading saw.
type replica struct {
	e       *Elector
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	started int
	stopped int
}

func startReplica(t *testing.T, kc *fake.Clientset, id string) *replica {
	t.Helper()
	r := &replica{reg: prometheus.NewRegistry(), done: make(chan struct{})}
	var err error
	r.e, err = New(Options{Client: kc, Namespace: "gpuhub", Name: "gpu-quota", Identity: id,
		// The Lease counts whole seconds: a shorter duration would never be valid.
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond,
		Registerer: r.reg, Subsystem: "quota",
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
	})
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
	a := startReplica(t, kc, "gpu-quota-a")
	eventually(t, "a leads", a.e.IsLeader)
	b := startReplica(t, kc, "gpu-quota-b")
	time.Sleep(300 * time.Millisecond)
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

func TestOptionsRequired(t *testing.T) {
	if _, err := New(Options{Client: fake.NewClientset(), Namespace: "ns", Name: "x"}); err == nil {
		t.Error("no identity: no error")
	}
	if _, err := New(Options{Client: fake.NewClientset(), Namespace: "ns", Name: "x", Identity: "a"}); err == nil {
		t.Error("no OnStartedLeading: no error")
	}
}
