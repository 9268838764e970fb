package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Sample is what a user held of one GPU class at a tick.
type Sample struct {
	Key
	// Allocated GPU-equivalents.
	Allocated float64
	// Used GPU-equivalents (allocated x utilization) when UsedKnown.
	Used      float64
	UsedKnown bool
}

// Options configure a Ledger.
type Options struct {
	// Interval is the sampling interval.
	Interval time.Duration
	// MaxGap is the longest stretch since the checkpoint that a tick may integrate. A longer gap (the service
	// was down) is not filled: only the last Interval is charged, with the state observed now, and the rest is
	// counted in Checkpoint.GapSeconds. Default 6 intervals.
	MaxGap time.Duration
	// Location defines "today"; default UTC.
	Location *time.Location
}

// store is what the ledger needs of its database; *Store implements it, tests inject faults through it.
type store interface {
	// Checkpoint reads the integration state; ok is false for a new ledger.
	Checkpoint(ctx context.Context) (cp Checkpoint, ok bool, err error)
	// Commit adds incs and moves the checkpoint from prev to next atomically, or returns ErrConflict.
	Commit(ctx context.Context, prev *Checkpoint, next Checkpoint, incs []Increment) error
	Sum(ctx context.Context, q Query) ([]Row, error)
	userWindows(ctx context.Context, today, d7, d30, toExcl time.Time) (map[string][3]Totals, error)
}

// Ledger integrates samples into the store and keeps per-user window totals in memory for the fast path.
type Ledger struct {
	store store
	opts  Options

	mu sync.Mutex // serializes Record
	cp *Checkpoint

	cacheMu sync.RWMutex
	cache   windowCache
}

// Result tells what one Record did.
type Result struct {
	At time.Time
	// Charged is the time integrated by this tick; zero on the first tick of a new ledger or when the clock
	// did not move forward.
	Charged time.Duration
	// Gap is time since the checkpoint that was not filled.
	Gap time.Duration
	// PerKey is GPU-seconds added per key.
	PerKey map[Key]Totals
	// Conflict is true when another writer had moved the checkpoint since this ledger's last commit: the tick
	// re-read the checkpoint and integrated from there.
	Conflict bool
}

// New loads the checkpoint and the window cache.
func New(ctx context.Context, st store, opts Options, now time.Time) (*Ledger, error) {
	if opts.Interval <= 0 {
		return nil, fmt.Errorf("ledger: interval must be positive")
	}
	if opts.MaxGap == 0 {
		opts.MaxGap = 6 * opts.Interval
	}
	opts.MaxGap = max(opts.MaxGap, opts.Interval)
	if opts.Location == nil {
		opts.Location = time.UTC
	}
	l := &Ledger{store: st, opts: opts}
	cp, ok, err := st.Checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	if ok {
		l.cp = &cp
	}
	if err := l.refreshCache(ctx, now); err != nil {
		return nil, err
	}
	return l, nil
}

// Checkpoint returns the last committed checkpoint; ok is false before the first commit.
func (l *Ledger) Checkpoint() (Checkpoint, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cp == nil {
		return Checkpoint{}, false
	}
	return *l.cp, true
}

// Record integrates the state observed at now (samples) over the time since the checkpoint, in one
// transaction with the new checkpoint. The state observed at a tick is charged for the interval that ends at
// that tick. When another writer moved the checkpoint (ErrConflict), Record re-reads it and integrates from
// there: each instant is charged once whichever writer charges it.
func (l *Ledger) Record(ctx context.Context, now time.Time, samples []Sample) (Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now = now.UTC()
	conflict := false
	for attempt := 0; ; attempt++ {
		res, next, incs, ok := l.integrate(now, samples)
		if !ok {
			res.Conflict = conflict
			return res, nil
		}
		err := l.store.Commit(ctx, l.cp, next, incs)
		if err == nil {
			l.cp = &next
			l.applyToCache(ctx, now, incs)
			res.Conflict = conflict
			return res, nil
		}
		if !errors.Is(err, ErrConflict) || attempt == maxConflictRetries {
			return Result{}, err
		}
		conflict = true
		if err := l.reload(ctx, now); err != nil {
			return Result{}, fmt.Errorf("after a ledger conflict: %w", err)
		}
	}
}

// maxConflictRetries bounds how often one Record re-reads the checkpoint when other writers keep moving it.
const maxConflictRetries = 3

// reload replaces the in-memory checkpoint and window cache with the store's, after another writer moved them.
func (l *Ledger) reload(ctx context.Context, now time.Time) error {
	cp, ok, err := l.store.Checkpoint(ctx)
	if err != nil {
		return err
	}
	l.cp = nil
	if ok {
		l.cp = &cp
	}
	return l.refreshCache(ctx, now)
}

