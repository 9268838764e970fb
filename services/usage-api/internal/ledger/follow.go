package ledger

import (
	"context"
	"math"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// Follow is what a replica that does not write the ledger (another replica holds the writer's Lease) does at
// a tick instead of Record. It remembers what it observed, as while commits fail: if it takes over, its first
// Record charges what the old writer could not (a pod that ended between that writer's last commit and this
// replica's first is charged up to its end, not only up to the old checkpoint). And it follows the writer:
// the checkpoint and the window cache are the store's, so that its answers (me's windows, the rolling and
// decayed sums) are the writer's.
//
// The cache follows cheaply: when only the current hour grew (the checkpoint's sums grew by what the current
// hour's rows grew), only the current hour is re-summed; an hour change or a write to another hour (a writer's
// first tick after an outage) re-sums every window, as a conflict does.
func (l *Ledger) Follow(ctx context.Context, now time.Time, samples []Sample) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	mono, hasMono := l.monotonic(now)
	now = now.Round(0).UTC()
	l.remember(sighting{wall: now, mono: mono, hasMono: hasMono}, l.holdings(samples), endings(samples))
	cp, ok, err := l.store.checkpoint(ctx, l.cp, &l.followHeld)
	if err != nil {
		return err
	}
	prev := l.cp
	l.cp, l.marked = nil, false
	if ok {
		l.cp = &cp
		l.forgetCovered(cp.At)
	}
	switch {
	case prev == nil || l.cp == nil:
		l.late.Add(1)
		return l.refreshCache(ctx, now)
	case prev.At.Equal(cp.At) && prev.Ticks == cp.Ticks:
		return l.refreshIfNewHour(ctx, now)
	}
	return l.followCache(ctx, now, cp.Sums.minus(prev.Sums))
}

// forgetCovered drops what seen holds of pods gone at or before at, a writer's checkpoint: the writer saw them
// go (every replica watches the same pods), so its commits charged them; a follower's seen stays bounded.
func (l *Ledger) forgetCovered(at time.Time) {
	var pace yield.Pass // 10,000 entries at every tick of a follower
	for k, e := range l.seen {
		pace.Item()
		if !e.gone.wall.IsZero() && !e.gone.wall.After(at) {
			delete(l.seen, k)
		}
	}
}

func (l *Ledger) refreshIfNewHour(ctx context.Context, now time.Time) error {
	l.cacheMu.RLock()
	same := now.Truncate(time.Hour).Equal(l.cache.hour)
	l.cacheMu.RUnlock()
	if same {
		return nil
	}
	return l.refreshCache(ctx, now)
}

// followCache re-sums the current hour after the writer committed grown (GPU-seconds); a growth the current
// hour does not account for went to other hours, and every window is re-summed.
func (l *Ledger) followCache(ctx context.Context, now time.Time, grown Totals) error {
	hour := now.Truncate(time.Hour)
	l.cacheMu.RLock()
	same := hour.Equal(l.cache.hour)
	var before Totals
	for _, t := range l.cache.current {
		before.add(t)
	}
	l.cacheMu.RUnlock()
	if !same {
		return l.refreshCache(ctx, now)
	}
	cur, err := l.currentHour(ctx, hour)
	if err != nil {
		return err
	}
	if !cur.total.minus(before).near(grown) {
		l.late.Add(1)
		return l.refreshWindows(ctx, hour, cur)
	}
	l.cacheMu.Lock()
	l.cache.current, l.cache.currentByKey = cur.byUser, cur.byKey
	l.cacheMu.Unlock()
	return nil
}

func (t Totals) minus(o Totals) Totals {
	return Totals{Allocated: t.Allocated - o.Allocated, Used: t.Used - o.Used, UsedUnknown: t.UsedUnknown - o.UsedUnknown}
}

// near: equal but for the rounding of sums of many float64 GPU-seconds (a millisecond of a GPU).
func (t Totals) near(o Totals) bool {
	const eps = 1e-3
	return math.Abs(t.Allocated-o.Allocated) <= eps && math.Abs(t.Used-o.Used) <= eps &&
		math.Abs(t.UsedUnknown-o.UsedUnknown) <= eps
}
