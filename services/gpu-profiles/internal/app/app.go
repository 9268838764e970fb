// Package app wires gpu-profiles: the configuration and its reloads, the informers feeding the catalog, the
// gpu-quota client, the renderer and the HTTP API. main parses flags and calls Run; tests call Run in-process
// with fakes.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/adviceclient"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/api"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/quotaclient"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// Hooks is what work started beside the API (the pending-spawn explainer) gets: the live catalog, the
// configuration in use, the informers and the clients.
type Hooks struct {
	Catalog   *catalog.Catalog
	Inventory *inventory.Inventory
	// Config is the configuration in use (never nil); Provisionable asks it whether a kind's node pool grows.
	Config    func() *profiles.Config
	Kube      kubernetes.Interface
	Namespace string
	Logger    *slog.Logger
	Registry  *prometheus.Registry
	Now       func() time.Time
}

// Provisionable reports whether the configuration marks the kind (kind name and slug) as provisionable.
func (h Hooks) Provisionable(kind, slug string) bool { return h.Config().Provisionable(kind, slug) }

// Options configure Run.
type Options struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Addr to listen on; Listener wins when set.
	Addr     string
	Listener net.Listener
	Prefix   string // JUPYTERHUB_SERVICE_PREFIX

	// ConfigPath is the overrides file; empty: none (every kind as generated). A file that does not load keeps
	// Run from starting (a *ConfigError); a reload that fails keeps the last good one.
	ConfigPath string
	// ConfigPoll is how often the file is checked for a new content (default 10 s); Reload forces a reload.
	ConfigPoll time.Duration
	Reload     <-chan struct{}

	Kube      kubernetes.Interface
	Namespace string // pods counted; "" = all (recommended: other namespaces' pods hold GPUs too)
	// InformerUnreadyAfter is how long an informer's list/watch may keep failing before /readyz fails.
	InformerUnreadyAfter time.Duration
	// ShutdownDelay is server.Options.ShutdownDelay (--shutdown-delay).
	ShutdownDelay time.Duration

	// Token is gpu-profiles' own Hub API token: the profiles endpoint accepts only it; gpu-quota is asked with it.
	Token string
	// Auth is hubauth's Middleware (inventory).
	Auth           func(http.Handler) http.Handler
	ReaderServices []string

	// QuotaURL is gpu-quota's base URL with its prefix; empty: no quota filtering.
	QuotaURL           string
	QuotaTimeout       time.Duration
	QuotaCacheTTL      time.Duration
	QuotaOnUnavailable string // until gpu-quota says its own: open (default) or closed
	QuotaClient        *http.Client

	// UsageURL is the usage API's base URL with its prefix; empty: no choice is marked recommended. Advice is
	// fetched per user in the background and held for AdviceTTL (adviceclient): a form never waits for it.
	UsageURL    string
	AdviceTTL   time.Duration
	UsageClient *http.Client

	// Extra, if set, runs beside the API until ctx ends (the pending-spawn explainer).
	Extra func(ctx context.Context, h Hooks)

	Now func() time.Time
	// OnServing, if set, gets the server and the catalog once it listens (tests).
	OnServing func(*server.Server, *catalog.Catalog)
}

