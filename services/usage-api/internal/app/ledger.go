package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// Ledger is what the service needs of the GPU-hours ledger; *ledger.Ledger satisfies it.
type Ledger interface {
	Record(ctx context.Context, now time.Time, samples []ledger.Sample) (ledger.Result, error)
	// Follow is a tick of a replica that does not write (another holds the ledger's Lease).
	Follow(ctx context.Context, now time.Time, samples []ledger.Sample) error
	UserWindows(user string) ledger.Windows
	Hours(ctx context.Context, q ledger.Query) ([]ledger.Row, error)
	Breakdown(ctx context.Context, q ledger.Query) ([]ledger.Usage, error)
	Hourly(ctx context.Context, q ledger.Query) ([]ledger.HourTotals, error)
	Rolling(ctx context.Context, windows []time.Duration, asOf time.Time) (map[time.Duration]map[string]map[string]float64, error)
	Decayed(ctx context.Context, halfLife, horizon time.Duration, asOf time.Time) (map[string]map[string]float64, error)
	// The waitlist state lives in the ledger's database (the usage API is its one writer).
	WaitlistState(ctx context.Context) (ledger.WaitlistState, error)
	PutWaitlistState(ctx context.Context, ifVersion int64, state json.RawMessage, now time.Time) (ledger.WaitlistState, error)
	// Right-size profiles (issue 38) live there too.
	PutProfiles(ctx context.Context, days []ledger.ProfileDay, keepFrom time.Time) error
	Profiles(ctx context.Context, from time.Time, user string) ([]ledger.ProfileDay, error)
	ScanProfiles(ctx context.Context, from time.Time, user string, fn func(*ledger.ProfileDay) error) error
}

// OpenLedgerFunc opens the ledger as of now; closer releases it when the service stops.
type OpenLedgerFunc func(ctx context.Context, now time.Time) (led Ledger, closer io.Closer, err error)

// OpenDatabase opens the ledger in a SQLite file or a postgres:// URL (ledger.Open) and loads its checkpoint.
func OpenDatabase(dsn string, opts ledger.Options, logger *slog.Logger) OpenLedgerFunc {
	return func(ctx context.Context, now time.Time) (Ledger, io.Closer, error) {
		store, err := ledger.Open(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		led, err := ledger.New(ctx, store, opts, now)
		if err != nil {
			_ = store.Close()
			return nil, nil, err
		}
		if cp, ok := led.Checkpoint(); ok {
			logger.Info("ledger resumed", "checkpoint", cp.At, "ticks", cp.Ticks, "gapSeconds", cp.GapSeconds)
		}
		return led, store, nil
	}
}

// ledgerConn keeps the ledger optional: the live share is served whether or not the database can be reached.
// It connects in the background with jittered, capped exponential backoff, and tracks whether the latest
// attempt (connect or commit) worked, for the API (Available), readiness (check) and gpuhub_usage_ledger_up.
type ledgerConn struct {
	open               OpenLedgerFunc
	now                func() time.Time
	logger             *slog.Logger
	interval           time.Duration // commits are retried at each tick
	retryMin, retryMax time.Duration
	connectTimeout     time.Duration

	up            prometheus.Gauge
	connectErrors prometheus.Counter

	// writer says whether this replica writes the ledger now (holds its Lease); nil: always (one replica).
	writer func() bool

	led atomic.Pointer[ledgerBox] // nil until connected
	ok  atomic.Bool               // connected and the last attempt worked: Available's fast path

	mu       sync.Mutex
	closer   io.Closer
	err      error     // the latest attempt's error; nil when it worked
	since    time.Time // when the current run of failures began
	attempts int       // failed connects in a row
	retry    time.Duration
}

type ledgerBox struct{ Ledger }

// errNotConnected is returned by record before the first successful connect.
var errNotConnected = errors.New("ledger not connected")

func newLedgerConn(o Options) (*ledgerConn, error) {
	c := &ledgerConn{
		open: o.OpenLedger, now: o.Now, logger: o.Logger, interval: o.Interval, writer: o.LedgerWriter,
		retryMin: o.LedgerRetryMin, retryMax: o.LedgerRetryMax, connectTimeout: 30 * time.Second,
		up: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "usage", Name: "ledger_up",
			Help: "1 when the ledger database is connected and the last commit worked, else 0 (GPU-hours are then answered as unavailable)."}),
		connectErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "usage", Name: "ledger_connect_errors_total",
			Help: "Failed attempts to open the ledger database (retried with backoff)."}),
	}
	for _, m := range []prometheus.Collector{c.up, c.connectErrors} {
		if err := o.Registry.Register(m); err != nil {
			return nil, fmt.Errorf("register ledger metrics: %w", err)
		}
	}
	return c, nil
}

