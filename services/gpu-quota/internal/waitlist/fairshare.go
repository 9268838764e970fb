package waitlist

import (
	"math"
	"slices"
	"time"
)

// Shares are a user's fair-share shares, from the quota policy's priority: 0 (the default) is 1 share, a
// priority p > 0 is 1+p shares, p < 0 is 1/(1-p). Only ratios matter: priority 1 weighs twice the default.
func Shares(priority int) float64 {
	if priority >= 0 {
		return float64(1 + priority)
	}
	return 1 / float64(1-priority)
}

// Factor is Slurm's classic fair-share factor F = 2^(-(u/U) / (s/S)): u the user's decayed GPU-hours, U
// everyone's, s the user's shares and S the shares of everyone waiting in the same queue. A user who used
// nothing recently has F = 1 (first in line); one who used exactly their share of everything has 1/2. Within
// one queue U and S are the same for all, so the order is that of u/s, lowest first.
func Factor(usage, totalUsage, shares, totalShares float64) float64 {
	if usage <= 0 || totalUsage <= 0 || shares <= 0 || totalShares <= 0 {
		return 1
	}
	return math.Exp2(-(usage / totalUsage) / (shares / totalShares))
}

// Decay is the weight of GPU-hours used age ago under a half-life: 2^(-age/halfLife).
func Decay(age, halfLife time.Duration) float64 {
	if halfLife <= 0 {
		return 1
	}
	return math.Exp2(-age.Hours() / halfLife.Hours())
}

// Estimate is when the position-th (1-based) entry waiting for a class may expect a unit, or zero when nothing
// tells: the position-th soonest of deadlines (servers of that class due to stop: the culler's and the quota
// enforcer's notices), and past them one mean turnover interval (units of the class freed recently) per further
// place. A deadline already past counts as now.
func Estimate(position int, deadlines []time.Time, turnover time.Duration, now time.Time) time.Time {
	if position < 1 {
		return time.Time{}
	}
	ds := slices.Clone(deadlines)
	slices.SortFunc(ds, func(a, b time.Time) int { return a.Compare(b) })
	if position <= len(ds) {
		return later(ds[position-1], now)
	}
	if turnover <= 0 {
		return time.Time{}
	}
	base := now
	if len(ds) > 0 {
		base = later(ds[len(ds)-1], now)
	}
	return base.Add(time.Duration(position-len(ds)) * turnover)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Turnover remembers when units of each class were freed, to estimate how often one frees.
type Turnover struct {
	// Over is how far back releases count (default 24 h).
	Over time.Duration
	at   map[string][]time.Time
	// since is when counting started: the mean is over min(Over, now - since).
	since time.Time
}

// NewTurnover starts counting at now.
func NewTurnover(now time.Time, over time.Duration) *Turnover {
	if over <= 0 {
		over = 24 * time.Hour
	}
	return &Turnover{Over: over, at: map[string][]time.Time{}, since: now}
}

// Freed records that units of class were freed at t.
func (t *Turnover) Freed(class string, at time.Time, units int64) {
	for range units {
		t.at[class] = append(t.at[class], at)
	}
	t.trim(class, at)
}

func (t *Turnover) trim(class string, now time.Time) {
	cut := now.Add(-t.Over)
	ts := t.at[class]
	i := 0
	for i < len(ts) && ts[i].Before(cut) {
		i++
	}
	if i > 0 {
		t.at[class] = slices.Clone(ts[i:])
	}
}

// Mean is the mean interval between two freed units of class, or 0 when none was freed in the period.
func (t *Turnover) Mean(class string, now time.Time) time.Duration {
	t.trim(class, now)
	n := len(t.at[class])
	if n == 0 {
		return 0
	}
	span := min(t.Over, now.Sub(t.since))
	return span / time.Duration(n)
}