// ConfigError is an overrides file that does not load at start: its text is every error, one a line,
// file:line:column: message.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Run serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil || o.Registry == nil || o.Kube == nil || o.Auth == nil {
		return errors.New("gpu-profiles: Logger, Registry, Kube and Auth are required")
	}
	if o.Token == "" {
		return errors.New("gpu-profiles: the service's Hub API token (JUPYTERHUB_API_TOKEN) is required: the Hub glue's requests carry it")
	}
	if o.ConfigPoll <= 0 {
		o.ConfigPoll = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnServing == nil {
		o.OnServing = func(*server.Server, *catalog.Catalog) {}
	}
	s := &service{o: o}
	if o.ConfigPath != "" {
		r, err := policy.NewReloader[profiles.Config](o.ConfigPath, o.Now())
		if err != nil {
			return &ConfigError{Err: err}
		}
		s.cfg = r
	}
	if err := s.metrics(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	inv := inventory.New(inventory.Options{Client: o.Kube, Namespace: o.Namespace, MetricsSubsystem: "profiles", NoAgents: true,
		UnhealthyAfter: o.InformerUnreadyAfter, Now: o.Now})
	if err := o.Registry.Register(inv.Metrics()); err != nil {
		return fmt.Errorf("register informer metrics: %w", err)
	}
	var handlersSynced atomic.Pointer[func() bool]
	synced := func() error {
		if err := inv.Synced(ctx); err != nil {
			return err
		}
		if f := handlersSynced.Load(); f == nil || !(*f)() {
			return errors.New("catalog not filled yet")
		}
		return nil
	}
	cat := catalog.New(catalog.Options{Tolerations: s.config().TolerationsOrDefault(), Synced: synced,
		Healthy: func() error { return inv.Healthy(ctx) }})
	s.cat = cat
	hs, err := inv.AddHandlers(cat.PodHandler(), cat.NodeHandler())
	if err != nil {
		return err
	}
	handlersSynced.Store(&hs)
	inv.Start(ctx)

	var quota *quotaclient.Client
	renderer := &profiles.Renderer{Catalog: cat, Config: s.config, Now: o.Now, Logger: o.Logger,
		OnQuota: func(r string) { s.assessed.WithLabelValues(r).Inc() }}
	if o.QuotaURL != "" {
		qc, err := quotaclient.New(quotaclient.Options{URL: o.QuotaURL, Token: o.Token, Timeout: o.QuotaTimeout, TTL: o.QuotaCacheTTL,
			OnUnavailable: o.QuotaOnUnavailable, Client: o.QuotaClient, Now: o.Now, Logger: o.Logger})
		if err != nil {
			return err
		}
		renderer.Quota = qc
		quota = qc
		s.quota.Store(qc)
	} else {
		o.Logger.Warn("no --quota-url: choices are not checked against gpu-quota; none is disabled for quota")
	}
	if o.UsageURL != "" {
		ac, err := adviceclient.New(ctx, adviceclient.Options{URL: o.UsageURL, Token: o.Token, TTL: o.AdviceTTL,
			Client: o.UsageClient, Logger: o.Logger, Now: o.Now})
		if err != nil {
			return err
		}
		renderer.Advice = ac
	}
	handler, err := api.New(api.Options{Prefix: o.Prefix, Renderer: renderer, Kinds: cat, Token: o.Token, Auth: o.Auth,
		ReaderServices: o.ReaderServices, Logger: o.Logger, Registerer: o.Registry, Now: o.Now})
	if err != nil {
		return err
	}
	srv, err := server.New(server.Options{
		Addr: o.Addr, Listener: o.Listener, Prefix: o.Prefix, Registry: o.Registry, Logger: o.Logger, Subsystem: "profiles",
		Handler: handler, ShutdownDelay: o.ShutdownDelay,
		ReadyChecks: []server.Check{
			{Name: "config", Fn: s.configLoaded},
			{Name: "informers", Fn: func(context.Context) error { return synced() }},
			// A broken watch leaves the caches silently frozen: not ready once it lasts.
			{Name: "watches", Fn: inv.Healthy},
			// Detail only: the last good configuration still serves.
			{Name: "config-reload", Fn: s.lastReload, Optional: true},
		},
	})
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	if quota != nil {
		// gpu-quota pushes every user's verdicts on the choices the forms may show: renders answer from memory.
		wg.Go(func() { quota.Watch(ctx, renderer.WatchOptions) })
	}
	if s.cfg != nil {
		wg.Go(func() {
			policy.Watch(ctx, s.cfg, policy.WatchOptions{Poll: o.ConfigPoll, Signal: o.Reload, What: "configuration", Logger: o.Logger,
				Now: o.Now, Metrics: s.reloadMetrics,
				// The catalog counts free nodes with the configuration's tolerations.
				OnChange: func() { s.cat.SetTolerations(s.config().TolerationsOrDefault()) }})
		})
	}
	if o.Extra != nil {
		h := Hooks{Catalog: cat, Inventory: inv, Config: s.config, Kube: o.Kube, Namespace: o.Namespace, Logger: o.Logger,
			Registry: o.Registry, Now: o.Now}
		wg.Go(func() { o.Extra(ctx, h) })
	}
	err = srv.Serve(ctx, func(srv *server.Server) { o.OnServing(srv, cat) })
	cancel()
	wg.Wait()
	return err
}

type service struct {
	o   Options
	cfg *policy.Reloader[profiles.Config] // nil without a file
	cat *catalog.Catalog

	reloadMetrics *policy.ReloadMetrics
	assessed      *prometheus.CounterVec
	// quota is gpu-quota's client; nil without --quota-url.
	quota atomic.Pointer[quotaclient.Client]
}

// empty is the configuration without a file.
var empty = &profiles.Config{}

func (s *service) config() *profiles.Config {
	if s.cfg == nil {
		return empty
	}
	return s.cfg.Current()
}

func (s *service) metrics() error {
	var err error
	if s.reloadMetrics, err = policy.NewReloadMetrics(s.o.Registry, "profiles", "config", "overrides"); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	s.assessed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "profiles", Name: "quota_assess_total",
		Help: "How gpu-quota's part of each form went: pushed (from the verdicts gpu-quota pushes, held in memory), ok (asked), cached (asked within --quota-cache), unavailable_open, unavailable_closed (gpu-quota could not answer; its onUnavailable applied), not_configured, nothing_to_ask."},
		[]string{"result"})
	watching := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "profiles", Name: "quota_watch_in_sync",
		Help: "1 while the verdicts gpu-quota pushes are in sync and its watch is alive: forms are answered from memory (pushed); 0 otherwise (forms ask gpu-quota)."},
		func() float64 {
			if qc := s.quota.Load(); qc != nil && qc.Watching() {
				return 1
			}
			return 0
		})
	for _, c := range []prometheus.Collector{s.assessed, watching} {
		if err := s.o.Registry.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	for _, r := range []string{profiles.QuotaPushed, profiles.QuotaOK, profiles.QuotaCached, profiles.QuotaUnavailableOpen, profiles.QuotaUnavailableClosed,
		profiles.QuotaNotConfigured, profiles.QuotaNothingToAsk} {
		s.assessed.WithLabelValues(r)
	}
	return nil
}

func (s *service) configLoaded(context.Context) error {
	if s.config() == nil {
		return errors.New("no configuration loaded")
	}
	return nil
}

// lastReload is the /readyz detail of the last reload: the errors while the last good configuration serves.
func (s *service) lastReload(context.Context) error {
	if s.cfg == nil {
		return nil
	}
	st := s.cfg.Status()
	if st.OK {
		return nil
	}
	return fmt.Errorf("the last reload of %s failed at %s; the configuration loaded at %s stays in use: %w",
		st.Path, st.LastAttempt.UTC().Format(time.RFC3339), st.Loaded.UTC().Format(time.RFC3339), st.Err)
}
