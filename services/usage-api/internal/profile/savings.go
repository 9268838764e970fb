package profile

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// Periods are the periods advice and savings are asked over, by name.
var Periods = map[string]time.Duration{"24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

// PeriodFrom is where a period ending at asOf starts: the UTC day of asOf - period (profiles are kept by UTC
// day, so a period counts every day it touches).
func PeriodFrom(period time.Duration, asOf time.Time) time.Time {
	return ledger.DayOf(asOf.Add(-period))
}

// NoGroup names the users in no Hub group (the admin view's word).
const NoGroup = "(no group)"

// Savings adds up the advice by user, group (groups says a user's Hub groups) or kind.
func Savings(advice []contract.RightSize, by string, groups func(user string) []string) ([]contract.RightSizeSavingsRow, float64, float64, error) {
	rows := map[string]*contract.RightSizeSavingsRow{}
	add := func(key string, a contract.RightSize, saved, held float64) {
		r := rows[key]
		if r == nil {
			r = &contract.RightSizeSavingsRow{Key: key}
			rows[key] = r
		}
		r.SaveableGPUHours += saved
		r.HeldGPUHours += held
		r.Servers++
		if a.Verdict == contract.VerdictSmaller {
			r.Smaller++
		}
		if a.Simulated {
			r.Simulated++
		}
		if a.Stale {
			r.Stale++
		}
	}
	var totalSaved, totalHeld float64
	for _, a := range advice {
		saved := rightsize.SaveableGPUHours(a)
		held := a.Held.ComputeGPUs * a.Evidence.HeldSeconds / 3600
		totalSaved, totalHeld = totalSaved+saved, totalHeld+held
		switch by {
		case "user":
			add(a.User, a, saved, held)
		case "kind":
			add(string(a.Held.Kind), a, saved, held)
		case "group":
			gs := groups(a.User)
			if len(gs) == 0 {
				gs = []string{NoGroup}
			}
			for _, g := range gs {
				add(g, a, saved, held)
			}
		default:
			return nil, 0, 0, fmt.Errorf("by %q is not user, group or kind", by)
		}
	}
	out := make([]contract.RightSizeSavingsRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	// Most to save first; ties by name, so the answer is stable.
	slices.SortFunc(out, func(a, b contract.RightSizeSavingsRow) int {
		if a.SaveableGPUHours != b.SaveableGPUHours {
			if a.SaveableGPUHours > b.SaveableGPUHours {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out, totalSaved, totalHeld, nil
}

// SaveablePerDay is the GPU-hours per day that taking every advice would have saved, over the days from from
// to asOf (the gauge's number).
func SaveablePerDay(advice []contract.RightSize, from, asOf time.Time) float64 {
	days := asOf.Sub(from).Hours() / 24
	if days <= 0 {
		return 0
	}
	var saved float64
	for _, a := range advice {
		saved += rightsize.SaveableGPUHours(a)
	}
	return saved / days
}
