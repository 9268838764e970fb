//go:build e2e

package cullere2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// call is one request a culler made to the Hub, with the Hub's answer.
type call struct {
	Client       string // the tap's client: a gpu-culler replica or an idle-culler
	Method, Path string
	User, Server string // a server DELETE's user and server ("" the default server)
	Status       int    // the Hub's answer; 0 when none came back
	At           time.Time
}

func (c call) String() string {
	return fmt.Sprintf("%s %s %s -> %d at %s", c.Client, c.Method, c.Path, c.Status, c.At.Format("15:04:05.000"))
}

// isDelete is a server DELETE (a stop) of user/server.
func (c call) isDelete(user, server string) bool {
	return c.Method == http.MethodDelete && c.User == user && c.Server == server
}

// isPass is the start of a culler's pass: the user list.
func (c call) isPass() bool {
	return c.Method == http.MethodGet && strings.TrimSuffix(c.Path, "/") == "/hub/api/users"
}

// tap is a recording reverse proxy in front of the Hub's REST API for one client. It passes every request on
// unchanged, records it with the Hub's answer, and can hold the answer of one server DELETE until the test lets
// it go (the leader scenario: the leader dies with its stop in flight).
type tap struct {
	name     string
	ln       net.Listener
	srv      *http.Server
	upstream atomic.Pointer[url.URL]

	mu    sync.Mutex
	calls []call
	hold  *holdSpec
}

type holdSpec struct {
	user, server string
	seen         chan call     // gets the held call once the Hub answered it
	release      chan struct{} // closed: the answer goes back (or not, to a dead client)
}

func newTap(ctx context.Context, name string) (*tap, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tap for %s: %w", name, err)
	}
	t := &tap{name: name, ln: ln}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(t.upstream.Load())
		},
		ModifyResponse: func(resp *http.Response) error {
			c := t.record(resp.Request, resp.StatusCode)
			t.maybeHold(resp.Request.Context(), c)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t.record(r, 0)
			http.Error(w, "tap: "+err.Error(), http.StatusBadGateway)
		},
	}
	t.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = t.srv.Serve(ln) }()
	return t, nil
}

// to points the tap at the Hub API (http://127.0.0.1:<port>/hub/api) and returns the URL the client uses instead.
func (t *tap) to(hubAPI string) (string, error) {
	u, err := url.Parse(hubAPI)
	if err != nil {
		return "", fmt.Errorf("tap %s: hub API URL: %w", t.name, err)
	}
	t.upstream.Store(&url.URL{Scheme: u.Scheme, Host: u.Host})
	return "http://" + t.ln.Addr().String() + u.Path, nil
}

func (t *tap) close() { _ = t.srv.Close() }

func (t *tap) record(r *http.Request, status int) call {
	c := call{Client: t.name, Method: r.Method, Path: r.URL.Path, Status: status, At: time.Now()}
	if r.Method == http.MethodDelete {
		c.User, c.Server, _ = serverOf(r.URL.EscapedPath())
	}
	t.mu.Lock()
	t.calls = append(t.calls, c)
	t.mu.Unlock()
	return c
}

// serverOf reads user and server from /hub/api/users/{name}/server or /hub/api/users/{name}/servers/{server}.
func serverOf(escaped string) (user, server string, ok bool) {
	rest, found := strings.CutPrefix(escaped, "/hub/api/users/")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	unescape := func(s string) string {
		v, err := url.PathUnescape(s)
		if err != nil {
			return s
		}
		return v
	}
	switch {
	case len(parts) == 2 && parts[1] == "server":
		return unescape(parts[0]), "", true
	case len(parts) == 3 && parts[1] == "servers":
		return unescape(parts[0]), unescape(parts[2]), true
	}
	return "", "", false
}

func (t *tap) maybeHold(ctx context.Context, c call) {
	t.mu.Lock()
	h := t.hold
	if h == nil || !c.isDelete(h.user, h.server) {
		t.mu.Unlock()
		return
	}
	t.hold = nil // once
	t.mu.Unlock()
	h.seen <- c
	select {
	case <-h.release:
	case <-ctx.Done():
	}
}

// holdStop arms the taps: the first DELETE of user/server through any of them reaches the Hub, and its answer is
// held until release is closed. The held call comes on the returned channel.
func holdStop(taps []*tap, user, server string) (seen <-chan call, release func()) {
	h := &holdSpec{user: user, server: server, seen: make(chan call, 1), release: make(chan struct{})}
	for _, t := range taps {
		t.mu.Lock()
		t.hold = h
		t.mu.Unlock()
	}
	var once sync.Once
	return h.seen, func() {
		once.Do(func() {
			close(h.release)
			for _, t := range taps {
				t.mu.Lock()
				if t.hold == h {
					t.hold = nil
				}
				t.mu.Unlock()
			}
		})
	}
}

// log is every call so far.
func (t *tap) log() []call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]call(nil), t.calls...)
}

// callsOf is every call of the taps that match.
func callsOf(taps []*tap, match func(call) bool) []call {
	var out []call
	for _, t := range taps {
		for _, c := range t.log() {
			if match(c) {
				out = append(out, c)
			}
		}
	}
	return out
}
