// Package app wires the usage API: informers, agent polling, the Hub directory, the ledger, the live state and
// the HTTP server. main parses flags and calls Run; tests call Run in-process with fakes.
package app

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/adminview"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/api"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/metrics"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/profile"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// HubUsers lists the Hub's users (with their groups); *hubapi.Client satisfies it.
type HubUsers interface {
	Users(ctx context.Context, opts hubapi.ListUsersOptions) iter.Seq2[hubapi.User, error]
}

// Login logs people into pages (*huboauth.Login).
type Login interface {
	Routes(mux *http.ServeMux)
	Require(next http.Handler) http.Handler
}

// Options configure Run.
type Options struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Addr to listen on; Listener wins when set.
	Addr     string
	Listener net.Listener
	Prefix   string // JUPYTERHUB_SERVICE_PREFIX

	Kube           kubernetes.Interface
	Namespace      string // singleuser pods; "" = all
	AgentNamespace string // agent pods; "" = all
	// Tolerations are the single-user pods' (nil: inventory.DefaultTolerations): what counts as free now.
	Tolerations []corev1.Toleration
	// AgentSelector and AgentServiceAccount say which pods are the agents (see inventory.Options).
	AgentSelector       labels.Selector
	AgentServiceAccount string
	AgentPort           int
	AgentClient         *http.Client
	// InformerUnreadyAfter is how long an informer's list/watch may keep failing before /readyz fails
	// (default 1 min).
	InformerUnreadyAfter time.Duration
	// ShutdownDelay is server.Options.ShutdownDelay (--shutdown-delay).
	ShutdownDelay time.Duration

	Hub        HubUsers
	HubRefresh time.Duration // default 2 min
	// Auth is hubauth's Middleware.
	Auth func(http.Handler) http.Handler
	// ReaderServices may read every user's GPU-hours (api/v1/gpu-hours, api/v1/gpu-hours/decayed), every
	// server's telemetry (api/v1/servers) and every user's right-size advice and savings, besides admins.
	ReaderServices []string
	// AdviceReaders may read any user's right-size advice (api/v1/users/{name}/right-size) and nothing else of
	// other users (gpu-profiles: the spawn form's mark).
	AdviceReaders []string
	// WaitlistServices may write gpu-quota's waitlist state (api/v1/waitlist/state); they and admins may read it.
	WaitlistServices []string
	// Budget answers the budget of me (budget.Client on --quota-url); nil: none configured.
	Budget api.Budget

	// Login logs people into the admin view's pages (hubapi/huboauth): Routes adds its own routes (the OAuth
	// callback, logout) and Require puts the session in the context of every page request. nil leaves the pages
	// out: GET {prefix} is then the API's 404, as before.
	Login Login
	// CullerAPI and QuotaAPI are gpu-culler's and gpu-quota's APIs for the admin view's decisions and waitlist
	// (remote.Client with the usage API's token); nil: not configured, the pages say so.
	CullerAPI, QuotaAPI adminview.Remote

	// Database is a SQLite file path or a postgres:// URL, opened with OpenDatabase unless OpenLedger is set.
	Database   string
	OpenLedger OpenLedgerFunc
	// LedgerRetryMin and LedgerRetryMax bound the backoff between attempts to open the ledger (default 1 s,
	// 30 s). The live share is served meanwhile; GPU-hours are answered as unavailable.
	LedgerRetryMin, LedgerRetryMax time.Duration
	Interval                       time.Duration // sampling interval, default 5 s
	MaxGap                         time.Duration // default 6 intervals
	History                        time.Duration // default 1 h
	// StaleAfter is the age past which a node's GPU telemetry is stale; 0: 3 sampling intervals (usage.Input).
	StaleAfter time.Duration
	// LedgerLease names the Lease that keeps the ledger's writes to one replica when several run (on one
	// PostgreSQL database): the others follow its commits (ledger.Follow) and answer from them. An empty
	// Namespace: no election, this replica writes (one replica, as with SQLite).
	LedgerLease LeaseOptions
	// LedgerWriter, when set, says whether this replica writes the ledger now (tests); LedgerLease sets it.
	LedgerWriter func() bool

	Now func() time.Time
	// OnServing, if set, gets the server once it listens (tests read its address).
	OnServing func(*server.Server)
}

