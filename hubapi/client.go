// Package hubapi is a typed client for the JupyterHub REST API (5.5 baseline,
// 6.x compatible). Every Hub call of gpuhub goes through it: pagination,
// retries with backoff, a concurrency cap, typed errors and token hygiene.
package hubapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults applied by New.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultSpawnTimeout   = 30 * time.Second
	DefaultMaxConcurrent  = 8
	DefaultMaxRetries     = 4
	DefaultPageSize       = 200 // the Hub's default api_page_max_limit
	DefaultRetryBaseDelay = 250 * time.Millisecond
	DefaultRetryMaxDelay  = 10 * time.Second
	DefaultMaxRetryAfter  = time.Minute
)

// PaginationMediaType asks the Hub for {"items", "_pagination"} replies.
const PaginationMediaType = "application/jupyterhub-pagination+json"

// Config configures a Client. Its String, GoString and LogValue redact the token.
type Config struct {
	URL           string        // e.g. http://127.0.0.1:8081/hub/api (JUPYTERHUB_API_URL); trailing slash tolerated
	Token         string        // JUPYTERHUB_API_TOKEN; sent as "Authorization: token <t>"; never logged
	Timeout       time.Duration // per request attempt, default 10s
	MaxConcurrent int           // cap of in-flight requests, default 8
	MaxRetries    int           // on 429/5xx/transport errors for idempotent requests, default 4; <0 disables
	HTTPClient    *http.Client  // optional
	Logger        *slog.Logger  // optional
	UserAgent     string

	// SpawnTimeout is the per-attempt timeout of StartServer and StopServer,
	// default 30s (at least Timeout). The Hub answers those only after
	// waiting up to slow_spawn_timeout / slow_stop_timeout (10s each by
	// default) for the spawner, so the 10s Timeout would cut them off.
	SpawnTimeout time.Duration

	// RetryBaseDelay is the first backoff step (doubled per retry, with
	// jitter), default 250ms; RetryMaxDelay caps a step, default 10s.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits for, default
	// 1m; a longer one is returned to the caller as an *APIError.
	MaxRetryAfter time.Duration
	// Sleep waits between attempts; tests inject a fake. Default: a timer
	// that returns ctx.Err() when ctx ends first.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock for Retry-After dates, default time.Now.
	Now func() time.Time
	// Registerer, when set, gets the client's metrics
	// (gpuhub_hubapi_requests_total{op,code}, ..._request_duration_seconds{op},
	// ..._retries_total{op}, ..._in_flight_requests). Clients sharing a
	// registry share the metrics.
	Registerer prometheus.Registerer
}

const redacted = "<redacted>"

func (c Config) tokenState() string {
	if c.Token == "" {
		return "<empty>"
	}
	return redacted
}

// String prints the config with the token redacted.
func (c Config) String() string {
	return fmt.Sprintf("hubapi.Config{URL:%q Token:%s Timeout:%s MaxConcurrent:%d MaxRetries:%d UserAgent:%q}",
		c.URL, c.tokenState(), c.Timeout, c.MaxConcurrent, c.MaxRetries, c.UserAgent)
}

// GoString keeps %#v from printing the token.
func (c Config) GoString() string { return c.String() }

// LogValue makes slog print the config with the token redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", c.URL),
		slog.String("token", c.tokenState()),
		slog.Duration("timeout", c.Timeout),
		slog.Int("maxConcurrent", c.MaxConcurrent),
		slog.Int("maxRetries", c.MaxRetries),
	)
}

// ConfigFromEnv reads JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN, the names
// the Hub gives its managed services.
func ConfigFromEnv() Config {
	return Config{
		URL:   os.Getenv("JUPYTERHUB_API_URL"),
		Token: os.Getenv("JUPYTERHUB_API_TOKEN"),
	}
}

// Client talks to one Hub with one token. It is safe for concurrent use.
type Client struct {
	base           string // API root without trailing slash, e.g. http://h:8081/hub/api
	token          string
	http           *http.Client
	timeout        time.Duration
	spawnTimeout   time.Duration
	maxRetries     int
	retryBaseDelay time.Duration
	retryMaxDelay  time.Duration
	maxRetryAfter  time.Duration
	userAgent      string
	sem            chan struct{}
	log            *slog.Logger
	sleep          func(ctx context.Context, d time.Duration) error
	now            func() time.Time
	metrics        *metrics
}

