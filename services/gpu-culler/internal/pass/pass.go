// Package pass is one gpu-culler pass over every running server: decide each one (decide.Decide on the pod's
// notice, the server's own GPU telemetry and what the Hub says of it, read only for the servers that may need an
// action), and act with bounded concurrency: set or withdraw the notice on the pod, stop through the Hub, or
// leave the server and say why. A pass that cannot read the Hub acts on nobody.
package pass

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/snooze"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/stops"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/telemetry"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// Hub is what a pass needs of the Hub (*hubapi.Client).
type Hub interface {
	Users(ctx context.Context, opts hubapi.ListUsersOptions) iter.Seq2[hubapi.User, error]
	GetUser(ctx context.Context, name string) (*hubapi.User, error)
	StopServer(ctx context.Context, user, server string, remove bool) (hubapi.StopResult, error)
}

// Pods finds servers' pods (*pods.Index).
type Pods interface {
	Pod(user, server string) (*corev1.Pod, bool)
	// Servers is the live pod of every server, by user and server.
	Servers() map[[2]string]*corev1.Pod
	Synced(ctx context.Context) error
}

// Telemetry is each GPU server's history and the usage API's state (*telemetry.Sampler).
type Telemetry interface {
	Server(user, server string, maxGap time.Duration) (decide.Telemetry, telemetry.Info)
	Info(user, server string) telemetry.Info
	Usage() decide.Usage
}

// Stops keeps each user's last stop (*stops.Store).
type Stops interface {
	Last(user string) (stops.Stop, bool)
	Record(ctx context.Context, sts ...stops.Stop) error
	Clear(ctx context.Context, user, server string) error
}

// Options configure a Runner.
type Options struct {
	Hub       Hub
	Pods      Pods
	Telemetry Telemetry
	Stops     Stops
	Kube      kubernetes.Interface
	// Policy is the policy in force (never nil).
	Policy    func() *policy.Policy
	Decisions *decision.Log
	Metrics   *Metrics
	// Contended says whether someone waits for a GPU class (gpu.Allocation.Class, the waitlist's and the usage
	// API's name): a GPU server of that class is judged under its rule's idleWhenContended. nil: never.
	Contended func(class string) bool
	Logger    *slog.Logger
	Now       func() time.Time
}

// Summary is what a pass did.
type Summary struct {
	Servers int
	// Decisions counts the servers by action and reason ("warn/idle", "skip/telemetry_stale", ...).
	Decisions map[string]int
	Stopped   int
	Errors    int
	// Contended counts the GPU servers judged under idleWhenContended: someone waits for their class.
	Contended int
	Duration  time.Duration
}

// Runner runs passes; it remembers what it last decided for each server (so the log says what changed) and the
// stopped servers whose GPU-hours are still being counted as saved.
type Runner struct {
	o Options

	mu    sync.Mutex
	last  map[serverKey]string
	saved map[serverKey]*savedGPU
	pages int // of the last full list; 0 before one
	// gone are the pods of servers this replica stopped: the Hub no longer runs them, KubeSpawner is deleting them.
	gone map[types.UID]bool
	// stops spaces the stops by the Hub's latency (pace.go).
	stops *pacer
}

type serverKey struct{ user, server string }

// savedGPU is a stopped GPU server counted as saving its GPUs until it runs again (at most SavedCap).
type savedGPU struct {
	at      time.Time
	gpus    float64
	kind    string
	counted time.Duration
}

// SavedCap bounds the GPU-hours one stop counts as saved: a server not started again within a day is counted
// as if it would have been stopped by then anyway.
const SavedCap = 24 * time.Hour

// ReasonNoPod is a skip of a server whose pod the informer does not hold (not a KubeSpawner pod, or just
// started): no notice can be shown, so nothing is stopped.
const ReasonNoPod decide.Reason = "pod_missing"

// New returns a Runner.
func New(o Options) *Runner {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Contended == nil {
		o.Contended = func(string) bool { return false }
	}
	return &Runner{o: o, last: map[serverKey]string{}, saved: map[serverKey]*savedGPU{}, gone: map[types.UID]bool{}, stops: newPacer(o.Now)}
}

