// Package leader runs one replica of an acting gpuhub service as the leader, by client-go's leader election on
// a coordination.k8s.io Lease: only the leader acts (stops servers, writes notices), so two replicas never act
// twice. Admission and reading need no lease. RBAC: get, create and update on leases in the lease namespace.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Options configure an Elector. Client, Namespace, Name and Identity are required.
type Options struct {
	Client kubernetes.Interface
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity names this replica in the Lease (the pod name, unique per replica).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's (defaults 15 s, 10 s, 2 s, as
	// kube-controller-manager's).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// OnStartedLeading runs while this replica leads; its ctx ends when leadership is lost or Run's ctx ends.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading, if set, runs when leadership is lost (or never gained and Run returns).
	OnStoppedLeading func()
	Logger           *slog.Logger
	// Registerer, with Subsystem, gets gpuhub_<subsystem>_leader (1 while leading); nil registers nothing.
	Registerer prometheus.Registerer
	Subsystem  string
}

// Elector campaigns for the Lease again and again until its context ends.
type Elector struct {
	o       Options
	leading atomic.Bool
	gauge   prometheus.Gauge
}

// New checks opts and registers the metric.
func New(o Options) (*Elector, error) {
	if o.Client == nil || o.Namespace == "" || o.Name == "" || o.Identity == "" {
		return nil, errors.New("leader: Client, Namespace, Name and Identity are required")
	}
	if o.OnStartedLeading == nil {
		return nil, errors.New("leader: OnStartedLeading is required")
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.RenewDeadline <= 0 {
		o.RenewDeadline = 10 * time.Second
	}
	if o.RetryPeriod <= 0 {
		o.RetryPeriod = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Elector{o: o}
	e.gauge = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: o.Subsystem, Name: "leader",
		Help: "1 while this replica holds the Lease and acts, 0 otherwise."})
	if o.Registerer != nil {
		if err := o.Registerer.Register(e.gauge); err != nil {
			return nil, fmt.Errorf("leader: register metric: %w", err)
		}
	}
	return e, nil
}

// IsLeader reports whether this replica leads now.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Run campaigns until ctx ends: when leadership is lost it campaigns again, so a replica that lost the Lease
// (an API-server outage longer than RenewDeadline) acts again once it wins it back. The Lease is released when
// ctx ends, so that another replica takes over at once.
func (e *Elector) Run(ctx context.Context) error {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, e.o.Namespace, e.o.Name,
		e.o.Client.CoreV1(), e.o.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: e.o.Identity})
	if err != nil {
		return fmt.Errorf("leader: lease lock: %w", err)
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: e.o.Name, ReleaseOnCancel: true,
		LeaseDuration: e.o.LeaseDuration, RenewDeadline: e.o.RenewDeadline, RetryPeriod: e.o.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				e.leading.Store(true)
				e.gauge.Set(1)
				e.o.Logger.Info("leading: acting as the only replica", "lease", e.o.Namespace+"/"+e.o.Name, "identity", e.o.Identity)
				e.o.OnStartedLeading(ctx)
			},
			OnStoppedLeading: func() {
				was := e.leading.Swap(false)
				e.gauge.Set(0)
				if was {
					e.o.Logger.Info("stopped leading", "lease", e.o.Namespace+"/"+e.o.Name, "identity", e.o.Identity)
				}
				if e.o.OnStoppedLeading != nil {
					e.o.OnStoppedLeading()
				}
			},
			OnNewLeader: func(id string) {
				if id != e.o.Identity {
					e.o.Logger.Info("another replica leads", "lease", e.o.Namespace+"/"+e.o.Name, "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader: %w", err)
	}
	for ctx.Err() == nil {
		le.Run(ctx) // returns when leadership is lost or ctx ends
		select {
		case <-ctx.Done():
		case <-time.After(e.o.RetryPeriod):
		}
	}
	return nil
}

// Run is New and Run in one call.
func Run(ctx context.Context, o Options) error {
	e, err := New(o)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}
