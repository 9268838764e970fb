package ledger

import (
	"context"
	"fmt"
	"maps"
	"math"
	"sync"
	"time"
)

// Decayed returns every user's allocated GPU-hours by class (gpu.Allocation.Class) with recent hours counting
// more, for fair share (Slurm's decayed usage): the sum over hour buckets of the hour's GPU-hours x
// 2^(-(asOf - the hour's midpoint) / halfLife). An hour one half-life old counts half, two a quarter. Hours that
// start more than horizon before the current hour bucket are left out. The current bucket holds what was recorded
// up to the last tick, so its midpoint is taken halfway from its start to asOf. Unweighted by GPU kind (gpu-quota
// applies its billing weights). Users without GPU-hours in the horizon are left out.
//
// The completed buckets, decayed to the start of the current hour, are summed with one grouped query once an
// hour (and after a commit to an earlier bucket) per halfLife and horizon; an answer then scales them to asOf and
// adds the current hour from memory.
func (l *Ledger) Decayed(ctx context.Context, halfLife, horizon time.Duration, asOf time.Time) (map[string]map[string]float64, error) {
	for _, d := range []time.Duration{halfLife, horizon} {
		if d < time.Hour || d%time.Hour != 0 {
			return nil, fmt.Errorf("ledger: a half-life or horizon is whole hours, not %s", d)
		}
	}
	l.cacheMu.RLock()
	hour := l.cache.hour
	current := make(map[Key]Totals, len(l.cache.currentByKey))
	maps.Copy(current, l.cache.currentByKey)
	l.cacheMu.RUnlock()

	completed, err := l.decayedSums(ctx, hour, halfLife, horizon)
	if err != nil {
		return nil, err
	}
	decay := func(age time.Duration) float64 { return math.Exp2(-max(0, age).Hours() / halfLife.Hours()) }
	out := make(map[string]map[string]float64, len(completed))
	add := func(user, class string, seconds float64) {
		if seconds <= 0 {
			return
		}
		c := out[user]
		if c == nil {
			c = map[string]float64{}
			out[user] = c
		}
		c[class] += seconds / 3600
	}
	toAsOf := decay(asOf.Sub(hour))
	for user, classes := range completed {
		for class, v := range classes {
			add(user, class, v*toAsOf)
		}
	}
	end := minTime(asOf, hour.Add(time.Hour))
	currentWeight := decay(asOf.Sub(hour.Add(max(0, end.Sub(hour)) / 2)))
	for k, t := range current {
		add(k.User, k.Class, t.Allocated*currentWeight)
	}
	return out, nil
}

// decayCache keeps the completed buckets' decayed sums per half-life and horizon as of one current hour.
type decayCache struct {
	once sync.Once
	// turn is held by the one computation under way: callers wait for it rather than each run the same scan.
	turn    chan struct{}
	entries map[decayKey]decayEntry
}

type decayKey struct{ halfLife, horizon time.Duration }

type decayEntry struct {
	hour time.Time
	late uint64 // Ledger.late when computed
	sums map[string]map[string]float64
}

// maxDecayEntries bounds the cache: gpu-quota asks with one half-life and horizon.
const maxDecayEntries = 8

// decayedSums returns the completed buckets' decayed sums (GPU-seconds) as of the current hour bucket hour.
func (l *Ledger) decayedSums(ctx context.Context, hour time.Time, halfLife, horizon time.Duration) (map[string]map[string]float64, error) {
	c := &l.decay
	c.once.Do(func() { c.turn = make(chan struct{}, 1) })
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.turn }()
	key, late := decayKey{halfLife, horizon}, l.late.Load()
	if e, ok := c.entries[key]; ok && e.hour.Equal(hour) && e.late == late {
		return e.sums, nil
	}
	qctx, cancel := context.WithTimeout(ctx, rollingTimeout)
	defer cancel()
	sums, err := l.store.decayedSums(qctx, hour, hour.Add(-horizon), halfLife)
	if err != nil {
		return nil, err
	}
	if c.entries == nil || len(c.entries) >= maxDecayEntries {
		c.entries = map[decayKey]decayEntry{}
	}
	c.entries[key] = decayEntry{hour: hour, late: late, sums: sums}
	return sums, nil
}

// decayedSums sums every user's allocated GPU-seconds by class over the buckets from `from` on except the
// current one, each weighted by 2^(-(current - its midpoint) / halfLife): decayed to the start of the current
// hour. Buckets after the current one exist only after the wall clock stepped back; they count in full.
func (s *Store) decayedSums(ctx context.Context, current, from time.Time, halfLife time.Duration) (map[string]map[string]float64, error) {
	// The casts keep the arithmetic in floating point on PostgreSQL (bucket is BIGINT).
	query := `SELECT user_name, class, SUM(CASE WHEN bucket > ? THEN allocated_s ELSE allocated_s * POWER(2.0,
		(CAST(bucket AS DOUBLE PRECISION) + 1800.0 - CAST(? AS DOUBLE PRECISION)) / CAST(? AS DOUBLE PRECISION)) END)
		FROM gpu_usage WHERE bucket >= ? AND bucket <> ? GROUP BY user_name, class`
	rows, err := s.db.QueryContext(ctx, s.q(query), current.Unix(), float64(current.Unix()), halfLife.Seconds(),
		from.Unix(), current.Unix())
	if err != nil {
		return nil, fmt.Errorf("query ledger decayed usage: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := map[string]map[string]float64{}
	for rows.Next() {
		var user, class string
		var v float64
		if err := rows.Scan(&user, &class, &v); err != nil {
			return nil, fmt.Errorf("scan ledger decayed usage: %w", err)
		}
		addTo(out, user, class, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query ledger decayed usage: %w", err)
	}
	return out, nil
}