// connect opens the ledger, retrying until it works or ctx ends.
func (c *ledgerConn) connect(ctx context.Context) {
	backoff := c.retryMin
	for {
		actx, cancel := context.WithTimeout(ctx, c.connectTimeout)
		led, closer, err := c.open(actx, c.now())
		cancel()
		if err == nil {
			c.mu.Lock()
			c.closer = closer
			down, attempts := c.since, c.attempts
			c.err, c.since, c.attempts = nil, time.Time{}, 0
			c.mu.Unlock()
			c.led.Store(&ledgerBox{led})
			c.ok.Store(true)
			c.up.Set(1)
			if attempts > 0 {
				c.logger.Info("ledger connected; GPU-hours are served again", "failedAttempts", attempts, "unavailableSince", down)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		c.connectErrors.Inc()
		c.up.Set(0)
		// Equal jitter: replicas (and a restarting database) do not retry in lockstep.
		wait := backoff/2 + rand.N(backoff/2+1)
		c.mu.Lock()
		c.fail(err)
		c.attempts++
		c.retry = backoff
		c.mu.Unlock()
		c.logger.Warn("cannot open the ledger; serving the live share without GPU-hours and retrying", "err", err, "retryIn", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, c.retryMax)
	}
}

// fail records a failed attempt; c.mu is held.
func (c *ledgerConn) fail(err error) {
	if c.err == nil {
		c.since = c.now()
	}
	c.err = err
}

// record commits one tick, or follows the writer's commits on a replica that does not hold the ledger's Lease. A
// failed commit is retried by the next tick (the ledger charges the time since its checkpoint, so nothing is lost
// to a short outage).
func (c *ledgerConn) record(ctx context.Context, now time.Time, samples []ledger.Sample) (ledger.Result, error) {
	b := c.led.Load()
	if b == nil {
		return ledger.Result{}, errNotConnected
	}
	var res ledger.Result
	var err error
	if c.writes() {
		res, err = b.Record(ctx, now, samples)
	} else {
		err = b.Follow(ctx, now, samples) // its answers follow the writer's commits
	}
	c.mu.Lock()
	wasFailing := c.err != nil
	if err != nil {
		c.fail(err)
	} else {
		c.err, c.since = nil, time.Time{}
	}
	c.ok.Store(err == nil)
	c.mu.Unlock()
	switch {
	case err != nil:
		c.up.Set(0)
	case wasFailing:
		c.up.Set(1)
		c.logger.Info("ledger commits work again; GPU-hours are served again")
	}
	return res, err
}

// Available is nil while GPU-hours can be served; otherwise it says why not in words for the panel's user (the
// technical error is in the log and the readiness detail).
func (c *ledgerConn) Available() error {
	if c.ok.Load() {
		return nil
	}
	connected := c.led.Load() != nil
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !connected && c.err == nil:
		return errors.New("the service is connecting to the ledger database")
	case !connected:
		return fmt.Errorf("the ledger database cannot be reached (retrying every %s)", seconds(c.retry))
	case c.err != nil:
		return fmt.Errorf("the ledger database stopped answering at %s (retrying every %s)",
			c.since.UTC().Format("15:04:05 UTC"), seconds(c.interval))
	}
	return nil
}

// check is the readiness detail: the live share is served either way, so it is an optional check.
func (c *ledgerConn) check(context.Context) error {
	connected := c.led.Load() != nil
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !connected && c.err == nil:
		return errors.New("connecting to the ledger database")
	case !connected:
		return fmt.Errorf("ledger database not connected since %s (failed attempts: %d, retrying every %s): %w",
			c.since.UTC().Format(time.RFC3339), c.attempts, seconds(c.retry), c.err)
	case c.err != nil:
		return fmt.Errorf("ledger commits failing since %s: %w", c.since.UTC().Format(time.RFC3339), c.err)
	}
	return nil
}