// Run serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil || o.Registry == nil || o.Kube == nil || o.Hub == nil || o.Auth == nil || (o.Database == "" && o.OpenLedger == nil) {
		return errors.New("usage-api: Logger, Registry, Kube, Hub, Auth and Database (or OpenLedger) are required")
	}
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.HubRefresh <= 0 {
		o.HubRefresh = 2 * time.Minute
	}
	if o.History <= 0 {
		o.History = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LedgerRetryMin <= 0 {
		o.LedgerRetryMin = time.Second
	}
	if o.LedgerRetryMax <= 0 {
		o.LedgerRetryMax = 30 * time.Second
	}
	o.LedgerRetryMax = max(o.LedgerRetryMax, o.LedgerRetryMin)
	if o.OpenLedger == nil {
		o.OpenLedger = OpenDatabase(o.Database, ledger.Options{Interval: o.Interval, MaxGap: o.MaxGap}, o.Logger)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if o.LedgerLease.Namespace != "" {
		el, err := newLedgerElector(o)
		if err != nil {
			return err
		}
		o.LedgerWriter = el.IsLeader
		go func() {
			if err := el.Run(ctx); err != nil && ctx.Err() == nil {
				o.Logger.Error("ledger writer election stopped; this replica follows the ledger until restarted", "err", err)
			}
		}()
	}

	// The ledger is not needed to serve the live share: an unreachable database must not keep the panel down
	// (nor crash-loop the pod). It connects in the background; until then GPU-hours answer "unavailable".
	led, err := newLedgerConn(o)
	if err != nil {
		return err
	}
	defer led.close()

	state := usage.NewState(usage.NewHistory(o.History, o.Interval))
	mets, err := metrics.New(o.Registry, state)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	inv := inventory.New(inventory.Options{Client: o.Kube, Namespace: o.Namespace, AgentNamespace: o.AgentNamespace,
		UnhealthyAfter: o.InformerUnreadyAfter, Now: o.Now,
		AgentSelector: o.AgentSelector, AgentServiceAccount: o.AgentServiceAccount})
	if err := o.Registry.Register(inv.Metrics()); err != nil {
		return fmt.Errorf("register informer metrics: %w", err)
	}
	inv.Start(ctx)
	s := &service{o: o, inv: inv, led: led, state: state, mets: mets, profiles: profile.NewRecorder(2 * o.Interval),
		advice: profile.NewReader(led, saveableEvery),
		coll:   collect.New(collect.Options{Client: o.AgentClient, Port: o.AgentPort, Logger: o.Logger, Now: o.Now})}

	handler := api.New(api.Options{Prefix: o.Prefix, State: state, Ledger: led, Auth: o.Auth, Now: o.Now, Logger: o.Logger,
		Budget: o.Budget, ReaderServices: o.ReaderServices, AdviceReaders: o.AdviceReaders, Waitlist: led, WaitlistServices: o.WaitlistServices, Profiles: s.advice})
	if o.Login != nil {
		// The JSON API keeps its own token auth under api/; everything else under the prefix is a page for people,
		// behind the login.
		prefix := server.NormalizePrefix(o.Prefix)
		mux := http.NewServeMux()
		mux.Handle(prefix+"api/", handler)
		o.Login.Routes(mux)
		mux.Handle(prefix, o.Login.Require(adminview.New(adminview.Options{Prefix: prefix, State: state, Ledger: led,
			Culler: o.CullerAPI, Quota: o.QuotaAPI, Profiles: s.advice, Now: o.Now, Logger: o.Logger})))
		handler = mux
	}
	srv, err := server.New(server.Options{
		Addr: o.Addr, Listener: o.Listener, Prefix: o.Prefix, Registry: o.Registry, Logger: o.Logger, Subsystem: "usage",
		Handler: handler, ShutdownDelay: o.ShutdownDelay,
		ReadyChecks: []server.Check{
			{Name: "informers", Fn: inv.Synced},
			// A broken watch leaves the caches (and every answer) silently frozen: not ready once it lasts.
			{Name: "watches", Fn: inv.Healthy},
			// Readiness means "can serve": the live share is served without the ledger, so its state is detail.
			{Name: "ledger", Fn: led.check, Optional: true},
			{Name: "hub", Fn: s.hubReady},
			{Name: "sampled", Fn: s.sampled},
		},
	})
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); led.connect(ctx) }()
	go func() { defer wg.Done(); s.hubLoop(ctx) }()
	go func() { defer wg.Done(); s.tickLoop(ctx) }()
	err = srv.Serve(ctx, o.OnServing)
	cancel()
	wg.Wait()
	s.bg.Wait()
	s.flushOnShutdown()
	return err
}

