package profiles

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
)

// QuotaKindNotAllowed is gpu-quota's reason for a kind the user's groups may not use: such a choice is left
// out, not shown disabled.
const QuotaKindNotAllowed = "kind_not_allowed"

// Verdict is gpu-quota's answer about one choice for one user (contract C2).
type Verdict struct {
	Allow   bool
	Reason  string
	Message string
}

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
// gpu-quota's message; one with nothing free is disabled with "none free" (a provisionable kind stays
// available: a node is added for it). The CPU choice is always there. Exactly one choice is the default:
// defaultSlug when the user can have it, else the CPU choice.
func ForUser(choices []Choice, verdicts map[string]Verdict, defaultSlug string) []Profile {
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
		switch {
		case p.GPUHub.Provisionable && (p.GPUHub.Free == 0 || c.Kind.SchedulableNodes == 0):
			p.GPUHub.ReasonText = "None free right now: a node is added when you start it (this can take a few minutes)."
		case c.Kind.SchedulableNodes == 0:
			disable(&p, ReasonUnschedulable, "Not available now: "+blockedWords(c.Kind)+".")
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

func disable(p *Profile, reason, text string) {
	p.GPUHub.Available, p.GPUHub.Reason, p.GPUHub.ReasonText = false, reason, text
}

// blockedWords says why no node of the kind takes new servers: "gpu-h100-0 is cordoned", "2 nodes are not
// ready", naming at most three nodes.
func blockedWords(k catalog.KindStatus) string {
	if len(k.Blocked) == 0 {
		return "no node has it"
	}
	names := slices.Sorted(maps.Keys(k.Blocked))
	var parts []string
	for i, n := range names {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more nodes cannot take new servers", len(names)-3))
			break
		}
		parts = append(parts, n+" is "+k.Blocked[n])
	}
	return strings.Join(parts, ", ")
}
