package admit

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// ReasonWaitlist denies a request whose units are free but held for (or owed to) people on the waitlist.
const ReasonWaitlist quota.Reason = "waitlist"

// WaitlistOptions configure the waitlist (services/gpu-quota/README.md, "When no GPU is free").
type WaitlistOptions struct {
	// Enabled turns the waitlist on: requests may join it, and queued people go before newcomers.
	Enabled bool
	// Hold is how long a freed unit is held for the next in line (default 10 min).
	Hold time.Duration
	// Decayed is every user's GPU-hours by class, decayed with the fair-share half-life (the usage API's
	// gpu-hours/decayed), and whether it is known; nil or unknown: everyone counts as equal (arrival order).
	Decayed func() (map[string]map[string]float64, bool)
}

// WaitlistChoice is what the spawn form says about the waitlist.
type WaitlistChoice = contract.WaitlistChoice

// Place and Contention are gpu-quota's wire types (waitlist answers), declared once in
// services/internal/contract for the usage API's admin view, gpu-culler and the CLI, which read them.
type (
	Place      = contract.Place
	Contention = contract.Contention
)

// Errors of the waitlist's API.
var (
	ErrWaitlistOff      = errors.New("the waitlist is not enabled (gpu-quota --waitlist)")
	ErrWaitlistNotReady = errors.New("the waitlist is not loaded yet (the usage API keeps it): try again in a minute")
	ErrNotQueued        = waitlist.ErrNotQueued
)

// JoinError is a join refused for a reason the user can act on (in plain words).
type JoinError struct{ Message string }

func (e *JoinError) Error() string { return e.Message }

type wlKey struct{ user, server string }

// waitlistState is the engine's waitlist, under e.mu.
type waitlistState struct {
	st      waitlist.State
	ready   bool
	blocked map[wlKey]string
	turn    *waitlist.Turnover
	// gen moves on every change: the persister saves when it differs from what it saved.
	gen uint64
	// factors are the users' fair-share factors as of the last tick.
	factors map[string]float64
	// recent are entries served within recentServed, newest last: the user is told their server started.
	recent []servedEntry
	// size is the state's JSON size as of generation sizeGen (sized: computed at least once).
	size    int
	sizeGen uint64
	sized   bool
}

type servedEntry struct {
	en waitlist.Entry
	at time.Time
}

// recentServed is how long a served entry is still shown (as started) to its user.
const recentServed = 15 * time.Minute

// rememberServedLocked keeps en as served at now, and forgets those served longer ago than recentServed.
func (e *Engine) rememberServedLocked(en waitlist.Entry, now time.Time) {
	kept := e.wl.recent[:0]
	for _, r := range e.wl.recent {
		if now.Sub(r.at) < recentServed && (r.en.User != en.User || r.en.Server != en.Server) {
			kept = append(kept, r)
		}
	}
	kept = append(kept, servedEntry{en: en, at: now})
	e.wl.recent = kept
}

func (e *Engine) wlOn() bool { return e.o.Waitlist.Enabled }

// LoadWaitlist installs the stored state (at start, before the waitlist answers). Entries saved before joins were
// bounded whose UserOptions are over maxUserOptions keep their place without them and without AutoStart (the
// user starts the server when it is held for them): they are returned, to be logged.
func (e *Engine) LoadWaitlist(st waitlist.State) (trimmed []waitlist.Entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, en := range st.Entries {
		if UserOptionsError(en.UserOptions) != nil {
			st.Entries[i].UserOptions, st.Entries[i].AutoStart = nil, false
			trimmed = append(trimmed, en)
		}
	}
	e.wl.st = st
	e.wl.ready = true
	e.wl.gen++
	return trimmed
}

// WaitlistSnapshot is the state to save and its generation.
func (e *Engine) WaitlistSnapshot() (waitlist.State, uint64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.wl.st.Clone(), e.wl.gen, e.wl.ready
}

// WaitlistGen is the state's generation: it moves on every change.
func (e *Engine) WaitlistGen() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.wl.gen
}

