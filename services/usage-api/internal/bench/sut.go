package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/logging"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/api"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/metrics"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// SUTOptions configure the system under test.
type SUTOptions struct {
	Users, GPUs, Pods, Replicas int
	Interval                    time.Duration
	Dir                         string // for the SQLite ledger
	// Ledger is a postgres:// URL for a ledger shared by several replicas; empty: SQLite in Dir (the chart's
	// default, one replica).
	Ledger string
	// Follow makes this replica one that does not write the ledger (another holds the Lease): each tick follows
	// the writer's checkpoint (ledger.Ledger.Follow) instead of recording. B1 has no API server, so no Lease:
	// which replica writes is fixed when it starts.
	Follow   bool
	Listener net.Listener
	// Ready gets the number of history users once the history is filled and the server listens.
	Ready func(historyUsers int)
	// Probe, if set, records tick durations and is served with pprof on DebugListener.
	Probe         *Probe
	DebugListener net.Listener
}

// tokenChecker stands in for the Hub behind hubauth: token "tok-<user>" belongs to <user>. hubauth's cache
// then works as in production (one lookup per token per minute).
type tokenChecker struct{}

func (tokenChecker) WhoAmIWithToken(_ context.Context, tok string) (*hubapi.User, error) {
	name, ok := strings.CutPrefix(tok, "tok-")
	if !ok {
		return nil, &hubapi.APIError{StatusCode: 403, Message: "invalid token"}
	}
	return &hubapi.User{Kind: "user", Name: name}, nil
}

// profileLocksEnv, set by run --profile-dir, turns on the SUT's mutex and block profiles.
const profileLocksEnv = "GPUHUB_BENCH_PROFILE_LOCKS"

// ServeSUT serves the usage API over a synthetic cluster: the real handler, server, auth cache, ledger (SQLite,
// or PostgreSQL shared by replicas) and metrics, with an hour of history pre-filled and a tick every Interval
// while it serves.
func ServeSUT(ctx context.Context, o SUTOptions) error {
	if os.Getenv(profileLocksEnv) != "" {
		// run --profile-dir: contended locks and waits for the mutex and block profiles (each wait of 10 µs or
		// more sampled); left off otherwise, as they cost every lock a little.
		runtime.SetMutexProfileFraction(1)
		runtime.SetBlockProfileRate(10_000)
	}
	now := time.Now()
	c := Synthesize(o.Users, o.GPUs, o.Pods, o.Replicas, now)
	dsn := o.Ledger
	if dsn == "" {
		dsn = filepath.Join(o.Dir, "ledger.db")
	}
	store, err := ledger.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	led, err := ledger.New(ctx, store, ledger.Options{Interval: o.Interval}, now)
	if err != nil {
		return err
	}
	state := usage.NewState(usage.NewHistory(time.Hour, o.Interval))
	if o.Probe != nil {
		o.Probe.Mapped = state.History.MappedBytes
	}
	// An hour of history: the same cluster at every tick of the past hour.
	var views usage.Builder // ticks run one at a time: this one, then the loop's
	v := views.Build(c.Input(now, o.Interval))
	for i := int(time.Hour/o.Interval) - 1; i > 0; i-- {
		past := *v
		past.SampledAt = now.Add(-time.Duration(i) * o.Interval)
		state.History.Add(&past)
	}
	reg := prometheus.NewRegistry()
	mets, err := metrics.New(reg, state)
	if err != nil {
		return err
	}
	tick := func(at time.Time) error {
		if o.Probe != nil {
			defer func(start time.Time) { o.Probe.ObserveTick(time.Since(start)) }(time.Now())
		}
		v := views.Build(c.Input(at, o.Interval))
		if o.Follow {
			if err := led.Follow(ctx, at, v.Samples); err != nil {
				return err
			}
		} else {
			res, err := led.Record(ctx, at, v.Samples)
			if err != nil {
				return err
			}
			mets.ObserveLedger(res, c.Hub)
		}
		state.Publish(v)
		return nil
	}
	if err := tick(now); err != nil {
		return err
	}
	auth := hubauth.New(hubauth.Options{Hub: tokenChecker{}, MaxEntries: 2 * o.Users})
	log := logging.Discard()
	srv, err := server.New(server.Options{Listener: o.Listener, Prefix: "/services/gpu-usage/", Registry: reg, Logger: log, Subsystem: "usage",
		Handler: api.New(api.Options{Prefix: "/services/gpu-usage/", State: state, Ledger: upLedger{led}, Auth: auth.Middleware, Logger: log})})
	if err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(o.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case at := <-t.C:
				if err := tick(at); err != nil {
					fmt.Println("tick:", err)
				}
			}
		}
	}()
	if o.Probe != nil && o.DebugListener != nil {
		go func() { _ = o.Probe.Serve(ctx, o.DebugListener) }()
	}
	if o.Ready != nil {
		o.Ready(state.History.Len())
	}
	if err := srv.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// upLedger is the benchmark's ledger for the API: always available (its store is a local file).
type upLedger struct{ *ledger.Ledger }

func (upLedger) Available() error { return nil }
