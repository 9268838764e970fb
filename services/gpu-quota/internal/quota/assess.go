package quota

import (
	"fmt"
	"strconv"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// Assess is what a user with policy eff is over right now while holding and having used u: the budgets whose
// weighted GPU-hours reached the budget, the kinds held that the user may no longer use, and the concurrent
// limits (total, per kind, servers) that what the user holds is above (an admin lowered them, or the user
// moved to another group). Budgets come first (they stop every GPU server), then the order of Decide.
//
// Exempt users and users without GPU servers are over nothing, and a budget window missing from u.GPUHours
// (its usage cannot be read) is never over: the running loop only acts on what it knows. Each Check's Message
// says what is over in plain words, without the consequence; NoticeMessage adds which servers stop and when.
func Assess(eff Effective, u Usage) []Check {
	if eff.Exempt.Value || len(u.Held) == 0 && u.Servers == 0 {
		return nil
	}
	s := situation{eff: eff, u: u, held: byKind(u.Held)}
	var out []Check
	out = append(out, s.overBudgets()...)
	out = append(out, s.heldKinds()...)
	out = append(out, s.overTotal()...)
	out = append(out, s.overPerKind()...)
	out = append(out, s.overServers()...)
	return out
}

func (s situation) overBudgets() []Check {
	var out []Check
	for _, w := range s.eff.Windows() {
		hours, ok := s.u.GPUHours[w]
		b := s.eff.Budgets[w]
		if !ok && b.Value == 0 {
			ok, hours = true, map[string]float64{} // a budget of 0 is spent whatever the usage
		}
		if !ok {
			continue // unreadable: never over
		}
		budget, used := float64(b.Value), s.eff.Weighted(hours)
		if used < budget-tolerance {
			continue
		}
		c := Check{Reason: ReasonBudgetExhausted, Window: w, Budget: budget, Used: used, From: b.From}
		_, per := windowWords(w)
		if budget == 0 {
			c.Message = fmt.Sprintf("You have no GPU budget (%s %s 0 GPU-hours %s)", Who(b.From), have(b.From), per)
		} else {
			unit := "GPU-hours"
			if hoursText(budget) == "1" {
				unit = "GPU-hour"
			}
			weighted := ""
			if s.weighted(hours) {
				weighted = ", weighted by kind of GPU"
			}
			c.Message = fmt.Sprintf("You are over your %s GPU budget (%s of %s %s used%s)",
				windowAdjective(w), hoursText(used), hoursText(budget), unit, weighted)
		}
		out = append(out, c)
	}
	return out
}

func (s situation) heldKinds() []Check {
	var out []Check
	for _, ks := range s.held.list() {
		k := ks.kind
		if s.eff.Allows(k) {
			continue
		}
		c := Check{Reason: ReasonKindNotAllowed, Kind: k, Held: ks.share, From: s.eff.AllowedKinds.From}
		c.Message = fmt.Sprintf("You use %s, but %s may not use %s",
			gpu.JoinUnits(ofKind(s.u.Held, k)), Who(c.From), k.Plural())
		out = append(out, c)
	}
	return out
}

func (s situation) overTotal() []Check {
	limit := s.eff.MaxGPUs
	c := Check{Reason: ReasonMaxGPUs, Limit: float64(limit.Value), Held: s.held.total(), From: limit.From}
	if c.Held <= c.Limit+tolerance {
		return nil
	}
	c.Message = heldOverMessage(c, s.u.Held, "GPUs", gpu.Amount(c.Limit))
	return []Check{c}
}

func (s situation) overPerKind() []Check {
	var out []Check
	for _, ks := range s.held.list() {
		k := ks.kind
		limit, ok := s.eff.MaxGPUsPerKind[k]
		if !ok {
			continue
		}
		c := Check{Reason: ReasonMaxGPUsPerKind, Kind: k, Limit: float64(limit.Value), Held: ks.share, From: limit.From}
		if c.Held <= c.Limit+tolerance {
			continue
		}
		c.Message = heldOverMessage(c, ofKind(s.u.Held, k), k.Plural(), amountOfKind(c.Limit, k))
		out = append(out, c)
	}
	return out
}

// heldOverMessage: "You use 6/7 of a GPU (two MIG 3g.20gb slices on an A100), more than the 3/7 of a GPU
// students may use at a time".
func heldOverMessage(c Check, held []gpu.Allocation, what, limitText string) string {
	if c.Limit <= tolerance {
		return fmt.Sprintf("You use %s (%s), but %s may not use %s", gpu.Amount(c.Held), gpu.JoinUnits(held), Who(c.From), what)
	}
	return fmt.Sprintf("You use %s (%s), more than the %s %s may use at a time",
		gpu.Amount(c.Held), gpu.JoinUnits(held), limitText, Who(c.From))
}

func (s situation) overServers() []Check {
	limit := s.eff.MaxServers
	c := Check{Reason: ReasonMaxServers, Limit: float64(limit.Value), Held: float64(s.u.Servers), From: limit.From}
	if c.Held <= c.Limit+tolerance {
		return nil
	}
	if c.Limit < 1 {
		c.Message = fmt.Sprintf("You run %s, but %s may not run GPU servers", GPUServers(s.u.Servers), Who(c.From))
	} else {
		c.Message = fmt.Sprintf("You run %s, more than the %s %s may run at a time",
			GPUServers(s.u.Servers), GPUServers(int(c.Limit)), Who(c.From))
	}
	return []Check{c}
}

// NoticeKind is the notice kind of a check: "budget" for a budget, "limit" for the rest (the values of
// services/internal/notice).
func (c Check) NoticeKind() string {
	if c.Reason == ReasonBudgetExhausted {
		return "budget"
	}
	return "limit"
}

// Stop is what a notice announces: which of the user's GPU servers gpu-quota stops, and when.
type Stop struct {
	// Servers are the names of the servers that stop ("" is the default server), in the order to name them.
	Servers []string
	// Running is how many GPU servers the user runs; when it is len(Servers), every one of them stops.
	Running int
	// Deadline is when they stop; Now is when the message is written (the date is added when the deadline is
	// on another day).
	Deadline, Now time.Time
}

// NoticeMessage is the message of a notice for what Assess found over, with what happens and when: "You are
// over your 24-hour GPU budget (2 of 2 GPU-hours used): your GPU server stops at 14:30 UTC unless you stop it
// first." The first check says what is over (Assess orders the most severe first); the others are in the
// decision log.
func NoticeMessage(over []Check, s Stop) string {
	if len(over) == 0 {
		return ""
	}
	at := deadlineText(s.Deadline, s.Now)
	names := serverNames(s.Servers)
	var action string
	switch {
	case len(s.Servers) == 0:
		action = "gpu-quota stops GPU servers at " + at + " unless you are back within your limits first"
	case len(s.Servers) >= s.Running && len(s.Servers) == 1:
		action = fmt.Sprintf("your %s stops at %s unless you stop it first", names, at)
	case len(s.Servers) >= s.Running && s.Running == 2:
		action = fmt.Sprintf("both your GPU servers (%s) stop at %s unless you stop them first", names, at)
	case len(s.Servers) >= s.Running:
		action = fmt.Sprintf("all %d of your GPU servers (%s) stop at %s unless you stop them first", s.Running, names, at)
	case len(s.Servers) == 1:
		action = fmt.Sprintf("your %s stops at %s unless you stop it or another GPU server first", names, at)
	default:
		action = fmt.Sprintf("your GPU servers %s stop at %s unless you stop them or other GPU servers first", names, at)
	}
	return over[0].Message + ": " + action + "."
}

// serverNames: `GPU server "train"` and `default GPU server` for one server, `the default one and "b"` for
// several (the sentence says "GPU servers").
func serverNames(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		if n == "" {
			quoted[i] = "the default one"
		} else {
			quoted[i] = strconv.Quote(n)
		}
	}
	if len(names) == 1 {
		if names[0] == "" {
			return "default GPU server"
		}
		return "GPU server " + quoted[0]
	}
	return JoinAnd(quoted)
}

// deadlineText: "14:30 UTC", or "14:30 UTC on 24 Nov" when the deadline is on another day than now.
func deadlineText(deadline, now time.Time) string {
	d, n := deadline.UTC(), now.UTC()
	s := d.Format("15:04") + " UTC"
	if d.YearDay() != n.YearDay() || d.Year() != n.Year() {
		s += " on " + d.Format("2 Jan")
	}
	return s
}

// windowAdjective names a window as in "your 24-hour GPU budget", "your 7-day GPU budget".
func windowAdjective(w time.Duration) string {
	if w%(24*time.Hour) == 0 && w > 24*time.Hour {
		return fmt.Sprintf("%d-day", w/(24*time.Hour))
	}
	return fmt.Sprintf("%d-hour", w/time.Hour)
}