// holdsLocked are the units of class held for entries other than (user, server), and (user, server)'s own.
func (e *Engine) holdsLocked(class, user, server string, now time.Time) (others, own int64) {
	for _, en := range e.wl.st.Entries {
		if en.Class != class || !en.Held() || !now.Before(en.HeldUntil) {
			continue
		}
		if en.User == user && en.Server == server {
			own++
		} else {
			others++
		}
	}
	return others, own
}

// aheadLocked is how many unblocked entries wait for class ahead of (user, server): all of them when it is not
// queued for class. Units free for it are those left after each of them got one.
func (e *Engine) aheadLocked(class, user, server string) int64 {
	var n int64
	for _, en := range e.wl.st.Order(class, e.factorLocked) {
		if en.Held() {
			continue
		}
		if en.User == user && en.Server == server {
			return n
		}
		if _, blocked := e.wl.blocked[wlKey{en.User, en.Server}]; !blocked {
			n++
		}
	}
	return n
}

// factorLocked is the user's fair-share factor as of the last refresh (1 when unknown).
func (e *Engine) factorLocked(user string) float64 {
	if f, ok := e.wl.factors[user]; ok {
		return f
	}
	return 1
}

// waitlistFreeLocked adjusts free, the units of class free for (user, server) on the nodes, by the waitlist:
// units held for others are not free, and while people wait, a unit is free for (user, server) only after each
// unblocked entry ahead of it got one. A unit held for (user, server) itself is among free.
func (e *Engine) waitlistFreeLocked(free int64, class, user, server string, now time.Time) int64 {
	if !e.wlOn() || len(e.wl.st.Entries) == 0 {
		return free
	}
	others, own := e.holdsLocked(class, user, server, now)
	free -= others
	if own == 0 {
		free -= e.aheadLocked(class, user, server)
	}
	return max(free, 0)
}

// maxUserOptions bounds the spawn form's answer an entry keeps (UserOptions, encoded as JSON) to start its server
// when its turn comes. The form's options are a profile slug and a few choices, a few hundred bytes; the whole
// waitlist is saved as one body that the usage API takes up to 1 MiB (usage-api MaxWaitlistBody), so without a
// bound a few joins with large options (the API takes 64 KiB a request) would stop it being saved for everyone.
const maxUserOptions = 8 << 10

// maxSavedState bounds the waitlist as saved (the state's JSON): the usage API takes at most 1 MiB (usage-api
// MaxWaitlistBody), and a queue it refuses is not saved for anyone (gpuhub_quota_waitlist_save_failures_total
// {reason="too_large"}). Joins that would take the state beyond it are refused; the rest leaves room for what
// entries gain while they wait (holds).
const maxSavedState = 768 << 10

// savedSizeLocked is the size of the state's JSON, computed again only after the state changed (gen moves on
// every change).
func (e *Engine) savedSizeLocked() int {
	if !e.wl.sized || e.wl.sizeGen != e.wl.gen {
		b, err := json.Marshal(e.wl.st)
		if err != nil {
			return 0 // not JSON: the save says so
		}
		e.wl.size, e.wl.sizeGen, e.wl.sized = len(b), e.wl.gen, true
	}
	return e.wl.size
}

// maxEntryJSON bounds one entry as saved: its userOptions (maxUserOptions) and the rest of the request (profile,
// node selector, resources: a few hundred bytes from the Hub glue, but an API join may send up to 64 KiB of them).
const maxEntryJSON = 16 << 10