// item is one server to decide with the Hub's word on it.
type item struct {
	user   *hubapi.User
	server hubapi.Server
	name   string
}

// PageSize is the page a full list asks for (the Hub may cap it lower).
const PageSize = 200

// Pass runs one pass. Its error means nobody was acted on (the pod list is not in, the Hub could not be read).
//
// The Hub is asked only about the servers that may need an action: each running server is first decided from
// its pod and its GPU telemetry alone, as if the Hub had seen no activity since it started (the most a
// server can be idle). A server that is not even then warned or stopped, and carries no notice, needs nothing
// from the Hub this pass: a busy GPU keeps its server whatever the Hub says. A decision nothing of which depends
// on the Hub (hubBlind) is acted on as it is. The others are read either one
// user at a time (GET /users/{name}) when they are fewer than the pages of a full list, or with the full ready
// list (paginated), so a pass never costs the Hub more requests than a full list plus the stops.
func (r *Runner) Pass(ctx context.Context) (sum Summary, err error) {
	start := r.o.Now()
	sum.Decisions = map[string]int{}
	defer func() {
		end := r.o.Now()
		sum.Duration = end.Sub(start)
		r.o.Metrics.pass(sum, err, end)
	}()
	if err := r.o.Pods.Synced(ctx); err != nil {
		return sum, err
	}
	p := r.o.Policy()
	usage := r.o.Telemetry.Usage()
	now := r.o.Now()

	running := map[serverKey]time.Time{}
	candidates := map[serverKey]bool{}
	users := map[string]bool{}
	settled := map[serverKey]decide.Decision{}
	kinds := map[serverKey]string{}
	var toClear []*corev1.Pod
	var blind []item
	live := map[types.UID]bool{}
	for k, pod := range r.o.Pods.Servers() {
		sk := serverKey{k[0], k[1]}
		live[pod.UID] = true
		if r.isGone(pod.UID) {
			continue // stopped by this replica; its pod is going away
		}
		running[sk] = podStarted(pod)
		r.clearOldStop(ctx, sk.user, sk.server, podStarted(pod))
		d, kind := r.decideAlone(p, sk, pod, usage, now)
		if d.Numbers.Contended {
			sum.Contended++
		}
		if d.Action == decide.Warn || d.Action == decide.Stop || d.Would != "" {
			if hubBlind(p, p.Rule(gpu.Kind(kindOrEmpty(kind)), pod.Labels[snooze.LabelProfile]), d) {
				// Nothing of this decision depends on the Hub: act on the pod and the telemetry.
				blind = append(blind, item{user: &hubapi.User{Name: sk.user}, name: sk.server,
					server: hubapi.Server{Name: sk.server, Ready: true, Started: ptr(podStarted(pod).Add(-startMargin))}})
				continue
			}
			candidates[sk] = true
			users[sk.user] = true
			continue
		}
		// Supposing the Hub silent since the start is the most idle a server can be: what is not due then is
		// not due at all, and a busy server's notice is withdrawn without asking the Hub.
		if _, _, hasNotice := notices.FromPod(pod.Annotations); hasNotice && d.Action == decide.None {
			toClear = append(toClear, pod)
		}
		settled[sk], kinds[sk] = d, kind
	}
	r.forgetGone(live)
	for _, pod := range toClear {
		if err := notices.Write(ctx, r.o.Kube, pod, nil); err != nil {
			r.writeFailed(result{}, pod.Annotations[inventory.AnnotationUser], pod.Annotations[inventory.AnnotationServer], err)
			continue
		}
		d := settled[serverKey{pod.Annotations[inventory.AnnotationUser], pod.Annotations[inventory.AnnotationServer]}]
		r.record(decision.Record{User: pod.Annotations[inventory.AnnotationUser], Server: pod.Annotations[inventory.AnnotationServer],
			Action: decision.ActionClear, Reason: string(d.Reason), Numbers: d.Numbers.Map()})
	}
	sum.Servers = len(running)

	var items []item
	if len(candidates) > 0 {
		hub, err := r.readHub(ctx, users)
		if err != nil {
			return sum, err
		}
		for sk := range candidates {
			u := hub[sk.user]
			s, ok := hubapi.Server{}, false
			if u != nil {
				s, ok = u.Servers[sk.server]
			}
			if !ok || !s.Ready || s.Pending != "" {
				// The Hub does not list it as ready: stopping, starting, or gone; nothing is done to it.
				settled[sk] = decide.Decision{Action: decide.Skip, Reason: decide.ReasonNotReady,
					Detail: "the Hub does not list this server as ready"}
				continue
			}
			items = append(items, item{user: u, server: s, name: sk.server})
		}
	}
	items = append(items, blind...)
	sort.Slice(items, func(i, j int) bool {
		if items[i].user.Name != items[j].user.Name {
			return items[i].user.Name < items[j].user.Name
		}
		return items[i].name < items[j].name
	})

	for sk, d := range settled {
		sum.Decisions[string(d.Action)+"/"+string(d.Reason)]++
		r.settle(sk, d, kinds[sk])
	}
	results := make([]result, len(items))
	work := make(chan int)
	var wg sync.WaitGroup
	kept := &stopLog{store: r.o.Stops}
	for range max(p.Workers(), 1) {
		wg.Go(func() {
			for i := range work {
				results[i] = r.one(ctx, p, items[i], usage)
				if st := results[i].stop; st != nil {
					kept.add(ctx, *st)
				}
			}
		})
	}
	for i := range items {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, res := range results {
		sum.Decisions[string(res.action)+"/"+string(res.reason)]++
		if res.stopped {
			sum.Stopped++
		}
		if res.err {
			sum.Errors++
		}
	}
	if failed := kept.failed; len(failed) > 0 { // once more, all together
		if err := record(ctx, r.o.Stops, failed); err != nil {
			r.o.Logger.Warn("the stops are done but their reasons could not be kept for the users' next visit", "stops", len(failed), "err", err)
		}
	}
	r.countSaved(running)
	r.forget(running)
	return sum, nil
}

// readHub reads the users with candidate servers: one at a time while they are fewer than the pages of a full
// list (as the last full list counted them), the full ready list otherwise. Any error fails the pass.
func (r *Runner) readHub(ctx context.Context, users map[string]bool) (map[string]*hubapi.User, error) {
	out := make(map[string]*hubapi.User, len(users))
	r.mu.Lock()
	pages := r.pages
	r.mu.Unlock()
	if pages > 0 && len(users) < pages {
		var mu sync.Mutex
		var firstErr error
		sem := make(chan struct{}, max(r.o.Policy().Workers(), 1))
		var wg sync.WaitGroup
		for name := range users {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				u, err := r.o.Hub.GetUser(ctx, name)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case hubapi.IsNotFound(err):
				case err != nil:
					if firstErr == nil {
						firstErr = fmt.Errorf("read the Hub's user %s (nobody is acted on this pass): %w", name, err)
					}
				default:
					out[name] = u
				}
			})
		}
		wg.Wait()
		return out, firstErr
	}
	n := 0
	for u, err := range r.o.Hub.Users(ctx, hubapi.ListUsersOptions{State: "ready", PageSize: PageSize}) {
		if err != nil {
			return nil, fmt.Errorf("list the Hub's ready servers (nobody is acted on this pass): %w", err)
		}
		n++
		if users[u.Name] {
			out[u.Name] = &u
		}
	}
	r.mu.Lock()
	r.pages = max(1, (n+PageSize-1)/PageSize)
	r.mu.Unlock()
	return out, nil
}

