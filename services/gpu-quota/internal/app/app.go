// Package app wires gpu-quota: the policy and its reloads, the informers, the Hub directory of users and
// groups, the cached ledger, the decision log, the admission engine, the HTTP API, and the leader-only work.
// main parses flags and calls Run; tests call Run in-process with fakes.
package app

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/api"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/usagecache"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/kube"
	"github.com/gpuhub/gpuhub/services/internal/leader"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// HubUsers lists the Hub's users with their groups; *hubapi.Client satisfies it.
type HubUsers interface {
	Users(ctx context.Context, opts hubapi.ListUsersOptions) iter.Seq2[hubapi.User, error]
}

// Leading is what the leader-only work (the enforcement loop) gets: the engine's views of every user, the
// decision log, the policy in use, and the clients to act with.
type Leading struct {
	Engine    *admit.Engine
	Inventory *inventory.Inventory
	Decisions *decision.Log
	Policy    *policy.Reloader[quota.Policy]
	Kube      kubernetes.Interface
	Hub       HubUsers
	Namespace string
	// Interval is --enforce-interval.
	Interval time.Duration
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Now      func() time.Time
	// Admissions are marked while served; passes over all users step aside for them (yield.Foreground).
	Admissions *yield.Foreground
}

// Options configure Run.
type Options struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Addr to listen on; Listener wins when set.
	Addr     string
	Listener net.Listener
	Prefix   string // JUPYTERHUB_SERVICE_PREFIX

	// PolicyPath is the policy file; a file that does not load keeps Run from starting (a *PolicyError).
	PolicyPath string
	// PolicyPoll is how often the file is checked for a new content (a ConfigMap update swaps a symlink);
	// default 10 s. Reload forces a reload (SIGHUP).
	PolicyPoll time.Duration
	Reload     <-chan struct{}
	// PolicyTicks, when set, replaces PolicyPoll's ticker (tests: each value sent is one poll).
	PolicyTicks <-chan time.Time

	Kube      kubernetes.Interface
	Namespace string // single-user pods; "" = all
	// Tolerations are the single-user pods' (--tolerations): a GPU on a node tainted against them is not free.
	// nil: inventory.DefaultTolerations.
	Tolerations []corev1.Toleration
	// InformerUnreadyAfter is how long an informer's list/watch may keep failing before /readyz fails.
	InformerUnreadyAfter time.Duration
	// ShutdownDelay is server.Options.ShutdownDelay (--shutdown-delay).
	ShutdownDelay time.Duration

	Hub        HubUsers
	HubRefresh time.Duration // default 2 min
	// Token is gpu-quota's own Hub API token: admit accepts only it, and the usage API is asked with it.
	Token string
	// Auth is hubauth's Middleware (quota, decisions, explain).
	Auth           func(http.Handler) http.Handler
	ReaderServices []string

	// UsageURL is the usage API's base URL with its prefix; empty: budgets are unavailable.
	UsageURL     string
	UsageRefresh time.Duration // default 15 s
	UsageClient  *http.Client

	ReservationTTL time.Duration // default 5 min
	// VerdictInterval is how often a watch of verdicts (assess/watch) looks for changes (default 2 s).
	VerdictInterval time.Duration

	// Waitlist turns the waitlist on (services/gpu-quota/README.md, "When no GPU is free").
	Waitlist bool
	// WaitlistHold is how long a freed unit is held for the next in line (default 10 min).
	WaitlistHold time.Duration
	// WaitlistTick is how often the leader moves the queues on (default 2 s).
	WaitlistTick time.Duration
	// WaitlistTicks, when set, replaces WaitlistTick's ticker (tests: each value sent is one step).
	WaitlistTicks <-chan time.Time
	// FairShareHalfLife is the half-life of GPU-hours in the fair-share order (default 7 days).
	FairShareHalfLife time.Duration
	// WaitlistStore keeps the queue; nil: the usage API at UsageURL (required then).
	WaitlistStore WaitlistStore
	// HubStart starts servers whose turn came with auto-start; nil: no auto-start (the hold still applies).
	HubStart HubStarter

	// WhileLeader, if set, runs under the Lease LeaseNamespace/LeaseName as Identity; its ctx ends when
	// leadership is lost. Admission never needs the lease.
	WhileLeader               func(ctx context.Context, l Leading)
	LeaseNamespace, LeaseName string
	Identity                  string
	// AdvertiseURL is where the other replicas reach this one (http://POD_IP:PORT, --advertise-url). Set, only the
	// holder of the Lease decides admissions and waitlist changes, and every other replica relays the API to it:
	// the Lease's identity becomes "<Identity>@<AdvertiseURL>". Empty: every replica decides on its own (exact
	// with one replica only). Needs WhileLeader.
	AdvertiseURL string
	// OwnerDeployment is gpu-quota's own Deployment in LeaseNamespace (--owner-deployment): the Lease it creates
	// is owned by it, so the Lease goes when the Deployment goes (helm uninstall); "": no owner.
	OwnerDeployment              string
	LeaseDuration, RenewDeadline time.Duration
	LeaseRetryPeriod             time.Duration
	EnforceInterval              time.Duration // passed to WhileLeader
	DecisionLogSize              int
	// DecisionLogDelay lets decisions' log lines wait up to this long, so that a burst of spawns is answered
	// before its lines are written (decision.Options.WriteDelay); 0: 20 ms; negative: each line at once.
	DecisionLogDelay time.Duration

	Now func() time.Time
	// OnServing, if set, gets the server and the engine once it listens (tests).
	OnServing func(*server.Server, *admit.Engine)
}

