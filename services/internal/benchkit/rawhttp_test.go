package benchkit

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// countingServer serves h and counts the connections it accepts; it returns the server and its host:port.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, string, *atomic.Int64) {
	t.Helper()
	conns := new(atomic.Int64)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://"), conns
}

func TestRawPool(t *testing.T) {
	_, addr, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("X-Auth", r.Header.Get("Authorization"))
			_, _ = w.Write(body)
		case "/chunked": // flushed in pieces: no Content-Length
			for _, part := range []string{"one ", strings.Repeat("x", 20<<10), " three"} {
				_, _ = io.WriteString(w, part)
				w.(http.Flusher).Flush()
			}
		default:
			http.Error(w, "no such route", http.StatusNotFound)
		}
	})
	pool := &RawPool{Addr: addr}
	defer pool.Close()
	ctx := context.Background()

	for _, tc := range []struct {
		name, path string
		body       []byte
		wantStatus int
		wantBody   string
	}{
		{"content-length", "/echo", []byte(`{"user":"alice"}`), http.StatusOK, `{"user":"alice"}`},
		{"chunked", "/chunked", nil, http.StatusOK, "one " + strings.Repeat("x", 20<<10) + " three"},
		{"error status", "/nowhere", nil, http.StatusNotFound, "no such route\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := RawRequest(http.MethodPost, addr, tc.path, [][2]string{{"Authorization", "token x"}}, tc.body)
			status, body, err := pool.Do(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.wantStatus {
				t.Errorf("status %d, want %d", status, tc.wantStatus)
			}
			if diff := cmp.Diff(tc.wantBody, string(body)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for calls one after the other, want 1 kept alive", n)
	}

	// Concurrent callers each get a connection; they are kept for the next calls.
	conns.Store(0)
	pool = &RawPool{Addr: addr}
	defer pool.Close()
	req := RawRequest(http.MethodPost, addr, "/echo", nil, []byte("hi"))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			for range 50 {
				if status, body, err := pool.Do(ctx, req); err != nil || status != http.StatusOK || string(body) != "hi" {
					t.Errorf("Do: %d %q %v", status, body, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if n := conns.Load(); n < 1 || n > 8 {
		t.Errorf("%d connections for 8 concurrent callers, want 1 to 8", n)
	}
}

func TestRawPoolServerGone(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { // answers nothing: reads the request and hangs up
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Read(make([]byte, 1024))
		_ = c.Close()
	}()
	defer func() { _ = ln.Close() }()
	pool := &RawPool{Addr: ln.Addr().String()}
	if _, _, err := pool.Do(context.Background(), RawRequest(http.MethodGet, "x", "/", nil, nil)); err == nil {
		t.Fatal("Do succeeded on a connection closed without an answer")
	}
	if len(pool.idle) != 0 {
		t.Errorf("a broken connection went back to the pool")
	}
}

// A kept connection the server has closed meanwhile costs a retry on a new one, not an error.
func TestRawPoolKeptConnectionClosed(t *testing.T) {
	srv, addr, conns := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	pool := &RawPool{Addr: addr}
	defer pool.Close()
	req := RawRequest(http.MethodGet, addr, "/", nil, nil)
	call := func() {
		t.Helper()
		if status, body, err := pool.Do(context.Background(), req); err != nil || status != http.StatusOK || string(body) != "ok" {
			t.Fatalf("Do: %d %q %v", status, body, err)
		}
	}
	call()
	srv.CloseClientConnections() // as a server's idle timeout would
	call()
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the first, closed by the server, and its replacement)", n)
	}

	// One idle for longer than IdleTimeout is not used at all.
	pool.IdleTimeout = time.Nanosecond
	time.Sleep(time.Millisecond)
	call()
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3 (the idle one replaced)", n)
	}
}

func TestRawPoolMaxConns(t *testing.T) {
	var inFlight, most atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	pool := &RawPool{Addr: addr, MaxConns: 3}
	defer pool.Close()
	req := RawRequest(http.MethodGet, addr, "/", nil, nil)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if status, _, err := pool.Do(context.Background(), req); err != nil || status != http.StatusOK {
				t.Errorf("Do: %d %v", status, err)
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > 3 {
		t.Errorf("%d calls in flight at once, want at most MaxConns (3)", m)
	}

	// A caller waiting for a connection gives up with its context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	full := &RawPool{Addr: addr, MaxConns: 1, slots: make(chan struct{}, 1)}
	full.slots <- struct{}{}
	if _, _, err := full.Do(ctx, req); err == nil {
		t.Error("Do with every connection taken and a cancelled context succeeded")
	}
}

// Waiting for a connection counts against Timeout.
func TestRawPoolTimeoutWhileWaiting(t *testing.T) {
	full := &RawPool{Addr: "127.0.0.1:1", MaxConns: 1, Timeout: 20 * time.Millisecond, slots: make(chan struct{}, 1)}
	full.slots <- struct{}{}
	start := time.Now()
	if _, _, err := full.Do(context.Background(), RawRequest(http.MethodGet, "x", "/", nil, nil)); err == nil {
		t.Fatal("Do with every connection taken succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Do gave up after %v, want about Timeout (20ms)", took)
	}
}

func TestRawConnAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, req, answer string
		wantStatus        int
		wantBody          string
		wantReusable      bool
	}{
		{"content-length", "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", true},
		{"chunked with extension and trailer", "GET / HTTP/1.1\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nok\r\n0\r\nX-Sum: 1\r\n\r\n", 200, "ok", true},
		{"interim answer first", "POST / HTTP/1.1\r\n\r\n",
			"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx", 201, "x", true},
		{"no content", "DELETE / HTTP/1.1\r\n\r\n", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", true},
		{"head", "HEAD / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", 200, "", true},
		{"connection close", "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer func() { _ = client.Close() }()
			go func() {
				defer func() { _ = server.Close() }()
				_, _ = io.ReadFull(server, make([]byte, len(tc.req)))
				// The answer, then a second one that must be left for the next call.
				_, _ = io.WriteString(server, tc.answer+"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")
			}()
			c := &RawConn{conn: client, r: bufio.NewReader(client)}
			status, body, err := c.RoundTrip([]byte(tc.req))
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.wantStatus || string(body) != tc.wantBody || c.Reusable() != tc.wantReusable {
				t.Errorf("RoundTrip = %d %q reusable %v, want %d %q reusable %v", status, body, c.Reusable(), tc.wantStatus, tc.wantBody, tc.wantReusable)
			}
			if line, _ := c.r.ReadString('\n'); line != "HTTP/1.1 200 OK\r\n" {
				t.Errorf("the next answer starts %q: the first was not read exactly", line)
			}
		})
	}
}
