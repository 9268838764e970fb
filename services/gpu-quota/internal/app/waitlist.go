package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/usagecache"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/decision"
)

// HubStarter starts a user's server (the waitlist's auto-start); *hubapi.Client satisfies it. The Hub role
// needs the servers scope (start), not only delete:servers.
type HubStarter interface {
	StartServer(ctx context.Context, user, server string, options map[string]any) (hubapi.StartResult, error)
}

// WaitlistStore keeps the waitlist durable (*waitlist.UsageStore: the usage API, in the ledger's database).
type WaitlistStore interface {
	Load(ctx context.Context) (waitlist.State, int64, error)
	Save(ctx context.Context, st waitlist.State, version int64) (int64, error)
}

// waitlister loads, moves on and saves the waitlist.
type waitlister struct {
	o     Options
	eng   *admit.Engine
	log   *decision.Log
	store WaitlistStore
	// stopping ends when the process stops (nil: never): the loop's last save then comes from the replica that
	// still holds the Lease, not from one that lost it.
	stopping <-chan struct{}
	version  atomic.Int64
	saved    atomic.Uint64 // the engine's generation last saved
	loadErr  atomic.Pointer[error]
	decayed  atomic.Pointer[decayedAnswer]

	// saveMu serializes saves (the loop's and the last one when leadership ends) and guards the backoff.
	saveMu sync.Mutex
	// failing counts the saves failed in a row; while it is not 0 the loop tries again only from retryAt (a
	// usage API that is down, or refuses the state, is not asked four times a second with a warning each).
	failing     int
	retryAt     time.Time
	saveMetrics saveMetrics
}

// saveMetrics count the failed saves by reason and those in a row (what the alert watches: 0 again once a save
// works or this replica stops leading, so a blip that the next try mends does not page anyone).
type saveMetrics struct {
	failures *prometheus.CounterVec
	inARow   prometheus.Gauge
}

// Why a save failed (gpuhub_quota_waitlist_save_failures_total's reason).
const (
	saveTooLarge    = "too_large"   // 413: the state is over what the usage API takes
	saveRefused     = "refused"     // another 4xx: gpu-quota's token or the usage API's configuration
	saveConflict    = "conflict"    // someone else kept writing (a former leader)
	saveUnavailable = "unavailable" // no answer, or a 5xx
)

func newSaveMetrics(reg prometheus.Registerer) (saveMetrics, error) {
	m := saveMetrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "waitlist_save_failures_total",
			Help: "Waitlist saves to the usage API that failed, by reason (too_large, refused, conflict, unavailable): changes " +
				"not saved are lost to the next leader."}, []string{"reason"}),
		inARow: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "quota", Name: "waitlist_save_failures_in_a_row",
			Help: "Waitlist saves that failed since the last one that worked (0 when saved, or when this replica does not lead)."}),
	}
	for _, r := range []string{saveTooLarge, saveRefused, saveConflict, saveUnavailable} {
		m.failures.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.failures, m.inARow} {
		if err := reg.Register(c); err != nil {
			return saveMetrics{}, err
		}
	}
	return m, nil
}

type decayedAnswer struct {
	users   map[string]map[string]float64
	fetched time.Time
}