// hubBlind reports whether decision d, made without the Hub, stands whatever the Hub says: a GPU server idle by
// its own telemetry under a rule that ignores Hub activity, with no exemption that only the Hub knows (groups,
// admins), for idleness (a max_age stop counts from the Hub's started). A stop sent for a server the Hub no
// longer runs is answered as such and changes nothing.
func hubBlind(p *policy.Policy, r policy.Rule, d decide.Decision) bool {
	reason := d.Reason
	if d.Action == decide.Skip && d.Would != "" {
		return false // snoozed or dry run: cheap to confirm, and rare
	}
	return !r.CPU && r.HubIdlePeriod == 0 && len(p.Exempt.Groups) == 0 && !p.Exempt.Admins && reason == decide.ReasonIdle
}

func kindOrEmpty(label string) string {
	if label == "cpu" {
		return ""
	}
	return label
}

func ptr[T any](v T) *T { return &v }

// decideAlone decides a server from its pod and telemetry alone, the Hub supposed silent since it started.
func (r *Runner) decideAlone(p *policy.Policy, sk serverKey, pod *corev1.Pod, usage decide.Usage, now time.Time) (decide.Decision, string) {
	kind, profile, info := r.kindOf(sk.user, sk.server, pod)
	rule := p.Rule(kind, profile)
	tel, _ := r.o.Telemetry.Server(sk.user, sk.server, rule.StaleAfter)
	prev, _, _ := notices.FromPod(pod.Annotations)
	in := decide.Input{Now: now, Rule: rule, Telemetry: tel, Usage: usage, Notice: prev, Contended: r.contended(info),
		Server: decide.Server{User: sk.user, Name: sk.server, Kind: kind, Profile: profile, Started: podStarted(pod).Add(-startMargin),
			Ready: true, Annotations: pod.Annotations}}
	return explainData(decide.Decide(in), info), kindLabel(kind)
}

