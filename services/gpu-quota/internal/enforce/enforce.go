// Package enforce is gpu-quota's loop while servers run: every interval it assesses each user against their
// policy (quota.Assess) and, for a user over a budget or a limit, first puts a notice on the user's GPU pods
// (services/internal/notice; the usage API shows it in the panel), then, once the notice has been on a pod for
// the whole grace period, stops the servers through the Hub API. A user back within their limits gets the
// notice withdrawn. Only the leader runs it (the service wires Run under its lease).
//
// What the loop knows between runs is on the pods: a notice's createdAt is when the user was first seen over,
// so the deadline survives a restart and a change of leader. In memory are only the stops the Hub answered
// 202 to (still stopping: not sent again) and the backoff of stops that failed.
package enforce

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/notice"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// Service is the Hub service that owns the notices (gpuhub.io/notice-gpu-quota) and the decisions.
const Service = "gpu-quota"

// View is one user as the service knows them from memory: policy, usage, and GPU pods.
type View struct {
	Name      string
	Groups    []string
	Effective quota.Effective
	Usage     quota.Usage
	// Pods are the user's active GPU pods: pending or running, not finished nor terminating.
	Pods []inventory.Pod
}

// Source lists every user who has a GPU pod. An error means the data cannot be trusted right now (informers
// not synced, usage stale): the loop then does nothing at all.
type Source interface {
	Views() ([]View, error)
}

// Nodes gives the node labels that say what kind of GPU a pod holds (*inventory.Inventory).
type Nodes interface {
	Nodes() (map[string]inventory.Node, error)
}

// Stopper stops a server through the Hub API (*hubapi.Client); Pending is the Hub's 202.
type Stopper interface {
	StopServer(ctx context.Context, user, server string, remove bool) (hubapi.StopResult, error)
}

// What the service wires in satisfies them as is.
var (
	_ Stopper = (*hubapi.Client)(nil)
	_ Nodes   = (*inventory.Inventory)(nil)
)

// Options configure an Enforcer. Source, Nodes, Stopper, Client and Decisions are required.
type Options struct {
	Source    Source
	Nodes     Nodes
	Stopper   Stopper
	Client    kubernetes.Interface // patches the notice annotations (RBAC: pods patch)
	Decisions *decision.Log
	// Grace is the policy's grace period (quota.Policy.GracePeriod), read every run so a reload applies.
	Grace func() time.Duration
	// Interval between runs (default 30s); also the first backoff of a stop that failed.
	Interval time.Duration
	// PendingTimeout is how long a stop the Hub accepted (202 pending, or 204 while the pod is still going) is
	// not sent again (default 5m).
	PendingTimeout time.Duration
	// MaxBackoff caps the wait before a failed stop is tried again (default 5m).
	MaxBackoff time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
	// Registerer gets the loop's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Behind is the work a run's pass over the users steps aside for (admissions; yield.Foreground).
	Behind *yield.Foreground
}

// Enforcer is the running-servers loop. Its methods are not safe for concurrent use: one loop runs them.
type Enforcer struct {
	o Options
	m metrics

	running sync.Mutex // Run holds it: one loop at a time

	pending map[serverKey]time.Time // stops sent (204 or 202), when: not sent again for PendingTimeout
	retry   map[serverKey]retry     // stops that failed
	written map[string]written      // pod UID -> the notice last written there
}

type serverKey struct{ user, server string }

// written is a notice this process wrote: patched again only when its key changes, and its createdAt kept
// while the inventory has not seen it yet.
type written struct {
	key     string
	created time.Time
}

type retry struct {
	fails int
	next  time.Time
}

type metrics struct {
	runs        *prometheus.CounterVec
	stopped     *prometheus.CounterVec
	pending     prometheus.Gauge
	lastSuccess prometheus.Gauge
	duration    prometheus.Gauge
}

// Results of a run (label of gpuhub_quota_enforce_runs_total).
const (
	ResultOK          = "ok"          // every action needed was taken
	ResultPartial     = "partial"     // some patch or stop failed; tried again next run
	ResultUnavailable = "unavailable" // no trustworthy data: nothing done
)

