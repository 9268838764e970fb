package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuhub/gpuhub/services/internal/logging"
)

func TestNormalizePrefix(t *testing.T) {
	tests := map[string]string{
		"":                      "/",
		"/":                     "/",
		"/services/gpu-usage/":  "/services/gpu-usage/",
		"services/gpu-usage":    "/services/gpu-usage/",
		"//services/gpu-usage/": "/services/gpu-usage/",
	}
	for in, want := range tests {
		if got := NormalizePrefix(in); got != want {
			t.Errorf("NormalizePrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLifecycle starts a whole server on 127.0.0.1:0, checks routing and probes, then shuts it down.
func TestLifecycle(t *testing.T) {
	ready := errors.New("informers not synced")
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"path": r.URL.Path})
	})
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{
		Listener:  ln,
		Prefix:    "/services/gpu-test/",
		Handler:   app,
		Registry:  prometheus.NewRegistry(),
		Subsystem: "test",
		Logger:    logging.Discard(),
		ReadyChecks: []Check{{Name: "caches", Fn: func(context.Context) error {
			return ready
		}}, {Name: "extra", Optional: true, Fn: func(context.Context) error {
			return errors.New("database away")
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	base := "http://" + ln.Addr().String()

	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "informers not synced") {
		t.Errorf("/readyz before ready = %d %s", code, body)
	}
	ready = nil
	if code, body := get("/readyz"); code != http.StatusOK || !strings.Contains(body, `"extra":"database away"`) {
		t.Errorf("/readyz after ready = %d %s, want 200 with the optional check's error in the detail", code, body)
	}
	if code, body := get("/services/gpu-test/api/v1/me"); code != http.StatusOK || !strings.Contains(body, `"/services/gpu-test/api/v1/me"`) {
		t.Errorf("app route = %d %s", code, body)
	}
	if code, _ := get("/services/gpu-test"); code != http.StatusMovedPermanently {
		t.Errorf("prefix without slash = %d, want redirect", code)
	}
	if code, _ := get("/elsewhere"); code != http.StatusNotFound {
		t.Errorf("outside prefix = %d, want 404", code)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `gpuhub_test_http_request_duration_seconds_count{code="200",method="get"}`) {
		t.Errorf("/metrics = %d, missing request histogram:\n%s", code, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server did not shut down")
	}
	if _, err := (&net.Dialer{Timeout: time.Second}).DialContext(t.Context(), "tcp", ln.Addr().String()); err == nil {
		t.Error("port still open after shutdown")
	}
}

// TestInstrumentedLikePromhttp: the HTTP histogram has the labels promhttp.InstrumentHandlerDuration gave it.
func TestInstrumentedLikePromhttp(t *testing.T) {
	vec := func() *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "d", Help: "d"}, []string{"method", "code"})
	}
	ours, theirs := vec(), vec()
	for _, c := range []struct {
		method string
		status int // 0: the handler writes nothing
		body   bool
	}{
		{"GET", 0, false}, {"GET", 0, true}, {"POST", 200, true}, {"POST", 401, true}, {"post", 503, false},
		{"Get", 200, false}, {"PROPFIND", 207, false}, {"DELETE", 204, false}, {"PATCH", 418, true}, {"PUT", 999, false},
	} {
		h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if c.status != 0 {
				w.WriteHeader(c.status)
			}
			if c.body {
				_, _ = w.Write([]byte("x"))
			}
		})
		req := httptest.NewRequestWithContext(t.Context(), c.method, "/", nil)
		(&instrumented{next: h, duration: ours, inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})}).
			ServeHTTP(httptest.NewRecorder(), req)
		promhttp.InstrumentHandlerDuration(theirs, h).ServeHTTP(httptest.NewRecorder(), req)
	}
	counts := func(v *prometheus.HistogramVec) map[string]uint64 {
		reg := prometheus.NewRegistry()
		reg.MustRegister(v)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				key := ""
				for _, l := range m.GetLabel() {
					key += l.GetName() + "=" + l.GetValue() + " "
				}
				out[key] = m.GetHistogram().GetSampleCount()
			}
		}
		return out
	}
	if diff := cmp.Diff(counts(theirs), counts(ours)); diff != "" {
		t.Errorf("labels differ from promhttp's (-promhttp +ours):\n%s", diff)
	}
}

// TestServe: onServing sees the server once it listens; the end of ctx is a clean stop, even before listening;
// a listen that fails is an error and nobody is told the server serves.
func TestServe(t *testing.T) {
	newServer := func(t *testing.T, addr string) *Server {
		t.Helper()
		srv, err := New(Options{Addr: addr, Handler: http.NotFoundHandler(), Registry: prometheus.NewRegistry(), Logger: logging.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	tests := map[string]struct {
		addr         string
		cancelFirst  bool // ctx ends before Serve is called: it may still listen for a moment
		wantServing  bool
		wantErr      bool
		cancelServed bool // ctx ends once onServing ran
	}{
		"serves until ctx ends":  {addr: "127.0.0.1:0", wantServing: true, cancelServed: true},
		"ctx ended before start": {addr: "127.0.0.1:0", cancelFirst: true},
		"listen fails":           {addr: "127.0.0.1:-1", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, tc.addr)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancelFirst {
				cancel()
			}
			serving := false
			done := make(chan error, 1)
			go func() {
				done <- srv.Serve(ctx, func(s *Server) {
					serving = s.Addr() != nil
					if tc.cancelServed {
						cancel()
					}
				})
			}()
			select {
			case err := <-done:
				if (err != nil) != tc.wantErr {
					t.Errorf("Serve = %v, want an error: %t", err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return")
			}
			if !tc.cancelFirst && serving != tc.wantServing {
				t.Errorf("onServing saw an address: %t, want %t", serving, tc.wantServing)
			}
		})
	}
}

// TestShutdownDelay: once ctx ends, the server keeps taking new connections for ShutdownDelay with /readyz at 503
// (kube-proxy still sends new connections to a terminating pod for a moment), then closes its port.
func TestShutdownDelay(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, http.StatusOK, "served") })
	const delay = 700 * time.Millisecond
	srv, err := New(Options{Listener: ln, Prefix: "/p/", Handler: app, Registry: prometheus.NewRegistry(), Logger: logging.Discard(),
		ShutdownDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	<-srv.listening
	base := "http://" + ln.Addr().String()
	get := func(path string) (int, string, error) {
		// A new connection each time: what kube-proxy sends is a new connection.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if code, _, err := get("/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz before the stop: %d %v", code, err)
	}
	begin := time.Now()
	cancel()
	time.Sleep(delay / 4)
	code, body, err := get("/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, `"shutdown":"shutting down"`) {
		t.Errorf("/readyz during the delay: %d %s %v, want 503 saying it shuts down", code, body, err)
	}
	if code, body, err := get("/p/x"); err != nil || code != http.StatusOK {
		t.Errorf("a new connection during the delay: %d %s %v, want served", code, body, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server did not shut down")
	}
	if d := time.Since(begin); d < delay {
		t.Errorf("Run returned %v after ctx ended, before the delay of %v", d, delay)
	}
	if _, _, err := get("/p/x"); err == nil {
		t.Error("still served after the delay")
	}
}
