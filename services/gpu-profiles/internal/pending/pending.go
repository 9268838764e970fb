// Package pending explains to a Hub user why their GPU server waits: it writes a core/v1 Event on the Pending
// pod (KubeSpawner relays every Event of the pod to the progress page), in plain words, with what is free
// now, and ends a spawn that nothing can ever satisfy through the Hub. Only the active replica writes.
package pending

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// EventReason and EventComponent mark the Events this package writes.
const (
	EventReason    = "GPUhubPending"
	EventComponent = "gpu-profiles"
)

// Defaults.
const (
	DefaultEndAfter      = 60 * time.Second
	DefaultRecheck       = 5 * time.Second
	DefaultMinChange     = 30 * time.Second
	DefaultRepeat        = 60 * time.Second
	DefaultPrepareGrace  = 10 * time.Second
	DefaultUnplacedGrace = 10 * time.Second
	DefaultWriteTimeout  = 5 * time.Second
	DefaultEndNotice     = 3 * time.Second
	// maxStopAttempts bounds the Hub calls for one spawn: a Hub that keeps refusing is not asked forever.
	maxStopAttempts = 5
)

// Hub stops a server; *hubapi.Client satisfies it (DELETE /users/{name}/server[s/{server}], scope
// delete:servers; it interrupts a pending spawn).
type Hub interface {
	StopServer(ctx context.Context, user, server string, remove bool) (hubapi.StopResult, error)
}

// Options configure an Explainer. Client and Capacity are required.
type Options struct {
	// Client writes the Events (RBAC: events create and patch in the user pods' namespace).
	Client   kubernetes.Interface
	Capacity Capacity
	// Hub ends hopeless spawns; nil never ends one (the Events still say why it waits).
	Hub Hub
	// IsLeader reports whether this replica acts (leader.Elector.IsLeader); nil: always.
	IsLeader func() bool
	// Synced reports whether the capacity behind Capacity is complete (the inventory synced and healthy);
	// nil: always. Nothing is explained from a partial view: it would call every kind missing.
	Synced func() bool
	Logger *slog.Logger
	// Registerer takes the metrics (nil: not registered); MetricsSubsystem names them
	// gpuhub_<subsystem>_pending_* (default "profiles").
	Registerer       prometheus.Registerer
	MetricsSubsystem string
	Now              func() time.Time
	// EndAfter is how long a spawn stays hopeless before it is ended; 0 never ends one. The service's flag
	// defaults to DefaultEndAfter.
	EndAfter time.Duration
	// EndNotice is how long the Event saying that the spawn ends precedes the Hub call: the Hub stops relaying
	// progress once the spawn is cancelled, and KubeSpawner polls its Events every second.
	EndNotice time.Duration
	// Recheck is how often every Pending pod is looked at again (capacity changes without a pod event).
	Recheck time.Duration
	// MinChange is the least time between two Events of one pod with the same reason and other words (counts,
	// what else is free); a new reason is written at once.
	MinChange time.Duration
	// Repeat is how often an unchanged explanation's count and lastTimestamp are refreshed.
	Repeat time.Duration
	// PrepareGrace is how long a bound pod may be starting before it is explained (a quick start shows
	// nothing extra); UnplacedGrace how long a pod may wait for a scheduler's first verdict.
	PrepareGrace, UnplacedGrace time.Duration
	// WriteTimeout bounds each API call.
	WriteTimeout time.Duration
	// Host is this replica's name, written as the Events' source host (optional).
	Host string
	// MaxFree is how many other free kinds a message names (default 4).
	MaxFree int
}

// Explainer keeps the Pending GPU pods of Hub users from the inventory's pod events and explains them.
type Explainer struct {
	client   kubernetes.Interface
	capacity Capacity
	hub      Hub
	isLeader func() bool
	synced   func() bool
	log      *slog.Logger
	now      func() time.Time
	cfg      explainConfig
	recheck  time.Duration
	minChg   time.Duration
	repeat   time.Duration
	timeout  time.Duration
	notice   time.Duration
	host     string
	metrics  *metrics

	mu     sync.Mutex
	pods   map[string]inventory.Pod // namespace/name -> Pending GPU pod of a Hub user
	dirty  map[string]struct{}
	notify chan struct{}

	// work serialises the passes; states belong to the pass.
	work   sync.Mutex
	states map[string]*podState
}