// New checks the options and registers the metrics.
func New(o Options) (*Enforcer, error) {
	if o.Source == nil || o.Nodes == nil || o.Stopper == nil || o.Client == nil || o.Decisions == nil {
		return nil, errors.New("enforce: Source, Nodes, Stopper, Client and Decisions are required")
	}
	if o.Grace == nil {
		o.Grace = func() time.Duration { return quota.DefaultGrace }
	}
	if o.Interval <= 0 {
		o.Interval = 30 * time.Second
	}
	if o.PendingTimeout <= 0 {
		o.PendingTimeout = 5 * time.Minute
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	const ns, sub = "gpuhub", "quota"
	m := metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "enforce_runs_total",
			Help: "Runs of the enforcement loop by result: ok, partial (a patch or stop failed; retried), unavailable (no trustworthy data: nothing done)."},
			[]string{"result"}),
		stopped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "servers_stopped_total",
			Help: "GPU servers the enforcement loop asked the Hub to stop (204 or 202), by reason."}, []string{"reason"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "notices_pending",
			Help: "Users with a pending gpu-quota notice: over a budget or limit, their servers stop at its deadline."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "enforce_last_run_success",
			Help: "1 if the enforcement loop's last run took every action it needed, else 0."}),
		duration: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "enforce_run_duration_seconds",
			Help: "Duration of the enforcement loop's last run."}),
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{m.runs, m.stopped, m.pending, m.lastSuccess, m.duration} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register enforce metrics: %w", err)
			}
		}
	}
	for _, r := range []string{ResultOK, ResultPartial, ResultUnavailable} {
		m.runs.WithLabelValues(r)
	}
	return &Enforcer{o: o, m: m, pending: map[serverKey]time.Time{}, retry: map[serverKey]retry{}, written: map[string]written{}}, nil
}