type service struct {
	o     Options
	inv   *inventory.Inventory
	coll  *collect.Collector
	led   *ledgerConn
	state *usage.State
	mets  *metrics.Metrics

	dir    atomic.Pointer[usage.Directory]
	hubErr atomic.Pointer[error]
	ticked atomic.Bool
	// departed tells each tick the pods that went since the last one, and when (started by the first tick).
	departed departures
	// views builds each tick's view, keeping its scratch memory from one tick to the next (ticks run one at a time).
	views usage.Builder
	// profiles records each server's use for right-size advice (issue 38); the ledger's writer alone does.
	profiles      *profile.Recorder
	profilesFlush time.Time   // when the profiles were last written
	profilesBusy  atomic.Bool // a write is in flight
	// advice reads the profiles; everyone's, computed once per saveableEvery, feed the gauge and the admin route.
	advice       *profile.Reader
	saveableAt   time.Time // when the right-size gauge was last computed
	saveableBusy atomic.Bool
	bg           sync.WaitGroup // work started by ticks; Run waits for it
}

// saveableEvery is how often the right-size gauge is computed: it reads a week of every server's profile, and
// what it measures changes over days, not minutes.
const saveableEvery = 10 * time.Minute

// refreshSaveable computes the right-size gauge (GPU-hours per day that taking every advice would save, over
// the last 7 days) when due, off the tick, since it reads a week of profiles. Every replica exports it.
func (s *service) refreshSaveable(ctx context.Context, v *usage.View, now time.Time) {
	if s.profiles == nil || s.advice == nil || now.Sub(s.saveableAt) < saveableEvery || s.led.Available() != nil || !s.saveableBusy.CompareAndSwap(false, true) {
		return
	}
	s.saveableAt = now
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer s.saveableBusy.Store(false)
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		from := profile.PeriodFrom(profile.Periods["7d"], now)
		ps, err := s.advice.Profiles(rctx, from, now, "")
		if err != nil {
			s.o.Logger.Warn("right-size gauge not computed; retried in 10 minutes", "err", err)
			return
		}
		s.mets.ObserveRightSize(profile.SaveablePerDay(profile.Advise(ps, v.Offers, now), from, now))
	}()
}

// shutdownFlushTimeout bounds the last write of the profiles on a graceful shutdown: a rolling update waits for
// it, and a database that does not answer must not hold the pod past its grace period.
const shutdownFlushTimeout = 5 * time.Second

// flushOnShutdown writes what the profiles gathered since the last write (up to a minute), after the tick and
// the background work have stopped. Only the ledger's writer writes.
func (s *service) flushOnShutdown() {
	if s.profiles == nil || !s.led.writes() || s.led.Available() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownFlushTimeout)
	defer cancel()
	if err := s.profiles.Flush(ctx, s.led, s.o.Now()); err != nil {
		s.o.Logger.Warn("right-size profiles not written at shutdown: up to a minute of them is lost", "err", err)
	}
}

// profileFlushEvery is how often the right-size profiles are written: at most this much of a day's profile is
// lost to a kill -9, and the database sees one small transaction a minute.
const profileFlushEvery = time.Minute

// recordProfile adds the view to the right-size profiles and writes them when due, in the background from a
// copy (the tick never waits for the database; one write at a time). Only the ledger's writer records (the
// others would count every server twice); a write that fails keeps what it had for the next.
func (s *service) recordProfile(ctx context.Context, v *usage.View, now time.Time) {
	if s.profiles == nil { // a test's service without one
		return
	}
	if !s.led.writes() {
		// Another replica records; what this one held would overwrite its rows if it wrote again later.
		s.profiles.Reset()
		return
	}
	s.profiles.Observe(v)
	if now.Sub(s.profilesFlush) < profileFlushEvery || s.led.Available() != nil || !s.profilesBusy.CompareAndSwap(false, true) {
		return
	}
	s.profilesFlush = now
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer s.profilesBusy.Store(false)
		fctx, cancel := context.WithTimeout(ctx, profileFlushEvery)
		defer cancel()
		if err := s.profiles.Flush(fctx, s.led, now); err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("right-size profiles not written; retried in a minute", "err", err)
		}
	}()
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

func (s *service) sampled(context.Context) error {
	if s.ticked.Load() {
		return nil
	}
	return errors.New("no sample taken yet")
}