// UserWindows, Hours, Breakdown, Hourly, Rolling, Decayed and the waitlist state serve the API and the admin view; Available says first whether their
// answers stand.
func (c *ledgerConn) UserWindows(user string) ledger.Windows {
	if b := c.led.Load(); b != nil {
		return b.UserWindows(user)
	}
	return ledger.Windows{}
}

func (c *ledgerConn) Hours(ctx context.Context, q ledger.Query) ([]ledger.Row, error) {
	if b := c.led.Load(); b != nil {
		return b.Hours(ctx, q)
	}
	return nil, errNotConnected
}

func (c *ledgerConn) Breakdown(ctx context.Context, q ledger.Query) ([]ledger.Usage, error) {
	if b := c.led.Load(); b != nil {
		return b.Breakdown(ctx, q)
	}
	return nil, errNotConnected
}

func (c *ledgerConn) Hourly(ctx context.Context, q ledger.Query) ([]ledger.HourTotals, error) {
	if b := c.led.Load(); b != nil {
		return b.Hourly(ctx, q)
	}
	return nil, errNotConnected
}

func (c *ledgerConn) Rolling(ctx context.Context, windows []time.Duration, asOf time.Time) (map[time.Duration]map[string]map[string]float64, error) {
	if b := c.led.Load(); b != nil {
		return b.Rolling(ctx, windows, asOf)
	}
	return nil, errNotConnected
}

func (c *ledgerConn) Decayed(ctx context.Context, halfLife, horizon time.Duration, asOf time.Time) (map[string]map[string]float64, error) {
	if b := c.led.Load(); b != nil {
		return b.Decayed(ctx, halfLife, horizon, asOf)
	}
	return nil, errNotConnected
}

func (c *ledgerConn) WaitlistState(ctx context.Context) (ledger.WaitlistState, error) {
	if b := c.led.Load(); b != nil {
		return b.WaitlistState(ctx)
	}
	return ledger.WaitlistState{}, errNotConnected
}

func (c *ledgerConn) PutWaitlistState(ctx context.Context, ifVersion int64, state json.RawMessage, now time.Time) (ledger.WaitlistState, error) {
	if b := c.led.Load(); b != nil {
		return b.PutWaitlistState(ctx, ifVersion, state, now)
	}
	return ledger.WaitlistState{}, errNotConnected
}

func (c *ledgerConn) PutProfiles(ctx context.Context, days []ledger.ProfileDay, keepFrom time.Time) error {
	if b := c.led.Load(); b != nil {
		return b.PutProfiles(ctx, days, keepFrom)
	}
	return errNotConnected
}

func (c *ledgerConn) Profiles(ctx context.Context, from time.Time, user string) ([]ledger.ProfileDay, error) {
	if b := c.led.Load(); b != nil {
		return b.Profiles(ctx, from, user)
	}
	return nil, errNotConnected
}

func (c *ledgerConn) ScanProfiles(ctx context.Context, from time.Time, user string, fn func(*ledger.ProfileDay) error) error {
	if b := c.led.Load(); b != nil {
		return b.ScanProfiles(ctx, from, user, fn)
	}
	return errNotConnected
}

// writes says whether this replica writes the ledger now.
func (c *ledgerConn) writes() bool { return c.writer == nil || c.writer() }

func (c *ledgerConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closer != nil {
		_ = c.closer.Close()
		c.closer = nil
	}
}

// seconds formats d for people: "30 s", "0.5 s".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%g s", d.Round(100*time.Millisecond).Seconds())
}