// contended says whether someone waits for the GPU class of a server, as the usage API names it (the waitlist
// uses the same name, gpu.Allocation.Class). A server the usage API does not list has no telemetry, and is not
// culled for GPU idleness anyway.
func (r *Runner) contended(info telemetry.Info) bool {
	return info.Known && info.Class != "" && r.o.Contended(info.Class)
}

// kindOf is a server's GPU kind (the usage API's, else from the pod's requests), profile and telemetry info.
func (r *Runner) kindOf(user, server string, pod *corev1.Pod) (gpu.Kind, string, telemetry.Info) {
	info := r.o.Telemetry.Info(user, server)
	var kind gpu.Kind
	switch {
	case info.Known:
		kind = info.Kind
	case pod != nil:
		kind = snooze.Kind(pod, nil)
	}
	profile := ""
	if pod != nil {
		profile = pod.Labels[snooze.LabelProfile]
	}
	return kind, profile, info
}

// explainData says why a GPU server's data is not usable, in the usage API's words.
func explainData(d decide.Decision, info telemetry.Info) decide.Decision {
	if d.Reason == decide.ReasonTelMiss && info.Stale {
		d.Reason = decide.ReasonTelStale // stale from the start: no sample was ever usable
	}
	switch {
	case (d.Reason == decide.ReasonTelMiss || d.Reason == decide.ReasonTelStale) && d.Detail == "":
		d.Detail = firstOf(info.StaleReason, info.Unknown)
	case d.Reason == decide.ReasonTelStale && info.StaleReason != "":
		d.Detail += ": " + info.StaleReason
	}
	return d
}

// settle counts and records a decision that needed no action (no Hub, no write).
func (r *Runner) settle(sk serverKey, d decide.Decision, kind string) {
	if d.Action != decide.Skip {
		r.note(sk.user, sk.server, decision.Record{}, string(d.Action)+"/"+string(d.Reason))
		return
	}
	r.o.Metrics.skip(string(d.Reason), kind)
	rec := decision.Record{User: sk.user, Server: sk.server, Action: "skip", Reason: string(d.Reason), Message: d.Detail, Numbers: d.Numbers.Map()}
	r.note(sk.user, sk.server, rec, string(d.Action)+"/"+string(d.Reason))
}

// kindLabel is the kind's metric label: cpu for a CPU-only server.
func kindLabel(k gpu.Kind) string {
	if k == "" {
		return "cpu"
	}
	return string(k)
}

// startMargin is how much earlier than its pod the Hub may have started a server (the Hub's started is set
// before KubeSpawner creates the pod): the pass supposes the earlier, so no server is due before it is asked about.
const startMargin = 5 * time.Minute

