// Package remote reads JSON from another gpuhub service (gpu-quota, gpu-culler) for the admin view, with the
// usage API's own Hub token: a short timeout, each answer (or failure) kept a few seconds so that page views do
// not fan out per request, and failures in plain words that say what to do. The token goes in a header only,
// never in a URL or a log.
package remote

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// Options configure a Client.
type Options struct {
	// Service is the Hub service asked (gpu-quota, gpu-culler): messages name it.
	Service string
	// URL is its base URL with its prefix, e.g. http://gpu-culler:8000/services/gpu-culler/.
	URL string
	// Token is the usage API's own Hub API token; the service resolves it to Self.
	Token string
	// Self is the usage API's Hub service name, which the service must list among its readers (default gpu-usage).
	Self   string
	Client *http.Client
	// Timeout bounds one request (default 2 s); TTL is how long an answer or a failure is kept (default 5 s).
	Timeout, TTL time.Duration
	Now          func() time.Time
	Logger       *slog.Logger
}

// Client fetches and briefly caches answers by path.
type Client struct {
	o    Options
	base *url.URL

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	mu   sync.Mutex // held while fetching: concurrent readers of one path wait for one request
	body []byte
	err  error
	at   time.Time
}

// maxEntries bounds the cache; the admin view asks a handful of fixed paths.
const maxEntries = 64

// New checks the URL.
func New(o Options) (*Client, error) {
	base, err := url.Parse(o.URL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("%s URL %q: want its base URL with its prefix, e.g. http://%s:8000/services/%s/", o.Service, o.URL, o.Service, o.Service)
	}
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	if o.Self == "" {
		o.Self = "gpu-usage"
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.TTL <= 0 {
		o.TTL = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{o: o, base: base, entries: map[string]*entry{}}, nil
}

// Service names the service asked.
func (c *Client) Service() string { return c.o.Service }

// Get returns the body of a 200 answer to GET {URL}{path} (path relative to the prefix, query included), or an
// error in plain words. Answers and failures are kept for TTL.
func (c *Client) Get(ctx context.Context, path string) ([]byte, error) {
	c.mu.Lock()
	e := c.entries[path]
	if e == nil {
		if len(c.entries) >= maxEntries {
			clear(c.entries)
		}
		e = &entry{}
		c.entries[path] = e
	}
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.at.IsZero() && c.o.Now().Sub(e.at) < c.o.TTL {
		return e.body, e.err
	}
	// The request's end must not leave a failure in the cache for the next viewer.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.Timeout)
	defer cancel()
	e.body, e.err = c.fetch(fctx, path)
	e.at = c.o.Now()
	if e.err != nil {
		attrs := []any{"service", c.o.Service, "path", path, "err", e.err}
		if cause := errors.Unwrap(e.err); cause != nil {
			attrs = append(attrs, "cause", cause)
		}
		c.o.Logger.Warn("admin view: remote service unavailable", attrs...)
	}
	return e.body, e.err
}

// maxBody bounds an answer (10,000 decisions are a few MB).
const maxBody = 8 << 20

func (c *Client) fetch(ctx context.Context, path string) ([]byte, error) {
	ref, err := url.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("bad path %q: %w", path, err)
	}
	u := c.base.ResolveReference(ref)
	a, err := contract.Caller{Token: c.o.Token, HTTP: c.o.Client, Limit: maxBody}.Do(ctx, http.MethodGet, u.String(), nil, nil)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%s did not answer within %s; see whether it is running and healthy", c.o.Service, c.o.Timeout)
	case errors.Is(err, contract.ErrTooLong):
		return nil, fmt.Errorf("%s's answer is larger than %d MiB", c.o.Service, maxBody>>20)
	case err != nil:
		return nil, &unreachable{service: c.o.Service, err: err}
	case a.Status == http.StatusUnauthorized || a.Status == http.StatusForbidden:
		return nil, fmt.Errorf("%s refused the usage API (%d): list %s in %s's --reader-services", c.o.Service, a.Status, c.o.Self, c.o.Service)
	case a.Status != http.StatusOK:
		return nil, fmt.Errorf("%s cannot answer (%d): %s", c.o.Service, a.Status, cmp.Or(a.Message(), http.StatusText(a.Status)))
	}
	return a.Body, nil
}

// unreachable is a failed request: its text is for the page, Unwrap for the log.
type unreachable struct {
	service string
	err     error
}

func (e *unreachable) Error() string {
	return e.service + " cannot be reached; see whether it is running and whether the URL the usage API was given is right"
}
func (e *unreachable) Unwrap() error { return e.err }
