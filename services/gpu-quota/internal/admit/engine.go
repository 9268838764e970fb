// Package admit is gpu-quota's admission engine: may this user start this GPU server now? It answers from
// memory only (its own index of the informers' pods and nodes, the Hub directory, the cached ledger): no
// API-server and no Hub request per decision. It applies the policy (quota.Decide), then checks that a GPU of
// the requested class is free, and reserves what it admits until the pod appears, so that concurrent spawns
// are counted exactly. It also gives the enforcement loop its view of every user (Views) and the usage API the
// quota of one user (UserQuota).
package admit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/usagecache"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// ReasonNoneFree refuses a request that the policy admits when no GPU of the requested class is free.
const ReasonNoneFree quota.Reason = "none_free"

// ErrUnavailable wraps every reason the engine cannot decide: the API answers 503 and the Hub glue applies
// its onUnavailable.
var ErrUnavailable = errors.New("gpu-quota cannot decide right now")

// ErrNotLeader is the answer of a replica that does not decide (SetDeciding(false)): with two or more replicas
// only the Lease holder decides admissions and changes the waitlist, so that one lock orders them all.
var ErrNotLeader = fmt.Errorf("%w: this replica does not decide (another one holds the Lease)", ErrUnavailable)

// Hours is the cached ledger (*usagecache.Cache).
type Hours interface {
	GPUHours(user string, windows []time.Duration, held []usagecache.Held, now time.Time) map[time.Duration]map[string]float64
}

// Directory is the Hub's users and their groups as last read: user -> groups. nil (with the reason) when it
// was never read.
type Directory func() (map[string][]string, error)

type toldGroups struct {
	groups []string
	at     time.Time
}

// Options configure an Engine.
type Options struct {
	// Policy is the policy in use (policy.Reloader.Current); nil when none is loaded.
	Policy func() *quota.Policy
	// Hours are the GPU-hours per window; nil: budgets are unavailable.
	Hours Hours
	// Directory gives each user's Hub groups when a request does not carry them.
	Directory Directory
	// DirectoryReadAt is when Directory was last read successfully (zero: unknown); with DirectoryMaxAge set,
	// Views fails once the directory is older (the Hub unreadable for several refreshes): enforcement does not
	// act on groups that may have changed.
	DirectoryReadAt func() time.Time
	DirectoryMaxAge time.Duration
	// Synced fails while the informers (and the engine's handlers on them) have not delivered every object:
	// until then nothing is decided.
	Synced func() error
	// Healthy fails while an informer's watch is broken (the data may be stale): Views refuses, so that
	// enforcement never acts on it. Admission still answers from the last known state.
	Healthy func() error
	Log     *decision.Log
	// ReservationTTL is how long an admitted server's GPUs stay reserved if its pod never appears (default 5 min).
	ReservationTTL time.Duration
	// Now is the clock of decisions, reservations and accrual (default time.Now).
	Now func() time.Time
	// Waitlist configures the waitlist (off unless Enabled).
	Waitlist WaitlistOptions
	// Registerer gets gpuhub_quota_admit_duration_seconds, gpuhub_quota_unavailable_total,
	// gpuhub_quota_reservations, gpuhub_quota_verdict_* and gpuhub_quota_waitlist_*; nil registers nothing.
	Registerer prometheus.Registerer
	// Behind is the work Views' pass over the users steps aside for (admissions; yield.Foreground).
	Behind *yield.Foreground
	// Tolerations are the single-user pods': units on a node tainted against them are not free
	// (inventory.Node.Blocked). nil: inventory.DefaultTolerations.
	Tolerations []corev1.Toleration
}