func podStarted(p *corev1.Pod) time.Time {
	return p.CreationTimestamp.Time
}

// result is what happened to one server.
type result struct {
	action  decide.Action
	reason  decide.Reason
	stopped bool
	err     bool
	// stop is the stop to keep for the user's next visit (the Stops store), when stopped.
	stop *stops.Stop
}

func started(s hubapi.Server) time.Time {
	if s.Started == nil {
		return time.Time{}
	}
	return *s.Started
}

// one decides and acts on one server.
func (r *Runner) one(ctx context.Context, p *policy.Policy, it item, usage decide.Usage) result {
	now := r.o.Now()
	u, s, name := it.user, it.server, it.name

	pod, hasPod := r.o.Pods.Pod(u.Name, name)
	kind, profile, info := r.kindOf(u.Name, name, pod)
	rule := p.Rule(kind, profile)
	tel, _ := r.o.Telemetry.Server(u.Name, name, rule.StaleAfter)

	srv := decide.Server{User: u.Name, Name: name, Groups: u.Groups, Admin: u.Admin, Kind: kind, Profile: profile,
		Started: started(s), Pending: s.Pending, Ready: s.Ready}
	if s.LastActivity != nil {
		srv.LastActivity = *s.LastActivity
	}
	var prev decide.Notice
	if hasPod {
		srv.Annotations = pod.Annotations
		prev, _, _ = notices.FromPod(pod.Annotations)
	}
	in := decide.Input{Now: now, Rule: rule, Server: srv, Telemetry: tel, Usage: usage, Notice: prev, Contended: r.contended(info)}
	d := decide.Decide(in)
	if !hasPod && (d.Action == decide.Warn || d.Action == decide.Stop || (d.Action == decide.Skip && d.Would != "")) {
		d = decide.Decision{Action: decide.Skip, Reason: ReasonNoPod, Numbers: d.Numbers,
			Detail: "no single-user pod found for this server (component=singleuser-server with KubeSpawner's annotations): no notice can be shown, so it is not stopped"}
	}
	d = explainData(d, info)
	res := result{action: d.Action, reason: d.Reason}
	kindLabel := kindLabel(kind)
	rec := decision.Record{User: u.Name, Server: name, Reason: string(d.Reason), Numbers: d.Numbers.Map()}

	switch d.Action {
	case decide.Warn, decide.Skip:
		if d.Action == decide.Skip && d.Reason != decide.ReasonSnoozed {
			if d.Reason == decide.ReasonExempt && hasPod && !prev.Since.IsZero() {
				// Exempt since the notice was set (the policy changed): the countdown no longer holds.
				if err := notices.Write(ctx, r.o.Kube, pod, nil); err != nil {
					return r.writeFailed(res, u.Name, name, err)
				}
			}
			r.o.Metrics.skip(string(d.Reason), kindLabel)
			rec.Action, rec.Message = "skip", d.Detail
			if d.Would != "" {
				rec.Message = firstOf(d.Detail, "would "+string(d.Would))
			}
			r.note(u.Name, name, rec, string(d.Action)+"/"+string(d.Reason))
			return res
		}
		n := notices.Build(d, rule, prev, now)
		if hasPod {
			_, cur, ok := notices.FromPod(pod.Annotations)
			if !ok || !cur.Deadline.Equal(n.Deadline) || cur.Message != n.Message || cur.Reason != n.Reason ||
				cur.Snoozes != n.Snoozes || cur.Snoozable != n.Snoozable || cur.MaxSnoozes != n.MaxSnoozes {
				if err := notices.Write(ctx, r.o.Kube, pod, &n); err != nil {
					return r.writeFailed(res, u.Name, name, err)
				}
			}
		}
		rec.Action, rec.Message = decision.ActionNotice, d.Message
		if d.Action == decide.Skip {
			r.o.Metrics.skip(string(d.Reason), kindLabel)
			rec.Action = "skip"
		}
		// A notice is recorded when it is new or its deadline moved, not on every pass.
		r.note(u.Name, name, rec, string(d.Action)+"/"+string(d.Reason)+"/"+n.Deadline.String())
	case decide.None:
		if hasPod && !prev.Since.IsZero() {
			if err := notices.Write(ctx, r.o.Kube, pod, nil); err != nil {
				return r.writeFailed(res, u.Name, name, err)
			}
			rec.Action = decision.ActionClear
			r.record(rec)
		}
		r.note(u.Name, name, decision.Record{}, string(d.Action)+"/"+string(d.Reason))
	case decide.Stop:
		remove := rule.Action == policy.StopAndRemove && name != ""
		var st hubapi.StopResult
		var err error
		r.stops.do(ctx, func() { st, err = r.o.Hub.StopServer(ctx, u.Name, name, remove) })
		if hubapi.IsNotFound(err) || isNotRunning(err) {
			// The Hub no longer runs it (stopped by the user or the Hub meanwhile): nothing to do.
			d = decide.Decision{Action: decide.Skip, Reason: decide.ReasonNotReady, Detail: "the Hub does not run this server"}
			res.action, res.reason = d.Action, d.Reason
			r.settle(serverKey{u.Name, name}, d, kindLabel)
			return res
		}
		if err != nil {
			r.o.Metrics.stopErrors.Inc()
			r.o.Logger.Warn("cannot stop the server; the next pass tries again", "user", u.Name, "server", name, "err", err)
			res.err = true
			return res
		}
		res.stopped = true
		if hasPod {
			r.mu.Lock()
			r.gone[pod.UID] = true
			r.mu.Unlock()
		}
		rec.Action, rec.Message = decision.ActionStop, d.Message
		if st.Pending {
			rec.Numbers["hub_pending"] = 1 // 202: the Hub is still stopping it; the next passes do not list it as ready
		}
		if remove {
			rec.Numbers["removed"] = 1
		}
		r.record(rec)
		r.o.Metrics.stopped.WithLabelValues(string(d.Reason), kindLabel).Inc()
		if d.Numbers.Contended && d.Reason == decide.ReasonIdle {
			r.o.Metrics.contendedStops.WithLabelValues(kindLabel).Inc()
			// The GPU goes to someone waiting this much earlier than the normal idle period would have freed it.
			if early := rule.IdlePeriod - d.Numbers.IdlePeriod; early > 0 && info.AllocatedGPUs > 0 {
				r.o.Metrics.reclaimed.WithLabelValues(kindLabel).Add(info.AllocatedGPUs * early.Seconds())
			}
		}
		// Kept for the user's next visit as soon as the worker is done with it (stopLog).
		res.stop = &stops.Stop{User: u.Name, Server: name, At: now, Reason: string(d.Reason), Message: d.Message}
		if kind != "" && info.AllocatedGPUs > 0 {
			r.mu.Lock()
			r.saved[serverKey{u.Name, name}] = &savedGPU{at: now, gpus: info.AllocatedGPUs, kind: kindLabel}
			r.mu.Unlock()
		}
		r.note(u.Name, name, decision.Record{}, "stop")
	}
	return res
}

