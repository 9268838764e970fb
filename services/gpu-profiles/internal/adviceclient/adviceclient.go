// Package adviceclient keeps the usage API's right-size advice per user in memory (issue 38; GET {usage
// prefix}api/v1/users/{name}/right-size). A form render only reads what is held: a user not seen yet, or whose
// advice is older than the TTL, is fetched in the background, so a render never waits on the usage API and
// never fails for it (the form is then drawn without a recommendation).
package adviceclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// Options configure a Client.
type Options struct {
	// URL is the usage API's base URL with its prefix, e.g. http://gpu-usage:8000/services/gpu-usage/.
	URL string
	// Token is gpu-profiles' own Hub API token (the usage API lists gpu-profiles in its --advice-readers).
	Token string
	// Timeout bounds one fetch (default 5 s); TTL is how long advice serves before it is fetched again (default
	// 10 min: profiles move by the minute and advice by the hour); Retry is how long a user whose fetch failed
	// waits for the next (default 1 min).
	Timeout, TTL, Retry time.Duration
	// MaxInFlight bounds the fetches under way at once (default 4): a burst of new users is caught up in turn.
	MaxInFlight int
	// Client sends the calls (nil: contract.NewHTTPClient).
	Client *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

// Client holds the advice. Safe for concurrent use.
type Client struct {
	o    Options
	base string
	ctx  context.Context
	sem  chan struct{}
	wg   sync.WaitGroup
	// lastWarn keeps a down usage API to one log line a minute.
	lastWarn atomic.Int64

	mu    sync.Mutex
	users map[string]*entry
}

type entry struct {
	advice   []contract.RightSize
	have     bool      // advice was fetched at least once
	at       time.Time // when the last fetch ended (ok or not)
	failed   bool      // the last fetch failed: Retry applies, not TTL
	fetching bool
}

// maxUsers bounds what is held: past it, entries not asked for within a TTL are dropped.
const maxUsers = 20000

// New returns a client whose background fetches end with ctx.
func New(ctx context.Context, o Options) (*Client, error) {
	if o.URL == "" {
		return nil, errors.New("adviceclient: URL is required")
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.TTL <= 0 {
		o.TTL = 10 * time.Minute
	}
	if o.Retry <= 0 {
		o.Retry = time.Minute
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 4
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{o: o, base: strings.TrimSuffix(o.URL, "/") + "/api/v1/users/", ctx: ctx,
		sem: make(chan struct{}, o.MaxInFlight), users: map[string]*entry{}}, nil
}

// Advice returns the advice held for user (ok false: none fetched yet) and, when it is missing or due, starts
// fetching it in the background. It never waits on the network.
func (c *Client) Advice(user string) (advice []contract.RightSize, ok bool) {
	if user == "" {
		return nil, false
	}
	now := c.o.Now()
	c.mu.Lock()
	e := c.users[user]
	if e == nil {
		if len(c.users) >= maxUsers {
			c.evict(now)
		}
		e = &entry{}
		c.users[user] = e
	}
	advice, ok = e.advice, e.have
	wait := c.o.TTL
	if e.failed {
		wait = c.o.Retry
	}
	due := !e.fetching && (e.at.IsZero() || now.Sub(e.at) >= wait)
	if due {
		e.fetching = true
	}
	c.mu.Unlock()
	if due {
		c.wg.Add(1)
		go c.fetch(user)
	}
	return advice, ok
}

// Wait returns when the fetches under way have ended (tests, shutdown).
func (c *Client) Wait() { c.wg.Wait() }

func (c *Client) evict(now time.Time) {
	for u, e := range c.users {
		if !e.fetching && now.Sub(e.at) >= c.o.TTL {
			delete(c.users, u)
		}
	}
	if len(c.users) >= maxUsers {
		clear(c.users) // the fetches under way store into entries no longer listed: harmless
	}
}

func (c *Client) fetch(user string) {
	defer c.wg.Done()
	var (
		advice []contract.RightSize
		err    error
	)
	select {
	case c.sem <- struct{}{}:
		advice, err = c.call(user)
		<-c.sem
	case <-c.ctx.Done():
		err = c.ctx.Err()
	}
	c.mu.Lock()
	if e := c.users[user]; e != nil {
		e.fetching, e.at, e.failed = false, c.o.Now(), err != nil
		if err == nil {
			e.advice, e.have = advice, true
		}
		// A failure keeps the advice held: it was true when fetched, and the usage API being down says nothing new.
	}
	c.mu.Unlock()
	if err != nil && c.ctx.Err() == nil {
		c.warn(err)
	}
}

func (c *Client) call(user string) ([]contract.RightSize, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.o.Timeout)
	defer cancel()
	endpoint := c.base + url.PathEscape(user) + "/right-size"
	a, err := contract.Caller{Token: c.o.Token, HTTP: c.o.Client, Limit: 1 << 20}.Do(ctx, http.MethodGet, endpoint, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("usage API right-size: %w", err)
	}
	if err := a.Err(http.MethodGet, endpoint); err != nil {
		return nil, fmt.Errorf("usage API right-size: %w", err)
	}
	var r contract.RightSizeResponse
	if err := a.Decode(&r); err != nil {
		return nil, fmt.Errorf("usage API right-size: the answer is not advice: %w", err)
	}
	return r.Servers, nil
}

func (c *Client) warn(err error) {
	now := time.Now().UnixNano()
	last := c.lastWarn.Load()
	if now-last < int64(time.Minute) || !c.lastWarn.CompareAndSwap(last, now) {
		return
	}
	c.o.Logger.Warn("the usage API's right-size advice could not be read; forms are drawn without a recommendation (logged at most once a minute)", "err", err)
}