// Engine decides admissions. It is safe for concurrent use.
type Engine struct {
	o Options
	// ownClock: Options.Now was given (tests, a service on a clock of its own); otherwise a decision's time is
	// the time.Now its admission starts with.
	ownClock bool

	// mu guards the index and the reservations: a decision and the reservation it makes are one step, so
	// concurrent requests are decided one after the other on exact numbers.
	mu  sync.Mutex
	ix  *index
	res reservations
	// feed streams the reservations this replica makes and releases to the standbys (replica.go).
	feed replicaFeed
	// notDeciding is set while another replica decides (SetDeciding): checked under mu, so that a step-down
	// is ordered with every decision.
	notDeciding bool
	// steppedDown is closed when this replica stops deciding (DecidingUntil); a new one when it decides again.
	steppedDown chan struct{}
	// changes counts what may change a verdict besides reservations and the waitlist, which count their own:
	// index events and what Changed announces (Generation).
	changes uint64
	// holdsSeen is when Generation last looked for waitlist holds that ended by the clock.
	holdsSeen time.Time
	// wl is the waitlist: holds and queues count in every decision, under the same lock.
	wl        waitlistState
	wlMetrics waitlistMetrics

	effective effCache

	// told are the groups the Hub sent with each user's last admission, and when: fresher than the directory
	// until its next read (enforcement must not judge a user by groups the Hub no longer has).
	toldMu sync.Mutex
	told   map[string]*toldGroups // changed in place: one map operation per admission

	duration    prometheus.Histogram
	unavailable *prometheus.CounterVec
	verdicts    verdictMetrics
}

// New returns an engine; register its handlers on the inventory (PodHandler, NodeHandler).
func New(o Options) (*Engine, error) {
	if o.Policy == nil || o.Log == nil {
		return nil, errors.New("admit: Policy and Log are required")
	}
	if o.ReservationTTL <= 0 {
		o.ReservationTTL = 5 * time.Minute
	}
	ownClock := o.Now != nil
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Synced == nil {
		o.Synced = func() error { return nil }
	}
	if o.Healthy == nil {
		o.Healthy = func() error { return nil }
	}
	if o.Directory == nil {
		o.Directory = func() (map[string][]string, error) { return nil, errors.New("no Hub directory") }
	}
	if o.Tolerations == nil {
		o.Tolerations = inventory.DefaultTolerations()
	}
	e := &Engine{o: o, ownClock: ownClock, ix: newIndex(), res: newReservations(), steppedDown: make(chan struct{}), told: map[string]*toldGroups{}, wlMetrics: newWaitlistMetrics(),
		verdicts: newVerdictMetrics()}
	e.res.tag = strconv.FormatInt(time.Now().UnixNano()%(36*36*36*36), 36) + "-"
	e.ix.tolerations = o.Tolerations
	e.wl.turn = waitlist.NewTurnover(o.Now(), 0)
	e.duration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "admit_duration_seconds",
		Help:    "Time to decide one admission in the engine (from memory: no API-server or Hub request).",
		Buckets: []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, .001, .0025, .005, .01}})
	e.unavailable = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "unavailable_total",
		Help: "Admissions decided while GPU-hours a budget needs could not be read, by the policy's onUnavailable mode (open admits, closed refuses)."},
		[]string{"mode"})
	for _, m := range []quota.Mode{quota.Open, quota.Closed} {
		e.unavailable.WithLabelValues(string(m))
	}
	reservationsGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "reservations",
		Help: "GPU reservations of admitted servers whose pod has not appeared yet (per replica)."},
		func() float64 {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.res.expire(e.o.Now())
			return float64(e.res.live)
		})
	if o.Registerer != nil {
		cs := append([]prometheus.Collector{e.duration, e.unavailable, reservationsGauge}, e.verdicts.collectors()...)
		if o.Waitlist.Enabled {
			cs = append(cs, e.wlMetrics.collectors()...)
		}
		for _, c := range cs {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("admit: register metrics: %w", err)
			}
		}
	}
	return e, nil
}

// SetDeciding turns this replica's decisions on or off. An engine decides from New on; with two or more
// replicas only the Lease holder's does. Off, Admit, Join and Leave return ErrNotLeader and WaitlistTick does
// nothing; the informers' handlers and the views go on. Decisions already under way when it is turned off are
// over when it returns.
func (e *Engine) SetDeciding(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case on && e.notDeciding:
		e.steppedDown = make(chan struct{})
	case !on && !e.notDeciding && e.steppedDown != nil:
		close(e.steppedDown)
	}
	e.notDeciding = !on
}

// DecidingUntil returns a channel closed once this replica stops deciding: already closed when it does not
// decide now. A stream served only by the decider (assess/watch) ends with it.
func (e *Engine) DecidingUntil() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.notDeciding {
		return closed
	}
	return e.steppedDown
}

// closed is a channel closed from the start.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Deciding reports whether this replica decides.
func (e *Engine) Deciding() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.notDeciding
}

