// Package pass is one gpu-culler pass over every ready server: read the Hub's ready servers in full (paginated,
// no request per user), decide each one (decide.Decide on the pod's notice and the server's own GPU
// telemetry), and act with bounded concurrency: set or withdraw the notice on the pod, stop through the Hub,
// or leave the server and say why. A pass that cannot read the whole list acts on nobody.
package pass

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
)

// Hub is what a pass needs of the Hub (*hubapi.Client).
type Hub interface {
	Users(ctx context.Context, opts hubapi.ListUsersOptions) iter.Seq2[hubapi.User, error]
	StopServer(ctx context.Context, user, server string, remove bool) (hubapi.StopResult, error)
}

// Pods finds a server's pod (*pods.Index).
type Pods interface {
	Pod(user, server string) (*corev1.Pod, bool)
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
	Record(ctx context.Context, s stops.Stop) error
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
	// Contended says whether someone waits for a kind (the waitlist); nil: never.
	Contended func(gpu.Kind) bool
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
	Duration  time.Duration
}

// Runner runs passes; it remembers what it last decided for each server (so the log says what changed) and the
// stopped servers whose GPU-hours are still being counted as saved.
type Runner struct {
	o Options

	mu    sync.Mutex
	last  map[serverKey]string
	saved map[serverKey]*savedGPU
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
		o.Contended = func(gpu.Kind) bool { return false }
	}
	return &Runner{o: o, last: map[serverKey]string{}, saved: map[serverKey]*savedGPU{}}
}

// item is one ready server of the Hub.
type item struct {
	user   *hubapi.User
	server hubapi.Server
	name   string
}

// Pass runs one pass. Its error means nobody was acted on (the pod list is not in, the Hub list failed).
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
	var items []item
	for u, err := range r.o.Hub.Users(ctx, hubapi.ListUsersOptions{State: "ready"}) {
		if err != nil {
			return sum, fmt.Errorf("list the Hub's ready servers (nobody is acted on this pass): %w", err)
		}
		for name, s := range u.Servers {
			items = append(items, item{user: &u, server: s, name: name})
		}
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].user.Name != items[j].user.Name {
			return items[i].user.Name < items[j].user.Name
		}
		return items[i].name < items[j].name
	})
	sum.Servers = len(items)
	usage := r.o.Telemetry.Usage()

	results := make([]result, len(items))
	work := make(chan int)
	var wg sync.WaitGroup
	for range max(p.Workers(), 1) {
		wg.Go(func() {
			for i := range work {
				results[i] = r.one(ctx, p, items[i], usage)
			}
		})
	}
	for i := range items {
		work <- i
	}
	close(work)
	wg.Wait()

	running := make(map[serverKey]time.Time, len(items))
	for i, it := range items {
		res := results[i]
		sum.Decisions[string(res.action)+"/"+string(res.reason)]++
		if res.stopped {
			sum.Stopped++
		}
		if res.err {
			sum.Errors++
		}
		running[serverKey{it.user.Name, it.name}] = started(it.server)
	}
	r.countSaved(running)
	r.forget(running)
	return sum, nil
}

// result is what happened to one server.
type result struct {
	action  decide.Action
	reason  decide.Reason
	stopped bool
	err     bool
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
	r.clearOldStop(ctx, u.Name, name, started(s))

	pod, hasPod := r.o.Pods.Pod(u.Name, name)
	var kind gpu.Kind
	profile := ""
	info := r.o.Telemetry.Info(u.Name, name)
	switch {
	case info.Known:
		kind = info.Kind
	case hasPod:
		kind = snooze.Kind(pod, nil)
	}
	if hasPod {
		profile = pod.Labels[snooze.LabelProfile]
	}
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
	in := decide.Input{Now: now, Rule: rule, Server: srv, Telemetry: tel, Usage: usage, Notice: prev, Contended: r.o.Contended(kind)}
	d := decide.Decide(in)
	if !hasPod && (d.Action == decide.Warn || d.Action == decide.Stop || (d.Action == decide.Skip && d.Would != "")) {
		d = decide.Decision{Action: decide.Skip, Reason: ReasonNoPod, Numbers: d.Numbers,
			Detail: "no single-user pod found for this server (component=singleuser-server with KubeSpawner's annotations): no notice can be shown, so it is not stopped"}
	}
	if (d.Reason == decide.ReasonTelMiss || d.Reason == decide.ReasonTelStale) && d.Detail == "" {
		d.Detail = firstOf(info.StaleReason, info.Unknown)
	} else if d.Reason == decide.ReasonTelStale && info.StaleReason != "" {
		d.Detail += ": " + info.StaleReason
	}
	res := result{action: d.Action, reason: d.Reason}
	kindLabel := string(kind)
	if kindLabel == "" {
		kindLabel = "cpu"
	}
	rec := decision.Record{User: u.Name, Server: name, Reason: string(d.Reason), Numbers: d.Numbers.Map()}

	switch d.Action {
	case decide.Warn, decide.Skip:
		if d.Action == decide.Skip && d.Reason != decide.ReasonSnoozed {
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
		st, err := r.o.Hub.StopServer(ctx, u.Name, name, remove)
		if err != nil {
			r.o.Metrics.stopErrors.Inc()
			r.o.Logger.Warn("cannot stop the server; the next pass tries again", "user", u.Name, "server", name, "err", err)
			res.err = true
			return res
		}
		res.stopped = true
		rec.Action, rec.Message = decision.ActionStop, d.Message
		if st.Pending {
			rec.Numbers["hub_pending"] = 1 // 202: the Hub is still stopping it; the next passes do not list it as ready
		}
		if remove {
			rec.Numbers["removed"] = 1
		}
		r.record(rec)
		r.o.Metrics.stopped.WithLabelValues(string(d.Reason), kindLabel).Inc()
		if err := r.o.Stops.Record(ctx, stops.Stop{User: u.Name, Server: name, At: now, Reason: string(d.Reason), Message: d.Message}); err != nil {
			r.o.Logger.Warn("the stop is done but its reason could not be kept for the user's next visit", "user", u.Name, "server", name, "err", err)
		}
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
			r.o.Metrics.saved.WithLabelValues(s.kind).Add(s.gpus * d.Hours())
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