// podState is what was written for one pod.
type podState struct {
	uid       string
	key       string // Explanation.key of the current Event
	message   string
	eventName string
	count     int32
	created   time.Time // the current Event's creation
	refreshed time.Time // its last count/lastTimestamp update
	// hopelessSince is when the pod was first found hopeless in the current run of hopeless verdicts.
	hopelessSince time.Time
	endWritten    time.Time // when the Event that the spawn ends was written (zero: not yet)
	stopAttempts  int
	ended         bool
}

// New checks opts and builds an Explainer; register PodHandler with the inventory and call Run.
func New(opts Options) (*Explainer, error) {
	if opts.Client == nil || opts.Capacity == nil {
		return nil, errors.New("pending: Client and Capacity are required")
	}
	e := &Explainer{
		client: opts.Client, capacity: opts.Capacity, hub: opts.Hub, isLeader: opts.IsLeader, synced: opts.Synced,
		log: opts.Logger, now: opts.Now, recheck: opts.Recheck, minChg: opts.MinChange, repeat: opts.Repeat,
		timeout: opts.WriteTimeout, notice: opts.EndNotice, host: opts.Host,
		cfg: explainConfig{endAfter: opts.EndAfter, canEnd: opts.Hub != nil, prepareGrace: opts.PrepareGrace,
			unplacedGrace: opts.UnplacedGrace, maxFree: opts.MaxFree},
		pods: map[string]inventory.Pod{}, dirty: map[string]struct{}{}, notify: make(chan struct{}, 1),
		states: map[string]*podState{},
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.isLeader == nil {
		e.isLeader = func() bool { return true }
	}
	if e.synced == nil {
		e.synced = func() bool { return true }
	}
	defaultTo(&e.recheck, DefaultRecheck)
	defaultTo(&e.minChg, DefaultMinChange)
	defaultTo(&e.repeat, DefaultRepeat)
	defaultTo(&e.timeout, DefaultWriteTimeout)
	defaultTo(&e.notice, DefaultEndNotice)
	defaultTo(&e.cfg.prepareGrace, DefaultPrepareGrace)
	defaultTo(&e.cfg.unplacedGrace, DefaultUnplacedGrace)
	if e.cfg.endAfter < 0 {
		e.cfg.endAfter = 0
	}
	if e.cfg.maxFree <= 0 {
		e.cfg.maxFree = 4
	}
	subsystem := opts.MetricsSubsystem
	if subsystem == "" {
		subsystem = "profiles"
	}
	e.metrics = newMetrics(subsystem, e.pendingCount)
	if opts.Registerer != nil {
		if err := e.metrics.register(opts.Registerer); err != nil {
			return nil, fmt.Errorf("pending: register metrics: %w", err)
		}
	}
	return e, nil
}

func defaultTo(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// PodHandler is the pod event handler to register with inventory.AddHandlers: it keeps the Pending GPU pods
// of Hub users and wakes Run for each change (a pod becoming Unschedulable is explained at once).
func (e *Explainer) PodHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.observe(obj, false) },
		UpdateFunc: func(_, obj any) { e.observe(obj, false) },
		DeleteFunc: func(obj any) { e.observe(obj, true) },
	}
}

func (e *Explainer) observe(obj any, gone bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, gone = d.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	p, gpuPod := inventory.PodFrom(pod)
	keep := !gone && gpuPod && p.User != "" && p.Phase == corev1.PodPending && !p.Terminating
	e.mu.Lock()
	_, had := e.pods[key]
	if keep {
		e.pods[key] = p
	} else {
		delete(e.pods, key)
	}
	if keep || had {
		e.dirty[key] = struct{}{}
	}
	e.mu.Unlock()
	if keep || had {
		select {
		case e.notify <- struct{}{}:
		default:
		}
	}
}

