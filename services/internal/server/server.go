// Package server serves a gpuhub service: its API under the JupyterHub service prefix, probes and metrics at
// the root, graceful shutdown.
//
// The proxy routes /services/<name>/ to the service without stripping the prefix and without authenticating
// (see docs), so the application handler is mounted under the prefix and must authenticate every request
// itself. Probes and /metrics live outside the prefix: the public proxy never forwards them, while the kubelet
// and Prometheus reach them on the pod IP.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// Check is one readiness condition, such as "informer caches synced" or "the Hub answers".
type Check struct {
	Name string
	Fn   func(ctx context.Context) error
	// Optional checks are reported in the /readyz detail but never make it fail: the service still serves
	// without them (e.g. the usage API's live share while its ledger database is away).
	Optional bool
}

// Options configure a Server. Handler, Logger and Registry are required.
type Options struct {
	// Addr to listen on, e.g. ":8000". Ignored when Listener is set.
	Addr string
	// Listener, when set, is used instead of listening on Addr (tests pass 127.0.0.1:0).
	Listener net.Listener
	// Prefix is JUPYTERHUB_SERVICE_PREFIX, e.g. "/services/gpu-usage/". Empty mounts Handler at "/".
	Prefix string
	// Handler serves the application routes. It sees the full path, prefix included.
	Handler http.Handler
	// Registry receives the HTTP and Go runtime metrics and is exposed on /metrics.
	Registry *prometheus.Registry
	// Namespace and Subsystem name the HTTP metrics (gpuhub_<subsystem>_http_...).
	Namespace, Subsystem string
	Logger               *slog.Logger
	// ReadyChecks must all pass for /readyz to answer 200, except Optional ones; the body lists each check's
	// state ("ok" or its error) either way.
	ReadyChecks []Check
	// ShutdownTimeout bounds graceful shutdown; default 15 s.
	ShutdownTimeout time.Duration
	// ShutdownDelay is how long the server keeps accepting new connections once ctx ends, /readyz answering 503,
	// before the graceful shutdown: behind a Service, kube-proxy and the endpoints go on sending new connections
	// to a terminating pod for a moment (a second or more), and a closed port refuses them. 0: shut down at once.
	ShutdownDelay time.Duration
}

// Server is an HTTP server for one gpuhub service.
type Server struct {
	opts    Options
	handler http.Handler
	// draining is set once ctx ended, while ShutdownDelay runs: /readyz answers 503.
	draining atomic.Bool
	mu       sync.Mutex
	addr     net.Addr
	// listening is closed once Run listens (addr is set).
	listening chan struct{}
}

// NormalizePrefix returns p with one leading and one trailing slash ("" stays "/").
func NormalizePrefix(p string) string {
	p = strings.Trim(p, "/")
	if p == "" {
		return "/"
	}
	return "/" + p + "/"
}

// New validates opts and builds the routing.
func New(opts Options) (*Server, error) {
	if opts.Handler == nil || opts.Logger == nil || opts.Registry == nil {
		return nil, errors.New("server: Handler, Logger and Registry are required")
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 15 * time.Second
	}
	if opts.Namespace == "" {
		opts.Namespace = "gpuhub"
	}
	opts.Prefix = NormalizePrefix(opts.Prefix)
	s := &Server{opts: opts, listening: make(chan struct{})}

	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: opts.Namespace,
		Subsystem: opts.Subsystem,
		Name:      "http_request_duration_seconds",
		Help:      "Duration of HTTP requests to the service API, by method and status code.",
		Buckets:   []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"method", "code"})
	inflight := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: opts.Namespace,
		Subsystem: opts.Subsystem,
		Name:      "http_requests_in_flight",
		Help:      "HTTP requests to the service API being served.",
	})
	for _, c := range []prometheus.Collector{duration, inflight} {
		if err := opts.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("server: register metrics: %w", err)
		}
	}
	// Runtime metrics help operators see leaks; registering twice (two servers, one registry) is harmless.
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := opts.Registry.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("server: register runtime metrics: %w", err)
			}
		}
	}

	app := &instrumented{next: opts.Handler, duration: duration, inflight: inflight}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{
		Registry:          opts.Registry,
		EnableOpenMetrics: true,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelError),
	}))
	if opts.Prefix == "/" {
		mux.Handle("/", app)
	} else {
		mux.Handle(opts.Prefix, app)
		// The Hub links a service as <prefix> ; a request for the prefix without its slash is redirected.
		mux.Handle(strings.TrimSuffix(opts.Prefix, "/"), http.RedirectHandler(opts.Prefix, http.StatusMovedPermanently))
	}
	s.handler = accessLog(opts.Logger, mux)
	return s, nil
}