// PolicyError is a policy file that does not load at start: its text is every error, one a line,
// file:line:column: message.
type PolicyError struct{ Err error }

func (e *PolicyError) Error() string { return e.Err.Error() }
func (e *PolicyError) Unwrap() error { return e.Err }

// Run serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil || o.Registry == nil || o.Kube == nil || o.Hub == nil || o.Auth == nil || o.PolicyPath == "" {
		return errors.New("gpu-quota: Logger, Registry, Kube, Hub, Auth and PolicyPath are required")
	}
	if o.Token == "" {
		return errors.New("gpu-quota: the service's Hub API token (JUPYTERHUB_API_TOKEN) is required: admit accepts only it")
	}
	if o.PolicyPoll <= 0 {
		o.PolicyPoll = 10 * time.Second
	}
	if o.HubRefresh <= 0 {
		o.HubRefresh = 2 * time.Minute
	}
	if o.DecisionLogDelay == 0 {
		o.DecisionLogDelay = 20 * time.Millisecond
	}
	// Unless the caller set a clock, the engine gets none and reads time.Now itself: once per admission, for
	// its duration and its decision, instead of twice.
	var engineNow func() time.Time
	if o.Now != nil {
		engineNow = o.Now
	} else {
		o.Now = time.Now
	}
	if o.OnServing == nil {
		o.OnServing = func(*server.Server, *admit.Engine) {}
	}
	if o.LeaseName == "" {
		o.LeaseName = "gpu-quota"
	}
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = o.Namespace
	}
	if o.Waitlist {
		if o.WaitlistTick <= 0 {
			o.WaitlistTick = 2 * time.Second
		}
		if o.FairShareHalfLife <= 0 {
			o.FairShareHalfLife = 7 * 24 * time.Hour
		}
		if o.UsageRefresh <= 0 {
			o.UsageRefresh = 15 * time.Second
		}
		if o.WaitlistStore == nil {
			if o.UsageURL == "" {
				return errors.New("gpu-quota: the waitlist is kept by the usage API: set --usage-url with --waitlist")
			}
			o.WaitlistStore = &waitlist.UsageStore{URL: o.UsageURL, Token: o.Token, Client: o.UsageClient}
		}
	}
	if o.WhileLeader != nil && (o.LeaseNamespace == "" || o.Identity == "") {
		return errors.New("gpu-quota: enforcement runs under a Lease: set --lease-namespace (or --namespace) and an identity (POD_NAME)")
	}
	if o.AdvertiseURL != "" && o.WhileLeader == nil {
		return errNoAdvertise
	}
	// With an advertise URL only the Lease holder decides; its identity tells the others where it is.
	oneDecider := o.AdvertiseURL != ""
	identity := o.Identity
	if oneDecider {
		u, err := advertised(o.AdvertiseURL)
		if err != nil {
			return err
		}
		identity += "@" + u
	}
	if o.OwnerDeployment != "" && o.LeaseNamespace == "" {
		return errors.New("gpu-quota: --owner-deployment needs --lease-namespace (or --namespace), the namespace of the Deployment and of its Lease")
	}

	pol, err := policy.NewReloader[quota.Policy](o.PolicyPath, o.Now())
	if err != nil {
		return &PolicyError{Err: err}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	s := &service{o: o, pol: pol}
	if err := s.metrics(); err != nil {
		return err
	}
	decisions, err := decision.NewLog(decision.Options{Service: admit.Service, Size: o.DecisionLogSize, Logger: o.Logger,
		Registerer: o.Registry, Subsystem: "quota", Now: o.Now, WriteDelay: max(o.DecisionLogDelay, 0)})
	if err != nil {
		return err
	}
	defer decisions.Flush() // after the goroutines below, which record, have ended
	// Admissions are what the Hub waits on; long passes (the usage refresh, the enforcer's, Views) step aside.
	admissions := &yield.Foreground{}
	// changed tells the engine (made below, before anything calls this) that a verdict may have changed.
	var eng *admit.Engine
	changed := func() { eng.Changed() }
	s.changed = changed
	s.usage, err = usagecache.New(usagecache.Options{URL: o.UsageURL, Token: o.Token, Client: o.UsageClient, Refresh: o.UsageRefresh,
		Now: o.Now, Logger: o.Logger, Registerer: o.Registry, Windows: func() []time.Duration { return policyWindows(pol.Current()) },
		Behind: admissions, OnChange: changed})
	if err != nil {
		return err
	}
	if o.UsageURL == "" {
		o.Logger.Warn("no --usage-url: GPU-hour budgets cannot be checked; the policy's onUnavailable applies to every budget")
	}

	inv := inventory.New(inventory.Options{Client: o.Kube, Namespace: o.Namespace, MetricsSubsystem: "quota", NoAgents: true,
		UnhealthyAfter: o.InformerUnreadyAfter, Now: o.Now})
	if err := o.Registry.Register(inv.Metrics()); err != nil {
		return fmt.Errorf("register informer metrics: %w", err)
	}
	var handlersSynced atomic.Pointer[func() bool]
	// Once synced, informers and their handlers stay synced (HasSynced never turns false): every admission
	// asks, and reading the informers' locks on each would cost it a few cache misses.
	var wasSynced atomic.Bool
	synced := func() error {
		if wasSynced.Load() {
			return nil
		}
		if err := inv.Synced(ctx); err != nil {
			return err
		}
		if f := handlersSynced.Load(); f == nil || !(*f)() {
			return errors.New("admission index not filled yet")
		}
		wasSynced.Store(true)
		return nil
	}
	wl := &waitlister{o: o, store: o.WaitlistStore, log: decisions, stopping: ctx.Done()}
	if wl.saveMetrics, err = newSaveMetrics(o.Registry); err != nil {
		return err
	}
	eng, err = admit.New(admit.Options{
		Waitlist: admit.WaitlistOptions{Enabled: o.Waitlist, Hold: o.WaitlistHold, Decayed: wl.decayedNow},
		Policy:   pol.Current, Hours: s.usage, Directory: s.directory, Log: decisions,
		DirectoryReadAt: func() time.Time {
			if at := s.dirAt.Load(); at != nil {
				return *at
			}
			return time.Time{}
		},
		// Enforcement stops acting once the Hub could not be read for three refreshes.
		DirectoryMaxAge: 3 * o.HubRefresh,
		Synced:          synced, Healthy: func() error { return inv.Healthy(ctx) },
		ReservationTTL: o.ReservationTTL, Now: engineNow, Registerer: o.Registry, Behind: admissions,
		Tolerations: o.Tolerations,
	})
	if err != nil {
		return err
	}
	wl.eng = eng
	if oneDecider {
		eng.SetDeciding(false) // until this replica holds the Lease
	}
	hs, err := inv.AddHandlers(eng.PodHandler(), eng.NodeHandler())
	if err != nil {
		return err
	}
	handlersSynced.Store(&hs)
	inv.Start(ctx)

	handler, err := api.New(api.Options{Prefix: o.Prefix, Engine: eng, Log: decisions, Token: o.Token, Auth: o.Auth,
		ReaderServices: o.ReaderServices, Logger: o.Logger, Foreground: admissions,
		Verdicts: func(opts []admit.AssessOption) api.VerdictWatch { return eng.WatchVerdicts(opts) },
		// A watch is the decider's, and it ends when this replica stops deciding or stops: the HTTP server's
		// graceful shutdown would otherwise wait for it.
		Deciding: eng.DecidingUntil, Stopping: ctx.Done(), VerdictInterval: o.VerdictInterval})
	if err != nil {
		return err
	}
	var (
		el       *leader.Elector
		replicas *replicaServer
		mirror   *replicaClient
		ready    func() bool
	)
	if oneDecider {
		replicas = newReplicaServer(eng, o.Token, o.Logger)
		mirror = &replicaClient{self: identity, prefix: server.NormalizePrefix(o.Prefix), token: o.Token, eng: eng,
			client: &http.Client{Transport: &http.Transport{}}, logger: o.Logger,
			gauge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "replica_in_sync",
				Help: "1 while this replica's copy of the deciding replica's reservations is in sync (it may take the Lease), 0 otherwise."})}
		if err := o.Registry.Register(mirror.gauge); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
		ready = mirror.ready
	}
	if o.WhileLeader != nil {
		el, err = leader.New(leader.Options{Ready: ready, Client: o.Kube, Namespace: o.LeaseNamespace, Name: o.LeaseName, Identity: identity,
			LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.LeaseRetryPeriod,
			Logger: o.Logger, Registerer: o.Registry, Subsystem: "quota",
			Owner: kube.NewOwner(kube.OwnerOptions{Client: o.Kube, Namespace: o.LeaseNamespace, Deployment: o.OwnerDeployment, Logger: o.Logger}).Ref,
			OnStartedLeading: func(lctx context.Context) {
				if oneDecider {
					eng.SetDeciding(true)
					defer eng.SetDeciding(false)
					o.Logger.Info("deciding admissions: this replica holds the Lease", "identity", identity)
				}
				var lwg sync.WaitGroup
				if o.Waitlist {
					lwg.Go(func() { wl.run(lctx) })
				}
				o.WhileLeader(lctx, Leading{Engine: eng, Inventory: inv, Decisions: decisions, Policy: pol, Kube: o.Kube, Hub: o.Hub,
					Namespace: o.Namespace, Interval: o.EnforceInterval, Logger: o.Logger, Registry: o.Registry, Now: o.Now,
					Admissions: admissions})
				lwg.Wait()
				<-lctx.Done() // decides for as long as it leads, whatever WhileLeader does
			},
			OnStoppedLeading: func() {
				if oneDecider {
					eng.SetDeciding(false)
				}
			}})
		if err != nil {
			return err
		}
	}
	if oneDecider {
		fw, err := newForwarder(identity, o.Prefix, eng, el.Leader, handler, o.Logger, o.Registry, ctx.Done())
		if err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
		mirror.leader = el.Leader
		stream := server.NormalizePrefix(o.Prefix) + replicaPath
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == stream && r.Method == http.MethodGet {
				replicas.ServeHTTP(w, r)
				return
			}
			fw.ServeHTTP(w, r)
		})
		deciding := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "deciding",
			Help: "1 on the replica that decides admissions and waitlist changes (the Lease holder), 0 on those that relay to it."},
			func() float64 {
				if eng.Deciding() {
					return 1
				}
				return 0
			})
		if err := o.Registry.Register(deciding); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	srv, err := server.New(server.Options{
		Addr: o.Addr, Listener: o.Listener, Prefix: o.Prefix, Registry: o.Registry, Logger: o.Logger, Subsystem: "quota",
		Handler: handler, ShutdownDelay: o.ShutdownDelay,
		ReadyChecks: []server.Check{
			{Name: "policy", Fn: s.policyLoaded},
			{Name: "informers", Fn: func(context.Context) error { return synced() }},
			// A broken watch leaves the caches silently frozen: not ready once it lasts.
			{Name: "watches", Fn: inv.Healthy},
			{Name: "hub", Fn: s.hubReady},
			// Detail only: the last good policy still serves, and budgets follow onUnavailable.
			{Name: "policy-reload", Fn: s.lastReload, Optional: true},
			{Name: "usage", Fn: s.usage.Check, Optional: true},
			{Name: "waitlist", Fn: wl.ready, Optional: true},
		},
	})
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Go(func() { s.hubLoop(ctx) })
	wg.Go(func() { s.usage.Run(ctx) })
	wg.Go(func() {
		policy.Watch(ctx, s.pol, policy.WatchOptions{Poll: o.PolicyPoll, Ticks: o.PolicyTicks, Signal: o.Reload, What: "policy", Logger: o.Logger,
			Now: o.Now, Metrics: s.reloadMetrics,
			// The usage cache asks for the windows the new policy needs; verdicts follow the new policy.
			OnChange: func() { s.usage.Kick(); changed() }})
	})
	if o.Waitlist {
		// Every replica answers from the stored queue; the leader moves it on and saves it.
		wg.Go(func() { wl.load(ctx) })
		wg.Go(func() { wl.decayedLoop(ctx) })
		if o.WhileLeader == nil {
			wg.Go(func() { wl.run(ctx) })
		}
	}
	// With one decider, a stop hands over in order: this replica stops deciding (decisions under way end first),
	// gives the Lease back, and only then drains its HTTP server, so that requests relayed meanwhile find the
	// next decider instead of a closed port. Otherwise the Lease and the server end with ctx, as before.
	elCtx, serveCtx := ctx, ctx
	stopFollowing := func() {}
	if oneDecider {
		var elCancel, serveCancel context.CancelFunc
		elCtx, elCancel = context.WithCancel(context.WithoutCancel(ctx))
		serveCtx, serveCancel = context.WithCancel(context.WithoutCancel(ctx))
		followCtx, followCancel := context.WithCancel(context.WithoutCancel(ctx))
		stopFollowing = followCancel
		defer elCancel()
		defer serveCancel()
		elDone := make(chan struct{})
		wg.Go(func() {
			defer close(elDone)
			if err := el.Run(elCtx); err != nil {
				o.Logger.Error("leader election stopped", "err", err)
			}
		})
		wg.Go(func() { mirror.run(ctx) })
		wg.Go(func() {
			<-ctx.Done() // the caller's, or cancel() below once Serve failed
			eng.SetDeciding(false)
			// The standbys get every reservation made, then the last line, before the Lease is free.
			if seq := eng.FinalLine(); seq > 0 && !replicas.waitFlushed(seq, time.Second) {
				o.Logger.Warn("a standby did not take the last reservations within 1 s; handing over anyway")
			}
			if o.Waitlist && el.IsLeader() {
				// The next decider reads the queue from the store: it gets this one's last changes.
				sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				wl.saveLast(sctx)
				scancel()
			}
			elCancel()
			<-elDone
			// Requests still here are relayed to the next holder while the server drains.
			wg.Go(func() { el.Follow(followCtx) })
			serveCancel()
		})
	} else if el != nil {
		wg.Go(func() {
			if err := el.Run(elCtx); err != nil {
				o.Logger.Error("leader election stopped", "err", err)
			}
		})
	}
	err = srv.Serve(serveCtx, func(srv *server.Server) { o.OnServing(srv, eng) })
	cancel()
	stopFollowing() // the server has drained: nothing more to relay
	wg.Wait()
	return err
}