// New validates cfg and returns a Client. Errors never contain the token.
func New(cfg Config) (*Client, error) {
	base, err := parseBaseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.Token == "" {
		return nil, errors.New("hubapi: token is empty (set JUPYTERHUB_API_TOKEN)")
	}
	if err := checkToken(cfg.Token); err != nil {
		return nil, fmt.Errorf("hubapi: config token: %w", err)
	}
	c := &Client{
		base:           base,
		token:          cfg.Token,
		http:           cfg.HTTPClient,
		timeout:        orDefault(cfg.Timeout, DefaultTimeout),
		spawnTimeout:   orDefault(cfg.SpawnTimeout, DefaultSpawnTimeout),
		maxRetries:     cfg.MaxRetries,
		retryBaseDelay: orDefault(cfg.RetryBaseDelay, DefaultRetryBaseDelay),
		retryMaxDelay:  orDefault(cfg.RetryMaxDelay, DefaultRetryMaxDelay),
		maxRetryAfter:  orDefault(cfg.MaxRetryAfter, DefaultMaxRetryAfter),
		userAgent:      cfg.UserAgent,
		log:            cfg.Logger,
		sleep:          cfg.Sleep,
		now:            cfg.Now,
	}
	if c.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	c.spawnTimeout = max(c.spawnTimeout, c.timeout)
	switch {
	case c.maxRetries == 0:
		c.maxRetries = DefaultMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	n := cfg.MaxConcurrent
	if n <= 0 {
		n = DefaultMaxConcurrent
	}
	c.sem = make(chan struct{}, n)
	if c.http == nil {
		c.http = &http.Client{}
	}
	if c.userAgent == "" {
		c.userAgent = "gpuhub-hubapi"
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.sleep == nil {
		c.sleep = sleepCtx
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// String identifies the client without its token.
func (c *Client) String() string {
	return fmt.Sprintf("hubapi.Client{URL:%q Token:%s}", c.base, redacted)
}

// GoString keeps %#v from printing the token.
func (c *Client) GoString() string { return c.String() }

// URL returns the API root the client talks to, without trailing slash.
func (c *Client) URL() string { return c.base }

func parseBaseURL(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("hubapi: URL is empty (set JUPYTERHUB_API_URL, e.g. http://hub:8081/hub/api)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("hubapi: parse URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("hubapi: URL %q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return "", fmt.Errorf("hubapi: URL %q has no host", u.Redacted())
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("hubapi: URL %q: user info, query and fragment are not allowed", u.Redacted())
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// checkToken refuses tokens that would corrupt the header; it never echoes the token.
func checkToken(tok string) error {
	for _, r := range tok {
		if r <= ' ' || r == 0x7f {
			return errors.New("token contains whitespace or control characters")
		}
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// escape makes one path segment; user and server names may hold "@", "." or unicode.
func escape(s string) string { return url.PathEscape(s) }

func serverPath(user, server string) string {
	if server == "" {
		return "/users/" + escape(user) + "/server"
	}
	return "/users/" + escape(user) + "/servers/" + escape(server)
}

// Version returns the Hub's version from GET / (no auth needed), e.g. "5.5.0".
func (c *Client) Version(ctx context.Context) (string, error) {
	var v versionInfo
	if _, err := c.do(ctx, request{op: "version", method: http.MethodGet, path: "/", noAuth: true}, &v); err != nil {
		return "", err
	}
	return v.Version, nil
}

// WhoAmI returns the model of the client's own token owner (GET /user).
func (c *Client) WhoAmI(ctx context.Context) (*User, error) {
	var u User
	if _, err := c.do(ctx, request{op: "whoami", method: http.MethodGet, path: "/user"}, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// WhoAmIWithToken returns the owner of another token (GET /user with that
// token). Any valid token may call it; the Hub then includes scopes, token_id,
// session_id, and always name, admin and groups of the owner.
func (c *Client) WhoAmIWithToken(ctx context.Context, token string) (*User, error) {
	if token == "" {
		return nil, errors.New("hubapi: whoami: empty token")
	}
	if err := checkToken(token); err != nil {
		return nil, fmt.Errorf("hubapi: whoami: %w", err)
	}
	var u User
	if _, err := c.do(ctx, request{op: "whoami_token", method: http.MethodGet, path: "/user", token: token}, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// Users iterates GET /users page by page. Pages are not a consistent
// snapshot: a user is yielded at most once, but one renamed, added or deleted
// while iterating may be missed. Iteration stops at the first error.
func (c *Client) Users(ctx context.Context, opts ListUsersOptions) iter.Seq2[User, error] {
	q := url.Values{}
	if opts.State != "" {
		q.Set("state", opts.State)
	}
	if opts.IncludeStoppedServers {
		q.Set("include_stopped_servers", "1")
	}
	if opts.Sort != "" {
		q.Set("sort", opts.Sort)
	}
	return paginate(ctx, c, "users_list", "/users", q, opts.PageSize, func(u User) string { return u.Name })
}

// ListUsers collects Users.
func (c *Client) ListUsers(ctx context.Context, opts ListUsersOptions) ([]User, error) {
	return collect(c.Users(ctx, opts))
}

// GetUser returns one user (GET /users/{name}).
func (c *Client) GetUser(ctx context.Context, name string) (*User, error) {
	var u User
	if _, err := c.do(ctx, request{op: "user_get", method: http.MethodGet, path: "/users/" + escape(name)}, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// Groups iterates GET /groups page by page, each group at most once.
func (c *Client) Groups(ctx context.Context) iter.Seq2[Group, error] {
	return paginate(ctx, c, "groups_list", "/groups", url.Values{}, 0, func(g Group) string { return g.Name })
}

// ListGroups collects Groups.
func (c *Client) ListGroups(ctx context.Context) ([]Group, error) { return collect(c.Groups(ctx)) }

// GetGroup returns one group (GET /groups/{name}).
func (c *Client) GetGroup(ctx context.Context, name string) (*Group, error) {
	var g Group
	if _, err := c.do(ctx, request{op: "group_get", method: http.MethodGet, path: "/groups/" + escape(name)}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// AddGroupMembers adds users to a group (POST /groups/{name}/users, scope
// groups). Adding a member twice is harmless, so it is retried like a GET.
func (c *Client) AddGroupMembers(ctx context.Context, group string, users ...string) error {
	if users == nil {
		users = []string{}
	}
	_, err := c.do(ctx, request{
		op:         "group_members_add",
		method:     http.MethodPost,
		path:       "/groups/" + escape(group) + "/users",
		body:       map[string]any{"users": users},
		idempotent: true,
	}, nil)
	return err
}

// StartServer starts a server (scope servers); server "" is the default
// server. options become the spawner's user_options (nil sends no body).
// 201 means started, 202 that the spawn goes on (Pending). The Hub answers
// 400 when the server is already running or has a stop pending: IsConflict.
// It is retried only on 429 with Retry-After, since a start is not idempotent.
// options are sent as the whole body, which 5.5 reads as user_options and 6.x
// too (for compatibility) unless it has a "user_options" or "display_name" key.
func (c *Client) StartServer(ctx context.Context, user, server string, options map[string]any) (StartResult, error) {
	req := request{op: "server_start", method: http.MethodPost, path: serverPath(user, server), timeout: c.spawnTimeout}
	if options != nil {
		req.body = options
	}
	code, err := c.do(ctx, req, nil)
	if err != nil {
		return StartResult{}, err
	}
	return StartResult{Pending: code == http.StatusAccepted}, nil
}

// StopServer stops a server (scope delete:servers); remove also deletes a
// named server (the Hub refuses remove for the default server).
// 204 means stopped, 202 that it is still stopping (Pending).
func (c *Client) StopServer(ctx context.Context, user, server string, remove bool) (StopResult, error) {
	req := request{
		op: "server_stop", method: http.MethodDelete, path: serverPath(user, server), idempotent: true, timeout: c.spawnTimeout,
	}
	if remove {
		req.body = map[string]bool{"remove": true}
	}
	code, err := c.do(ctx, req, nil)
	if err != nil {
		return StopResult{}, err
	}
	return StopResult{Pending: code == http.StatusAccepted}, nil
}

// CreateToken mints a token for user (POST /users/{name}/tokens, scope tokens).
// Not retried: a retry could mint two tokens.
func (c *Client) CreateToken(ctx context.Context, user string, req TokenRequest) (*Token, error) {
	var t Token
	if _, err := c.do(ctx, request{op: "token_create", method: http.MethodPost, path: "/users/" + escape(user) + "/tokens", body: req}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// NotifyActivity reports activity (POST /users/{name}/activity, scope
// users:activity). The Hub keeps the newest time, so it is retried like a GET.
// The Hub rejects times more than an hour in the future and unknown servers.
func (c *Client) NotifyActivity(ctx context.Context, user string, a Activity) error {
	body := map[string]any{}
	if !a.LastActivity.IsZero() {
		body["last_activity"] = FormatTime(a.LastActivity)
	}
	if len(a.Servers) > 0 {
		servers := make(map[string]any, len(a.Servers))
		for name, t := range a.Servers {
			servers[name] = map[string]string{"last_activity": FormatTime(t)}
		}
		body["servers"] = servers
	}
	if len(body) == 0 {
		return errors.New("hubapi: activity: need LastActivity or Servers")
	}
	_, err := c.do(ctx, request{
		op:         "activity",
		method:     http.MethodPost,
		path:       "/users/" + escape(user) + "/activity",
		body:       body,
		idempotent: true,
	}, nil)
	return err
}

// FormatTime renders t the way the Hub does: UTC, microseconds, "Z".
func FormatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for v, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

type pageInfo struct {
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
	Total  int `json:"total"`
	Next   *struct {
		Offset int `json:"offset"`
		Limit  int `json:"limit"`
	} `json:"next"`
}

// paginate follows _pagination.next by offset and limit (not by its url,
// whose host is the Hub's public one). A Hub or proxy that answers with a bare
// list gets offset paging until a short page or a page with nothing new.
func paginate[T any](ctx context.Context, c *Client, op, path string, q url.Values, pageSize int, key func(T) string) iter.Seq2[T, error] {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	return func(yield func(T, error) bool) {
		var zero T
		seen := map[string]struct{}{}
		offset, limit := 0, pageSize
		for {
			pq := url.Values{}
			for k, v := range q {
				pq[k] = v
			}
			pq.Set("offset", strconv.Itoa(offset))
			pq.Set("limit", strconv.Itoa(limit))
			var raw json.RawMessage
			_, err := c.do(ctx, request{op: op, method: http.MethodGet, path: path, query: pq, accept: PaginationMediaType}, &raw)
			if err != nil {
				yield(zero, err)
				return
			}
			var items []T
			var page *pageInfo
			if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '[' {
				if err := json.Unmarshal(trimmed, &items); err != nil {
					yield(zero, fmt.Errorf("hub api: GET %s: decode list: %w", path, err))
					return
				}
			} else {
				var p struct {
					Items      []T       `json:"items"`
					Pagination *pageInfo `json:"_pagination"`
				}
				if err := json.Unmarshal(trimmed, &p); err != nil {
					yield(zero, fmt.Errorf("hub api: GET %s: decode page: %w", path, err))
					return
				}
				items, page = p.Items, p.Pagination
				if page == nil {
					page = &pageInfo{} // items without _pagination: a single page
				}
			}
			fresh := 0
			for _, it := range items {
				k := key(it)
				if _, dup := seen[k]; dup {
					continue
				}
				seen[k] = struct{}{}
				fresh++
				if !yield(it, nil) {
					return
				}
			}
			if page != nil {
				// With state=ready the Hub filters after paging, so a page may be
				// short or empty while next is still set: follow next only.
				if page.Next == nil || page.Next.Offset <= offset {
					return
				}
				offset = page.Next.Offset
				if page.Next.Limit > 0 {
					limit = page.Next.Limit
				}
				continue
			}
			// Bare list: the Hub caps it at api_page_max_limit; a full page may
			// have a successor. Stop when nothing new came (offset ignored).
			if len(items) < limit || fresh == 0 {
				return
			}
			offset += len(items)
		}
	}
}

type request struct {
	op         string // metric label
	method     string
	path       string // escaped, relative to the API root, starting with "/"
	query      url.Values
	body       any
	token      string // overrides the client's token
	noAuth     bool
	accept     string
	idempotent bool          // retry on 5xx and transport errors even though the method is POST
	timeout    time.Duration // per attempt; 0 = the client's Timeout
}

func (r request) retryable() bool {
	return r.idempotent || r.method == http.MethodGet || r.method == http.MethodDelete || r.method == http.MethodHead
}

// do runs req with retries and decodes a 2xx JSON body into out (if non-nil).
// It returns the final status code.
func (c *Client) do(ctx context.Context, req request, out any) (int, error) {
	var body []byte
	if req.body != nil {
		var err error
		if body, err = json.Marshal(req.body); err != nil {
			return 0, fmt.Errorf("hub api: %s %s: encode body: %w", req.method, req.path, err)
		}
	}
	for attempt := 0; ; attempt++ {
		code, retryAfter, err := c.attempt(ctx, req, body, out)
		if err == nil {
			return code, nil
		}
		if ctx.Err() != nil {
			return code, err // the caller gave up; err wraps ctx.Err() unless an answer came
		}
		retry, wait := c.shouldRetry(req, attempt, err, retryAfter)
		if !retry {
			return code, err
		}
		if dl, ok := ctx.Deadline(); ok && c.now().Add(wait).After(dl) {
			return code, err // waiting would outlive the caller: give the real error now
		}
		c.log.DebugContext(ctx, "retrying hub api request",
			"method", req.method, "path", req.path, "attempt", attempt+1, "status", code, "wait", wait, "err", err)
		c.metrics.retries.WithLabelValues(req.op).Inc()
		if serr := c.sleep(ctx, wait); serr != nil {
			return code, fmt.Errorf("%w (retry abandoned: %w)", err, serr)
		}
	}
}

// shouldRetry decides on a failed attempt and how long to wait before the next.
func (c *Client) shouldRetry(req request, attempt int, err error, retryAfter time.Duration) (bool, time.Duration) {
	if attempt >= c.maxRetries {
		return false, 0
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		var de *decodeError
		if errors.As(err, &de) {
			return false, 0
		}
		return req.retryable(), c.backoff(attempt) // transport error or attempt timeout
	}
	if ae.StatusCode == http.StatusTooManyRequests {
		if retryAfter > c.maxRetryAfter {
			return false, 0
		}
		if retryAfter > 0 {
			return true, retryAfter // safe even for a start: the Hub refused before spawning
		}
		return req.retryable(), c.backoff(attempt)
	}
	if !req.retryable() {
		return false, 0
	}
	switch ae.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
	case http.StatusInternalServerError:
		if req.method != http.MethodGet {
			return false, 0
		}
	default:
		return false, 0
	}
	if retryAfter > c.maxRetryAfter {
		return false, 0
	}
	if retryAfter > 0 {
		return true, retryAfter
	}
	return true, c.backoff(attempt)
}

// backoff is exponential with jitter in [d/2, d).
func (c *Client) backoff(attempt int) time.Duration {
	d := c.retryBaseDelay
	for range attempt {
		d *= 2
		if d >= c.retryMaxDelay {
			d = c.retryMaxDelay
			break
		}
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// attempt sends req once, holding a concurrency slot for its duration.
func (c *Client) attempt(ctx context.Context, req request, body []byte, out any) (int, time.Duration, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("hub api: %s %s: waiting for a free slot: %w", req.method, req.path, ctx.Err())
	}
	defer func() { <-c.sem }()

	timeout := c.timeout
	if req.timeout > 0 {
		timeout = req.timeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	target := c.base + req.path
	if len(req.query) > 0 {
		target += "?" + req.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(actx, req.method, target, rd)
	if err != nil {
		return 0, 0, fmt.Errorf("hub api: %s %s: %w", req.method, req.path, err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	accept := req.accept
	if accept == "" {
		accept = "application/json"
	} else {
		accept += ", application/json"
	}
	hr.Header.Set("Accept", accept)
	hr.Header.Set("User-Agent", c.userAgent)
	if !req.noAuth {
		tok := c.token
		if req.token != "" {
			tok = req.token
		}
		hr.Header.Set("Authorization", "token "+tok)
	}

	c.metrics.inFlight.Inc()
	start := time.Now()
	resp, err := c.http.Do(hr)
	c.metrics.inFlight.Dec()
	c.metrics.duration.WithLabelValues(req.op).Observe(time.Since(start).Seconds())
	if err != nil {
		c.metrics.requests.WithLabelValues(req.op, "error").Inc()
		return 0, 0, fmt.Errorf("hub api: %s %s: %w", req.method, req.path, err)
	}
	c.metrics.requests.WithLabelValues(req.op, codeLabel(resp.StatusCode)).Inc()
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, 0, fmt.Errorf("hub api: %s %s: read body: %w", req.method, req.path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := &APIError{
			StatusCode: resp.StatusCode,
			Method:     req.method,
			Path:       req.path,
			Message:    errorMessage(data),
			RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), c.now()),
		}
		return resp.StatusCode, ae.RetryAfter, ae
	}
	if out != nil && resp.StatusCode != http.StatusNoContent && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, 0, &decodeError{fmt.Errorf("hub api: %s %s: decode: %w", req.method, req.path, err)}
		}
	}
	return resp.StatusCode, 0, nil
}

// errorMessage takes the Hub's {"status", "message"} or a short excerpt of
// another body (e.g. a proxy's HTML page).
func errorMessage(data []byte) string {
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &m) == nil && m.Message != "" {
		return m.Message
	}
	s := strings.TrimSpace(string(data))
	if strings.HasPrefix(s, "{") || strings.HasPrefix(s, "<") {
		return ""
	}
	const maxLen = 200
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	return s
}

// parseRetryAfter reads seconds or an HTTP date; zero when absent or invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		if n > int(math.MaxInt64/time.Second) {
			return math.MaxInt64 // centuries: longer than any caller waits, and not negative by overflow
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