// integrate computes the increments and the next checkpoint for a tick at now; ok is false when there is
// nothing to commit.
func (l *Ledger) integrate(now time.Time, samples []Sample) (res Result, next Checkpoint, incs []Increment, ok bool) {
	res = Result{At: now, PerKey: map[Key]Totals{}}
	next = Checkpoint{At: now, Ticks: 1}
	var from time.Time
	if l.cp != nil {
		if !now.After(l.cp.At) {
			return res, next, nil, false // clock did not move; nothing to integrate, nothing to commit
		}
		next = *l.cp
		next.At, next.Ticks = now, l.cp.Ticks+1
		from = l.cp.At
		if gap := now.Sub(from); gap > l.opts.MaxGap {
			// The pods' state over the gap is unknown: charge only the last interval, for which the
			// observation stands.
			from = now.Add(-l.opts.Interval)
			res.Gap = gap - l.opts.Interval
			next.GapSeconds += res.Gap.Seconds()
		}
		res.Charged = now.Sub(from)
	}
	if res.Charged > 0 {
		perKey := map[Key]Totals{}
		for _, s := range samples {
			t := perKey[s.Key]
			t.Allocated += s.Allocated
			if s.UsedKnown {
				t.Used += s.Used
			} else {
				t.UsedUnknown += s.Allocated
			}
			perKey[s.Key] = t
		}
		for _, span := range splitHours(from, now) {
			secs := span.d.Seconds()
			for k, t := range perKey {
				if t == (Totals{}) {
					continue
				}
				v := t.scale(secs)
				incs = append(incs, Increment{Key: k, Bucket: span.bucket, Totals: v})
				next.Sums.add(v)
				pk := res.PerKey[k]
				pk.add(v)
				res.PerKey[k] = pk
			}
		}
	}
	return res, next, incs, true
}

type span struct {
	bucket time.Time
	d      time.Duration
}

// splitHours cuts (from, to] at hour boundaries.
func splitHours(from, to time.Time) []span {
	var out []span
	for from.Before(to) {
		b := from.Truncate(time.Hour)
		end := minTime(b.Add(time.Hour), to)
		out = append(out, span{bucket: b, d: end.Sub(from)})
		from = end
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Windows are the per-user GPU-hours the fast path serves.
type Windows struct {
	Today, Days7, Days30 Totals
}

// windowCache holds per-user sums of completed hour buckets per window plus the current hour, so that
// answering "today, 7 d, 30 d" needs no query. Completed buckets are re-summed once per hour.
type windowCache struct {
	hour      time.Time // current hour bucket
	completed map[string][3]Totals
	current   map[string]Totals
}

func (l *Ledger) windowStarts(hour time.Time) (today, d7, d30 time.Time) {
	y, m, d := hour.In(l.opts.Location).Date()
	today = time.Date(y, m, d, 0, 0, 0, 0, l.opts.Location).UTC()
	return today, hour.Add(-(7*24 - 1) * time.Hour), hour.Add(-(30*24 - 1) * time.Hour)
}

func (l *Ledger) refreshCache(ctx context.Context, now time.Time) error {
	hour := now.UTC().Truncate(time.Hour)
	today, d7, d30 := l.windowStarts(hour)
	completed, err := l.store.userWindows(ctx, today, d7, d30, hour)
	if err != nil {
		return err
	}
	rows, err := l.store.Sum(ctx, Query{From: hour, To: hour.Add(time.Hour)})
	if err != nil {
		return err
	}
	current := map[string]Totals{}
	for _, r := range rows {
		t := current[r.User]
		t.add(r.Totals)
		current[r.User] = t
	}
	l.cacheMu.Lock()
	l.cache = windowCache{hour: hour, completed: completed, current: current}
	l.cacheMu.Unlock()
	return nil
}

func (l *Ledger) applyToCache(ctx context.Context, now time.Time, incs []Increment) {
	hour := now.Truncate(time.Hour)
	l.cacheMu.RLock()
	stale := !hour.Equal(l.cache.hour)
	l.cacheMu.RUnlock()
	if stale {
		// The hour rolled over: re-sum from the store (it has this tick's increments already).
		if err := l.refreshCache(ctx, now); err == nil {
			return
		}
	}
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	for _, inc := range incs {
		if inc.Bucket.Equal(l.cache.hour) {
			t := l.cache.current[inc.User]
			t.add(inc.Totals)
			l.cache.current[inc.User] = t
		}
	}
}

// UserWindows returns a user's GPU-hours for today, the last 7 days and the last 30 days (hour buckets, the
// current one included), from memory.
func (l *Ledger) UserWindows(user string) Windows {
	l.cacheMu.RLock()
	c, cur := l.cache.completed[user], l.cache.current[user]
	l.cacheMu.RUnlock()
	for i := range c {
		c[i].add(cur)
	}
	const h = 1.0 / 3600
	return Windows{Today: c[0].scale(h), Days7: c[1].scale(h), Days30: c[2].scale(h)}
}

// Hours returns GPU-hours per key over a custom window, from the store.
func (l *Ledger) Hours(ctx context.Context, q Query) ([]Row, error) {
	rows, err := l.store.Sum(ctx, q)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].Totals = rows[i].scale(1.0 / 3600)
	}
	return rows, nil
}
