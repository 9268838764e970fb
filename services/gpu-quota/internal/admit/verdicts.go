package admit

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// The watch of verdicts (POST assess/watch): gpu-profiles keeps every user's verdicts for the default server in
// memory, so that a form render costs no round trip to gpu-quota. A watch sends the whole table once, then only
// what changed; Assess computes every line, so there is one rule for a form's verdicts, not two.

// The wire types of assess/watch, declared once in services/internal/contract for gpu-profiles, which reads them.
type (
	VerdictWatchRequest = contract.VerdictWatchRequest
	VerdictLine         = contract.VerdictLine
)

// Kinds of pass, as gpuhub_quota_verdict_passes_total{pass} counts them.
const (
	// PassFull assesses every user of the directory.
	PassFull = "full"
	// PassClock assesses only the users whose verdicts the clock alone may change (Generation is unchanged):
	// those holding a running GPU pod under a budget, whose GPU-hours grow by the minute.
	PassClock = "clock"
	// PassSkipped assesses no one: nothing a verdict depends on changed.
	PassSkipped = "skipped"
)

// Changed tells the engine that something a verdict depends on changed outside it: the policy, the Hub
// directory, the GPU-hours read from the usage API.
func (e *Engine) Changed() {
	e.mu.Lock()
	e.changes++
	e.mu.Unlock()
}

// Generation counts the changes a verdict can depend on: pod and node events, reservations made and
// released, waitlist changes and what Changed announces. It applies the clock first: reservations past their
// TTL are released, and waitlist holds that ended since the last look count as a change. Two equal readings
// mean that no verdict changed in between, but for the GPU-hours a running pod adds by the clock (PassClock).
func (e *Engine) Generation() uint64 {
	now := e.o.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.res.expire(now)
	if e.wlOn() {
		for _, en := range e.wl.st.Entries {
			if en.Held() && en.HeldUntil.After(e.holdsSeen) && !now.Before(en.HeldUntil) {
				e.changes++ // Assess stops counting a hold at its end, before the waitlist's tick removes it
			}
		}
	}
	if now.After(e.holdsSeen) {
		e.holdsSeen = now
	}
	return e.changes + e.res.changes + e.wl.gen
}

// VerdictWatch is what one watcher (a gpu-profiles replica) was told of every user's verdicts, and works out
// what to tell it next. Not for concurrent use; Close it when the watcher is gone.
type VerdictWatch struct {
	e       *Engine
	options []AssessOption
	// sent holds a hash of each user's last line (a few bytes a user instead of their verdicts); nil before
	// the first pass. A collision of 64-bit hashes would keep one change from being sent: about 2^-64 a change.
	seed   maphash.Seed
	sent   map[string]uint64
	gen    uint64 // Generation when the last full pass started
	closed bool
}

// WatchVerdicts starts a watch of options for every user; its first Pass sends the whole table.
func (e *Engine) WatchVerdicts(options []AssessOption) *VerdictWatch {
	e.verdicts.watches.Inc()
	return &VerdictWatch{e: e, options: slices.Clone(options), seed: maphash.MakeSeed()}
}

// Close ends the watch (the gauge of open watches).
func (w *VerdictWatch) Close() {
	if !w.closed {
		w.closed = true
		w.e.verdicts.watches.Dec()
	}
}

// Pass gives emit the lines of what changed since the last pass, and says which kind of pass it was. The first
// pass emits a line for every user of the directory; a later one, a line for each user whose verdicts or
// groups changed and a left line for each user gone from the directory. When Generation has not moved since
// the last full pass, only the users PassClock names are assessed, and with none the pass is skipped.
//
// A full pass costs one Assess per user (one short hold of the engine's lock each, admissions in between), in
// slices that give way to admissions (yield). It fails (wrapping ErrUnavailable) while no verdict can be made:
// no policy, the informers not synced, the directory never read; and with ctx or emit's error.
func (w *VerdictWatch) Pass(ctx context.Context, emit func(VerdictLine) error) (string, error) {
	e := w.e
	gen := e.Generation() // before the pass: a change during it makes the next pass a full one
	pol := e.o.Policy()
	if pol == nil {
		return "", fmt.Errorf("%w: no policy loaded", ErrUnavailable)
	}
	if err := e.o.Synced(); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	dir, err := e.o.Directory()
	if dir == nil {
		return "", fmt.Errorf("%w: the Hub's users and groups were not read yet: %w", ErrUnavailable, err)
	}
	if w.sent != nil && gen == w.gen {
		users := w.clockUsers(pol, dir)
		if len(users) == 0 {
			e.verdicts.passes.WithLabelValues(PassSkipped).Inc()
			return PassSkipped, nil
		}
		if err := w.assess(ctx, users, dir, w.sent, emit); err != nil {
			return "", err
		}
		e.verdicts.passes.WithLabelValues(PassClock).Inc()
		return PassClock, nil
	}

	start := time.Now()
	users := make([]string, 0, len(dir))
	for u := range dir {
		users = append(users, u)
	}
	slices.Sort(users) // a stable order: the same table reads the same
	next := make(map[string]uint64, len(dir))
	if err := w.assess(ctx, users, dir, next, emit); err != nil {
		return "", err
	}
	if w.sent != nil {
		var gone []string
		for u := range w.sent {
			if _, ok := next[u]; !ok {
				gone = append(gone, u)
			}
		}
		slices.Sort(gone)
		for _, u := range gone {
			if err := emit(VerdictLine{Kind: contract.WatchLeft, User: u}); err != nil {
				return "", err
			}
		}
	}
	w.sent, w.gen = next, gen
	e.verdicts.passes.WithLabelValues(PassFull).Inc()
	e.verdicts.seconds.Observe(time.Since(start).Seconds())
	return PassFull, nil
}