type service struct {
	o     Options
	pol   *policy.Reloader[quota.Policy]
	usage *usagecache.Cache
	// changed tells the engine that something a verdict depends on changed (admit.Engine.Changed).
	changed func()

	dir    atomic.Pointer[map[string][]string]
	dirAt  atomic.Pointer[time.Time] // when dir was read
	hubErr atomic.Pointer[error]

	reloadMetrics *policy.ReloadMetrics
	hubSuccess    prometheus.Gauge
	hubDuration   prometheus.Gauge
}

func (s *service) metrics() error {
	var err error
	if s.reloadMetrics, err = policy.NewReloadMetrics(s.o.Registry, "quota", "policy", "policy"); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	s.hubSuccess = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "hub_refresh_last_run_success",
		Help: "1 when the last read of the Hub's users and groups succeeded, 0 when it failed (the last directory stays in use)."})
	s.hubDuration = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "hub_refresh_run_duration_seconds",
		Help: "Duration of the last read of the Hub's users and groups."})
	for _, c := range []prometheus.Collector{s.hubSuccess, s.hubDuration} {
		if err := s.o.Registry.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

func (s *service) policyLoaded(context.Context) error {
	if s.pol.Current() == nil {
		return errors.New("no policy loaded")
	}
	return nil
}

// lastReload is the /readyz detail of the last reload: the errors while the last good policy serves.
func (s *service) lastReload(context.Context) error {
	st := s.pol.Status()
	if st.OK {
		return nil
	}
	return fmt.Errorf("the last reload of %s failed at %s; the policy loaded at %s stays in use: %w",
		st.Path, st.LastAttempt.UTC().Format(time.RFC3339), st.Loaded.UTC().Format(time.RFC3339), st.Err)
}

func (s *service) directory() (map[string][]string, error) {
	if d := s.dir.Load(); d != nil {
		return *d, nil
	}
	if e := s.hubErr.Load(); e != nil {
		return nil, *e
	}
	return nil, errors.New("not read yet")
}

func (s *service) hubReady(context.Context) error {
	if s.dir.Load() != nil {
		return nil
	}
	if e := s.hubErr.Load(); e != nil {
		return fmt.Errorf("hub users not read yet: %w", *e)
	}
	return errors.New("hub users not read yet")
}

// hubLoop keeps the last known users and groups; on errors it retries with backoff and keeps the old ones.
func (s *service) hubLoop(ctx context.Context) {
	backoff := time.Second
	for {
		start := time.Now()
		dir, err := s.readHub(ctx)
		s.hubDuration.Set(time.Since(start).Seconds())
		wait := s.o.HubRefresh
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.hubSuccess.Set(0)
			s.hubErr.Store(&err)
			s.o.Logger.Warn("reading Hub users and groups failed; keeping the last known", "err", err, "retryIn", backoff)
			wait = backoff
			backoff = min(2*backoff, s.o.HubRefresh)
		} else {
			s.hubSuccess.Set(1)
			if old := s.dir.Swap(&dir); old == nil || !maps.EqualFunc(*old, dir, slices.Equal) {
				s.changed()
			}
			at := s.o.Now()
			s.dirAt.Store(&at)
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (s *service) readHub(ctx context.Context) (map[string][]string, error) {
	dir := map[string][]string{}
	for u, err := range s.o.Hub.Users(ctx, hubapi.ListUsersOptions{}) {
		if err != nil {
			return nil, fmt.Errorf("list hub users: %w", err)
		}
		groups := u.Groups
		if groups == nil {
			groups = []string{}
		}
		dir[u.Name] = groups
	}
	return dir, nil
}

// policyWindows are the budget windows with a limit in any entry of p: a superset of every user's
// Effective.Windows, asked from the usage API in one poll.
func policyWindows(p *quota.Policy) []time.Duration {
	if p == nil {
		return nil
	}
	var out []time.Duration
	add := func(e quota.Entry) {
		for _, b := range e.Budgets {
			if b.GPUHours != nil && !b.GPUHours.IsUnlimited() {
				out = append(out, b.Window.Std())
			}
		}
	}
	add(p.Default)
	for _, e := range p.Groups {
		add(e)
	}
	for _, e := range p.Users {
		add(e)
	}
	return usagecache.Windows(out)
}
