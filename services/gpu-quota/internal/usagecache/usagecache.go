// Package usagecache is gpu-quota's cached ledger: it polls the usage API's bulk GPU-hours endpoint
// (GET {usage prefix}api/v1/gpu-hours?windows=...) for the budget windows the policy needs, keeps the last
// answer, and answers a decision's GPU-hours from memory. Between polls it adds what the user's running
// allocations accrue since the answer's asOf, so that a budget is crossed when it is, not up to a refresh later.
// An answer older than three refreshes, or none yet, is unavailable: the windows are missing and the policy's
// onUnavailable decides.
package usagecache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// Held is one allocation the user holds now and that accrues GPU-hours (a running pod's GPUs).
type Held struct {
	Class string
	// GPUs is the allocation's GPU-equivalents (gpu.Allocation.Share): what the ledger charges per hour.
	GPUs float64
	// Since is when the pod started holding it; zero when unknown (then it accrues from the answer's asOf).
	Since time.Time
}

// Options configure a Cache.
type Options struct {
	// URL is the usage API's base URL including its prefix (http://gpu-usage:8000/services/gpu-usage/).
	// Empty: budgets are always unavailable.
	URL string
	// Token is gpu-quota's own Hub API token, sent as "Authorization: token ..."; never logged.
	Token  string
	Client *http.Client
	// Refresh is the polling interval (default 15 s); an answer older than 3 refreshes is unavailable.
	Refresh time.Duration
	// Windows are the windows the current policy needs; asked before every poll.
	Windows func() []time.Duration
	Now     func() time.Time
	Logger  *slog.Logger
	// Registerer gets gpuhub_quota_usage_*; nil registers nothing.
	Registerer prometheus.Registerer
	// Behind is the work a refresh steps aside for (admissions; see yield.Foreground); nil: none.
	Behind *yield.Foreground
	// OnChange, if set, is called after a poll whose GPU-hours differ from the last answer's, and once when the
	// answer in use turns stale (unavailable): what GPUHours gives may have changed (the watches of verdicts).
	OnChange func()
}

// Cache holds the last answer of the usage API.
type Cache struct {
	o    Options
	last atomic.Pointer[answer]
	err  atomic.Pointer[error]
	// staleTold is set once OnChange was told that the answer in use is stale.
	staleTold atomic.Bool
	kick      chan struct{}

	age      prometheus.GaugeFunc
	failures prometheus.Counter
	success  prometheus.Gauge
	duration prometheus.Gauge
}

// answer is one poll's result.
type answer struct {
	asOf    time.Time // the usage API's
	fetched time.Time // ours: when it arrived
	// hours: window -> user -> class -> unweighted GPU-hours.
	hours map[time.Duration]map[string]map[string]float64
	// byUser is hours by user: every window of the answer (noUse where the user used nothing in it), as
	// GPUHours gives it to a user who holds nothing. A decision then looks the user up once, not once per
	// window, in maps of 10,000 users that 64 spawns at once find out of the processor's cache, and builds no
	// map. none is the same for a user the answer does not name.
	byUser map[string]map[time.Duration]map[string]float64
	none   map[time.Duration]map[string]float64
}

// newAnswer indexes hours by user.
func newAnswer(asOf, fetched time.Time, hours map[time.Duration]map[string]map[string]float64, behind *yield.Foreground) *answer {
	a := &answer{asOf: asOf, fetched: fetched, hours: hours, none: make(map[time.Duration]map[string]float64, len(hours))}
	users := 0
	for w, byUser := range hours {
		a.none[w] = noUse
		users = max(users, len(byUser))
	}
	a.byUser = make(map[string]map[time.Duration]map[string]float64, users)
	pace := yield.Pass{Behind: behind}
	n := 0
	for w, byUser := range hours {
		for user, byClass := range byUser {
			mine := a.byUser[user]
			if mine == nil {
				mine = maps.Clone(a.none)
				a.byUser[user] = mine
			}
			mine[w] = byClass
			if n++; n%32 == 0 {
				pace.Item()
			}
		}
	}
	return a
}

