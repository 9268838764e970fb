// Package app wires gpu-culler: the policy and its reloads, the single-user pod informer, the telemetry sampler,
// the stops store, the leader election, the pass loop and the HTTP API. main parses flags and calls Run.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/hubapi"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/api"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/contention"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/pass"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/pods"
	cpolicy "github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/snooze"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/stops"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/telemetry"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/kube"
	"github.com/gpuhub/gpuhub/services/internal/leader"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// Service is the Hub service name.
const Service = "gpu-culler"

// Options configure Run.
type Options struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Addr     string
	Listener net.Listener
	Prefix   string

	// PolicyPath is the policy file: one that does not load keeps Run from starting (a *ConfigError); a reload
	// that fails keeps the last good one. PolicyPoll is how often it is checked; Reload forces a reload.
	PolicyPath string
	PolicyPoll time.Duration
	Reload     <-chan struct{}

	Kube      kubernetes.Interface
	Namespace string // of the single-user pods; "" = all

	// Hub is the pass's Hub; nil: a client is built from HubConfig whose requests are counted in
	// gpuhub_culler_hub_requests_total.
	Hub       pass.Hub
	HubConfig hubapi.Config
	// Token is the culler's own Hub token: the usage API is read with it, the Hub glue presents it.
	Token string
	// Scopes are the token's scopes (GET /user); nil: unknown, not checked.
	Scopes         []string
	Auth           func(http.Handler) http.Handler
	ReaderServices []string

	UsageURL    string
	SampleEvery time.Duration
	UsageClient *http.Client

	// QuotaURL is gpu-quota's base URL with its prefix, whose waitlist says which GPU classes someone waits for
	// (idleWhenContended applies to their servers); "": no waitlist, nothing is ever contended. It is polled
	// every ContentionEvery (default 10 s) with Token.
	QuotaURL        string
	ContentionEvery time.Duration
	QuotaClient     *http.Client

	// LeaderElect: act only while holding the Lease LeaseNamespace/LeaseName; false: act alone.
	LeaderElect                               bool
	LeaseNamespace, LeaseName, Identity       string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	StopsNamespace, StopsConfigMap            string
	// OwnerDeployment is gpu-culler's own Deployment in LeaseNamespace (--owner-deployment): the Lease and the
	// stops ConfigMap it creates are owned by it, so they go when it goes (helm uninstall); "": no owner.
	OwnerDeployment string

	Now func() time.Time
	// OnServing, if set, gets the server once it listens (tests).
	OnServing func(*server.Server)
}

