package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/prometheus/client_golang/prometheus"
)

// Informer health. A reflector whose watch fails keeps serving its last cache, so a broken watch is invisible
// unless someone records it. The informer's watch error handler is not enough: the reflector retries a watch
// that fails with "connection refused" (the kube-apiserver restarting) or 429 by itself, with backoff, without
// ever calling it. So the clientset the informers use is wrapped (observedClient): every List and Watch call
// reports its outcome, and every event a watch delivers counts as progress. The error handler still records
// what reaches it that the calls did not already report, and keeps client-go's logging.

// InformerHealth is one informer's list/watch state.
type InformerHealth struct {
	Name string
	// LastSync is the last time a list or watch call succeeded or a watch delivered an event (zero: never).
	LastSync time.Time
	// FailingSince is when the current run of failed calls began; zero while the last call worked.
	FailingSince time.Time
	// Failures counts the calls failed in the current run; Errors every failed call since the start.
	Failures  int
	Errors    uint64
	LastError string
}

type informerHealth struct {
	now    func() time.Time
	errors prometheus.Counter

	mu      sync.Mutex
	state   InformerHealth
	lastErr error
}

// observe records the outcome of one list or watch call.
func (h *informerHealth) observe(err error) {
	if err != nil && h.errors != nil {
		h.errors.Inc()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if err == nil {
		h.state.LastSync, h.state.FailingSince, h.state.Failures = now, time.Time{}, 0
		return
	}
	if h.state.FailingSince.IsZero() {
		h.state.FailingSince = now
	}
	h.state.Failures++
	h.state.Errors++
	h.state.LastError = err.Error()
	h.lastErr = err
}

// progress records an event delivered by a watch. It proves the watch works but does not end a run of
// failures: an event may have been buffered before the failure began.
func (h *informerHealth) progress() {
	h.mu.Lock()
	h.state.LastSync = h.now()
	h.mu.Unlock()
}

// watchErrorHandler records errors that reach the reflector's handler without having been reported by a call
// (a failed list or watch call reaches both), then logs as client-go does.
func (h *informerHealth) watchErrorHandler(ctx context.Context, r *cache.Reflector, err error) {
	h.mu.Lock()
	seen := h.lastErr != nil && errors.Is(err, h.lastErr)
	h.mu.Unlock()
	if !seen {
		h.observe(err)
	}
	cache.DefaultWatchErrorHandler(ctx, r, err)
}

func (h *informerHealth) snapshot() InformerHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// Health returns the list/watch state of each informer (pods, nodes, agents).
func (inv *Inventory) Health() []InformerHealth {
	out := make([]InformerHealth, 0, len(inv.health))
	for _, h := range inv.health {
		out = append(out, h.snapshot())
	}
	return out
}

// Healthy is a readiness check: it fails while an informer's list/watch calls have been failing for longer than
// Options.UnhealthyAfter, naming the informer, since when, and the last error.
func (inv *Inventory) Healthy(context.Context) error {
	now := inv.now()
	var bad []string
	for _, h := range inv.Health() {
		if h.FailingSince.IsZero() {
			continue
		}
		if d := now.Sub(h.FailingSince); d > inv.unhealthyAfter {
			bad = append(bad, fmt.Sprintf("%s: list/watch failing since %s (%s, %d failed calls; last successful sync %s): %s",
				h.Name, h.FailingSince.UTC().Format(time.RFC3339), d.Round(time.Second), h.Failures, syncedAt(h.LastSync), h.LastError))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

func syncedAt(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// Metrics returns the collector of gpuhub_<subsystem>_informer_watch_errors_total and
// gpuhub_<subsystem>_informer_last_sync_timestamp_seconds, by informer (Options.MetricsSubsystem); register it
// once.
func (inv *Inventory) Metrics() prometheus.Collector { return inv.metrics }

// healthMetrics are gpuhub_<subsystem>_informer_*.
type healthMetrics struct {
	inv      *Inventory
	errors   *prometheus.CounterVec
	lastSync *prometheus.Desc
}

func newHealthMetrics(inv *Inventory, subsystem string) *healthMetrics {
	return &healthMetrics{
		inv: inv,
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: subsystem, Name: "informer_watch_errors_total",
			Help: "Failed list and watch calls of the informer (the kube-apiserver unreachable, refused, timing out)."}, []string{"informer"}),
		lastSync: prometheus.NewDesc(prometheus.BuildFQName("gpuhub", subsystem, "informer_last_sync_timestamp_seconds"),
			"Last time the informer's list or watch call succeeded or its watch delivered an event (unix seconds; 0: never).", []string{"informer"}, nil),
	}
}

func (m *healthMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.errors.Describe(ch)
	ch <- m.lastSync
}

func (m *healthMetrics) Collect(ch chan<- prometheus.Metric) {
	m.errors.Collect(ch)
	for _, h := range m.inv.Health() {
		var ts float64
		if !h.LastSync.IsZero() {
			ts = float64(h.LastSync.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(m.lastSync, prometheus.GaugeValue, ts, h.Name)
	}
}

// observedClient reports the outcome of the informers' pod and node List and Watch calls to their health.
type observedClient struct {
	kubernetes.Interface
	pods, nodes *informerHealth // nil: not observed
}

func (c observedClient) CoreV1() corev1client.CoreV1Interface {
	return observedCoreV1{CoreV1Interface: c.Interface.CoreV1(), c: c}
}

// IsWatchListSemanticsUnSupported passes on what the wrapped clientset says (the fake says true), which the
// reflector asks before streaming lists.
func (c observedClient) IsWatchListSemanticsUnSupported() bool {
	u, ok := c.Interface.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

type observedCoreV1 struct {
	corev1client.CoreV1Interface
	c observedClient
}

func (v observedCoreV1) Pods(namespace string) corev1client.PodInterface {
	p := v.CoreV1Interface.Pods(namespace)
	if v.c.pods == nil {
		return p
	}
	return observedPods{PodInterface: p, h: v.c.pods}
}

func (v observedCoreV1) Nodes() corev1client.NodeInterface {
	n := v.CoreV1Interface.Nodes()
	if v.c.nodes == nil {
		return n
	}
	return observedNodes{NodeInterface: n, h: v.c.nodes}
}

type observedPods struct {
	corev1client.PodInterface
	h *informerHealth
}

func (p observedPods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	l, err := p.PodInterface.List(ctx, opts)
	p.h.observe(err)
	return l, err
}

func (p observedPods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return observeWatch(p.h)(p.PodInterface.Watch(ctx, opts))
}

type observedNodes struct {
	corev1client.NodeInterface
	h *informerHealth
}

func (n observedNodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	l, err := n.NodeInterface.List(ctx, opts)
	n.h.observe(err)
	return l, err
}

func (n observedNodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return observeWatch(n.h)(n.NodeInterface.Watch(ctx, opts))
}

func observeWatch(h *informerHealth) func(watch.Interface, error) (watch.Interface, error) {
	return func(w watch.Interface, err error) (watch.Interface, error) {
		h.observe(err)
		if err != nil {
			return nil, err
		}
		ow := &observedWatch{Interface: w, h: h, out: make(chan watch.Event), stop: make(chan struct{})}
		go ow.loop()
		return ow, nil
	}
}

// observedWatch passes a watch's events on, recording each as progress (bookmarks included).
type observedWatch struct {
	watch.Interface
	h    *informerHealth
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *observedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *observedWatch) Stop() {
	w.once.Do(func() { close(w.stop) })
	w.Interface.Stop()
}

func (w *observedWatch) loop() {
	defer close(w.out)
	for ev := range w.Interface.ResultChan() {
		if ev.Type != watch.Error {
			w.h.progress()
		}
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
}