// New returns a cache; call Run to poll.
func New(o Options) (*Cache, error) {
	if o.Refresh <= 0 {
		o.Refresh = 15 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Windows == nil {
		o.Windows = func() []time.Duration { return nil }
	}
	if o.URL != "" && !strings.HasSuffix(o.URL, "/") {
		o.URL += "/"
	}
	c := &Cache{o: o, kick: make(chan struct{}, 1)}
	c.age = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "usage_age_seconds",
		Help: "Age of the GPU-hours answer in use from the usage API (-1: none yet; older than 3 refreshes counts as unavailable)."},
		func() float64 {
			a := c.last.Load()
			if a == nil {
				return -1
			}
			return c.o.Now().Sub(a.fetched).Seconds()
		})
	c.failures = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "usage_refresh_failures_total",
		Help: "Failed polls of the usage API's GPU-hours."})
	c.success = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "usage_refresh_last_run_success",
		Help: "1 when the last poll of the usage API's GPU-hours succeeded, 0 when it failed."})
	c.duration = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "usage_refresh_run_duration_seconds",
		Help: "Duration of the last poll of the usage API's GPU-hours."})
	if o.Registerer != nil {
		for _, m := range []prometheus.Collector{c.age, c.failures, c.success, c.duration} {
			if err := o.Registerer.Register(m); err != nil {
				return nil, fmt.Errorf("usagecache: register metrics: %w", err)
			}
		}
	}
	return c, nil
}

// Configured reports whether a usage API URL was given.
func (c *Cache) Configured() bool { return c.o.URL != "" }

// Kick asks for a poll now (the policy changed and may need other windows).
func (c *Cache) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run polls until ctx ends. Without a URL it returns at once.
func (c *Cache) Run(ctx context.Context) {
	if c.o.URL == "" {
		return
	}
	t := time.NewTicker(c.o.Refresh)
	defer t.Stop()
	for {
		c.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// Refresh polls once.
func (c *Cache) Refresh(ctx context.Context) {
	windows := c.o.Windows()
	if len(windows) == 0 {
		// Nothing to ask: every window the policy needs is present (none), and the answer is fresh.
		now := c.o.Now()
		c.store(newAnswer(now, now, map[time.Duration]map[string]map[string]float64{}, nil), now)
		c.err.Store(nil)
		c.success.Set(1)
		return
	}
	start := time.Now()
	a, err := c.fetch(ctx, windows)
	c.duration.Set(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		c.failures.Inc()
		c.success.Set(0)
		c.err.Store(&err)
		c.o.Logger.Warn("reading GPU-hours from the usage API failed; keeping the last answer until it is 3 refreshes old",
			"err", err, "url", c.o.URL)
		if c.last.Load() != nil && c.fresh(c.o.Now()) == nil && !c.staleTold.Swap(true) && c.o.OnChange != nil {
			c.o.OnChange()
		}
		return
	}
	c.success.Set(1)
	c.err.Store(nil)
	c.store(a, c.o.Now())
}

// store puts a in use and tells OnChange when what GPUHours answers may differ from the last answer's: other
// numbers, or an answer that was stale.
func (c *Cache) store(a *answer, now time.Time) {
	prev := c.last.Swap(a)
	wasStale := c.staleTold.Swap(false) || prev == nil || now.Sub(prev.fetched) > 3*c.o.Refresh
	if c.o.OnChange != nil && (wasStale || !sameHours(prev.hours, a.hours)) {
		c.o.OnChange()
	}
}

// sameHours reports whether two answers hold the same GPU-hours (their asOf aside: what running pods accrue
// since is added at each decision).
func sameHours(a, b map[time.Duration]map[string]map[string]float64) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]map[string]float64) bool {
		return maps.EqualFunc(x, y, maps.Equal)
	})
}

// Param writes a window as the usage API's windows parameter takes it: days when whole days above one ("7d"),
// hours otherwise ("24h", "36h").
func Param(w time.Duration) string {
	if w > 24*time.Hour && w%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", w/(24*time.Hour))
	}
	return fmt.Sprintf("%dh", w/time.Hour)
}