func (r *Runner) writeFailed(res result, user, server string, err error) result {
	res.err = true
	if apierrors.IsConflict(err) {
		// The pod changed since the informer's copy (a snooze): the next pass decides on the new notice.
		r.o.Logger.Debug("the pod changed while the notice was written; the next pass decides again", "user", user, "server", server)
		r.o.Metrics.conflicts.Inc()
		return res
	}
	r.o.Metrics.noticeErrors.Inc()
	r.o.Logger.Warn("cannot write the culler's notice; the server is not stopped before one is shown", "user", user, "server", server, "err", err)
	return res
}

// note records rec when what was decided for the server (state) changed since the last pass: the decision log
// and the logs say what changed, not the same skip every pass.
func (r *Runner) note(user, server string, rec decision.Record, state string) {
	k := serverKey{user, server}
	r.mu.Lock()
	changed := r.last[k] != state
	r.last[k] = state
	r.mu.Unlock()
	if changed && rec.Action != "" {
		r.record(rec)
	}
}

func (r *Runner) record(rec decision.Record) {
	if r.o.Decisions != nil {
		r.o.Decisions.Record(rec)
	}
}

// isNotRunning is the Hub's 400 to a stop of a server that is not running.
func isNotRunning(err error) bool {
	var ae *hubapi.APIError
	return errors.As(err, &ae) && ae.StatusCode == http.StatusBadRequest
}

