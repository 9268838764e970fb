// Package leader runs one replica of an acting gpuhub service as the leader, by client-go's leader election on
// a coordination.k8s.io Lease: only the leader acts (stops servers, writes notices), so two replicas never act
// twice. Reading needs no lease; gpu-quota with more than one replica also decides admissions on the holder only
// (Leader tells the others where it is; Ready keeps a replica without a copy of its state from campaigning).
// RBAC: get, create and update on leases in the lease namespace.
//
// With an owner (Options.Owner: the service's Deployment), the Lease carries an ownerReference to it, so that the
// garbage collector deletes the Lease with the Deployment (helm uninstall deletes only what it rendered, and the
// Lease is created at run time).
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/gpuhub/gpuhub/services/internal/kube"
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
	// Owner, if set, is asked before the first campaign (kube.Owner.Ref): a reference it returns is put on the
	// Lease, which is created with it when missing, or given it when it lacks it. nil, or a nil reference: the
	// Lease is left to client-go, without an owner.
	Owner func(ctx context.Context) *metav1.OwnerReference
	// Ready, if set, gates each campaign: the replica campaigns only while it returns true (a standby whose copy
	// of the leader's state is in sync), or once no replica has held the Lease for 2 × LeaseDuration (a cold
	// start: nobody has a state to copy). Meanwhile the Lease is read every RetryPeriod, for Leader.
	Ready func() bool
}

// Elector campaigns for the Lease again and again until its context ends.
type Elector struct {
	o       Options
	leading atomic.Bool
	gauge   prometheus.Gauge
	// le is client-go's elector while Run runs: its observed record names the holder.
	le atomic.Pointer[leaderelection.LeaderElector]
	// gated is set while Run waits for Ready; seen is then the holder it read from the Lease.
	gated atomic.Bool
	seen  atomic.Pointer[string]
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

// Leader is the holder's identity as this replica last observed it (this replica's own while it leads); "" when
// none is known, or the Lease was released. It may name a holder that is gone until another one acquires.
func (e *Elector) Leader() string {
	if e.gated.Load() {
		if p := e.seen.Load(); p != nil {
			return *p
		}
		return ""
	}
	if le := e.le.Load(); le != nil {
		return le.GetLeader()
	}
	return ""
}

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
	e.le.Store(le)
	owned := e.o.Owner == nil
	for ctx.Err() == nil {
		if !e.waitReady(ctx) {
			break
		}
		if !owned {
			// Tried again before each campaign until it succeeds: a failure leaves the Lease as it was, and the
			// election goes on regardless (the owner matters only at uninstall).
			if err := e.own(ctx); err != nil {
				if ctx.Err() != nil {
					break
				}
				e.o.Logger.Warn("cannot give the Lease its owner; electing anyway, trying again at the next campaign",
					"lease", e.o.Namespace+"/"+e.o.Name, "err", err)
			} else {
				owned = true
			}
		}
		cctx, stop := e.campaign(ctx)
		le.Run(cctx) // returns when leadership is lost, ctx ends, or the campaign is called off
		stop()
		select {
		case <-ctx.Done():
		case <-time.After(e.o.RetryPeriod):
		}
	}
	return nil
}

// campaign is the context of one campaign: with Ready set, it ends when this replica stops being ready before it
// has won, so that it waits at the gate again instead of winning with a stale copy. stop ends it.
func (e *Elector) campaign(ctx context.Context) (_ context.Context, stop func()) {
	if e.o.Ready == nil {
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(e.o.RetryPeriod)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				if e.leading.Load() {
					continue
				}
				if !e.o.Ready() {
					e.o.Logger.Info("not ready any more: campaigning no longer", "lease", e.o.Namespace+"/"+e.o.Name, "identity", e.o.Identity)
					cancel()
					return
				}
			}
		}
	}()
	return cctx, cancel
}