// roomLocked refuses en when it is over maxEntryJSON, or when queueing it (in place of (user, server)'s entry, if
// any) would take the saved state beyond maxSavedState; else it returns how much the state grows (< 0: shrinks).
func (e *Engine) roomLocked(en waitlist.Entry) (int, error) {
	b, err := json.Marshal(en)
	if err != nil {
		return 0, &JoinError{Message: "This server's request cannot be kept on the waitlist: start the server when a GPU is free."}
	}
	if len(b) > maxEntryJSON {
		return 0, &JoinError{Message: fmt.Sprintf("This server's request takes %.1f KiB as the waitlist keeps it, more than it "+
			"keeps for one server (%d KiB): pick a profile with fewer options to join the waitlist, or start the server "+
			"when a GPU is free.", float64(len(b))/1024, maxEntryJSON>>10)}
	}
	grow := len(b) + 1 // and a comma
	if i := e.wl.st.Find(en.User, en.Server); i >= 0 {
		if old, err := json.Marshal(e.wl.st.Entries[i]); err == nil {
			grow -= len(old) + 1
		}
	}
	if grow > 0 && e.savedSizeLocked()+grow > maxSavedState {
		return 0, &JoinError{Message: fmt.Sprintf("The waitlist is full right now (%d servers wait): try again when some of them "+
			"have started, or start the server when a GPU is free.", len(e.wl.st.Entries))}
	}
	return grow, nil
}

// maxEntriesPerUser bounds one user's entries when the policy does not (no maxServers, or exempt): with
// maxUserOptions, one user's entries stay far below what the usage API takes.
const maxEntriesPerUser = 16

// UserOptionsError refuses to keep opts with a waitlist entry when they are over maxUserOptions (a *JoinError;
// nil when they fit). The API's join answers it with a 400 before joining; an admission that joins is refused it
// by the engine, which starts nothing then anyway.
func UserOptionsError(opts map[string]any) error {
	if len(opts) == 0 {
		return nil
	}
	b, err := json.Marshal(opts)
	if err == nil && len(b) <= maxUserOptions {
		return nil
	}
	size := "cannot be kept" // not JSON: never from a decoded request
	if err == nil {
		size = fmt.Sprintf("take %.1f KiB", float64(len(b))/1024)
	}
	return &JoinError{Message: fmt.Sprintf("The spawn form's options for this server %s, more than the waitlist keeps with a "+
		"server (%d KiB): pick a profile with fewer options to join the waitlist, or start the server when a GPU is free.",
		size, maxUserOptions>>10)}
}

// runsLocked reports whether user's server counts in usageLocked: an active pod of it with GPUs, or a
// reservation.
func (e *Engine) runsLocked(user, server string) bool {
	if e.res.byUser[user][server] != nil {
		return true
	}
	for _, p := range e.ix.byUser[user] {
		if p.active && p.pod.Server == server && len(p.allocs) > 0 {
			return true
		}
	}
	return false
}

// joinLimitLocked refuses (user, server) a place when user's GPU servers, running and waiting with it, would be
// more than maxServers allows, or their entries more than maxEntriesPerUser: each entry is a server the user
// means to run, and may be held a unit. An entry of server itself is replaced by the join and not counted.
func (e *Engine) joinLimitLocked(eff quota.Effective, user, server string, now time.Time) error {
	entries, waiting := 0, 0
	for _, en := range e.wl.st.Entries {
		if en.User != user || en.Server == server {
			continue
		}
		entries++
		if !e.runsLocked(user, en.Server) { // counted as running already
			waiting++
		}
	}
	if entries >= maxEntriesPerUser {
		return &JoinError{Message: fmt.Sprintf("You already wait for %d servers on the waitlist, the most one user may. "+
			"Take one of them off the waitlist to wait for this one instead.", entries)}
	}
	limit := eff.MaxServers
	if eff.Exempt.Value || limit.Value.IsUnlimited() {
		return nil
	}
	running := e.usageLocked(nil, user, &server, now).Servers
	if float64(running+waiting+1) <= float64(limit.Value) {
		return nil
	}
	return &JoinError{Message: serversWaitingMessage(running, waiting, int(limit.Value), limit.From)}
}