// PodHandler keeps the engine's index of GPU pods; register it on the pod informer.
func (e *Engine) PodHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { e.onPod(obj, false) },
		DeleteFunc: func(obj any) { e.onPod(obj, true) },
	}
}

// NodeHandler keeps the engine's index of GPU nodes; register it on the node informer.
func (e *Engine) NodeHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.onNode(obj, false) },
		UpdateFunc: func(_, obj any) { e.onNode(obj, false) },
		DeleteFunc: func(obj any) { e.onNode(obj, true) },
	}
}

func (e *Engine) onPod(obj any, deleted bool) {
	key, p := podKey(obj)
	if key == "" {
		return
	}
	var gp inventory.Pod
	ok := false
	if p != nil && !deleted {
		gp, ok = inventory.PodFrom(p)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.changes++
	if old := e.ix.pods[key]; old != nil && old.active && (!ok || !active(gp)) {
		e.freedLocked(old.classified, e.o.Now())
	}
	if !ok {
		e.ix.removePod(key)
		return
	}
	ent := e.ix.upsertPod(key, gp)
	if ent.active && gp.User != "" {
		e.res.match(gp.User, gp.Server, gp.UID)
	}
}

func (e *Engine) onNode(obj any, deleted bool) {
	name, n := nodeOf(obj)
	if name == "" {
		return
	}
	var gn *inventory.Node
	if n != nil && !deleted {
		v := inventory.NodeFrom(n)
		gn = &v
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.changes++
	e.ix.setNode(name, gn)
}

// Request is an admission request: the server the Hub is about to create a pod for. Its slices and maps may
// be shared with other requests (the API reuses those decoded from the same text): read them, never change
// them.
type Request struct {
	User   string `json:"user"`
	Server string `json:"server"` // "" is the default server
	// Groups are the user's Hub groups as the Hub sees them now; nil: the engine's directory.
	Groups []string `json:"groups"`
	// Resources are the pod's GPU extended resources (gpu.PodResources).
	Resources    map[string]int64  `json:"resources"`
	NodeSelector map[string]string `json:"nodeSelector"`
	Profile      string            `json:"profile"` // informational
	// Waitlist is the spawn form's choice: join the waitlist when nothing is free (nil: do not).
	Waitlist *WaitlistChoice `json:"waitlist,omitempty"`
	// UserOptions are the spawn form's answer, kept to start the server when its turn comes (AutoStart).
	UserOptions map[string]any `json:"userOptions,omitempty"`
	// FromPod says Resources and NodeSelector were read from the pod the request sent (the glue's way).
	FromPod bool `json:"-"`
	// Arrived is when the API received the request (zero: when it is decided). A refusal releases only a
	// reservation of the server made before then: one made since is a later start's.
	Arrived time.Time `json:"-"`
}

// Option is a GPU class the user could take instead: free now and within their quota.
type Option struct {
	Kind        gpu.Kind `json:"kind"`
	Class       string   `json:"class"`
	Description string   `json:"description"`
	// Free is how many units of the class the user could take now: free, and within their limits at once.
	Free int64 `json:"free"`

	unit gpu.Allocation // one unit of Class, for the message
}

// Result is the answer to an admission request.
type Result struct {
	Allow   bool   `json:"allow"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// DecisionID is the decision log's record.
	DecisionID string `json:"decisionId"`
	// Reservation is set when the server is admitted with GPUs.
	Reservation string   `json:"reservation,omitempty"`
	CanTake     []Option `json:"canTake"`
	// OnUnavailable is the policy's mode, for the glue when a later request cannot be answered.
	OnUnavailable quota.Mode `json:"onUnavailable"`
	// Waitlist is the server's place in the waitlist when the request joined it.
	Waitlist *Place `json:"waitlist,omitempty"`
	// JoinOffered says the refusal is for want of a free unit (none_free, or waitlist: held for people waiting)
	// and the request did not join: waiting in line would help, so the spawn form may offer joining on it.
	JoinOffered bool `json:"joinOffered,omitempty"`
	// CountedPod says gpu-quota counted the GPUs of the pod the request sent (Request.FromPod): a glue that sends
	// the pod takes an answer without it for one from a gpu-quota too old to read it, which admits unchecked.
	CountedPod bool `json:"countedPod,omitempty"`
}

// OnUnavailable is the loaded policy's onUnavailable ("" before a policy loads). Every replica knows it, deciding
// or not: a 503 carries it, so that a glue that never heard it (a restarted Hub during a handover) applies the
// policy's mode instead of its own default.
func (e *Engine) OnUnavailable() string {
	if pol := e.o.Policy(); pol != nil {
		return string(pol.Unavailable())
	}
	return ""
}

// Admit decides one request from memory and records the decision. An error (wrapping ErrUnavailable) means
// no decision could be made: no policy, the informers not synced, or the user's groups unknown.
func (e *Engine) Admit(ctx context.Context, r Request) (Result, error) {
	start := time.Now()
	now := start // one clock read for the duration and the decision, unless the engine was given a clock
	if e.ownClock {
		now = e.o.Now()
	}
	pol := e.o.Policy()
	if pol == nil {
		return Result{}, fmt.Errorf("%w: no policy loaded", ErrUnavailable)
	}
	if err := e.o.Synced(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	groups := r.Groups
	if groups != nil {
		e.toldMu.Lock()
		t := e.told[r.User]
		if t == nil {
			t = &toldGroups{}
			e.told[r.User] = t
		}
		if t.groups == nil || !slices.Equal(t.groups, groups) { // mostly the same groups again: no copy
			t.groups = slices.Clone(groups)
		}
		t.at = now
		e.toldMu.Unlock()
	}
	if groups == nil {
		dir, err := e.o.Directory()
		if dir == nil {
			return Result{}, fmt.Errorf("%w: the request has no groups and the Hub's were not read yet: %w", ErrUnavailable, err)
		}
		groups = dir[r.User]
	}
	ent := e.effective.get(pol, r.User, groups)
	eff := ent.eff
	if err := ctx.Err(); err != nil { // the glue gave up waiting: nobody would start the server on the answer
		return Result{}, err
	}

	e.mu.Lock()
	if e.notDeciding {
		e.mu.Unlock()
		return Result{}, ErrNotLeader
	}
	out, rec := e.decideLocked(ent, r, now)
	e.mu.Unlock()

	rec = e.o.Log.Record(rec)
	out.DecisionID = rec.ID
	out.OnUnavailable = eff.OnUnavailable
	if out.CanTake == nil {
		out.CanTake = []Option{}
	}
	e.duration.Observe(time.Since(start).Seconds())
	return out, nil
}

// decideLocked is the decision and the reservation, under e.mu.
func (e *Engine) decideLocked(ent effEntry, r Request, now time.Time) (Result, decision.Record) {
	ix, eff := e.ix, ent.eff
	e.res.expire(now)
	askedC := ix.resolve(r.Resources, r.NodeSelector)
	asked := askedC.allocs
	u := e.usageLocked(ent.windows, r.User, &r.Server, now)
	if missing(ent.windows, u) {
		e.unavailable.WithLabelValues(string(eff.OnUnavailable)).Inc()
	}
	d := quota.Decide(eff, u, quota.Request{Allocations: asked})
	rec := decision.Record{Time: now, User: r.User, Server: r.Server, Reason: string(d.Reason), Numbers: numbers(d.Check)}
	if len(asked) > 0 {
		rec.Numbers["requestedGPUs"] = round(sumShares(asked))
	}
	res := Result{Allow: d.Allow, Reason: string(d.Reason), Message: d.Message}
	if d.Allow && len(asked) > 0 {
		if i, free := e.shortLocked(r, askedC, now); i >= 0 {
			short := &asked[i]
			res.Allow, res.Reason = false, string(ReasonNoneFree)
			res.CanTake = e.canTakeLocked(eff, u, r, d, now)
			res.Message = ix.noneFreeMessageLocked(*short, askedC.classes[i], free, ix.blockedWordsLocked(askedC.classes[i]), res.CanTake)
			rec.Numbers = map[string]float64{"free": float64(free), "requested": float64(short.Count)}
			if e.wlOn() && e.baseFreeLocked(askedC.classes[i], r.User, r.Server) >= short.Count {
				res.Reason = string(ReasonWaitlist)
				held, _ := e.holdsLocked(askedC.classes[i], r.User, r.Server, now)
				res.Message = waitlistMessage(*short, held, e.aheadLocked(askedC.classes[i], r.User, r.Server), r.Waitlist != nil && r.Waitlist.Join)
			}
			if r.Waitlist != nil && r.Waitlist.Join {
				place, err := e.joinLocked(r, askedC, eff, now)
				if err == nil {
					res.Waitlist = &place
					res.Message = joinedMessage(place, res.CanTake)
					rec.Numbers["position"] = float64(place.Position)
				} else {
					res.Message += " The waitlist could not take you: " + err.Error()
				}
			} else {
				res.JoinOffered = e.wlOn()
			}
			rec.Reason = res.Reason
		} else {
			res.Reservation = e.res.reserve(r.User, r.Server, askedC, now.Add(e.o.ReservationTTL), ix)
			if len(e.feed.subs) > 0 {
				e.publishLocked(ReplicaLine{Reserve: mirrored(e.res.byUser[r.User][r.Server])})
			}
			e.servedLocked(r.User, r.Server, now)
		}
	} else if !d.Allow {
		res.CanTake = e.canTakeLocked(eff, u, r, d, now)
		if len(res.CanTake) > 0 {
			res.Message += freeWithinQuota(res.CanTake)
		}
	}
	rec.Action = decision.ActionDeny
	if res.Allow {
		rec.Action = decision.ActionAdmit
	} else if rv := e.res.byUser[r.User][r.Server]; rv != nil && rv.made.Before(arrival(r)) {
		// The Hub asks again only once the server's last start is over, and it will not start the server
		// on this answer: what an earlier admission reserved for it would otherwise stay taken until its TTL.
		e.res.release(rv)
		if len(e.feed.subs) > 0 {
			e.publishLocked(ReplicaLine{Release: &MirroredReservation{ID: rv.id, User: rv.user, Server: rv.server}})
		}
	}
	rec.Message = res.Message
	return res, rec
}

// arrival is when r arrived, for ordering it against reservations (a monotonic reading).
func arrival(r Request) time.Time {
	if r.Arrived.IsZero() {
		return time.Now()
	}
	return r.Arrived
}

// usageLocked is what user holds: the GPU allocations of their active pods and of their reservations, and
// their GPU-hours. For a decision about starting *starting, that server's own pods and reservation are left
// out: the Hub is starting it again, so a pod left of it is about to be replaced and its reservation renewed.
func (e *Engine) usageLocked(windows []time.Duration, user string, starting *string, now time.Time) quota.Usage {
	var u quota.Usage
	var running []usagecache.Held
	for _, p := range e.ix.byUser[user] {
		if !p.active {
			continue
		}
		if p.pod.Allocated() {
			running = appendHeld(running, p)
		}
		if starting != nil && p.pod.Server == *starting || len(p.allocs) == 0 {
			continue
		}
		u.Held = append(u.Held, p.allocs...)
		u.Servers++
	}
	for s, rv := range e.res.byUser[user] {
		if starting != nil && s == *starting {
			continue
		}
		u.Held = append(u.Held, rv.allocs...)
		u.Servers++
	}
	if len(windows) > 0 && e.o.Hours != nil {
		u.GPUHours = e.o.Hours.GPUHours(user, windows, running, now)
	}
	return u
}

func appendHeld(out []usagecache.Held, p *podEntry) []usagecache.Held {
	for i, a := range p.allocs {
		out = append(out, usagecache.Held{Class: p.classes[i], GPUs: a.Share(), Since: p.pod.Started})
	}
	return out
}

// missing reports whether a budget window's GPU-hours could not be read.
func missing(windows []time.Duration, u quota.Usage) bool {
	for _, w := range windows {
		if _, ok := u.GPUHours[w]; !ok {
			return true
		}
	}
	return false
}

// freeLocked is how many units of class are free for a request about (user, server): what the nodes that
// take new pods offer, less what active pods hold there and reservations keep, plus what the server being
// started again gives back (its old pod and its reservation). The waitlist (units held for others, entries
// ahead in line) has a say over the rest only: what the server itself holds or has reserved stays its own.
func (e *Engine) freeLocked(class, user, server string, now time.Time) int64 {
	pool, mine := e.poolLocked(class, user, server)
	return min(max(pool+mine, 0), mine+e.waitlistFreeLocked(max(pool, 0), class, user, server, now))
}

// baseFreeLocked is freeLocked without the waitlist.
func (e *Engine) baseFreeLocked(class, user, server string) int64 {
	pool, mine := e.poolLocked(class, user, server)
	return max(pool+mine, 0)
}

// poolLocked is the units of class that no active pod holds and no reservation keeps (below 0 when more are
// held than the nodes offer now), and mine, the units that (user, server)'s own active pods and reservation
// hold (counted among the held and the kept, not in pool).
func (e *Engine) poolLocked(class, user, server string) (pool, mine int64) {
	pool = e.unclaimedLocked(class)
	for _, p := range e.ix.byUser[user] {
		if p.active && p.pod.Server == server {
			mine += p.units(class)
		}
	}
	if rv := e.res.byUser[user][server]; rv != nil {
		mine += rv.units(class)
	}
	return pool, mine
}

// unclaimedLocked is the units of class that the nodes a new pod can land on offer (inventory.Node.Blocked),
// less those active pods hold there and reservations keep: what admission and the waitlist's hand-over share
// out. Below 0 when more are held than those nodes offer now.
func (e *Engine) unclaimedLocked(class string) int64 {
	return e.ix.capacity[class] - e.ix.held[class] - e.res.reserved[class]
}

// shortLocked returns the index of the first requested allocation with fewer units free than asked (-1: none),
// and how many are.
func (e *Engine) shortLocked(r Request, asked classified, now time.Time) (int, int64) {
	for i, a := range asked.allocs {
		if free := e.freeLocked(asked.classes[i], r.User, r.Server, now); free < a.Count {
			return i, free
		}
	}
	return -1, 0
}

// canTakeLocked lists the classes with a free unit that the policy would admit one unit of, for this user now.
// d is the policy's decision on the request itself: when it refuses for a reason that does not depend on what
// is asked, every unit is refused as well; otherwise those reasons passed, and quota.Fits decides the rest per
// class without running every check of quota.Decide again.
func (e *Engine) canTakeLocked(eff quota.Effective, u quota.Usage, r Request, d quota.Decision, now time.Time) []Option {
	if refusesAnyGPU(d) {
		return nil
	}
	var out []Option
	fits := quota.NewFitter(eff, u)
	var ask [1]gpu.Allocation
	for _, class := range e.ix.classes {
		one := e.ix.sample[class]
		ask[0] = one
		if !fits.Fits(quota.Request{Allocations: ask[:]}) {
			continue
		}
		free := e.freeLocked(class, r.User, r.Server, now)
		if free <= 0 {
			continue
		}
		free = mostThatFit(&fits, one, free)
		if out == nil {
			out = make([]Option, 0, len(e.ix.classes))
		}
		out = append(out, Option{Kind: one.Kind, Class: class, Description: e.ix.described[class], Free: free, unit: one})
	}
	return out
}

// mostThatFit is how many units like one, up to free, the policy admits at once (one fits): what the user could
// take is also bounded by their limits, or "two whole H100s free within your quota" would follow "you may use at
// most 1 GPU". Fits is monotonic in the count: one check when free fit, else a binary search.
func mostThatFit(fits *quota.Fitter, one gpu.Allocation, free int64) int64 {
	ask := [1]gpu.Allocation{one}
	fit := func(n int64) bool {
		ask[0].Count = n
		return fits.Fits(quota.Request{Allocations: ask[:]})
	}
	if free <= 1 || fit(free) {
		return free
	}
	lo, hi := int64(1), free // fit(lo), !fit(hi)
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; fit(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// refusesAnyGPU reports whether d refuses for a reason quota.Decide finds whatever GPUs are asked for: a
// spent budget, GPU-hours unreadable under onUnavailable closed, or the server limit (budgets and servers are
// checked on the usage alone).
func refusesAnyGPU(d quota.Decision) bool {
	if d.Allow {
		return false
	}
	if requestIndependent(d.Reason) {
		return true
	}
	for _, c := range d.Also {
		if requestIndependent(c.Reason) {
			return true
		}
	}
	return false
}

func requestIndependent(r quota.Reason) bool {
	return r == quota.ReasonBudgetExhausted || r == quota.ReasonUsageUnavailable || r == quota.ReasonMaxServers
}

// numbers are a check's numbers for the decision log; unlimited limits are left out (JSON has no infinity).
func numbers(c quota.Check) map[string]float64 {
	m := make(map[string]float64, 4) // and requestedGPUs
	switch c.Reason {
	case quota.ReasonBudgetExhausted:
		put(m, "windowSeconds", c.Window.Seconds())
		put(m, "budget", c.Budget)
		put(m, "used", c.Used)
	case quota.ReasonUsageUnavailable:
		put(m, "windowSeconds", c.Window.Seconds())
		put(m, "budget", c.Budget)
	case quota.ReasonOK, quota.ReasonMaxGPUs, quota.ReasonMaxGPUsPerKind, quota.ReasonMaxServers, quota.ReasonKindNotAllowed:
		put(m, "limit", c.Limit)
		put(m, "held", c.Held)
		put(m, "requested", c.Requested)
	}
	return m
}

func put(m map[string]float64, k string, v float64) {
	if !math.IsInf(v, 0) && !math.IsNaN(v) {
		m[k] = round(v)
	}
}

func sumShares(as []gpu.Allocation) float64 {
	total := 0.0
	for _, a := range as {
		total += a.Share()
	}
	return total
}

// round keeps 4 decimals: 3/7 is 0.4286.
func round(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// reservations are the GPUs of admitted servers whose pods have not appeared yet, per (user, server). The TTL
// is one for all, so expiry order is creation order: a FIFO queue, with replaced and matched ones skipped.
type reservations struct {
	byUser   map[string]map[string]*reservation
	queue    []*reservation
	reserved map[string]int64 // class -> units
	live     int
	seq      uint64
	// changes counts reservations added and released (Engine.Generation).
	changes uint64
	// tag tells this process's ids from another decider's (a standby keeps the old decider's reservations).
	tag string
}

type reservation struct {
	id           string
	user, server string
	classified
	expires time.Time
	// made is when it was made (time.Now, monotonic: Request.Arrived is compared with it).
	made time.Time
	// before are the UIDs of the server's pods that existed when it was reserved: only a new pod matches.
	before []string
	done   bool
}

func newReservations() reservations {
	return reservations{byUser: map[string]map[string]*reservation{}, reserved: map[string]int64{}}
}

func (rs *reservations) reserve(user, server string, allocs classified, expires time.Time, ix *index) string {
	rs.release(rs.byUser[user][server])
	rs.seq++
	rv := &reservation{id: "r" + strconv.FormatInt(expires.UnixMilli(), 36) + "-" + rs.tag + strconv.FormatUint(rs.seq, 36),
		user: user, server: server, classified: allocs, expires: expires, made: time.Now()}
	for _, p := range ix.byUser[user] {
		if p.pod.Server == server {
			rv.before = append(rv.before, p.pod.UID)
		}
	}
	rs.add(rv)
	return rv.id
}

// add counts rv (made here, or mirrored from the deciding replica).
func (rs *reservations) add(rv *reservation) {
	user, server, allocs := rv.user, rv.server, rv.classified
	inner := rs.byUser[user]
	if inner == nil {
		inner = map[string]*reservation{}
		rs.byUser[user] = inner
	}
	inner[server] = rv
	for i, a := range allocs.allocs {
		rs.reserved[allocs.classes[i]] += a.Count
	}
	rs.queue = append(rs.queue, rv)
	rs.live++
	rs.changes++
}

func (rs *reservations) release(rv *reservation) {
	if rv == nil || rv.done {
		return
	}
	rv.done = true
	for i, a := range rv.allocs {
		c := rv.classes[i]
		rs.reserved[c] -= a.Count
		if rs.reserved[c] <= 0 {
			delete(rs.reserved, c)
		}
	}
	if inner := rs.byUser[rv.user]; inner[rv.server] == rv {
		delete(inner, rv.server)
		if len(inner) == 0 {
			delete(rs.byUser, rv.user)
		}
	}
	rs.live--
	rs.changes++
}

// match releases (user, server)'s reservation when a pod of it that was not there when it was made appears.
func (rs *reservations) match(user, server, uid string) {
	rv := rs.byUser[user][server]
	if rv == nil || slices.Contains(rv.before, uid) {
		return
	}
	rs.release(rv)
}

// expire releases the reservations past their TTL at now.
func (rs *reservations) expire(now time.Time) {
	n := 0
	for n < len(rs.queue) && (rs.queue[n].done || !now.Before(rs.queue[n].expires)) {
		rs.release(rs.queue[n])
		rs.queue[n] = nil
		n++
	}
	if n > 0 {
		rs.queue = rs.queue[n:]
	}
}
