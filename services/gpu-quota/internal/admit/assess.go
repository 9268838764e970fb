package admit

import (
	"context"
	"fmt"

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
// free is gpu-profiles' business); Message is the user's plain words when refused.
type Verdict struct {
	ID      string `json:"id"`
	Allow   bool   `json:"allow"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Assessment answers an AssessRequest, option by option in the request's order.
type Assessment struct {
	Options       []Verdict  `json:"options"`
	OnUnavailable quota.Mode `json:"onUnavailable"`
}

// Assess applies the same policy decision as Admit to each option, as if the user started Server with it
// now, but reserves nothing, checks nothing about free GPUs and records no decision: it changes no state, so a
// form may ask it as often as it renders. It costs one read of the user's usage under the engine's lock and
// one quota.Decide per option outside it. Errors are Admit's (wrapping ErrUnavailable).
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
	e.mu.Lock()
	// Expiring is not a change anyone could see: an expired reservation already counts for nothing.
	e.res.expire(now)
	u := e.usageLocked(ent.windows, r.User, &r.Server, now) // a fresh copy: safe to read after unlock
	for i, o := range r.Options {
		asked[i] = quota.Request{Allocations: e.ix.resolve(o.Resources, o.NodeSelector).allocs}
	}
	e.mu.Unlock()

	out := Assessment{Options: make([]Verdict, len(r.Options)), OnUnavailable: ent.eff.OnUnavailable}
	for i, o := range r.Options {
		d := quota.Decide(ent.eff, u, asked[i])
		out.Options[i] = Verdict{ID: o.ID, Allow: d.Allow, Reason: string(d.Reason), Message: d.Message}
	}
	return out, nil
}