// waitReady returns once Ready allows a campaign, or no replica has held the Lease for 2 × LeaseDuration;
// false when ctx ends first. A holder counts as live while its record changes (renewals) within LeaseDuration,
// by this replica's clock, as client-go judges it: no clocks are compared.
func (e *Elector) waitReady(ctx context.Context) bool {
	if e.o.Ready == nil || e.o.Ready() {
		return true
	}
	if h := e.Leader(); h != "" {
		e.seen.Store(&h)
	}
	e.gated.Store(true)
	defer e.gated.Store(false)
	var (
		last      string // the holder and renew time last read
		changed   = time.Now()
		freeSince time.Time // zero while a holder is live
	)
	for {
		if e.o.Ready() {
			return true
		}
		holder, record, err := e.read(ctx)
		now := time.Now()
		if err == nil {
			e.seen.Store(&holder)
			if record != last {
				last, changed = record, now
			}
			live := holder != "" && now.Sub(changed) < e.o.LeaseDuration
			switch {
			case live:
				freeSince = time.Time{}
			case freeSince.IsZero():
				freeSince = now
			case now.Sub(freeSince) >= 2*e.o.LeaseDuration:
				e.o.Logger.Warn("no replica has held the Lease for twice its duration: campaigning without a copy of a leader's state",
					"lease", e.o.Namespace+"/"+e.o.Name, "identity", e.o.Identity)
				return true
			}
		} else if ctx.Err() == nil {
			e.o.Logger.Warn("cannot read the Lease while waiting to campaign", "lease", e.o.Namespace+"/"+e.o.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(e.o.RetryPeriod):
		}
	}
}

// Follow keeps Leader current after Run has returned, by reading the Lease every RetryPeriod until ctx ends: a
// replica that stopped campaigning (it is shutting down) still relays the requests it has to the next holder.
func (e *Elector) Follow(ctx context.Context) {
	h := e.Leader()
	e.seen.Store(&h)
	e.gated.Store(true)
	for {
		if holder, _, err := e.read(ctx); err == nil {
			e.seen.Store(&holder)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(e.o.RetryPeriod):
		}
	}
}

// read returns the Lease's holder and a string that changes with each renewal; a missing Lease has none.
func (e *Elector) read(ctx context.Context) (holder, record string, err error) {
	l, err := e.o.Client.CoordinationV1().Leases(e.o.Namespace).Get(ctx, e.o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	record = holder
	if l.Spec.RenewTime != nil {
		record += "@" + l.Spec.RenewTime.String()
	}
	return holder, record, nil
}

// ownAttempts bounds own's read-modify-write on a conflict (a replica's renewal in between).
const ownAttempts = 5

// own makes sure the Lease exists with the owner's reference: created with it (the spec empty: client-go takes
// a Lease without a holder as free), or given it when it lacks it. The rest of an existing Lease is kept.
func (e *Elector) own(ctx context.Context) error {
	ref := e.o.Owner(ctx)
	if ref == nil {
		return nil
	}
	leases := e.o.Client.CoordinationV1().Leases(e.o.Namespace)
	var err error
	for range ownAttempts {
		var l *coordinationv1.Lease
		l, err = leases.Get(ctx, e.o.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.o.Name, Namespace: e.o.Namespace,
				OwnerReferences: []metav1.OwnerReference{*ref}}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another replica created it first: read it
			}
			if err != nil {
				return fmt.Errorf("leader: create lease %s/%s: %w", e.o.Namespace, e.o.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("leader: read lease %s/%s: %w", e.o.Namespace, e.o.Name, err)
		}
		refs, changed := kube.WithOwner(l.OwnerReferences, *ref)
		if !changed {
			return nil
		}
		l = l.DeepCopy()
		l.OwnerReferences = refs
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			e.o.Logger.Info("the Lease is now owned by the service's Deployment", "lease", e.o.Namespace+"/"+e.o.Name, "owner", ref.Name)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("leader: give lease %s/%s its owner: %w", e.o.Namespace, e.o.Name, err)
		}
	}
	return fmt.Errorf("leader: give lease %s/%s its owner: changed by someone else %d times in a row: %w", e.o.Namespace, e.o.Name, ownAttempts, err)
}

// Run is New and Run in one call.
func Run(ctx context.Context, o Options) error {
	e, err := New(o)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}

// ProcessIdentity is a replica's Lease identity: its host name (the pod name in a cluster) and its process id, so
// that replicas that share a host (processes on one machine, as the e2e stacks run them) never hold the Lease
// as one, and a restarted process is a new holder, as a new pod is.
func ProcessIdentity() string {
	host, _ := os.Hostname()
	return host + "_" + strconv.Itoa(os.Getpid())
}
