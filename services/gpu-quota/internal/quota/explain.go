package quota

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// Explain prints the effective policy of user, a member of the Hub groups groups, and why: for each field
// its value, the entry it comes from, and what the other entries that apply say (`gpuhub policy explain`).
func (p *Policy) Explain(user string, groups []string) string {
	a := p.applicable(user, groups)
	eff := p.Effective(user, groups)
	var b strings.Builder
	fmt.Fprintf(&b, "Quota policy for user %s\n", user)
	hub := slices.Clone(groups)
	slices.Sort(hub)
	hub = slices.Compact(hub)
	switch {
	case len(hub) == 0:
		b.WriteString("  Hub groups: none\n")
	case len(a.groups) == 0:
		fmt.Fprintf(&b, "  Hub groups: %s (none has an entry)\n", strings.Join(hub, ", "))
	default:
		fmt.Fprintf(&b, "  Hub groups: %s (with an entry: %s)\n", strings.Join(hub, ", "), strings.Join(a.groups, ", "))
	}
	var order []string
	if a.userE != nil {
		order = append(order, "user "+user)
	}
	if len(a.groups) > 0 {
		order = append(order, "the most generous of "+Source{Level: FromGroup, Names: a.groups}.String())
	}
	order = append(order, "default")
	fmt.Fprintf(&b, "  Precedence, field by field: %s; a limit no entry sets is unlimited\n", strings.Join(order, ", then "))
	mode := "open: admit and count it"
	if eff.OnUnavailable == Closed {
		mode = "closed: refuse, saying the quota cannot be checked"
	}
	fmt.Fprintf(&b, "  When usage cannot be read: %s; grace before a stop: %s\n\n", mode, policy.FormatDuration(p.GracePeriod()))

	line := func(key, value string, from Source, get func(*Entry) (string, bool)) {
		origin := "from " + from.String()
		if from.Level == Builtin {
			origin = "no entry sets it"
		}
		fmt.Fprintf(&b, "  %s: %s, %s", key, value, origin)
		var others []string
		consider := func(s Source, e *Entry) {
			if e == nil || sameSource(s, from) {
				return
			}
			if v, ok := get(e); ok {
				others = append(others, s.String()+" "+v)
			}
		}
		consider(Source{Level: FromUser, Names: []string{user}}, a.userE)
		for i, e := range a.groupEs {
			if from.Level == FromGroup && slices.Contains(from.Names, a.groups[i]) {
				continue
			}
			consider(Source{Level: FromGroup, Names: []string{a.groups[i]}}, e)
		}
		consider(Source{Level: FromDefault}, a.defaultE)
		if len(others) > 0 {
			fmt.Fprintf(&b, " (also set: %s)", strings.Join(others, ", "))
		}
		b.WriteString("\n")
	}

	exempt := "no"
	if eff.Exempt.Value {
		exempt = "yes: admitted whatever the use, so no limit below applies"
	}
	line("exempt", exempt, eff.Exempt.From, func(e *Entry) (string, bool) {
		if e.Exempt == nil {
			return "", false
		}
		return yesNo(*e.Exempt), true
	})
	line("priority", strconv.Itoa(eff.Priority.Value), eff.Priority.From, func(e *Entry) (string, bool) {
		if e.Priority == nil {
			return "", false
		}
		return strconv.Itoa(*e.Priority), true
	})
	line("maxGPUs", atMost(gpuLimit(eff.MaxGPUs.Value), " at a time"), eff.MaxGPUs.From, func(e *Entry) (string, bool) {
		if e.MaxGPUs == nil {
			return "", false
		}
		return gpu.FormatGPUs(float64(*e.MaxGPUs)), true
	})
	for _, k := range sortedKinds(eff.MaxGPUsPerKind) {
		s := eff.MaxGPUsPerKind[k]
		line("maxGPUsPerKind."+string(k), atMost(gpuLimit(s.Value), " in "+k.Plural()+" at a time"), s.From, func(e *Entry) (string, bool) {
			v, ok := e.MaxGPUsPerKind[k]
			return gpu.FormatGPUs(float64(v)), ok
		})
	}
	line("maxServers", atMost(serverLimit(eff.MaxServers.Value), " at a time"), eff.MaxServers.From, func(e *Entry) (string, bool) {
		if e.MaxServers == nil {
			return "", false
		}
		return gpu.FormatGPUs(float64(*e.MaxServers)), true
	})
	windows := make([]time.Duration, 0, len(eff.Budgets))
	for w := range eff.Budgets {
		windows = append(windows, w)
	}
	slices.Sort(windows)
	for _, w := range windows {
		s := eff.Budgets[w]
		_, per := windowWords(w)
		value := "unlimited"
		if !s.Value.IsUnlimited() {
			value = fmt.Sprintf("at most %s GPU-hours %s", hoursText(float64(s.Value)), per)
		}
		line("budget "+windowName(w), value, s.From, func(e *Entry) (string, bool) {
			v, ok := budgetFor(e, w)
			return limitText(v, hoursText), ok
		})
	}
	if len(eff.Budgets) == 0 {
		b.WriteString("  budgets: none, no entry sets one\n")
	}
	line("allowedKinds", kindsText(eff.AllowedKinds.Value), eff.AllowedKinds.From, func(e *Entry) (string, bool) {
		if e.AllowedKinds == nil {
			return "", false
		}
		return "[" + strings.Join(kindNames(inVocabularyOrder(e.AllowedKinds)), ", ") + "]", true
	})
	for _, key := range sortedKeys(eff.Weights) {
		s := eff.Weights[key]
		line(fmt.Sprintf("weight %q", key), "a GPU-hour counts "+hoursText(s.Value), s.From, func(e *Entry) (string, bool) {
			v, ok := e.Weights[key]
			return hoursText(v), ok
		})
	}
	if len(eff.Weights) == 0 {
		b.WriteString("  weights: every GPU-hour counts 1, no entry sets a weight\n")
	} else {
		b.WriteString("  weights: a GPU-hour of any other class counts 1\n")
	}
	return b.String()
}

// windowName writes a budget window in hours below two days and in days from there ("24h", "36h", "7d"), as
// windowWords says it.
func windowName(w time.Duration) string {
	if w%(24*time.Hour) == 0 && w > 24*time.Hour {
		return fmt.Sprintf("%dd", w/(24*time.Hour))
	}
	return fmt.Sprintf("%dh", w/time.Hour)
}

func sameSource(a, b Source) bool { return a.Level == b.Level && slices.Equal(a.Names, b.Names) }

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

func atMost(limit, suffix string) string {
	if limit == "unlimited" {
		return limit
	}
	return "at most " + limit + suffix
}

func gpuLimit(l Limit) string {
	if l.IsUnlimited() {
		return "unlimited"
	}
	return gpu.Amount(float64(l))
}

func serverLimit(l Limit) string {
	if l.IsUnlimited() {
		return "unlimited"
	}
	return GPUServers(int(l))
}

func limitText(l Limit, format func(float64) string) string {
	if l.IsUnlimited() {
		return "unlimited"
	}
	return format(float64(l))
}

func kindsText(ks []gpu.Kind) string {
	switch {
	case ks == nil:
		return "every kind"
	case len(ks) == 0:
		return "none (CPU-only servers)"
	}
	plurals := make([]string, len(ks))
	for i, k := range ks {
		plurals[i] = k.Plural()
	}
	return JoinAnd(plurals)
}

func kindNames(ks []gpu.Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

func sortedKinds[V any](m map[gpu.Kind]V) []gpu.Kind {
	var out []gpu.Kind
	for _, k := range gpu.Kinds() {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}
