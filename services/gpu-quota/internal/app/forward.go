package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/api"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// ForwardedHeader marks a request one replica passed to the deciding one, with the sender's identity: the
// receiver serves it or answers 503 with api.NotLeaderHeader, never forwards it again (no second hop).
const ForwardedHeader = "X-Gpuhub-Forwarded"

// forwardBody bounds what is read before forwarding: the largest body the API takes (assess).
const forwardBody = 1<<20 + 1

// Deciding is the engine's gate and the policy's onUnavailable (*admit.Engine).
type Deciding interface {
	Deciding() bool
	OnUnavailable() string
}

// forwarder serves the API on the deciding replica and relays it to the decider from every other one: with two or
// more replicas only the holder of the Lease decides, so one lock orders every admission and waitlist change.
// The holder's address is in its Lease identity, "<pod>@<advertise URL>".
type forwarder struct {
	self   string // this replica's identity
	prefix string
	engine Deciding
	// leader is the holder's identity as last observed (leader.Elector.Leader).
	leader func() string
	local  http.Handler
	client *http.Client
	// park is how long a request waits for a decider while none is known (a handover): within the glue's 2 s.
	park time.Duration
	poll time.Duration
	// dialTimeout bounds one connection attempt to the holder: a holder whose pod is gone leaves an address that
	// answers nothing, and a connect left to the caller's deadline would spend the whole park time on it while
	// the Lease already names the next decider. dial is how connections are made (net.Dialer's; tests replace it).
	dialTimeout time.Duration
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	logger      *slog.Logger
	counts      *prometheus.CounterVec
	// stopping is closed when this replica stops: a stream it relays ends then, so that its HTTP server's
	// graceful shutdown does not wait for it (the reader connects again, to another replica).
	stopping <-chan struct{}
}

// streamPaths, under the API prefix, answer streams (NDJSON) that last until the decider or this replica stops.
var streamPaths = []string{"v1/assess/watch"}

func newForwarder(self, prefix string, engine Deciding, leader func() string, local http.Handler, logger *slog.Logger,
	reg prometheus.Registerer, stopping <-chan struct{}) (*forwarder, error) {
	f := &forwarder{self: self, prefix: server.NormalizePrefix(prefix) + "api/", engine: engine, leader: leader, local: local,
		park: 1500 * time.Millisecond, poll: 10 * time.Millisecond, dialTimeout: 250 * time.Millisecond,
		dial: (&net.Dialer{}).DialContext, logger: logger, stopping: stopping}
	f.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, f.dialTimeout)
			defer cancel()
			return f.dial(ctx, network, addr)
		}}}
	f.counts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "forwarded_total",
		Help: "API requests this replica relayed to the deciding one (the Lease holder), by result: ok (its answer, whatever the status), " +
			"unavailable (no decider reachable within the park time: 503)."}, []string{"result"})
	for _, r := range []string{"ok", "unavailable"} {
		f.counts.WithLabelValues(r)
	}
	if err := reg.Register(f.counts); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, f.prefix) {
		f.local.ServeHTTP(w, r)
		return
	}
	forwarded := r.Header.Get(ForwardedHeader) != ""
	if f.engine.Deciding() && !forwarded {
		f.serveLocal(w, r)
		return
	}
	if forwarded {
		// Sent here as to the decider: serve it if this replica still decides, else tell the sender to look again.
		if f.engine.Deciding() {
			f.local.ServeHTTP(w, r)
			return
		}
		notLeader(w)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, forwardBody))
	if err != nil {
		server.WriteError(w, http.StatusBadRequest, "cannot read the body: %v", err)
		return
	}
	f.relay(w, r, body, time.Now().Add(f.park))
}

// serveLocal serves r here; if the engine stepped down between the check and the decision (a handover), the
// request goes to the new decider instead of being answered 503.
func (f *forwarder) serveLocal(w http.ResponseWriter, r *http.Request) {
	buf := forwardBuffers.Get().(*bytes.Buffer)
	defer forwardBuffers.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, forwardBody)); err != nil {
		server.WriteError(w, http.StatusBadRequest, "cannot read the body: %v", err)
		return
	}
	body := buf.Bytes()
	r.Body = io.NopCloser(bytes.NewReader(body))
	c := catchers.Get().(*notLeaderCatcher)
	c.ResponseWriter, c.caught = w, false
	f.local.ServeHTTP(c, r)
	caught := c.caught
	c.ResponseWriter = nil
	catchers.Put(c)
	if caught {
		f.relay(w, r, body, time.Now().Add(f.park))
	}
}

