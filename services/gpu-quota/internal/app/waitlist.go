package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

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
	o       Options
	eng     *admit.Engine
	log     *decision.Log
	store   WaitlistStore
	version atomic.Int64
	saved   atomic.Uint64 // the engine's generation last saved
	loadErr atomic.Pointer[error]
	decayed atomic.Pointer[decayedAnswer]
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
			w.eng.LoadWaitlist(st)
			_, gen, _ := w.eng.WaitlistSnapshot()
			w.saved.Store(gen)
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
// former leader) is resolved in favour of the leader's state: it is the one acting.
func (w *waitlister) save(ctx context.Context) {
	st, gen, ready := w.eng.WaitlistSnapshot()
	if !ready || gen == w.saved.Load() {
		return
	}
	v, err := w.store.Save(ctx, st, w.version.Load())
	if errors.Is(err, waitlist.ErrConflict) {
		if _, cur, lerr := w.store.Load(ctx); lerr == nil {
			w.o.Logger.Warn("the stored waitlist changed under this replica; the leader's queue replaces it", "version", cur)
			v, err = w.store.Save(ctx, st, cur)
		}
	}
	if err != nil {
		w.o.Logger.Warn("cannot save the waitlist; retrying at the next step", "err", err)
		return
	}
	w.version.Store(v)
	w.saved.Store(gen)
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
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			w.save(sctx)
			cancel()
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