// withHoldsLocked is u, user's usage for a decision about server, with the units held on the waitlist for
// user's other servers counted as held (each entry a server): a unit held for the user is set aside for them as
// if taken. It returns the entries it counted.
func (e *Engine) withHoldsLocked(u quota.Usage, user, server string, now time.Time) (quota.Usage, []waitlist.Entry) {
	var held []waitlist.Entry
	for _, en := range e.wl.st.Entries {
		if en.User != user || en.Server == server || !en.Held() || !now.Before(en.HeldUntil) || e.runsLocked(user, en.Server) {
			continue
		}
		if held == nil {
			u.Held = slices.Clone(u.Held) // u's slice may be the caller's
		}
		u.Held = append(u.Held, e.ix.resolve(en.Resources, en.NodeSelector).allocs...)
		u.Servers++
		held = append(held, en)
	}
	return u, held
}

// joinLocked queues r's server for the first unit of asked that is short; it returns its place. eff is r's
// user's policy: their servers, running and waiting, stay within its maxServers.
func (e *Engine) joinLocked(r Request, asked classified, eff quota.Effective, now time.Time) (Place, error) {
	if !e.wlOn() {
		return Place{}, ErrWaitlistOff
	}
	if !e.wl.ready {
		return Place{}, ErrWaitlistNotReady
	}
	if len(asked.allocs) == 0 {
		return Place{}, &JoinError{Message: "This server asks for no GPU: it does not need the waitlist."}
	}
	if err := UserOptionsError(r.UserOptions); err != nil {
		return Place{}, err
	}
	if err := e.joinLimitLocked(eff, r.User, r.Server, now); err != nil {
		return Place{}, err
	}
	// The first unit that is short (the callers found one; the first unit otherwise).
	i, _ := e.shortLocked(r, asked, now)
	i = max(i, 0)
	unit := asked.allocs[i]
	class := asked.classes[i]
	en := waitlist.Entry{User: r.User, Server: r.Server, Class: class, Kind: unit.Kind,
		Description: unitName(unit), Resources: r.Resources, NodeSelector: r.NodeSelector,
		Profile: r.Profile, AutoStart: r.Waitlist != nil && r.Waitlist.AutoStart, UserOptions: r.UserOptions, JoinedAt: now}
	grow, err := e.roomLocked(en)
	if err != nil {
		return Place{}, err
	}
	sized := e.wl.sized && e.wl.sizeGen == e.wl.gen
	en = e.wl.st.Join(en, now)
	e.wl.gen++
	if sized { // joins in a row grow the known size, not encode the whole queue each (within a few bytes: the arrival number)
		e.wl.size, e.wl.sizeGen = e.wl.size+grow, e.wl.gen
	}
	e.waitlistMetricsLocked()
	return e.placeLocked(en, now), nil
}

// placeLocked describes en's place now.
func (e *Engine) placeLocked(en waitlist.Entry, now time.Time) Place {
	p := Place{User: en.User, Server: en.Server, Class: en.Class, Kind: en.Kind, Description: en.Description,
		State: "waiting", JoinedAt: en.JoinedAt, HeldUntil: en.HeldUntil, AutoStart: en.AutoStart, StartRequested: en.StartRequested,
		FairShare: e.factorLocked(en.User), Blocked: e.wl.blocked[wlKey{en.User, en.Server}]}
	if en.Held() {
		p.State = "held"
	}
	pos := 0
	for _, o := range e.wl.st.Order(en.Class, e.factorLocked) {
		if o.Held() {
			continue
		}
		p.Waiting++
		if o.User == en.User && o.Server == en.Server {
			pos = p.Waiting
		}
	}
	p.Position = pos
	name := entryName(en)
	switch {
	case en.Held():
		p.Message = fmt.Sprintf("Your turn: %s is held for you until %s.", gpu.WithArticle(name), hhmm(en.HeldUntil))
		if en.AutoStart {
			p.Message += " Your server is being started for you."
		} else {
			p.Message += " Start your server before then, or it passes to the next person in line."
		}
	default:
		p.Estimate = waitlist.Estimate(pos, e.deadlinesLocked(en.Class, now), e.wl.turn.Mean(en.Class, now), now)
		p.Message = fmt.Sprintf("You are number %d of %d waiting for %s.", pos, p.Waiting, gpu.WithArticle(name))
		if !p.Estimate.IsZero() {
			p.Message += fmt.Sprintf(" Estimated: around %s.", hhmm(p.Estimate))
		}
		if en.AutoStart {
			p.Message += " Your server starts by itself when your turn comes."
		} else {
			p.Message += " When your turn comes, one is held for you for a while."
		}
		if p.Blocked != "" {
			p.Message += " For now you cannot be served: " + p.Blocked
		}
	}
	return p
}