// load reads the stored waitlist until it succeeds (backoff up to a minute); until then the waitlist answers
// "not loaded yet" and admissions do not consider it.
func (w *waitlister) load(ctx context.Context) bool {
	backoff := time.Second
	for {
		st, v, err := w.store.Load(ctx)
		if err == nil {
			w.version.Store(v)
			trimmed := w.eng.LoadWaitlist(st)
			for _, en := range trimmed {
				w.o.Logger.Warn("a stored waitlist entry's spawn options are over what the waitlist keeps (8 KiB; saved by an "+
					"older gpu-quota): it keeps its place without them and without auto-start, so the user starts the server "+
					"when a unit is held for them", "user", en.User, "server", en.Server, "class", en.Class)
			}
			if _, gen, _ := w.eng.WaitlistSnapshot(); len(trimmed) == 0 {
				w.saved.Store(gen) // else saved at the next try, without the options
			}
			w.loadErr.Store(nil)
			w.o.Logger.Info("waitlist loaded", "entries", len(st.Entries), "version", v)
			return true
		}
		w.loadErr.Store(&err)
		w.o.Logger.Warn("cannot read the stored waitlist; retrying", "err", err, "retryIn", backoff)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

// ready is the /readyz detail of the waitlist.
func (w *waitlister) ready(context.Context) error {
	if e := w.loadErr.Load(); e != nil {
		return fmt.Errorf("the stored waitlist could not be read (retrying): %w", *e)
	}
	return nil
}

// save writes the engine's state when it changed since the last save. A conflict (someone else wrote: a
// former leader) is resolved in favour of the leader's state: it is the one acting. After a failure the next
// tries wait 1 s, doubling to a minute, with one warning each.
func (w *waitlister) save(ctx context.Context) { w.saveWhen(ctx, false, true) }

// saveLast is the leader's save before the process ends (it still holds the Lease): tried whatever the backoff.
func (w *waitlister) saveLast(ctx context.Context) { w.saveWhen(ctx, true, true) }

func (w *waitlister) saveWhen(ctx context.Context, now, leading bool) {
	w.saveMu.Lock()
	defer w.saveMu.Unlock()
	st, gen, ready := w.eng.WaitlistSnapshot()
	if !ready || gen == w.saved.Load() || (!now && w.failing > 0 && w.o.Now().Before(w.retryAt)) {
		return
	}
	v, err := w.store.Save(ctx, st, w.version.Load())
	if errors.Is(err, waitlist.ErrConflict) && !leading {
		w.o.Logger.Info("this replica no longer leads and the stored waitlist was written since it saved it: its last changes are left to the queue stored since")
		return
	}
	if errors.Is(err, waitlist.ErrConflict) {
		if _, cur, lerr := w.store.Load(ctx); lerr == nil {
			w.o.Logger.Warn("the stored waitlist changed under this replica; the leader's queue replaces it", "version", cur)
			v, err = w.store.Save(ctx, st, cur)
		}
	}
	if err != nil {
		w.saveFailed(st, err)
		return
	}
	if w.failing > 0 {
		w.o.Logger.Info("waitlist saved again", "failedBefore", w.failing)
		w.failing = 0
		w.saveMetrics.inARow.Set(0)
	}
	w.version.Store(v)
	w.saved.Store(gen)
}

// saveAtEnd is the loop's save when it ends, tried whatever the backoff: the leader's last save when the process
// stops (it holds the Lease until it gives it back); else the Lease was lost, and a queue stored since by someone
// else (the next leader) is left as it is, not replaced by this replica's older one.
func (w *waitlister) saveAtEnd(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	select {
	case <-w.stopping:
		w.saveWhen(sctx, true, true)
	default:
		w.saveWhen(sctx, true, false)
	}
}

// notLeading forgets the failures when this replica stops moving the queue: the next leader saves its own.
func (w *waitlister) notLeading() {
	w.saveMu.Lock()
	defer w.saveMu.Unlock()
	w.failing = 0
	w.saveMetrics.inARow.Set(0)
}

// saveFailed counts a failed save, sets when the next try may come and says what to do.
func (w *waitlister) saveFailed(st waitlist.State, err error) {
	w.failing++
	backoff := min(time.Second<<min(w.failing-1, 6), time.Minute)
	w.retryAt = w.o.Now().Add(backoff)
	reason, todo := saveUnavailable, "check that the usage API answers"
	switch {
	case errors.Is(err, waitlist.ErrConflict):
		reason, todo = saveConflict, "another gpu-quota keeps writing it: check that one replica leads (the Lease)"
	case contract.IsStatus(err, http.StatusRequestEntityTooLarge):
		size := "?"
		if b, jerr := json.Marshal(st); jerr == nil {
			size = fmt.Sprintf("%.0f KiB", float64(len(b))/1024)
		}
		reason, todo = saveTooLarge, "the queue ("+size+", "+fmt.Sprint(len(st.Entries))+" entries) is more than the usage API "+
			"keeps: an admin can take entries off (DELETE api/v1/users/{name}/waitlist)"
	case contract.IsStatus(err, http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound):
		reason, todo = saveRefused, "check gpu-quota's token and that it is among the usage API's --waitlist-services"
	}
	w.saveMetrics.failures.WithLabelValues(reason).Inc()
	w.saveMetrics.inARow.Set(float64(w.failing))
	w.o.Logger.Warn("cannot save the waitlist: a new leader would not see the changes since the last save; "+todo,
		"err", err, "reason", reason, "failedInARow", w.failing, "retryIn", backoff)
}

// run is the leader's waitlist loop: load what the previous leader saved, then every tick move the queues on,
// ask the Hub to start the servers whose turn came with auto-start, and save.
func (w *waitlister) run(ctx context.Context) {
	if !w.load(ctx) {
		return
	}
	ticks := w.o.WaitlistTicks
	if ticks == nil {
		t := time.NewTicker(w.o.WaitlistTick)
		defer t.Stop()
		ticks = t.C
	}
	// Changes between steps (joins, leaves, admissions that serve an entry) are saved within saveAfter, not at the
	// next step only: what a decider that is killed has not saved is lost to the next one.
	saves := time.NewTicker(saveAfter)
	defer saves.Stop()
	for {
		w.step(ctx)
		if !w.untilTick(ctx, ticks, saves.C) {
			// Save what the last step changed before leadership (or the process) ends.
			w.saveAtEnd(ctx)
			w.notLeading()
			return
		}
	}
}

// untilTick saves changes every saveAfter until the next tick (true) or the end of ctx (false).
func (w *waitlister) untilTick(ctx context.Context, ticks <-chan time.Time, saves <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-ticks:
			return true
		case <-saves:
			if w.eng.WaitlistGen() != w.saved.Load() {
				w.save(ctx)
			}
		}
	}
}