func (e *Explainer) pendingCount() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return float64(len(e.pods))
}

// Run explains pods as their events arrive and every Recheck until ctx ends.
func (e *Explainer) Run(ctx context.Context) error {
	t := time.NewTicker(e.recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.notify:
			e.pass(ctx, e.takeDirty())
		case <-t.C:
			e.Check(ctx)
		}
	}
}

// Check looks at every Pending pod once (Run calls it every Recheck; tests call it after moving the clock).
func (e *Explainer) Check(ctx context.Context) {
	e.takeDirty()
	e.pass(ctx, nil)
}

func (e *Explainer) takeDirty() map[string]struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.dirty
	e.dirty = map[string]struct{}{}
	return d
}

// pass explains the pods in only (nil: all of them).
func (e *Explainer) pass(ctx context.Context, only map[string]struct{}) {
	e.work.Lock()
	defer e.work.Unlock()
	e.mu.Lock()
	pods := make([]inventory.Pod, 0, len(e.pods))
	for k, p := range e.pods {
		if only == nil {
			pods = append(pods, p)
		} else if _, ok := only[k]; ok {
			pods = append(pods, p)
		}
	}
	e.mu.Unlock()
	// Forget the pods that are gone or no longer Pending.
	for k := range e.states {
		if only != nil {
			if _, ok := only[k]; !ok {
				continue
			}
		}
		if !e.has(k) {
			delete(e.states, k)
		}
	}
	if !e.isLeader() || !e.synced() {
		// A gap (another replica leads, or the data is not complete): forget every countdown, so that acting
		// again starts with a fresh warning and a full EndAfter, never with a stop decided before the gap.
		for _, st := range e.states {
			st.hopelessSince, st.endWritten = time.Time{}, time.Time{}
		}
		return
	}
	for _, p := range pods {
		if ctx.Err() != nil {
			return
		}
		e.explainPod(ctx, p)
	}
}

// stillUnplaced reports whether the pod as the informer last saw it is still p, unbound, Pending and not
// being deleted.
func (e *Explainer) stillUnplaced(p inventory.Pod) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	cur, ok := e.pods[p.Namespace+"/"+p.Name]
	return ok && cur.UID == p.UID && cur.Node == "" && cur.Phase == corev1.PodPending && !cur.Terminating
}

func (e *Explainer) has(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.pods[key]
	return ok
}

func (e *Explainer) explainPod(ctx context.Context, p inventory.Pod) {
	key := p.Namespace + "/" + p.Name
	st := e.states[key]
	if st == nil || st.uid != p.UID {
		st = &podState{uid: p.UID}
		e.states[key] = st
	}
	if st.ended {
		return
	}
	now := e.now()
	x, ok := explain(p, e.capacity, now, st.hopelessSince, e.cfg)
	if !ok {
		st.hopelessSince = time.Time{}
		return
	}
	if !x.Hopeless {
		st.hopelessSince = time.Time{}
	} else if st.hopelessSince.IsZero() {
		st.hopelessSince = now
	}
	log := e.log.With("user", p.User, "server", p.Server, "pod", key, "reason", x.Reason)

	if x.Hopeless && e.cfg.endAfter > 0 && e.hub != nil && now.Sub(st.hopelessSince) >= e.cfg.endAfter {
		e.end(ctx, p, st, x, log)
		return
	}

	msg := x.Message()
	switch {
	case st.eventName == "" || x.key() != st.key:
		// A new explanation: at once.
	case msg != st.message && now.Sub(st.created) >= e.minChg:
		// Same reason, other words (counts, what else is free): at most every MinChange.
	case now.Sub(st.refreshed) >= e.repeat:
		e.refresh(ctx, p, st, now, log)
		return
	default:
		return
	}
	name, err := e.write(ctx, p, x.Reason, eventType(x.Warning), msg, now)
	if err != nil {
		log.Warn("pending: cannot write the explanation Event; retrying at the next check", "err", err)
		return
	}
	*st = podState{uid: st.uid, key: x.key(), message: msg, eventName: name, count: 1, created: now, refreshed: now,
		hopelessSince: st.hopelessSince}
	log.Info("pending: explained", "event", name, "type", eventType(x.Warning))
}