// entryName is what en waits for in words: its description, else its class.
func entryName(en waitlist.Entry) string {
	if en.Description != "" {
		return en.Description
	}
	return en.Class
}

// startedPlace is the place of an entry whose server started from the queue at.
func startedPlace(en waitlist.Entry, at time.Time) Place {
	name := entryName(en)
	srv := "Your server"
	if en.Server != "" {
		srv = fmt.Sprintf("Your server %q", en.Server)
	}
	how := "started"
	if en.AutoStart && en.StartRequested {
		how = "was started for you"
	}
	return Place{User: en.User, Server: en.Server, Class: en.Class, Kind: en.Kind, Description: en.Description,
		State: "started", JoinedAt: en.JoinedAt, HeldUntil: en.HeldUntil, StartedAt: at, AutoStart: en.AutoStart,
		StartRequested: en.StartRequested, FairShare: 1,
		Message: fmt.Sprintf("%s %s at %s with %s from the waitlist.", srv, how, hhmm(at), gpu.WithArticle(name))}
}

// hhmm is a time as the other services write it in messages (gpu-culler, the quota enforcer): UTC, said so.
func hhmm(t time.Time) string { return t.UTC().Format("15:04") + " UTC" }

// deadlinesLocked are when servers holding units of class on nodes that take new pods are due to stop, from
// their notices (the culler's countdown, the quota enforcer's).
func (e *Engine) deadlinesLocked(class string, now time.Time) []time.Time {
	var out []time.Time
	for _, p := range e.ix.pods {
		if !p.active || len(p.pod.Notices) == 0 || p.units(class) == 0 || e.ix.blocked[p.pod.Node] != "" {
			continue // a unit freed on a node that takes no new pods frees for nobody
		}
		ns, _ := notice.Parse(p.pod.Notices)
		var soonest time.Time
		for _, n := range ns {
			if n.Stops && !n.Deadline.IsZero() && (soonest.IsZero() || n.Deadline.Before(soonest)) {
				soonest = n.Deadline
			}
		}
		if !soonest.IsZero() {
			for range p.units(class) {
				out = append(out, soonest)
			}
		}
	}
	return out
}