// saveAfter bounds how long a change of the queue waits for its save.
const saveAfter = 250 * time.Millisecond

func (w *waitlister) step(ctx context.Context) {
	now := w.o.Now()
	res := w.eng.WaitlistTick(now)
	for _, en := range res.Held {
		w.log.Record(decision.Record{Time: now, User: en.User, Server: en.Server, Action: "hold", Reason: "waitlist_turn",
			Message: fmt.Sprintf("a %s is held until %s", en.Description, en.HeldUntil.UTC().Format(time.RFC3339)),
			Numbers: map[string]float64{"waitedSeconds": en.HeldAt.Sub(en.JoinedAt).Seconds()}})
	}
	for _, en := range res.Expired {
		w.log.Record(decision.Record{Time: now, User: en.User, Server: en.Server, Action: "release", Reason: "waitlist_hold_expired",
			Message: "the server did not start while a unit was held for it; it passed to the next in line"})
	}
	for _, en := range res.Served {
		w.o.Logger.Info("waitlist entry served: its server started", "user", en.User, "server", en.Server, "class", en.Class)
	}
	for _, en := range res.Start {
		if w.o.HubStart == nil {
			break
		}
		// Marked before the Hub is asked: the Hub admits the start (and gpu-quota takes the entry off the queue)
		// before it answers, and the started place must say it was started for the user.
		w.eng.MarkStartRequested(en.User, en.Server, true)
		_, err := w.o.HubStart.StartServer(ctx, en.User, en.Server, en.UserOptions)
		switch {
		case err == nil:
			w.o.Logger.Info("started a server from the waitlist", "user", en.User, "server", en.Server, "class", en.Class)
		case hubapi.IsConflict(err):
			// Already running or starting (the user was quicker, or runs a CPU server under that name): the
			// hold stays until it expires.
			w.o.Logger.Info("the Hub did not start the server from the waitlist; the unit stays held for the user", "user", en.User, "server", en.Server, "err", err)
		default:
			w.o.Logger.Warn("cannot start a server from the waitlist; retrying", "user", en.User, "server", en.Server, "err", err)
			w.eng.MarkStartRequested(en.User, en.Server, false)
		}
	}
	w.save(ctx)
}

// decayedLoop polls the usage API's decayed GPU-hours for fair share.
func (w *waitlister) decayedLoop(ctx context.Context) {
	if w.o.UsageURL == "" {
		return
	}
	for {
		users, err := w.fetchDecayed(ctx)
		if err == nil {
			if prev := w.decayed.Load(); prev == nil || len(prev.users) != len(users) {
				w.o.Logger.Info("fair share: decayed GPU-hours read", "users", len(users), "halfLife", w.o.FairShareHalfLife)
			}
			w.decayed.Store(&decayedAnswer{users: users, fetched: w.o.Now()})
		} else if ctx.Err() == nil {
			w.o.Logger.Warn("cannot read decayed GPU-hours for fair share; the last answer stays in use while fresh", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.o.UsageRefresh):
		}
	}
}

// decayedNow is the last decayed answer while fresh (three polls); unknown otherwise: then everyone counts
// alike and arrival orders the queue.
func (w *waitlister) decayedNow() (map[string]map[string]float64, bool) {
	a := w.decayed.Load()
	if a == nil || w.o.Now().Sub(a.fetched) > 3*w.o.UsageRefresh {
		return nil, false
	}
	return a.users, true
}

func (w *waitlister) fetchDecayed(ctx context.Context) (map[string]map[string]float64, error) {
	u := strings.TrimSuffix(w.o.UsageURL, "/") + "/api/v1/gpu-hours/decayed?halfLife=" + url.QueryEscape(usagecache.Param(w.o.FairShareHalfLife))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out contract.DecayedResponse
	if err := (contract.Caller{Token: w.o.Token, HTTP: w.o.UsageClient, Limit: 64 << 20}).JSON(ctx, http.MethodGet, u, nil, &out); err != nil {
		return nil, err
	}
	if out.Users == nil {
		out.Users = map[string]map[string]float64{}
	}
	return out.Users, nil
}
