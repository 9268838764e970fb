package admit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// The assess request and answer: gpu-quota's wire types, declared once in services/internal/contract for
// gpu-profiles, which asks.
type (
	AssessRequest = contract.AssessRequest
	AssessOption  = contract.AssessOption
	Verdict       = contract.Verdict
	Assessment    = contract.Assessment
)

// Assess applies the same policy decision as Admit to each option, as if the user started Server with it
// now, but reserves nothing, checks nothing about free GPUs and records no decision: it changes no state, so a
// form may ask it as often as it renders. It costs one read of the user's usage under the engine's lock and
// one quota.Decide per option outside it; with the waitlist, one pass over its entries in the same lock
// section. Errors are Admit's (wrapping ErrUnavailable).
func (e *Engine) Assess(_ context.Context, r AssessRequest) (Assessment, error) {
	pol := e.o.Policy()
	if pol == nil {
		return Assessment{}, fmt.Errorf("%w: no policy loaded", ErrUnavailable)
	}
	if err := e.o.Synced(); err != nil {
		return Assessment{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	groups := r.Groups
	if groups == nil {
		dir, err := e.o.Directory()
		if dir == nil {
			return Assessment{}, fmt.Errorf("%w: the request has no groups and the Hub's were not read yet: %w", ErrUnavailable, err)
		}
		groups = dir[r.User]
	}
	ent := e.effective.get(pol, r.User, groups)
	now := e.o.Now()

	asked := make([]quota.Request, len(r.Options))
	var held []classHolds
	e.mu.Lock()
	// Expiring is not a change anyone could see: an expired reservation already counts for nothing.
	e.res.expire(now)
	u := e.usageLocked(ent.windows, r.User, &r.Server, now) // a fresh copy: safe to read after unlock
	holds := e.waitlistHoldsLocked(r.User, r.Server, now)
	if holds != nil {
		held = make([]classHolds, len(r.Options))
	}
	for i, o := range r.Options {
		c := e.ix.resolve(o.Resources, o.NodeSelector)
		asked[i] = quota.Request{Allocations: c.allocs}
		if holds != nil {
			held[i] = holds.of(c.classes)
		}
	}
	e.mu.Unlock()

	out := Assessment{Options: make([]Verdict, len(r.Options)), OnUnavailable: string(ent.eff.OnUnavailable)}
	for i, o := range r.Options {
		d := quota.Decide(ent.eff, u, asked[i])
		out.Options[i] = Verdict{ID: o.ID, Allow: d.Allow, Reason: string(d.Reason), Message: d.Message}
		if held != nil {
			out.Options[i].HeldForOthers, out.Options[i].HeldForYouUntil = held[i].others, held[i].ownUntil
		}
	}
	return out, nil
}

// classHolds are the waitlist's holds on one GPU class as one server sees them: units held for others, and
// until when one is held for it.
type classHolds struct {
	others   int64
	ownUntil time.Time
}

// holdsByClass are the holds of every class with one.
type holdsByClass map[string]classHolds

// of sums the holds on an option's classes (an option asking for several classes; one in practice), the
// soonest end of its own.
func (h holdsByClass) of(classes []string) classHolds {
	var out classHolds
	for i, c := range classes {
		if slices.Contains(classes[:i], c) {
			continue
		}
		ch := h[c]
		out.others += ch.others
		if !ch.ownUntil.IsZero() && (out.ownUntil.IsZero() || ch.ownUntil.Before(out.ownUntil)) {
			out.ownUntil = ch.ownUntil
		}
	}
	return out
}

// waitlistHoldsLocked are the units the waitlist holds at now, by class, as (user, server) sees them: the same
// holds admit counts (holdsLocked), in one pass for every class. Nil when nothing is held. Under e.mu.
func (e *Engine) waitlistHoldsLocked(user, server string, now time.Time) holdsByClass {
	if !e.wlOn() {
		return nil
	}
	var out holdsByClass
	for _, en := range e.wl.st.Entries {
		if !en.Held() || !now.Before(en.HeldUntil) {
			continue
		}
		if out == nil {
			out = holdsByClass{}
		}
		ch := out[en.Class]
		if en.User == user && en.Server == server {
			if ch.ownUntil.IsZero() || en.HeldUntil.Before(ch.ownUntil) {
				ch.ownUntil = en.HeldUntil
			}
		} else {
			ch.others++
		}
		out[en.Class] = ch
	}
	return out
}