func eventType(warning bool) string {
	if warning {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// end writes the Warning that the spawn ends, then, EndNotice later (so that KubeSpawner relays it before the
// Hub ends the progress stream), stops the server through the Hub.
func (e *Explainer) end(ctx context.Context, p inventory.Pod, st *podState, x Explanation, log *slog.Logger) {
	now := e.now()
	if st.endWritten.IsZero() {
		if _, err := e.write(ctx, p, ReasonEnded, corev1.EventTypeWarning, endMessage(x), now); err != nil {
			// The spawn still ends: the user sees the cancellation, and the earlier Warning said why.
			log.Warn("pending: cannot write the Event that the spawn ends", "err", err)
		}
		st.endWritten = now
	}
	if now.Sub(st.endWritten) < e.notice {
		return
	}
	// Seconds have passed since the decision: stop only if this replica still leads and the pod is still the
	// same one, unbound and Pending (a server that has started in between must never be stopped).
	if !e.isLeader() || !e.stillUnplaced(p) {
		st.hopelessSince, st.endWritten = time.Time{}, time.Time{}
		return
	}
	st.stopAttempts++
	cctx, cancel := context.WithTimeout(ctx, 2*e.timeout)
	res, err := e.hub.StopServer(cctx, p.User, p.Server, false)
	cancel()
	if err != nil {
		e.metrics.errors.WithLabelValues("hub_stop").Inc()
		if st.stopAttempts >= maxStopAttempts {
			st.ended = true
			log.Error("pending: the Hub did not stop the hopeless spawn; giving up", "attempts", st.stopAttempts, "err", err)
			return
		}
		log.Warn("pending: the Hub did not stop the hopeless spawn; retrying at the next check", "err", err)
		return
	}
	st.ended = true
	e.metrics.ended.Inc()
	log.Info("pending: ended a spawn that cannot start", "hopeless_for", now.Sub(st.hopelessSince).Round(time.Second).String(),
		"still_stopping", res.Pending)
}

// write creates an Event on the pod. KubeSpawner sorts a pod's Events by lastTimestamp (else eventTime) and
// prints "<lastTimestamp> [<type>] <message>" for each Event it has not shown yet: lastTimestamp must be set.
func (e *Explainer) write(ctx context.Context, p inventory.Pod, reason, typ, msg string, now time.Time) (string, error) {
	t := metav1.NewTime(now)
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", p.Name, now.UnixNano()), Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name,
			UID: types.UID(p.UID)},
		Reason: EventReason, Message: msg, Type: typ, Count: 1, FirstTimestamp: t, LastTimestamp: t,
		Source: corev1.EventSource{Component: EventComponent, Host: e.host},
	}
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	got, err := e.client.CoreV1().Events(p.Namespace).Create(cctx, ev, metav1.CreateOptions{})
	if err != nil {
		e.metrics.errors.WithLabelValues("event_create").Inc()
		return "", fmt.Errorf("create event on pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	e.metrics.explanations.WithLabelValues(reason).Inc()
	return got.Name, nil
}

// refresh bumps the current Event's count and lastTimestamp (kubectl shows it is still true; KubeSpawner
// does not print it again).
func (e *Explainer) refresh(ctx context.Context, p inventory.Pod, st *podState, now time.Time, log *slog.Logger) {
	body, err := json.Marshal(map[string]any{"count": st.count + 1, "lastTimestamp": metav1.NewTime(now)})
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	_, err = e.client.CoreV1().Events(p.Namespace).Patch(cctx, st.eventName, types.MergePatchType, body, metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// Expired (the API server's event TTL): the next check writes it anew.
		st.eventName = ""
	case err != nil:
		e.metrics.errors.WithLabelValues("event_patch").Inc()
		log.Warn("pending: cannot refresh the explanation Event", "event", st.eventName, "err", err)
	default:
		st.count++
		st.refreshed = now
	}
}