// relay sends r to the decider and copies its answer; while none is known, or it cannot be reached, or it no
// longer decides, it waits and looks again until deadline, then answers 503. A stream is copied as it comes,
// and ends when this replica stops.
func (f *forwarder) relay(w http.ResponseWriter, r *http.Request, body []byte, deadline time.Time) {
	ctx, stream := r.Context(), f.stream(r)
	if stream {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-ctx.Done():
			case <-f.stopping:
				cancel()
			}
		}()
	}
	for {
		if f.engine.Deciding() {
			// Became the decider while the request waited.
			r.Body = io.NopCloser(bytes.NewReader(body))
			f.local.ServeHTTP(w, r)
			return
		}
		if url := holderURL(f.leader(), f.self); url != "" {
			resp, err := f.send(ctx, url, r, body)
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return // the caller is gone, or this replica stops
				}
				f.logger.Debug("the deciding replica did not answer; looking again", "leader", url, "err", err)
			case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(api.NotLeaderHeader) != "":
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			default:
				f.counts.WithLabelValues("ok").Inc()
				copyResponse(w, resp, stream)
				return
			}
		}
		if !time.Now().Before(deadline) {
			f.counts.WithLabelValues("unavailable").Inc()
			w.Header().Set("Retry-After", "1")
			// With the policy's onUnavailable: a glue that has not heard it yet applies it, not its own default.
			api.WriteUnavailable(w, f.engine.OnUnavailable(), "no gpu-quota replica decides right now (a handover); try again")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.poll):
		}
	}
}

// stream reports whether r asks for a stream (streamPaths).
func (f *forwarder) stream(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, f.prefix)
	return ok && slices.Contains(streamPaths, rest)
}

func (f *forwarder) send(ctx context.Context, base string, r *http.Request, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, h := range []string{"Authorization", "Content-Type", "Accept", "Cookie"} {
		if v := r.Header.Values(h); len(v) > 0 {
			req.Header[h] = v
		}
	}
	req.Header.Set(ForwardedHeader, f.self)
	return f.client.Do(req)
}

// copyResponse passes resp on; a stream's lines are flushed as they come, not when a buffer fills.
func copyResponse(w http.ResponseWriter, resp *http.Response, stream bool) {
	defer func() { _ = resp.Body.Close() }()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if !stream {
		_, _ = io.Copy(w, resp.Body)
		return
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil || rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// holderURL is the advertise URL in the holder's identity "<pod>@<url>"; "" when there is none, or the holder is
// this replica (which then is about to decide, or has just stopped).
func holderURL(holder, self string) string {
	if holder == "" || holder == self {
		return ""
	}
	_, url, ok := strings.Cut(holder, "@")
	if !ok {
		return ""
	}
	return strings.TrimSuffix(url, "/")
}

func notLeader(w http.ResponseWriter) {
	w.Header().Set(api.NotLeaderHeader, "1")
	w.Header().Set("Retry-After", "1")
	server.WriteError(w, http.StatusServiceUnavailable, "this gpu-quota replica does not decide; ask the Lease holder")
}

// notLeaderCatcher keeps an answer of the local API that says it no longer decides from the client: the
// request is relayed instead.
type notLeaderCatcher struct {
	http.ResponseWriter
	caught bool
}

var (
	catchers       = sync.Pool{New: func() any { return new(notLeaderCatcher) }}
	forwardBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

func (c *notLeaderCatcher) WriteHeader(code int) {
	h := c.Header()
	if code == http.StatusServiceUnavailable && h.Get(api.NotLeaderHeader) != "" {
		c.caught = true
		for _, k := range []string{api.NotLeaderHeader, "Retry-After", "Content-Type", "X-Content-Type-Options"} {
			h.Del(k)
		}
		return
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *notLeaderCatcher) Write(b []byte) (int, error) {
	if c.caught {
		return len(b), nil
	}
	return c.ResponseWriter.Write(b)
}

func (c *notLeaderCatcher) Unwrap() http.ResponseWriter { return c.ResponseWriter }

var errNoAdvertise = errors.New("gpu-quota: --advertise-url needs the Lease (an identity and a lease namespace)")

// advertised checks --advertise-url and brackets an IPv6 host given bare, as a pod IP substituted into
// "http://$(POD_IP):8000" is: http://fd00::1:8000 becomes http://[fd00::1]:8000.
func advertised(raw string) (string, error) {
	raw = strings.TrimSuffix(raw, "/")
	scheme, rest, ok := strings.Cut(raw, "://")
	if ok && strings.Count(rest, ":") > 1 && !strings.HasPrefix(rest, "[") {
		if i := strings.LastIndexByte(rest, ':'); i > 0 {
			rest = "[" + rest[:i] + "]" + rest[i:]
		}
	}
	u, err := url.Parse(scheme + "://" + rest)
	if !ok || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Port() == "" || u.Hostname() == "" || u.Path != "" {
		return "", fmt.Errorf("gpu-quota: --advertise-url %q is not http://HOST:PORT (where the other replicas reach this one)", raw)
	}
	return u.String(), nil
}