// assess assesses users, records each one's line in into and emits those that differ from what was sent.
func (w *VerdictWatch) assess(ctx context.Context, users []string, dir map[string][]string, into map[string]uint64,
	emit func(VerdictLine) error) error {
	pace := yield.Pass{Behind: w.e.o.Behind} // one CPU: let admissions and renders run between users
	var h maphash.Hash
	h.SetSeed(w.seed)
	for _, u := range users {
		pace.Item()
		if err := ctx.Err(); err != nil {
			return err
		}
		groups := dir[u]
		if groups == nil {
			groups = []string{}
		}
		a, err := w.e.Assess(ctx, AssessRequest{User: u, Groups: groups, Options: w.options})
		if err != nil {
			return err
		}
		line := VerdictLine{Kind: contract.WatchUser, User: u, Groups: groups, Options: a.Options, OnUnavailable: a.OnUnavailable}
		sum := lineHash(&h, line)
		old, known := w.sent[u]
		into[u] = sum
		if known && old == sum {
			continue
		}
		if err := emit(line); err != nil {
			return err
		}
	}
	return nil
}

// clockUsers are the users of dir whose verdicts the clock alone may change: a running GPU pod's GPU-hours
// accrue by the minute, which matters under a budget only. None when the policy has no budget at all.
func (w *VerdictWatch) clockUsers(pol *quota.Policy, dir map[string][]string) []string {
	e := w.e
	if e.o.Hours == nil || !anyBudget(pol) {
		return nil
	}
	var running []string
	e.mu.Lock()
	for name, pods := range e.ix.byUser {
		if slices.ContainsFunc(pods, func(p *podEntry) bool { return p.active && p.pod.Allocated() && len(p.allocs) > 0 }) {
			running = append(running, name)
		}
	}
	e.mu.Unlock()
	out := running[:0]
	for _, u := range running {
		if g, ok := dir[u]; ok && len(e.effective.get(pol, u, g).windows) > 0 {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// anyBudget reports whether any entry of p sets a budget.
func anyBudget(p *quota.Policy) bool {
	if len(p.Default.Budgets) > 0 {
		return true
	}
	for _, m := range []map[string]quota.Entry{p.Groups, p.Users} {
		for _, en := range m {
			if len(en.Budgets) > 0 {
				return true
			}
		}
	}
	return false
}

// lineHash sums what a reader keeps of a user line.
func lineHash(h *maphash.Hash, l VerdictLine) uint64 {
	h.Reset()
	for _, g := range l.Groups {
		h.WriteString(g)
		h.WriteByte(0)
	}
	h.WriteByte(1)
	h.WriteString(l.OnUnavailable)
	for _, v := range l.Options {
		h.WriteByte(0)
		h.WriteString(v.ID)
		h.WriteByte(0)
		if v.Allow {
			h.WriteByte(1)
		}
		h.WriteString(v.Reason)
		h.WriteByte(0)
		h.WriteString(v.Message)
		h.WriteByte(0)
		maphash.WriteComparable(h, v.HeldForOthers)
		maphash.WriteComparable(h, v.HeldForYouUntil.UnixNano())
	}
	return h.Sum64()
}

// verdictMetrics are the watches' series.
type verdictMetrics struct {
	passes  *prometheus.CounterVec
	seconds prometheus.Histogram
	watches prometheus.Gauge
}

func newVerdictMetrics() verdictMetrics {
	m := verdictMetrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "verdict_passes_total",
			Help: "Passes over the users for the watches of verdicts (assess/watch), by pass: full (every user), clock (only users whose " +
				"GPU-hours grow by the clock under a budget), skipped (nothing changed)."}, []string{"pass"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "verdict_pass_duration_seconds",
			Help:    "Duration of a full pass over the users for a watch of verdicts, waiting behind admissions included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "verdict_watches",
			Help: "Open watches of verdicts (assess/watch): one per gpu-profiles replica."}),
	}
	for _, p := range []string{PassFull, PassClock, PassSkipped} {
		m.passes.WithLabelValues(p)
	}
	return m
}

func (m verdictMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.passes, m.seconds, m.watches}
}
