// Package budget fetches a user's quota from gpu-quota (GET {quota-url}api/v1/users/{name}/quota) for the BUDGET
// section of the panel, which keeps polling the usage API's `me` only. Answers are cached per user for a few
// seconds, the fetch has a short timeout, and an answer that is a little old is served at once while it is
// refreshed in the background: `me` never waits long on gpu-quota, and an unreachable gpu-quota is an
// "unavailable" object, never an error of `me`.
package budget

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// Options configure a Client.
type Options struct {
	// URL is gpu-quota's base URL with its prefix, e.g. http://gpu-quota:8000/services/gpu-quota/.
	URL string
	// Token is the usage API's own Hub API token; gpu-quota resolves it to the service gpu-usage, one of its
	// --reader-services.
	Token  string
	Client *http.Client
	// Timeout bounds one fetch (default 2 s). TTL is how long an answer is fresh (default 10 s); an answer up to
	// 3 TTL old is served while it is refreshed, an older one is fetched again first. An unavailable answer is
	// kept for FailTTL (default 5 s) so that a gpu-quota that hangs costs a user's poll its timeout at most that
	// often.
	Timeout, TTL, FailTTL time.Duration
	// MaxUsers bounds the cache (default 10,000).
	MaxUsers   int
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Client fetches and caches quota objects.
type Client struct {
	o       Options
	base    *url.URL
	fetches *prometheus.CounterVec

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	body     json.RawMessage
	ok       bool
	at       time.Time
	fetching chan struct{} // closed when the fetch under way ends; nil when none is
}

// New checks the URL and registers gpuhub_usage_quota_fetches_total.
func New(o Options) (*Client, error) {
	base, err := url.Parse(o.URL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("quota URL %q: want gpu-quota's base URL with its prefix, e.g. http://gpu-quota:8000/services/gpu-quota/", o.URL)
	}
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.TTL <= 0 {
		o.TTL = 10 * time.Second
	}
	if o.FailTTL <= 0 {
		o.FailTTL = 5 * time.Second
	}
	if o.MaxUsers <= 0 {
		o.MaxUsers = 10_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{o: o, base: base, entries: map[string]*entry{},
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "usage", Name: "quota_fetches_total",
			Help: "Fetches of a user's quota from gpu-quota for the panel's budget, by result (ok, error)."}, []string{"result"})}
	if o.Registerer != nil {
		if err := o.Registerer.Register(c.fetches); err != nil {
			return nil, fmt.Errorf("register quota fetch metric: %w", err)
		}
	}
	return c, nil
}

// Get returns user's quota object as gpu-quota answers it, or {"status":"unavailable","reason":…}.
func (c *Client) Get(ctx context.Context, user string) json.RawMessage {
	for {
		now := c.o.Now()
		c.mu.Lock()
		e := c.entries[user]
		if e == nil {
			c.evictLocked(now)
			e = &entry{}
			c.entries[user] = e
		}
		age := now.Sub(e.at)
		fresh := e.body != nil && (e.ok && age < c.o.TTL || !e.ok && age < c.o.FailTTL)
		usable := e.body != nil && e.ok && age < 3*c.o.TTL
		if !fresh && e.fetching == nil {
			e.fetching = make(chan struct{})
			go c.fetch(user, e)
		}
		body, wait := e.body, e.fetching
		c.mu.Unlock()
		if fresh || usable {
			return body
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return unavailable("the request ended before the quota service answered")
		}
	}
}

// evictLocked keeps the cache within MaxUsers: answers no longer servable go first, then everything.
func (c *Client) evictLocked(now time.Time) {
	if len(c.entries) < c.o.MaxUsers {
		return
	}
	for u, e := range c.entries {
		if e.fetching == nil && now.Sub(e.at) >= 3*c.o.TTL {
			delete(c.entries, u)
		}
	}
	if len(c.entries) >= c.o.MaxUsers {
		for u, e := range c.entries {
			if e.fetching == nil {
				delete(c.entries, u)
			}
		}
	}
}

func (c *Client) fetch(user string, e *entry) {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
	defer cancel()
	body, err := c.get(ctx, user)
	result := "ok"
	if err != nil {
		result = "error"
		attrs := []any{"user", user, "err", err}
		if cause := errors.Unwrap(err); cause != nil {
			attrs = append(attrs, "cause", cause)
		}
		c.o.Logger.Warn("quota for the panel unavailable", attrs...)
		body = unavailable(err.Error())
	}
	c.fetches.WithLabelValues(result).Inc()
	c.mu.Lock()
	e.body, e.ok, e.at = body, err == nil, c.o.Now()
	close(e.fetching)
	e.fetching = nil
	c.mu.Unlock()
}

// maxBody bounds gpu-quota's answer (a few budgets and a notice).
const maxBody = 1 << 20

func (c *Client) get(ctx context.Context, user string) (json.RawMessage, error) {
	u := *c.base // the name escaped as one segment (a Hub name may hold characters a path gives meaning to)
	u.Path = c.base.Path + "api/v1/users/" + user + "/quota"
	u.RawPath = c.base.EscapedPath() + "api/v1/users/" + url.PathEscape(user) + "/quota"
	a, err := contract.Caller{Token: c.o.Token, HTTP: c.o.Client, Limit: maxBody}.Do(ctx, http.MethodGet, u.String(), nil, nil)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("the quota service did not answer within %s", c.o.Timeout)
	case errors.Is(err, contract.ErrTooLong):
		return nil, errors.New("the quota service's answer is too large")
	case err != nil:
		// The panel gets plain words; the log (through the caller) keeps the cause.
		return nil, &unreachable{err: err}
	case a.Status == http.StatusUnauthorized || a.Status == http.StatusForbidden:
		return nil, fmt.Errorf("the quota service refused the usage API (%d): list gpu-usage in gpu-quota's --reader-services", a.Status)
	case a.Status != http.StatusOK:
		return nil, fmt.Errorf("the quota service cannot answer right now: %s", cmp.Or(a.Message(), http.StatusText(a.Status)))
	}
	body := a.Body
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return nil, errors.New("the quota service's answer is not a JSON object")
	}
	return json.RawMessage(strings.TrimSpace(string(body))), nil
}

func unavailable(reason string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"status": "unavailable", "reason": reason})
	return b
}

// unreachable is a failed request to gpu-quota: its text is for the panel, Unwrap for the log.
type unreachable struct{ err error }

func (e *unreachable) Error() string { return "the quota service cannot be reached" }
func (e *unreachable) Unwrap() error { return e.err }