// Handler returns the full routing (probes, metrics, application), for in-process tests.
func (s *Server) Handler() http.Handler { return s.handler }

// Addr returns the address being served, once Run has started listening.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

type readyReport struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rep := readyReport{Ready: true, Checks: map[string]string{}}
	if s.draining.Load() {
		rep.Ready, rep.Checks["shutdown"] = false, "shutting down"
	}
	for _, c := range s.opts.ReadyChecks {
		if err := c.Fn(ctx); err != nil {
			rep.Ready = rep.Ready && c.Optional
			rep.Checks[c.Name] = err.Error()
			continue
		}
		rep.Checks[c.Name] = "ok"
	}
	w.Header().Set("Content-Type", "application/json")
	if !rep.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rep)
}

// Run serves until ctx is cancelled, then shuts down gracefully: in-flight requests get ShutdownTimeout.
func (s *Server) Run(ctx context.Context) error {
	ln := s.opts.Listener
	if ln == nil {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", s.opts.Addr)
		if err != nil {
			return fmt.Errorf("server: listen on %s: %w", s.opts.Addr, err)
		}
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	select {
	case <-s.listening: // a second Run
	default:
		close(s.listening)
	}
	s.mu.Unlock()
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.opts.Logger.Info("serving", "addr", ln.Addr().String(), "prefix", s.opts.Prefix)
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	if d := s.opts.ShutdownDelay; d > 0 {
		s.draining.Store(true)
		s.opts.Logger.Info("still accepting while the endpoints stop sending here", "shutdown_delay", d)
		select {
		case err := <-errc:
			return fmt.Errorf("server: %w", err)
		case <-time.After(d):
		}
	}
	s.opts.Logger.Info("shutting down", "timeout", s.opts.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("server: graceful shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// Serve is how a service's Run ends: it serves until ctx ends, as Run does, and calls onServing (when not nil)
// once the server listens, so a test can read Addr. A server stopped because ctx ended returns nil, also one
// stopped before it listened.
func (s *Server) Serve(ctx context.Context, onServing func(*Server)) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	var err error
	select {
	case <-s.listening:
		if onServing != nil {
			onServing(s)
		}
		err = <-errc
	case err = <-errc:
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// statusRecorder remembers the status written (0 until a header or body is).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// instrumented counts the application's requests in flight and observes their duration by method and code,
// with the labels promhttp.InstrumentHandlerDuration gives ("post", "200"), at a fraction of its cost per
// request (no label map, one wrapper): gpu-quota answers every spawn on this path.
type instrumented struct {
	next     http.Handler
	duration *prometheus.HistogramVec
	inflight prometheus.Gauge
}

func (h *instrumented) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.inflight.Inc()
	defer h.inflight.Dec()
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	h.next.ServeHTTP(rec, r)
	h.duration.WithLabelValues(methodLabel(r.Method), codeLabel(rec.code())).Observe(time.Since(start).Seconds())
}

// methodLabel is promhttp's method label: the standard methods in lower case, anything else "unknown".
func methodLabel(m string) string {
	switch m {
	case "GET", "get":
		return "get"
	case "PUT", "put":
		return "put"
	case "HEAD", "head":
		return "head"
	case "POST", "post":
		return "post"
	case "DELETE", "delete":
		return "delete"
	case "CONNECT", "connect":
		return "connect"
	case "OPTIONS", "options":
		return "options"
	case "NOTIFY", "notify":
		return "notify"
	case "TRACE", "trace":
		return "trace"
	case "PATCH", "patch":
		return "patch"
	}
	return "unknown"
}

// codeLabel is promhttp's code label, without formatting the common codes.
func codeLabel(code int) string {
	switch code {
	case http.StatusOK:
		return "200"
	case http.StatusBadRequest:
		return "400"
	case http.StatusUnauthorized:
		return "401"
	case http.StatusForbidden:
		return "403"
	case http.StatusNotFound:
		return "404"
	case http.StatusServiceUnavailable:
		return "503"
	}
	if code >= 100 && code <= 599 {
		return strconv.Itoa(code)
	}
	return "unknown"
}

// accessLog logs each request at debug level (probes excluded); never headers, so tokens stay out of logs.
// Above debug it costs nothing per request.
func accessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == "/metrics" || !log.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		log.LogAttrs(r.Context(), slog.LevelDebug, "request", slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", rec.code()), slog.Duration("duration", time.Since(start)))
	})
}

// WriteJSON writes v as JSON with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError writes a contract.Error body with the given status.
func WriteError(w http.ResponseWriter, status int, format string, args ...any) {
	WriteJSON(w, status, contract.Error{Status: status, Message: fmt.Sprintf(format, args...)})
}
