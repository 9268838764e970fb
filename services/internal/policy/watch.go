package policy

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WatchOptions configure Watch.
type WatchOptions struct {
	// Poll is how often the file's content is compared (default 10 s); Signal forces a reload (SIGHUP).
	Poll   time.Duration
	Signal <-chan struct{}
	// What names the file in logs and metric help: "policy", "configuration".
	What   string
	Logger *slog.Logger
	Now    func() time.Time
	// Metrics, if set, count the reloads (NewReloadMetrics).
	Metrics *ReloadMetrics
	// OnChange runs after a reload that put a new version in use (e.g. a cache asks for new windows).
	OnChange func()
	// Ticks, when set, replaces the ticker of Poll: each value received is one poll (tests send them, so a
	// poll is an event they can count rather than a time to sleep through).
	Ticks <-chan time.Time
}

// ReloadMetrics are gpuhub_<subsystem>_<name>_reloads_total{result} and _last_reload_success.
type ReloadMetrics struct {
	reloads *prometheus.CounterVec
	success prometheus.Gauge
}

// NewReloadMetrics registers the reload metrics of a service's file (name "policy" or "config").
func NewReloadMetrics(reg prometheus.Registerer, subsystem, name, what string) (*ReloadMetrics, error) {
	m := &ReloadMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: subsystem, Name: name + "_reloads_total",
			Help: "Reload attempts of the " + what + " file (it changed, or SIGHUP) by result: success, failure (the last good one stays in use)."},
			[]string{"result"}),
		success: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: subsystem, Name: name + "_last_reload_success",
			Help: "1 when the last load or reload of the " + what + " file succeeded, 0 when it failed (the last good one stays in use; /readyz has the errors)."}),
	}
	for _, c := range []prometheus.Collector{m.reloads, m.success} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	m.success.Set(1)
	return m, nil
}

func (m *ReloadMetrics) result(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.success.Set(1)
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
	m.success.Set(0)
}

// Watch reloads r on every Signal and whenever its file's content changes, until ctx ends. A Kubernetes
// ConfigMap update swaps a symlink under the mounted path, which no write event on the file announces, so the
// file is polled: its hash is compared every Poll, and only a new content is decoded, so a bad file is reported
// once per change, not once per poll. A reload that fails keeps the last good version and logs one line per
// problem (file:line:column: message).
func Watch[T any](ctx context.Context, r *Reloader[T], o WatchOptions) {
	if o.Poll <= 0 {
		o.Poll = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.What == "" {
		o.What = "file"
	}
	path := r.Path()
	// From the content in use, not the file now: a change between the load at start and this line is not missed.
	last := r.goodHash()
	ticks := o.Ticks
	if ticks == nil {
		t := time.NewTicker(o.Poll)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.Signal:
			last, _ = fileHash(path)
			reload(r, o, "signal")
		case <-ticks:
			h, err := fileHash(path)
			if err == nil && h == last {
				continue
			}
			if err != nil && last == ([sha256.Size]byte{}) {
				continue // still unreadable: reported when it became so
			}
			last = h
			reload(r, o, "file changed")
		}
	}
}

func reload[T any](r *Reloader[T], o WatchOptions, why string) {
	changed, err := r.Reload(o.Now())
	o.Metrics.result(err == nil)
	if err != nil {
		loaded := r.Status().Loaded.UTC().Format(time.RFC3339)
		msg := o.What + " reload failed: keeping the last good one"
		var es Errors
		if errors.As(err, &es) {
			for _, e := range es {
				o.Logger.Error(msg, "why", why, "error", e.Error(), "loaded", loaded)
			}
		} else {
			o.Logger.Error(msg, "why", why, "err", err, "loaded", loaded)
		}
		return
	}
	if !changed {
		o.Logger.Info(o.What+" reread: unchanged", "why", why, "path", r.Path())
		return
	}
	o.Logger.Info(o.What+" reloaded", "why", why, "path", r.Path())
	if o.OnChange != nil {
		o.OnChange()
	}
}

// fileHash is the content hash of path; the zero hash with the error when it cannot be read.
func fileHash(path string) ([sha256.Size]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(data), nil
}