// hubLoop keeps the last known users and groups; on errors it retries with backoff and keeps serving the old
// directory.
func (s *service) hubLoop(ctx context.Context) {
	backoff := time.Second
	for {
		start := time.Now()
		dir, err := s.readHub(ctx)
		s.mets.ObserveRun("hub", time.Since(start), err)
		wait := s.o.HubRefresh
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.hubErr.Store(&err)
			s.o.Logger.Warn("reading Hub users failed; keeping the last known", "err", err, "retryIn", backoff)
			wait = backoff
			backoff = min(2*backoff, s.o.HubRefresh)
		} else {
			s.dir.Store(dir)
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (s *service) readHub(ctx context.Context) (*usage.Directory, error) {
	dir := &usage.Directory{Users: map[string]usage.HubUser{}, FetchedAt: s.o.Now()}
	for u, err := range s.o.Hub.Users(ctx, hubapi.ListUsersOptions{}) {
		if err != nil {
			return nil, fmt.Errorf("list hub users: %w", err)
		}
		dir.Users[u.Name] = usage.HubUser{Name: u.Name, Groups: u.Groups, Admin: u.Admin}
	}
	return dir, nil
}

func (s *service) tickLoop(ctx context.Context) {
	if err := s.inv.WaitForSync(ctx); err != nil {
		return
	}
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	for {
		s.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick joins one sample, commits it to the ledger and publishes it.
func (s *service) tick(ctx context.Context) {
	start := time.Now()
	err := s.tickOnce(ctx)
	s.mets.ObserveRun("collect", time.Since(start), err)
	if err != nil && ctx.Err() == nil {
		s.o.Logger.Warn("tick failed", "err", err)
	}
}

func (s *service) tickOnce(ctx context.Context) error {
	if err := s.departed.watch(s.inv, s.o.Now); err != nil {
		return err
	}
	agents, err := s.inv.Agents()
	if err != nil {
		return err
	}
	targets := make([]collect.Agent, 0, len(agents))
	for _, a := range agents {
		targets = append(targets, collect.Agent{Pod: a.Pod, Node: a.Node, IP: a.IP})
	}
	pollCtx, cancel := context.WithTimeout(ctx, s.o.Interval)
	results, pollErr := s.coll.Poll(pollCtx, targets)
	cancel()
	pods, err := s.inv.GPUPods()
	if err != nil {
		return err
	}
	nodes, err := s.inv.Nodes()
	if err != nil {
		return err
	}
	var dir usage.Directory
	if d := s.dir.Load(); d != nil {
		dir = *d
	}
	now := s.o.Now()
	v := s.views.Build(usage.Input{Now: now, Interval: s.o.Interval, Pods: pods, Nodes: nodes, Agents: results, Hub: dir, StaleAfter: s.o.StaleAfter,
		Tolerations: s.o.Tolerations, Departed: s.departed.take(pods, now)})
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
		}
	}
	s.mets.ObserveAgents(failed, v.Cluster.StaleAgents)
	// The live view never waits for the database (fault 8): it is published first, and a commit that hangs (a
	// PostgreSQL connection that stopped answering) is given up after two intervals; the next tick retries.
	s.state.Publish(v)
	s.ticked.Store(true)
	lstart := time.Now()
	recCtx, cancelRec := context.WithTimeout(ctx, 2*s.o.Interval)
	res, lerr := s.led.record(recCtx, now, v.Samples)
	cancelRec()
	s.mets.ObserveRun("ledger", time.Since(lstart), lerr)
	if lerr == nil {
		s.mets.ObserveLedger(res, dir)
		if res.Gap > 0 {
			s.o.Logger.Warn("ledger: part of an outage not charged: pods ended during it or had no start time", "gap", res.Gap, "endedPods", res.Ended, "untrackedHoldings", res.Untracked)
		}
		if res.ClockStep != 0 {
			s.o.Logger.Warn("ledger: the wall clock stepped; integrated monotonic time and re-anchored the checkpoint", "step", res.ClockStep)
		}
		if res.Conflict {
			s.o.Logger.Warn("ledger: another writer moved the checkpoint; continued from it")
		}
	}
	s.recordProfile(ctx, v, now)
	s.refreshSaveable(ctx, v, now)
	if lerr != nil && !errors.Is(lerr, errNotConnected) { // the connect loop logs its own attempts
		return fmt.Errorf("ledger: %w", lerr)
	}
	if pollErr != nil {
		return fmt.Errorf("%d of %d agents failed: %w", failed, len(targets), pollErr)
	}
	return nil
}