func (r *Runner) isGone(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone[uid]
}

// forgetGone forgets the stopped pods that are gone.
func (r *Runner) forgetGone(live map[types.UID]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid := range r.gone {
		if !live[uid] {
			delete(r.gone, uid)
		}
	}
}

// forget drops the remembered decisions of servers no longer running.
func (r *Runner) forget(running map[serverKey]time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.last {
		if _, ok := running[k]; !ok {
			delete(r.last, k)
		}
	}
}

// countSaved adds the GPU-hours the stopped servers did not hold since the last pass: from the stop until the
// same server runs again, at most SavedCap.
func (r *Runner) countSaved(running map[serverKey]time.Time) {
	now := r.o.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, s := range r.saved {
		end := earliest(now, s.at.Add(SavedCap))
		again, ok := running[k]
		if ok && again.After(s.at) {
			end = earliest(end, again)
		}
		if d := end.Sub(s.at) - s.counted; d > 0 {
			r.o.Metrics.saved.WithLabelValues(s.kind).Add(s.gpus * d.Seconds())
			s.counted += d
		}
		if !end.Before(s.at.Add(SavedCap)) || (ok && again.After(s.at)) {
			delete(r.saved, k)
		}
	}
}

// ShownAfterStart is how long the user's "stopped because" stays after the same server runs again: long enough
// for the panel of the new server (it asks at load) and the Hub home to show it once more.
const ShownAfterStart = 15 * time.Minute

// clearOldStop withdraws the user's "stopped because" once the same server has run again for ShownAfterStart.
func (r *Runner) clearOldStop(ctx context.Context, user, server string, started time.Time) {
	last, ok := r.o.Stops.Last(user)
	if !ok || last.Server != server || started.IsZero() || !started.After(last.At) || r.o.Now().Sub(started) < ShownAfterStart {
		return
	}
	if err := r.o.Stops.Clear(ctx, user, server); err != nil && !errors.Is(err, context.Canceled) {
		r.o.Logger.Debug("cannot clear the last stop; the next pass tries again", "user", user, "server", server, "err", err)
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// stopLog keeps a pass's stops for the users' next visit as they are made. A stop is written at once when no
// write is in flight; one made during a write goes in the next, with every other made meanwhile (the worker
// that started writing goes on until none is left). So a leader killed mid-pass loses at most the stops of the
// write in flight (one write at the pass's end lost every stop of the pass: the side-by-side e2e's "leader
// killed mid-pass" once lost alice's reason), and a burst of stops costs a few writes, not one each.
type stopLog struct {
	store   Stops
	mu      sync.Mutex
	pending []stops.Stop
	writing bool
	// failed are the stops whose write failed, for one more try at the pass's end (read after the workers end).
	failed []stops.Stop
}

// recordTimeout bounds one write of stops. The write has a context of its own: a stop already made is kept even
// when the pass is cancelled meanwhile (a leader losing its Lease mid-pass), or the user is never told why.
const recordTimeout = 10 * time.Second

func record(ctx context.Context, store Stops, sts []stops.Stop) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	return store.Record(ctx, sts...)
}

func (l *stopLog) add(ctx context.Context, st stops.Stop) {
	l.mu.Lock()
	l.pending = append(l.pending, st)
	if l.writing {
		l.mu.Unlock()
		return
	}
	l.writing = true
	for len(l.pending) > 0 {
		batch := l.pending
		l.pending = nil
		l.mu.Unlock()
		err := record(ctx, l.store, batch)
		l.mu.Lock()
		if err != nil {
			l.failed = append(l.failed, batch...)
		}
	}
	l.writing = false
	l.mu.Unlock()
}