func (c *Cache) fetch(ctx context.Context, windows []time.Duration) (*answer, error) {
	params := make([]string, len(windows))
	for i, w := range windows {
		params[i] = Param(w)
	}
	u := c.o.URL + "api/v1/gpu-hours?windows=" + url.QueryEscape(strings.Join(params, ","))
	ctx, cancel := context.WithTimeout(ctx, c.o.Refresh)
	defer cancel()
	a, err := contract.Caller{Token: c.o.Token, HTTP: c.o.Client, Limit: 64 << 20}.Do(ctx, http.MethodGet, u, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("get gpu-hours: %w", err)
	}
	if err := a.Err(http.MethodGet, u); err != nil {
		return nil, fmt.Errorf("get gpu-hours: %w", err)
	}
	body := a.Body
	w, ok := decodeFast(body, prevByParam(c.last.Load(), windows, params), c.o.Behind)
	if !ok {
		if w, err = decodeWire(body, c.o.Behind); err != nil {
			return nil, fmt.Errorf("get gpu-hours: decode: %w", err)
		}
	}
	if w.AsOf.IsZero() {
		return nil, errors.New("get gpu-hours: the answer has no asOf")
	}
	hours := map[time.Duration]map[string]map[string]float64{}
	for i, w2 := range windows {
		users, ok := w.Windows[params[i]]
		if !ok {
			continue // missing: unavailable for this window
		}
		if users == nil {
			users = map[string]map[string]float64{}
		}
		hours[w2] = users
	}
	return newAnswer(w.AsOf, c.o.Now(), hours, c.o.Behind), nil
}

// decodeWire decodes the usage API's answer as json.Unmarshal into a wire would, but a user at a time, giving up
// the processor every yield.Slice: admissions would otherwise wait behind decoding a 10,000-user answer in one
// call (about 40 ms; Go takes the processor from a goroutine only after 10 ms). It decodes what decodeFast
// leaves: escapes, a key in another case or given twice, null.
func decodeWire(body []byte, behind *yield.Foreground) (contract.RollingResponse, error) {
	var w contract.RollingResponse
	dec := json.NewDecoder(bytes.NewReader(body))
	if null, err := openOrNull(dec); err != nil || null {
		if err == nil {
			err = wantEOF(dec)
		}
		return w, err
	}
	pace := yield.Pass{Behind: behind}
	for dec.More() {
		key, err := stringToken(dec)
		if err != nil {
			return w, err
		}
		switch {
		case strings.EqualFold(key, "asOf"):
			if err := dec.Decode(&w.AsOf); err != nil {
				return w, err
			}
		case strings.EqualFold(key, "windows"):
			if null, err := openOrNull(dec); err != nil || null {
				w.Windows = nil
				if err != nil {
					return w, err
				}
				continue
			}
			if w.Windows == nil {
				w.Windows = map[string]map[string]map[string]float64{}
			}
			for dec.More() {
				window, err := stringToken(dec)
				if err != nil {
					return w, err
				}
				null, err := openOrNull(dec)
				if err != nil {
					return w, err
				}
				if null {
					w.Windows[window] = nil
					continue
				}
				hours := map[string]map[string]float64{} // a repeated key replaces, as with json.Unmarshal
				w.Windows[window] = hours
				for dec.More() {
					user, err := stringToken(dec)
					if err != nil {
						return w, err
					}
					var byClass map[string]float64
					if err := dec.Decode(&byClass); err != nil {
						return w, err
					}
					hours[user] = byClass
					pace.Item()
				}
				if err := wantDelim(dec, '}'); err != nil {
					return w, err
				}
			}
			if err := wantDelim(dec, '}'); err != nil {
				return w, err
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return w, err
			}
		}
	}
	if err := wantDelim(dec, '}'); err != nil {
		return w, err
	}
	return w, wantEOF(dec)
}

// wantEOF checks nothing follows the value.
func wantEOF(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more after the answer's JSON value")
	}
	return nil
}

// stringToken reads an object's key.
func stringToken(dec *json.Decoder) (string, error) {
	t, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := t.(string)
	if !ok {
		return "", fmt.Errorf("want a key, got %v", t)
	}
	return s, nil
}