// ConfigError is a policy file that does not load at start (every error, file:line:column: message), or one the
// culler's Hub token cannot apply.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Run serves and culls until ctx ends.
func Run(ctx context.Context, o Options) error {
	switch {
	case o.Logger == nil || o.Registry == nil || o.Kube == nil || o.Auth == nil:
		return errors.New("gpu-culler: Logger, Registry, Kube and Auth are required")
	case o.Token == "":
		return errors.New("gpu-culler: the service's Hub API token (JUPYTERHUB_API_TOKEN) is required")
	case o.UsageURL == "":
		return errors.New("gpu-culler: --usage-url is required: GPU servers are judged by the usage API's telemetry")
	case o.LeaderElect && (o.LeaseNamespace == "" || o.LeaseName == "" || o.Identity == ""):
		return errors.New("gpu-culler: leader election needs --lease-namespace and --lease-name (or --leader-elect=false for a single replica)")
	case o.OwnerDeployment != "" && o.LeaseNamespace == "":
		return errors.New("gpu-culler: --owner-deployment needs --lease-namespace, the namespace of the Deployment and of what it owns")
	}
	if o.PolicyPoll <= 0 {
		o.PolicyPoll = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	pol, err := policy.NewReloader[cpolicy.Policy](o.PolicyPath, o.Now())
	if err != nil {
		return &ConfigError{Err: err}
	}
	if err := CheckScopes(pol.Current(), o.Scopes); err != nil {
		return &ConfigError{Err: err}
	}
	reloadMetrics, err := policy.NewReloadMetrics(o.Registry, "culler", "policy", "policy")
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	decisions, err := decision.NewLog(decision.Options{Service: Service, Logger: o.Logger, Registerer: o.Registry, Subsystem: "culler", Now: o.Now})
	if err != nil {
		return err
	}
	metrics, err := pass.NewMetrics(o.Registry)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if o.Hub == nil {
		cfg := o.HubConfig
		base := http.DefaultTransport
		if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
			base = cfg.HTTPClient.Transport
		}
		cfg.HTTPClient = &http.Client{Transport: metrics.CountHubRequests(base)}
		cfg.Registerer = nil // the service's own Hub client (hubauth's) already has hubapi's metrics registered
		// The policy's concurrency (at most 100, read at each pass) bounds the requests at once, not the client.
		cfg.MaxConcurrent = max(cfg.MaxConcurrent, 100)
		hub, err := hubapi.New(cfg)
		if err != nil {
			return fmt.Errorf("hub client: %w", err)
		}
		o.Hub = hub
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	podIndex, err := pods.New(o.Kube, o.Namespace)
	if err != nil {
		return err
	}
	podIndex.Start(ctx)
	stopsNS := o.StopsNamespace
	if stopsNS == "" {
		stopsNS = o.LeaseNamespace
	}
	// No OwnerDeployment: no owner.
	owner := kube.NewOwner(kube.OwnerOptions{Client: o.Kube, Namespace: o.LeaseNamespace, Deployment: o.OwnerDeployment, Logger: o.Logger})
	stopsOptions := stops.Options{Client: o.Kube, Namespace: stopsNS, Name: o.StopsConfigMap, Logger: o.Logger, Now: o.Now}
	if stopsNS == o.LeaseNamespace {
		// An ownerReference names an object in the same namespace only.
		stopsOptions.Owner = owner.Ref
	}
	store := stops.New(stopsOptions)
	sampler := telemetry.New(telemetry.Options{URL: o.UsageURL, Token: o.Token, Client: o.UsageClient, Every: o.SampleEvery,
		Window: func() time.Duration { return Window(pol.Current()) }, Logger: o.Logger, Now: o.Now})
	// Every replica polls the waitlist, as it samples the telemetry: a snooze on any replica is limited while
	// someone waits, and a new leader knows at once.
	var waitlist *contention.Poller
	contended := func(string) bool { return false }
	if o.QuotaURL != "" {
		waitlist, err = contention.New(contention.Options{URL: o.QuotaURL, Token: o.Token, Client: o.QuotaClient, Every: o.ContentionEvery,
			Registerer: o.Registry, Logger: o.Logger, Now: o.Now})
		if err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
		contended = waitlist.Contended
	} else if usesContention(pol.Current()) {
		o.Logger.Warn("the policy sets idleWhenContended, but without --quota-url the culler cannot know who waits: the normal idle periods apply")
	}
	runner := pass.New(pass.Options{Hub: o.Hub, Pods: podIndex, Telemetry: sampler, Stops: store, Kube: o.Kube,
		Policy: pol.Current, Decisions: decisions, Metrics: metrics, Contended: contended, Logger: o.Logger, Now: o.Now})
	snoozer := snooze.New(snooze.Options{Client: o.Kube, Pods: podIndex.Pod, Policy: pol.Current, Decisions: decisions,
		Class: func(user, server string) string { return sampler.Info(user, server).Class }, Contended: contended,
		Logger: o.Logger, Now: o.Now})

	readyChecks := []server.Check{
		{Name: "pods", Fn: podIndex.Synced},
		{Name: "stops", Fn: func(context.Context) error {
			if !store.Synced() {
				return errors.New("the stops ConfigMap is not read yet")
			}
			return nil
		}},
		// Detail only: without the usage API GPU servers are left alone, which is safe.
		{Name: "usage-api", Fn: func(context.Context) error { return sampler.Err() }, Optional: true},
		{Name: "policy-reload", Fn: func(context.Context) error { return lastReload(pol) }, Optional: true},
	}
	if waitlist != nil {
		// Detail only: without the waitlist nothing is contended, the normal idle periods apply.
		readyChecks = append(readyChecks, server.Check{Name: "waitlist", Fn: func(context.Context) error { return waitlist.Err() }, Optional: true})
	}
	handler := api.New(api.Options{Prefix: o.Prefix, Auth: o.Auth, OwnToken: o.Token, Decisions: decisions, Stops: store,
		Snoozer: snoozer, Notices: func(user string) []notices.OnServer { return notices.FromPods(podIndex.UserPods(user)) },
		ReaderServices: o.ReaderServices, Logger: o.Logger})
	srv, err := server.New(server.Options{
		Addr: o.Addr, Listener: o.Listener, Prefix: o.Prefix, Registry: o.Registry, Logger: o.Logger, Subsystem: "culler",
		Handler: handler, ReadyChecks: readyChecks,
	})
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Go(func() {
		policy.Watch(ctx, pol, policy.WatchOptions{Poll: o.PolicyPoll, Signal: o.Reload, What: "policy", Logger: o.Logger,
			Now: o.Now, Metrics: reloadMetrics,
			OnChange: func() {
				if err := CheckScopes(pol.Current(), o.Scopes); err != nil {
					o.Logger.Error("the new policy needs a Hub scope the culler's token lacks; its group exemptions cannot be applied, so every GPU and CPU server is left alone until the scope is granted or the policy changed", "err", err)
				}
			}})
	})
	wg.Go(func() {
		if err := store.Run(ctx); err != nil && ctx.Err() == nil {
			o.Logger.Error("the stops ConfigMap cannot be watched", "err", err)
		}
	})
	wg.Go(func() { sampler.Run(ctx) })
	if waitlist != nil {
		wg.Go(func() { waitlist.Run(ctx) })
	}

	loop := func(ctx context.Context) {
		if err := podIndex.WaitForSync(ctx); err != nil {
			return
		}
		Loop(ctx, LoopOptions{Runner: runner, Policy: pol.Current, Scopes: o.Scopes, Logger: o.Logger})
	}
	if o.LeaderElect {
		el, err := leader.New(leader.Options{Client: o.Kube, Namespace: o.LeaseNamespace, Name: o.LeaseName, Identity: o.Identity,
			LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod, Owner: owner.Ref,
			OnStartedLeading: loop, Logger: o.Logger, Registerer: o.Registry, Subsystem: "culler"})
		if err != nil {
			return err
		}
		wg.Go(func() { _ = el.Run(ctx) })
	} else {
		o.Logger.Info("leader election off: this replica acts alone; run one replica only")
		wg.Go(func() { loop(ctx) })
	}

	err = srv.Serve(ctx, o.OnServing)
	cancel()
	wg.Wait()
	return err
}

// LoopOptions configure Loop.
type LoopOptions struct {
	Runner *pass.Runner
	Policy func() *cpolicy.Policy
	Scopes []string
	Logger *slog.Logger
}

// Loop runs a pass every policy `every` until ctx ends (leadership lost). A failed pass is retried with
// backoff (every 5 s doubling, at most `every`), and acts on nobody.
func Loop(ctx context.Context, o LoopOptions) {
	backoff := time.Duration(0)
	for {
		p := o.Policy()
		wait := p.EveryPeriod()
		if err := CheckScopes(p, o.Scopes); err != nil {
			o.Logger.Warn("no pass: the policy needs a Hub scope the culler's token lacks", "err", err)
		} else if sum, err := o.Runner.Pass(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, 5*time.Second), wait)
			wait = backoff
			o.Logger.Warn("pass failed; nobody was acted on; retrying", "err", err, "retry_in", wait.String())
		} else {
			backoff = 0
			o.Logger.Info("pass", "servers", sum.Servers, "stopped", sum.Stopped, "errors", sum.Errors, "contended", sum.Contended,
				"duration", sum.Duration.String(), "decisions", sum.Decisions)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Window is how far back the telemetry must reach under p: the longest idle period of its GPU rules (plus the
// warning, during which the stretch goes on).
func Window(p *cpolicy.Policy) time.Duration {
	w := cpolicy.DefaultIdlePeriod
	consider := func(e cpolicy.Entry) {
		if e.IdlePeriod != nil {
			w = max(w, e.IdlePeriod.Std())
		}
		if e.HubIdlePeriod != nil {
			w = max(w, e.HubIdlePeriod.Std())
		}
	}
	consider(p.GPU)
	for _, e := range p.Kinds {
		consider(e)
	}
	for _, e := range p.Profiles {
		consider(e)
	}
	return w + p.Rule("gpu", "").Warn
}

// usesContention reports whether a GPU rule of p sets idleWhenContended.
func usesContention(p *cpolicy.Policy) bool {
	if p.GPU.IdleWhenContended != nil {
		return true
	}
	for _, e := range p.Kinds {
		if e.IdleWhenContended != nil {
			return true
		}
	}
	for _, e := range p.Profiles {
		if e.IdleWhenContended != nil {
			return true
		}
	}
	return false
}

// CheckScopes is nil when the culler's Hub token can apply p: exempting by group needs the users' groups
// (read:users:groups, or a scope that holds it, unfiltered or filtered to every exempt group: a user outside
// the filter shows no groups, and would be taken as not exempt). scopes nil: not known, not checked.
func CheckScopes(p *cpolicy.Policy, scopes []string) error {
	if scopes == nil || len(p.Exempt.Groups) == 0 {
		return nil
	}
	covered := map[string]bool{}
	for _, s := range scopes {
		base, filter, filtered := strings.Cut(s, "!")
		if base != "read:users:groups" && base != "read:users" && base != "admin:users" {
			continue
		}
		if !filtered {
			return nil
		}
		if g, ok := strings.CutPrefix(filter, "group="); ok {
			covered[g] = true
		}
	}
	if !slices.ContainsFunc(p.Exempt.Groups, func(g string) bool { return !covered[g] }) {
		return nil
	}
	return errors.New("exempt.groups needs the Hub scope read:users:groups, which the culler's token does not have: add it to the culler's role (chart value culler.extraHubScopes) or remove exempt.groups")
}

func lastReload(r *policy.Reloader[cpolicy.Policy]) error {
	st := r.Status()
	if st.OK {
		return nil
	}
	return fmt.Errorf("the last reload of %s failed at %s; the policy loaded at %s stays in use: %w",
		st.Path, st.LastAttempt.UTC().Format(time.RFC3339), st.Loaded.UTC().Format(time.RFC3339), st.Err)
}