// Run runs the loop now and every Interval until ctx is done. Call it only while holding the leader lease.
func (e *Enforcer) Run(ctx context.Context) {
	// client-go starts each leadership's callback in a goroutine without waiting for the last one to end, and a
	// replica can win the lease straight back: one loop at a time over the enforcer's state.
	e.running.Lock()
	defer e.running.Unlock()
	t := time.NewTicker(e.o.Interval)
	defer t.Stop()
	for {
		_ = e.Once(ctx) // logged and counted inside
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once is one run: it returns the run's result (ResultOK, ResultPartial, ResultUnavailable) as an error when
// not ok, after logging and counting it.
func (e *Enforcer) Once(ctx context.Context) error {
	start := e.o.Now()
	result, err := e.once(ctx)
	e.m.runs.WithLabelValues(result).Inc()
	e.m.duration.Set(e.o.Now().Sub(start).Seconds())
	if result == ResultOK {
		e.m.lastSuccess.Set(1)
		return nil
	}
	e.m.lastSuccess.Set(0)
	e.o.Logger.Warn("enforce run incomplete", "result", result, "err", err)
	return fmt.Errorf("enforce: %s: %w", result, err)
}

func (e *Enforcer) once(ctx context.Context) (string, error) {
	views, err := e.o.Source.Views()
	if err != nil {
		return ResultUnavailable, fmt.Errorf("user views: %w", err)
	}
	nodes, err := e.o.Nodes.Nodes()
	if err != nil {
		return ResultUnavailable, fmt.Errorf("nodes: %w", err)
	}
	now, grace := e.o.Now(), e.o.Grace()
	seenServers, seenPods := map[serverKey]bool{}, map[string]bool{}
	var errs []error
	noticed := 0
	pace := yield.Pass{Behind: e.o.Behind}
	for _, v := range views {
		// Let admissions run between users; it may wait for them, so the context is checked after it.
		pace.Item()
		if ctx.Err() != nil { // leadership lost: act no further
			return ResultPartial, ctx.Err()
		}
		u := sortOut(v, nodes)
		for _, s := range u.servers {
			seenServers[serverKey{v.Name, s.name}] = true
			for _, p := range s.pods {
				seenPods[p.UID] = true
			}
		}
		if len(u.stop) > 0 {
			noticed++
		}
		errs = append(errs, e.act(ctx, v, u, now, grace)...)
	}
	// Forget what concerns servers and pods that are gone.
	for k := range e.pending {
		if !seenServers[k] {
			delete(e.pending, k)
		}
	}
	for k := range e.retry {
		if !seenServers[k] {
			delete(e.retry, k)
		}
	}
	for uid := range e.written {
		if !seenPods[uid] {
			delete(e.written, uid)
		}
	}
	e.m.pending.Set(float64(noticed))
	if len(errs) > 0 {
		return ResultPartial, errors.Join(errs...)
	}
	return ResultOK, nil
}

// user is one View sorted into servers, with what the loop works out for it.
type user struct {
	servers []*server // every server with a pod, newest first
	live    []*server // those with a pod that is not terminating
	over    []quota.Check
	stop    []*server // the servers to stop, newest first; none when the user is within their limits
	// unknown is set when a budget window's usage cannot be read: within the limits that can be checked is
	// then not known to be within all of them, so a notice is not withdrawn.
	unknown bool
}

type server struct {
	name     string
	pods     []inventory.Pod
	allocs   []gpu.Allocation // of its pods that are not terminating
	started  time.Time        // latest start of its pods; zero while one is not running yet (newest)
	live     bool
	selected bool
}

func sortOut(v View, nodes map[string]inventory.Node) user {
	by := map[string]*server{}
	var u user
	for _, p := range v.Pods {
		if p.User != v.Name { // not spawned by the Hub for this user: never touched
			continue
		}
		s := by[p.Server]
		if s == nil {
			s = &server{name: p.Server}
			by[p.Server] = s
			u.servers = append(u.servers, s)
		}
		s.pods = append(s.pods, p)
		if p.Terminating {
			continue
		}
		labels := p.NodeSelector
		if n, ok := nodes[p.Node]; ok && p.Node != "" {
			labels = n.Labels
		}
		s.allocs = append(s.allocs, gpu.Allocations(p.Resources, gpu.Node{Labels: labels})...)
		s.live = true
	}
	for _, s := range u.servers {
		s.started = started(s.pods)
	}
	slices.SortFunc(u.servers, newestFirst)
	for _, s := range u.servers {
		if s.live {
			u.live = append(u.live, s)
		}
	}
	if v.Effective.Exempt.Value {
		return u
	}
	u.over = quota.Assess(v.Effective, v.Usage)
	u.stop = choose(u.over, u.live)
	for _, w := range v.Effective.Windows() {
		if _, ok := v.Usage.GPUHours[w]; !ok {
			u.unknown = true
		}
	}
	return u
}

// started is when a server's pods started running, the latest of them; zero while one of them is not running
// yet (the newest of all).
func started(pods []inventory.Pod) time.Time {
	var t time.Time
	for _, p := range pods {
		if p.Terminating {
			continue
		}
		if !p.Allocated() || p.Started.IsZero() {
			return time.Time{}
		}
		t = later(t, p.Started)
	}
	return t
}

// newestFirst orders servers by start, newest first; a server not running yet is the newest; then by name.
func newestFirst(a, b *server) int {
	switch {
	case a.started.IsZero() != b.started.IsZero():
		if a.started.IsZero() {
			return -1
		}
		return 1
	case !a.started.Equal(b.started):
		return b.started.Compare(a.started)
	}
	return cmp.Compare(b.name, a.name)
}

// choose picks the servers to stop for what the user is over: for a budget, every GPU server; for a kind no
// longer allowed, every server holding it; for a concurrent limit, only as many as it takes, newest first.
// The counts are of the pods that are not terminating (those are already going), so a user whose excess is
// only in terminating pods has nothing to stop.
func choose(over []quota.Check, live []*server) []*server {
	for _, s := range live {
		s.selected = false
	}
	for _, c := range over {
		switch c.Reason {
		case quota.ReasonBudgetExhausted:
			for _, s := range live {
				s.selected = true
			}
		case quota.ReasonKindNotAllowed:
			for _, s := range live {
				if share(s, c.Kind) > 0 {
					s.selected = true
				}
			}
		case quota.ReasonMaxGPUs, quota.ReasonMaxGPUsPerKind:
			kept := 0.0
			for _, s := range live {
				if !s.selected {
					kept += share(s, c.Kind)
				}
			}
			for _, s := range live { // newest first
				if kept <= c.Limit+1e-9 {
					break
				}
				if sh := share(s, c.Kind); !s.selected && sh > 0 {
					s.selected = true
					kept -= sh
				}
			}
		case quota.ReasonMaxServers:
			kept := 0
			for _, s := range live {
				if !s.selected {
					kept++
				}
			}
			for _, s := range live {
				if float64(kept) <= c.Limit {
					break
				}
				if !s.selected {
					s.selected = true
					kept--
				}
			}
		}
	}
	var out []*server
	for _, s := range live {
		if s.selected {
			out = append(out, s)
		}
	}
	return out
}

// share is what s holds of kind k in GPU-equivalents (every kind when k is "").
func share(s *server, k gpu.Kind) float64 {
	total := 0.0
	for _, a := range s.allocs {
		if k == "" || a.Kind == k {
			total += a.Share()
		}
	}
	return total
}

// act brings one user's pods in line: notices set or withdrawn, servers past their deadline stopped.
func (e *Enforcer) act(ctx context.Context, v View, u user, now time.Time, grace time.Duration) []error {
	if len(u.stop) == 0 {
		reason := "within_limits"
		switch {
		case v.Effective.Exempt.Value:
			reason = string(quota.ReasonExempt)
		case u.unknown:
			return nil // usage unreadable: neither stopped nor told it is over
		}
		return e.clear(ctx, v, u, reason, now)
	}
	// The user's deadline: first seen over (the oldest notice still on a pod) plus the grace, never earlier
	// than a deadline already announced (a shorter grace after a reload does not bring it forward).
	var first, announced time.Time
	for _, s := range u.live {
		for _, p := range s.pods {
			if n, ok := ours(p); ok && !p.Terminating {
				if first.IsZero() || n.CreatedAt.Before(first) {
					first = n.CreatedAt
				}
				if announced.IsZero() || n.Deadline.Before(announced) {
					announced = n.Deadline
				}
			}
		}
	}
	if first.IsZero() {
		first = now
	}
	deadline := later(first.Add(grace), announced)
	names := make([]string, len(u.stop))
	for i, s := range u.stop {
		names[i] = s.name
	}
	head := u.over[0]
	var errs []error
	for _, s := range u.live {
		noticedNow := ""
		ready := true // every live pod of s has had the notice on it for the whole grace, and its deadline passed
		for _, p := range s.pods {
			if p.Terminating {
				continue
			}
			old, had := ours(p)
			created := now
			if had {
				created = old.CreatedAt
			} else if w, ok := e.written[p.UID]; ok {
				created = w.created // written by an earlier run, not in the inventory yet
			}
			podDeadline := later(deadline, created.Add(grace))
			// A server joins the stop set later than the user's first notice when the reason grows (a limit that
			// named another server, then a budget that stops them all): it gets its own full grace from then.
			since := now
			if had && old.Stops && !old.StopsSince.IsZero() {
				since = old.StopsSince
			}
			if s.selected {
				podDeadline = later(podDeadline, since.Add(grace))
			}
			want := notice.Notice{
				Service: Service, Kind: head.NoticeKind(), Reason: string(head.Reason),
				Message:  quota.NoticeMessage(u.over, quota.Stop{Servers: names, Running: len(u.live), Deadline: podDeadline, Now: now}),
				Deadline: podDeadline.UTC(), CreatedAt: created.UTC(),
			}
			if s.selected {
				want.Stops, want.StopsSince = true, since.UTC()
			}
			key := noticeKey(want, names)
			if !had || e.written[p.UID].key != key && !sameNotice(old, want) {
				if err := notice.Set(ctx, e.o.Client, p.Namespace, p.Name, want); err != nil {
					errs = append(errs, err)
					ready = false
					continue
				}
				_, again := e.written[p.UID]
				e.written[p.UID] = written{key: key, created: created}
				changed := old.Reason != want.Reason || old.Kind != want.Kind || !old.Deadline.Equal(want.Deadline)
				if had && changed || !had && !again {
					noticedNow = want.Message
				}
			}
			if !had || !old.Stops || now.Before(old.Deadline) || now.Before(podDeadline) || now.Sub(old.CreatedAt) < grace ||
				now.Sub(old.StopsSince) < grace {
				ready = false
			}
		}
		if noticedNow != "" {
			e.o.Decisions.Record(decision.Record{Time: now, User: v.Name, Server: s.name, Action: decision.ActionNotice,
				Reason: string(head.Reason), Message: noticedNow, Numbers: numbers(head, deadline, now)})
		}
		if s.selected && ready {
			if err := e.stop(ctx, v.Name, s.name, head, now); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// stop asks the Hub to stop one server, unless it is still stopping from an earlier request (202) or waiting
// out its backoff after an error.
func (e *Enforcer) stop(ctx context.Context, userName, serverName string, head quota.Check, now time.Time) error {
	k := serverKey{userName, serverName}
	if since, ok := e.pending[k]; ok && now.Sub(since) < e.o.PendingTimeout {
		return nil
	}
	if r, ok := e.retry[k]; ok && now.Before(r.next) {
		return nil
	}
	res, err := e.o.Stopper.StopServer(ctx, userName, serverName, false)
	if err != nil {
		r := e.retry[k]
		r.fails++
		wait := min(e.o.Interval<<min(r.fails-1, 16), e.o.MaxBackoff)
		r.next = now.Add(wait)
		e.retry[k] = r
		e.o.Logger.Warn("stop server failed; retrying", "user", userName, "server", serverName, "fails", r.fails, "retry_in", wait, "err", err)
		return fmt.Errorf("stop %s/%s: %w", userName, serverName, err)
	}
	delete(e.retry, k)
	// Not sent again while the Hub stops it (202), nor while the stopped pod has not left the inventory yet.
	e.pending[k] = now
	e.m.stopped.WithLabelValues(string(head.Reason)).Inc()
	msg := "gpu-quota stopped this server: " + head.Message + "."
	nums := numbers(head, time.Time{}, now)
	if res.Pending {
		nums["pending"] = 1
	}
	e.o.Decisions.Record(decision.Record{Time: now, User: userName, Server: serverName, Action: decision.ActionStop,
		Reason: string(head.Reason), Message: msg, Numbers: nums})
	return nil
}

// clear withdraws the user's notices: they are back within their limits (or exempt now).
func (e *Enforcer) clear(ctx context.Context, v View, u user, reason string, now time.Time) []error {
	var errs []error
	for _, s := range u.live {
		cleared := ""
		for _, p := range s.pods {
			old, had := ours(p)
			if !had || p.Terminating {
				continue
			}
			if err := notice.Clear(ctx, e.o.Client, p.Namespace, p.Name, Service); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(e.written, p.UID)
			cleared = old.Reason
		}
		if cleared != "" {
			e.o.Decisions.Record(decision.Record{User: v.Name, Server: s.name, Action: decision.ActionClear, Reason: reason,
				Time: now, Message: "Notice withdrawn (" + cleared + "): back within the limits."})
		}
		delete(e.pending, serverKey{v.Name, s.name})
		delete(e.retry, serverKey{v.Name, s.name})
	}
	return errs
}

// ours is gpu-quota's notice on p, as the pod carries it.
func ours(p inventory.Pod) (notice.Notice, bool) {
	raw, ok := p.Notices[notice.Key(Service)]
	if !ok {
		return notice.Notice{}, false
	}
	ns, _ := notice.Parse(map[string]string{notice.Key(Service): raw})
	if len(ns) != 1 || ns[0].CreatedAt.IsZero() {
		return notice.Notice{}, false // not ours after all (hand-written): overwritten
	}
	return ns[0], true
}

// noticeKey is what makes a notice worth writing again: not the numbers of its message (GPU-hours used grow
// every run), but its reason, deadline and the servers it names.
func noticeKey(n notice.Notice, servers []string) string {
	return strings.Join([]string{n.Kind, n.Reason, n.Deadline.UTC().Format(time.RFC3339), n.CreatedAt.UTC().Format(time.RFC3339),
		strconv.FormatBool(n.Stops), n.StopsSince.UTC().Format(time.RFC3339), strings.Join(servers, "\x00")}, "|")
}

func sameNotice(a, b notice.Notice) bool {
	return a.Kind == b.Kind && a.Reason == b.Reason && a.Message == b.Message && a.Deadline.Equal(b.Deadline) &&
		a.CreatedAt.Equal(b.CreatedAt) && a.Snoozable == b.Snoozable && a.Stops == b.Stops && a.StopsSince.Equal(b.StopsSince)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// numbers are a check's numbers for the decision log.
func numbers(c quota.Check, deadline, now time.Time) map[string]float64 {
	n := map[string]float64{}
	switch c.Reason {
	case quota.ReasonBudgetExhausted:
		n["budget_gpu_hours"] = c.Budget
		n["used_gpu_hours"] = c.Used
		n["window_hours"] = c.Window.Hours()
	case quota.ReasonMaxServers:
		n["limit_servers"] = c.Limit
		n["servers"] = c.Held
	default:
		n["limit_gpus"] = c.Limit
		n["held_gpus"] = c.Held
	}
	if !deadline.IsZero() {
		n["deadline_in_seconds"] = deadline.Sub(now).Seconds()
	}
	return n
}