// Join queues a server outside admission (the panel's or the API's join): the request is judged by the
// policy as an admission would be; a request the policy refuses, or one that could start now, is not queued.
func (e *Engine) Join(r Request) (Place, error) {
	pol := e.o.Policy()
	if pol == nil {
		return Place{}, fmt.Errorf("%w: no policy loaded", ErrUnavailable)
	}
	if err := e.o.Synced(); err != nil {
		return Place{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	groups, err := e.groupsOf(r.User, r.Groups)
	if err != nil {
		return Place{}, err
	}
	ent := e.effective.get(pol, r.User, groups)
	now := e.o.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.notDeciding {
		return Place{}, ErrNotLeader
	}
	e.res.expire(now)
	asked := e.ix.resolve(r.Resources, r.NodeSelector)
	u := e.usageLocked(ent.windows, r.User, &r.Server, now)
	d := quota.Decide(ent.eff, u, quota.Request{Allocations: asked.allocs})
	if !d.Allow {
		return Place{}, &JoinError{Message: "You cannot join the waitlist for this: " + d.Message}
	}
	if i, _ := e.shortLocked(r, asked, now); i < 0 && len(asked.allocs) > 0 {
		return Place{}, &JoinError{Message: "What this server asks for is free now: start it instead of waiting."}
	}
	return e.joinLocked(r, asked, ent.eff, now)
}

// Leave takes (user, server) off the waitlist; a unit held for it passes to the next in line.
func (e *Engine) Leave(user, server string) error {
	if !e.wlOn() {
		return ErrWaitlistOff
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.notDeciding {
		return ErrNotLeader
	}
	if !e.wl.ready {
		return ErrWaitlistNotReady
	}
	if _, err := e.wl.st.Remove(user, server); err != nil {
		return err
	}
	e.wl.gen++
	e.waitlistMetricsLocked()
	return nil
}

// Places are user's places in the queues ("" : every user's, for admins), in line order per class.
func (e *Engine) Places(user string) ([]Place, error) {
	if !e.wlOn() {
		return nil, ErrWaitlistOff
	}
	now := e.o.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.wl.ready {
		return nil, ErrWaitlistNotReady
	}
	out := []Place{}
	for _, class := range e.wl.st.Classes() {
		for _, en := range e.wl.st.Order(class, e.factorLocked) {
			if user == "" || en.User == user {
				out = append(out, e.placeLocked(en, now))
			}
		}
	}
	for _, r := range e.wl.recent {
		if (user == "" || r.en.User == user) && now.Sub(r.at) < recentServed {
			out = append(out, startedPlace(r.en, r.at))
		}
	}
	return out, nil
}

// Contended are the classes someone waits for (held entries do not count: their unit is found).
func (e *Engine) Contended() ([]Contention, error) {
	if !e.wlOn() {
		return []Contention{}, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.wl.ready {
		return nil, ErrWaitlistNotReady
	}
	by := map[string]*Contention{}
	var order []string
	for _, en := range e.wl.st.Entries {
		if en.Held() {
			continue
		}
		c := by[en.Class]
		if c == nil {
			c = &Contention{Class: en.Class, Kind: en.Kind}
			by[en.Class] = c
			order = append(order, en.Class)
		}
		c.Waiting++
	}
	slices.Sort(order)
	out := make([]Contention, 0, len(order))
	for _, c := range order {
		out = append(out, *by[c])
	}
	return out, nil
}

// TickResult is what one waitlist step did: entries whose turn came, entries whose hold expired, entries
// served (their server's new pod appeared).
type TickResult struct {
	Held, Expired, Served []waitlist.Entry
	// Start are held AutoStart entries whose start the Hub was not asked for yet.
	Start []waitlist.Entry
}

// WaitlistTick moves the queues on at now (the leader, every second or so): refreshes fair share and who is
// blocked by quota, removes served entries and expired holds, and holds each free unit for the next unblocked
// entry in line. Exactly one entry gets each free unit: it runs under the same lock as admissions.
func (e *Engine) WaitlistTick(now time.Time) TickResult {
	var out TickResult
	if !e.wlOn() {
		return out
	}
	pol := e.o.Policy()
	decayed, decayedOK := map[string]map[string]float64(nil), false
	if e.o.Waitlist.Decayed != nil {
		decayed, decayedOK = e.o.Waitlist.Decayed()
	}
	groups := map[string][]string{}
	e.mu.Lock()
	users := map[string]bool{}
	for _, en := range e.wl.st.Entries {
		users[en.User] = true
	}
	e.mu.Unlock()
	for u := range users {
		if g, err := e.groupsOf(u, nil); err == nil {
			groups[u] = g
		}
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.wl.ready || e.notDeciding {
		return out
	}
	e.res.expire(now)
	before := e.wl.gen

	// Served: a pod of the server created after it joined is active (it started, from the queue or not).
	kept := e.wl.st.Entries[:0]
	for _, en := range e.wl.st.Entries {
		if e.startedSinceLocked(en) {
			out.Served = append(out.Served, en)
			e.rememberServedLocked(en, now)
			turn := now
			if en.Held() {
				turn = en.HeldAt
			}
			e.wlMetrics.waited(en.Class, turn.Sub(en.JoinedAt))
			continue
		}
		kept = append(kept, en)
	}
	if len(out.Served) > 0 {
		e.wl.st.Entries = kept
		e.wl.gen++
	}
	if ex := e.wl.st.Expire(now); len(ex) > 0 {
		out.Expired = ex
		e.wl.gen++
		for _, en := range ex {
			e.wlMetrics.expired.WithLabelValues(en.Class).Inc()
		}
	}

	// Fair share and quota, per user.
	e.wl.factors = map[string]float64{}
	e.wl.blocked = map[wlKey]string{}
	if pol != nil {
		usage := map[string]float64{}
		total := 0.0
		for u, byClass := range decayed {
			g, ok := groups[u]
			if !ok {
				g = nil
			}
			w := e.effective.get(pol, u, g).eff.Weighted(byClass)
			usage[u] = w
			total += w
		}
		for _, class := range e.wl.st.Classes() {
			var shares float64
			seen := map[string]float64{}
			for _, en := range e.wl.st.Entries {
				if en.Class != class {
					continue
				}
				if _, ok := seen[en.User]; !ok {
					s := waitlist.Shares(e.effective.get(pol, en.User, groups[en.User]).eff.Priority.Value)
					seen[en.User] = s
					shares += s
				}
			}
			for u, s := range seen {
				f := 1.0
				if decayedOK {
					f = waitlist.Factor(usage[u], total, s, shares)
				}
				// A user waiting in several queues keeps the lowest factor (the most conservative order).
				if old, ok := e.wl.factors[u]; !ok || f < old {
					e.wl.factors[u] = f
				}
			}
		}
		for _, en := range e.wl.st.Entries {
			if msg := e.overQuotaLocked(pol, groups, en, now); msg != "" {
				e.wl.blocked[wlKey{en.User, en.Server}] = msg
			}
		}
	}

	// Offer each free unit to the next unblocked entry in line. A user given a unit here is judged again for
	// their next entry: that unit counts as theirs.
	placed := map[string]bool{}
	for _, class := range e.wl.st.Classes() {
		others, _ := e.holdsLocked(class, "", "\x00", now)
		free := e.unclaimedLocked(class) - others
		for _, en := range e.wl.st.Order(class, e.factorLocked) {
			if free <= 0 {
				break
			}
			if en.Held() {
				continue
			}
			if _, blocked := e.wl.blocked[wlKey{en.User, en.Server}]; blocked {
				continue
			}
			if placed[en.User] && pol != nil {
				if msg := e.overQuotaLocked(pol, groups, en, now); msg != "" {
					e.wl.blocked[wlKey{en.User, en.Server}] = msg
					continue
				}
			}
			h, err := e.wl.st.Hold(en.User, en.Server, now, e.holdWindow())
			if err != nil {
				continue
			}
			placed[en.User] = true
			free--
			e.wl.gen++
			out.Held = append(out.Held, h)
		}
	}
	for _, en := range e.wl.st.Entries {
		if en.Held() && en.AutoStart && !en.StartRequested {
			out.Start = append(out.Start, en)
		}
	}
	if e.wl.gen != before {
		e.waitlistMetricsLocked()
	}
	return out
}

// overQuotaLocked is why en cannot be served now for its user's quota ("" when it can): the policy refuses it
// on what the user holds, or on that and the units held for their other entries. Users whose groups the Hub has
// not told yet are judged when it does.
func (e *Engine) overQuotaLocked(pol *quota.Policy, groups map[string][]string, en waitlist.Entry, now time.Time) string {
	g, known := groups[en.User]
	if !known {
		return ""
	}
	ent := e.effective.get(pol, en.User, g)
	u := e.usageLocked(ent.windows, en.User, &en.Server, now)
	req := quota.Request{Allocations: e.ix.resolve(en.Resources, en.NodeSelector).allocs}
	if d := quota.Decide(ent.eff, u, req); !d.Allow {
		return d.Message
	}
	if withHolds, held := e.withHoldsLocked(u, en.User, en.Server, now); len(held) > 0 && !quota.Decide(ent.eff, withHolds, req).Allow {
		return heldForOthersMessage(held)
	}
	return ""
}

func (e *Engine) holdWindow() time.Duration {
	if e.o.Waitlist.Hold > 0 {
		return e.o.Waitlist.Hold
	}
	return 10 * time.Minute
}

// MarkStartRequested records that the Hub is asked (on) to start a held entry's server, or that the request
// failed and is to be made again (off).
func (e *Engine) MarkStartRequested(user, server string, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.wl.st.MarkStartRequested(user, server, on)
	e.wl.gen++
}

// startedSinceLocked reports whether a pod of en's server created after en joined is active.
func (e *Engine) startedSinceLocked(en waitlist.Entry) bool {
	for _, p := range e.ix.byUser[en.User] {
		if p.active && p.pod.Server == en.Server && !p.pod.Created.Before(en.JoinedAt) {
			return true
		}
	}
	return false
}

// servedLocked takes (user, server) off the queue when admitted (it holds the unit through its reservation
// from now on).
func (e *Engine) servedLocked(user, server string, now time.Time) {
	if !e.wlOn() {
		return
	}
	en, err := e.wl.st.Remove(user, server)
	if err != nil {
		return
	}
	e.wl.gen++
	e.rememberServedLocked(en, now)
	turn := now
	if en.Held() {
		turn = en.HeldAt
	}
	e.wlMetrics.waited(en.Class, turn.Sub(en.JoinedAt))
	e.waitlistMetricsLocked()
}

// groupsOf are user's groups: those given, else the freshest the Hub told, else the directory's.
func (e *Engine) groupsOf(user string, given []string) ([]string, error) {
	if given != nil {
		return given, nil
	}
	e.toldMu.Lock()
	var groups []string
	t, ok := e.told[user]
	if ok {
		groups = t.groups // under toldMu: Admit changes the entry in place
	}
	e.toldMu.Unlock()
	if ok {
		return groups, nil
	}
	dir, err := e.o.Directory()
	if dir == nil {
		return nil, fmt.Errorf("%w: the Hub's groups were not read yet: %w", ErrUnavailable, err)
	}
	return dir[user], nil
}

// freedLocked records units of classes freed at now (for the turnover estimate).
func (e *Engine) freedLocked(c classified, now time.Time) {
	if e.wl.turn == nil {
		return
	}
	for i, a := range c.allocs {
		e.wl.turn.Freed(c.classes[i], now, a.Count)
	}
}

// waitlistMetrics are the waitlist's series.
type waitlistMetrics struct {
	length  *prometheus.GaugeVec
	held    *prometheus.GaugeVec
	wait    *prometheus.HistogramVec
	expired *prometheus.CounterVec
	served  *prometheus.CounterVec
}

func newWaitlistMetrics() waitlistMetrics {
	return waitlistMetrics{
		length: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "waitlist_length",
			Help: "Servers waiting for a unit of a GPU class (held ones not counted)."}, []string{"class"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "waitlist_held",
			Help: "Units of a GPU class held for the next in line until they start their server."}, []string{"class"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "waitlist_wait_seconds",
			Help:    "Time from joining the waitlist to the turn (a unit held, or admitted), per GPU class.",
			Buckets: []float64{30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400}}, []string{"class"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "waitlist_holds_expired_total",
			Help: "Holds that ended without the server starting: the unit passed to the next in line."}, []string{"class"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "waitlist_served_total",
			Help: "Waitlist entries whose server started."}, []string{"class"}),
	}
}

func (m waitlistMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.length, m.held, m.wait, m.expired, m.served}
}

func (m waitlistMetrics) waited(class string, d time.Duration) {
	m.served.WithLabelValues(class).Inc()
	m.wait.WithLabelValues(class).Observe(max(d, 0).Seconds())
}

// waitlistMetricsLocked sets the gauges from the state.
func (e *Engine) waitlistMetricsLocked() {
	e.wlMetrics.length.Reset()
	e.wlMetrics.held.Reset()
	for _, en := range e.wl.st.Entries {
		if en.Held() {
			e.wlMetrics.held.WithLabelValues(en.Class).Inc()
		} else {
			e.wlMetrics.length.WithLabelValues(en.Class).Inc()
		}
	}
}
