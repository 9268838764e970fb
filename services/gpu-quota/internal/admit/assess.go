package admit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
)

// AssessRequest asks which of several spawn choices the policy would admit for a user now (gpu-profiles, at
// every render of the spawn form).
type AssessRequest struct {
	User string `json:"user"`
	// Server is the server the form is for ("" the default one): like Admit, its own pods and reservation are
	// left out of what the user holds.
	Server string `json:"server"`
	// Groups are the user's Hub groups as the Hub sees them now; nil: the engine's directory.
	Groups  []string       `json:"groups"`
	Options []AssessOption `json:"options"`
}

// AssessOption is one spawn choice: the GPU resources and nodeSelector its pod would have.
type AssessOption struct {
	ID           string            `json:"id"`
	Resources    map[string]int64  `json:"resources"`
	NodeSelector map[string]string `json:"nodeSelector"`
}

// Verdict is the policy's answer for one option. Reason is one of quota's reasons (never none_free: what is
// free is gpu-profiles' business); Message is the user's plain words when refused. The waitlist's part is
// told apart, since gpu-profiles counts free units from its own inventory, which does not see holds.
type Verdict struct {
	ID      string `json:"id"`
	Allow   bool   `json:"allow"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// HeldForOthers is how many units of the option's GPU class the waitlist holds right now for other people
	// (or the user's other servers): free on the nodes, but admit refuses them to this server (reason
	// waitlist). 0 without the waitlist.
	HeldForOthers int64 `json:"heldForOthers"`
	// HeldForYouUntil is when the unit the waitlist holds for this server (its turn) passes to the next in
	// line; left out when none is held for it.
	HeldForYouUntil time.Time `json:"heldForYouUntil,omitzero"`
}

// Assessment answers an AssessRequest, option by option in the request's order.
type Assessment struct {
	Options       []Verdict  `json:"options"`
	OnUnavailable quota.Mode `json:"onUnavailable"`
}

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

	out := Assessment{Options: make([]Verdict, len(r.Options)), OnUnavailable: ent.eff.OnUnavailable}
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
