// Package quotaclient asks gpu-quota which of a user's choices their quota allows. With a watch running
// (Watch), gpu-quota pushes every user's verdicts for the default server (POST {quota prefix}api/v1/assess/watch)
// and a render is answered from memory; any other question goes to POST {quota prefix}api/v1/assess (contract
// C2), with a short timeout and a per-user cache of a few seconds: a form render never waits long on gpu-quota,
// and a user reloading the form does not ask twice.
package quotaclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// Options configure a Client.
type Options struct {
	// URL is gpu-quota's base URL with its prefix, e.g. http://gpu-quota:8000/services/gpu-quota/.
	URL string
	// Token is gpu-profiles' own Hub API token (gpu-quota authenticates it through the Hub).
	Token string
	// Timeout bounds one call (default 500 ms); TTL is how long an answer serves the same user (default 2 s).
	Timeout, TTL time.Duration
	// OnUnavailable applies until gpu-quota has said its own setting (default Open).
	OnUnavailable string
	// Client sends the calls (nil: contract.NewHTTPClient); the watch uses it without its timeout.
	Client *http.Client
	Now    func() time.Time
	// Stale is how long a watch may stay silent before its table stops answering (default DefaultStale).
	Stale time.Duration
	// Logger gets the watch's connections and failures (nil: discarded); never the token.
	Logger *slog.Logger
}

// Client asks gpu-quota. Safe for concurrent use.
type Client struct {
	o        Options
	endpoint string
	// onUnavailable is the last setting gpu-quota said.
	onUnavailable atomic.Pointer[string]

	mu    sync.Mutex
	cache map[string]cached

	// table is the watched verdicts renders are answered from; nil until a watch is in sync. installMu orders
	// putting a table in use with a later watcher taking over (watcher.served, watcher.prev).
	table         atomic.Pointer[table]
	installMu     sync.Mutex
	watchEndpoint string
	watchHTTP     *http.Client
}

type cached struct {
	verdicts map[string]contract.Verdict
	at       time.Time
}

// maxCached bounds the cache: expired answers are dropped once it is this big.
const maxCached = 10000

// New returns a client.
func New(o Options) (*Client, error) {
	if o.URL == "" {
		return nil, errors.New("quotaclient: URL is required")
	}
	if o.Timeout <= 0 {
		o.Timeout = 500 * time.Millisecond
	}
	if o.TTL <= 0 {
		o.TTL = 2 * time.Second
	}
	switch o.OnUnavailable {
	case "":
		o.OnUnavailable = contract.Open
	case contract.Open, contract.Closed:
	default:
		return nil, fmt.Errorf("quotaclient: onUnavailable is open or closed, not %q", o.OnUnavailable)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Stale <= 0 {
		o.Stale = DefaultStale
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// The watch's client: the calls' transport (its idle connections, no redirects), no timeout on a stream.
	wc := contract.NewHTTPClient(0)
	if o.Client != nil {
		c := *o.Client
		wc = &c
	}
	wc.Timeout = 0
	endpoint := strings.TrimSuffix(o.URL, "/") + "/api/v1/assess"
	return &Client{o: o, endpoint: endpoint, cache: map[string]cached{}, watchEndpoint: endpoint + "/watch", watchHTTP: wc}, nil
}

// OnUnavailable is what to do while gpu-quota cannot answer: its own setting as it last said it, else the
// configured default.
func (c *Client) OnUnavailable() string {
	if p := c.onUnavailable.Load(); p != nil {
		return *p
	}
	return c.o.OnUnavailable
}

// Result says where an answer came from, for the metrics: "pushed" (the watched table), "ok" (asked),
// "cached" (asked within the TTL).
type Result string

// Assess returns gpu-quota's verdicts by option ID: from the watched table when it answers the question
// exactly, else asked (or cached). On an error (gpu-quota down, slow, 503) the caller applies OnUnavailable.
func (c *Client) Assess(ctx context.Context, user, server string, groups []string, opts []contract.AssessOption) (map[string]contract.Verdict, Result, error) {
	if v, ok := c.pushed(user, server, groups, opts); ok {
		return v, Pushed, nil
	}
	key := cacheKey(user, server, groups, opts)
	now := c.o.Now()
	c.mu.Lock()
	if e, ok := c.cache[key]; ok && now.Sub(e.at) < c.o.TTL {
		c.mu.Unlock()
		return e.verdicts, "cached", nil
	}
	c.mu.Unlock()

	v, err := c.call(ctx, user, server, groups, opts)
	if err != nil {
		return nil, "", err
	}
	c.mu.Lock()
	if len(c.cache) >= maxCached {
		for k, e := range c.cache {
			if now.Sub(e.at) >= c.o.TTL {
				delete(c.cache, k)
			}
		}
		if len(c.cache) >= maxCached {
			clear(c.cache)
		}
	}
	c.cache[key] = cached{verdicts: v, at: now}
	c.mu.Unlock()
	return v, "ok", nil
}

func cacheKey(user, server string, groups []string, opts []contract.AssessOption) string {
	var b strings.Builder
	b.WriteString(user)
	b.WriteByte(0)
	b.WriteString(server)
	b.WriteByte(0)
	for _, g := range slices.Sorted(slices.Values(groups)) {
		b.WriteString(g)
		b.WriteByte(',')
	}
	b.WriteByte(0)
	for _, o := range opts {
		b.WriteString(o.ID)
		b.WriteByte(',')
	}
	return b.String()
}

func (c *Client) call(ctx context.Context, user, server string, groups []string, opts []contract.AssessOption) (map[string]contract.Verdict, error) {
	if groups == nil {
		groups = []string{}
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	a, err := contract.Caller{Token: c.o.Token, HTTP: c.o.Client, Limit: 1 << 20}.Do(ctx, http.MethodPost, c.endpoint,
		contract.AssessRequest{User: user, Server: server, Groups: groups, Options: opts}, nil)
	if err != nil {
		return nil, fmt.Errorf("gpu-quota assess: %w", err)
	}
	if err := a.Err(http.MethodPost, c.endpoint); err != nil {
		var u contract.Unavailable // a 503 says the policy's mode too: a restarted gpu-profiles need not wait for a decision
		if a.Status == http.StatusServiceUnavailable && a.Decode(&u) == nil {
			c.remember(u.OnUnavailable)
		}
		return nil, fmt.Errorf("gpu-quota assess: %w", err)
	}
	var r contract.Assessment
	if err := a.Decode(&r); err != nil {
		return nil, fmt.Errorf("gpu-quota assess: the answer is not an assessment: %w", err)
	}
	c.remember(r.OnUnavailable)
	if r.Options == nil {
		return nil, errors.New("gpu-quota assess: the answer has no options")
	}
	out := make(map[string]contract.Verdict, len(r.Options))
	for _, v := range r.Options {
		out[v.ID] = v
	}
	return out, nil
}

func (c *Client) remember(onUnavailable string) {
	if onUnavailable == contract.Open || onUnavailable == contract.Closed {
		if p := c.onUnavailable.Load(); p == nil || *p != onUnavailable {
			c.onUnavailable.Store(&onUnavailable)
		}
	}
}