// wantDelim reads the delimiter d.
func wantDelim(dec *json.Decoder, d json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != d {
		return fmt.Errorf("want %v, got %v", d, t)
	}
	return nil
}

// openOrNull reads an object's opening brace, or null.
func openOrNull(dec *json.Decoder) (null bool, err error) {
	t, err := dec.Token()
	if err != nil {
		return false, err
	}
	switch t {
	case json.Delim('{'):
		return false, nil
	case nil:
		return true, nil
	}
	return false, fmt.Errorf("want an object, got %v", t)
}

// fresh is the answer in use at now, nil when there is none or it is older than 3 refreshes.
func (c *Cache) fresh(now time.Time) *answer {
	a := c.last.Load()
	if a == nil || now.Sub(a.fetched) > 3*c.o.Refresh {
		return nil
	}
	return a
}

// noUse is the GPU-hours of a user who used nothing: readable, 0. Shared; never written.
var noUse = map[string]float64{}

// GPUHours is user's unweighted GPU-hours by class in each of windows at now, for quota.Usage.GPUHours: the
// last answer plus what held accrues since its asOf. A window is missing when it cannot be read (no URL, no
// answer yet, the answer is stale, or it lacks the window). When nothing accrues the result is the answer's
// own, shared, and may hold the answer's other windows too: read the windows asked for, never change it.
func (c *Cache) GPUHours(user string, windows []time.Duration, held []Held, now time.Time) map[time.Duration]map[string]float64 {
	if len(windows) == 0 {
		return nil
	}
	a := c.fresh(now)
	if a == nil {
		return nil
	}
	mine := a.byUser[user]
	if mine == nil {
		mine = a.none
	}
	if !accrues(a, held, now) {
		return mine // every decision of a user who holds nothing reads the same numbers: no copy
	}
	out := make(map[time.Duration]map[string]float64, len(windows))
	for _, w := range windows {
		used, ok := mine[w]
		if !ok {
			continue
		}
		// Accrual since asOf: held x elapsed. The window also slid by as much, and use that left it is not
		// subtracted: between polls a budget can only look more used than it is, never less.
		byClass := make(map[string]float64, len(used)+len(held))
		maps.Copy(byClass, used)
		for _, h := range held {
			if d := now.Sub(accruesFrom(a, h)); d > 0 {
				byClass[h.Class] += h.GPUs * min(d, w).Hours()
			}
		}
		out[w] = byClass
	}
	return out
}

// accruesFrom is when h starts adding to the answer's numbers: its asOf, or h's start when later.
func accruesFrom(a *answer, h Held) time.Time {
	if h.Since.After(a.asOf) {
		return h.Since
	}
	return a.asOf
}

// accrues reports whether something held adds to the answer's numbers at now.
func accrues(a *answer, held []Held, now time.Time) bool {
	for _, h := range held {
		if now.Sub(accruesFrom(a, h)) > 0 {
			return true
		}
	}
	return false
}

// Check is the /readyz detail of the cache (an optional check): the age of the answer in use, or why there
// is none.
func (c *Cache) Check(context.Context) error {
	if c.o.URL == "" {
		return errors.New("no --usage-url: GPU-hour budgets cannot be checked (onUnavailable applies)")
	}
	now := c.o.Now()
	a := c.last.Load()
	var last string
	if e := c.err.Load(); e != nil {
		last = fmt.Sprintf("; last poll failed: %v", *e)
	}
	switch {
	case a == nil:
		return fmt.Errorf("no GPU-hours from the usage API yet%s", last)
	case now.Sub(a.fetched) > 3*c.o.Refresh:
		return fmt.Errorf("GPU-hours from the usage API are %s old, more than 3 refreshes: budgets unavailable%s",
			now.Sub(a.fetched).Round(time.Second), last)
	case last != "":
		return fmt.Errorf("GPU-hours %s old%s", now.Sub(a.fetched).Round(time.Second), last)
	}
	return nil
}

// Windows is the union of windows, sorted (a helper for Options.Windows).
func Windows(sets ...[]time.Duration) []time.Duration {
	var out []time.Duration
	for _, s := range sets {
		out = append(out, s...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
