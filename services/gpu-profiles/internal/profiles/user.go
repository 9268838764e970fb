package profiles

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// QuotaKindNotAllowed is gpu-quota's reason for a kind the user's groups may not use: such a choice is left
// out, not shown disabled.
const QuotaKindNotAllowed = "kind_not_allowed"

// Visible are the choices a member of groups may see: those limited to other groups are left out.
func Visible(choices []Choice, groups []string) []Choice {
	out := make([]Choice, 0, len(choices))
	for _, c := range choices {
		if (Override{Groups: c.groups}).visibleTo(groups) {
			out = append(out, c)
		}
	}
	return out
}

// ForUser is one user's form from the choices they may see (Visible) and gpu-quota's verdicts by slug (a choice
// without a verdict is allowed). Kinds not allowed are left out; a choice over quota is disabled with
// gpu-quota's message; units the waitlist holds for others are not free for the user; one with nothing free is
// disabled with "none free", or "waitlist" when only the holds left none (a provisionable kind stays
// available: a node is added for it); the holder is told the unit is theirs until when. The CPU choice is
// always there. Exactly one choice is the default: defaultSlug when the user can have it, else the CPU choice.
func ForUser(choices []Choice, verdicts map[string]contract.Verdict, defaultSlug string) []Profile {
	out := make([]Profile, 0, len(choices))
	for _, c := range choices {
		p := c.Profile
		p.Default = false
		if p.GPUHub.Kind == catalog.KindCPU || p.GPUHub.Kind == KindStatic {
			out = append(out, p)
			continue
		}
		if v, ok := verdicts[p.Slug]; ok && !v.Allow {
			if v.Reason == QuotaKindNotAllowed {
				continue
			}
			msg := v.Message
			if msg == "" {
				msg = "Not allowed by your GPU quota."
			}
			disable(&p, ReasonQuota, msg)
			out = append(out, p)
			continue
		}
		v := verdicts[p.Slug]
		freeBeforeHolds := p.GPUHub.Free
		p.GPUHub.Free = freeAfterHolds(c, v.HeldForOthers)
		switch {
		case p.GPUHub.Provisionable && (p.GPUHub.Free == 0 || c.Kind.SchedulableNodes == 0):
			p.GPUHub.ReasonText = "None free right now: a node is added when you start it (this can take a few minutes)."
		case c.Kind.SchedulableNodes == 0:
			disable(&p, ReasonUnschedulable, "Not available now: "+blockedWords(c.Kind)+".")
		case p.GPUHub.Free == 0 && freeBeforeHolds > 0:
			disable(&p, ReasonWaitlist, "None free for you right now: "+heldWords(c.Kind.Unit, min(v.HeldForOthers, c.Kind.Free))+".")
		case !v.HeldForYouUntil.IsZero() && p.GPUHub.Free > 0 && p.GPUHub.Count <= 1: // a hold is one unit
			p.GPUHub.HeldForYouUntil = v.HeldForYouUntil.UTC()
			p.GPUHub.ReasonText = fmt.Sprintf("Your turn on the waitlist: one is held for you until %s. Start it before then, or it passes to the next person in line.",
				hhmm(v.HeldForYouUntil))
		case p.GPUHub.Free == 0 && p.GPUHub.Count > 1:
			disable(&p, ReasonNoneFree, fmt.Sprintf("None free right now: no node has %d free together.", p.GPUHub.Count))
		case p.GPUHub.Free == 0:
			disable(&p, ReasonNoneFree, fmt.Sprintf("None free right now: all %d in use.", p.GPUHub.Total))
		}
		out = append(out, p)
	}
	def := slices.IndexFunc(out, func(p Profile) bool { return p.Slug == defaultSlug && p.GPUHub.Available })
	if def < 0 {
		def = slices.IndexFunc(out, func(p Profile) bool { return p.Slug == catalog.SlugCPU })
	}
	if def >= 0 {
		out[def].Default = true
	}
	return out
}

// freeAfterHolds is the choice's free count once the units the waitlist holds for others are taken off: for N
// GPUs on one node, no more sets than the units left make (the holds are not tied to a node).
func freeAfterHolds(c Choice, held int64) int64 {
	free := c.GPUHub.Free
	if held <= 0 {
		return free
	}
	if n := max(c.GPUHub.Count, 1); n > 1 {
		return max(min(free, (c.Kind.Free-held)/n), 0)
	}
	return max(free-held, 0)
}

// heldWords says that the free units are held for people on the waitlist: "the free H100 is held for the next
// person on the waitlist", "the free MIG 1g.5gb slices on an A100 are held for the next people on the waitlist".
func heldWords(unit gpu.Allocation, held int64) string {
	one := held <= 1
	unit.Count = max(held, 1)
	name := unit.Units()
	name = name[strings.IndexByte(name, ' ')+1:] // the count word
	name = strings.TrimPrefix(name, "whole ")    // "the free H100", as gpu-quota says it
	if one {
		return "the free " + name + " is held for the next person on the waitlist"
	}
	return "the free " + name + " are held for the next people on the waitlist"
}

// hhmm is a time as gpu-quota writes it in the waitlist's messages: "14:05 UTC".
func hhmm(t time.Time) string { return t.UTC().Format("15:04") + " UTC" }

func disable(p *Profile, reason, text string) {
	p.GPUHub.Available, p.GPUHub.Reason, p.GPUHub.ReasonText = false, reason, text
}

// blockedWords says why no node of the kind takes new servers: "gpu-h100-0 is cordoned", "2 nodes are not
// ready", naming at most three nodes (inventory.BlockedWords, as gpu-quota says it).
func blockedWords(k catalog.KindStatus) string {
	if len(k.Blocked) == 0 {
		return "no node has it"
	}
	return inventory.BlockedWords(k.Blocked)
}
