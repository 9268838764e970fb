package ledger

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// Sample is what a user held of one GPU class at a tick.
type Sample struct {
	Key
	// Pod is the UID of the pod that holds it; empty when unknown.
	Pod string
	// Since is when the pod started holding (its phase became Running: the earliest container start still
	// recorded, else status.startTime); zero when unknown.
	Since time.Time
	// Allocated GPU-equivalents.
	Allocated float64
	// Used is the fraction of a physical GPU's time the unit kept busy (util x UtilizationScale) when UsedKnown.
	Used      float64
	UsedKnown bool
	// Until is set on a pod that stopped holding since the last tick (deleted, or no longer Running): when it went,
	// as the caller's informer told. Its charge ends there instead of at the tick, so it does not depend on how
	// long after its end the next tick came; it is held no longer. Zero while the pod holds.
	Until time.Time
}

// Options configure a Ledger.
type Options struct {
	// Interval is the sampling interval.
	Interval time.Duration
	// MaxGap is the longest stretch since the checkpoint over which the state observed now stands. Over a
	// longer gap (the service or its database was down) utilization is unknown but the pods' holding is
	// charged from the held set, their start times and what this process saw while its commits failed (see
	// integrate). Default 6 intervals.
	MaxGap time.Duration
	// Location defines "today"; default UTC.
	Location *time.Location
	// Monotonic reads a monotonic clock (time since any fixed origin); tests inject one. By default the ledger
	// uses the monotonic reading that time.Now() puts in the now passed to Record; a now without one (a fake
	// clock) is integrated on wall time alone.
	Monotonic func() time.Duration
	// MaxSeen bounds the holdings (pod and key) the ledger keeps in memory while its commits fail (see
	// Ledger.seen); default 10000. Holdings first seen beyond it are not kept: counted in Result.Untracked and
	// charged as after a restart.
	MaxSeen int
}

// defaultMaxSeen is Options.MaxSeen's default: a few MB at most.
const defaultMaxSeen = 10000

// store is what the ledger needs of its database; *Store implements it, tests inject faults through it.
type store interface {
	// Checkpoint reads the integration state; ok is false for a new ledger.
	Checkpoint(ctx context.Context) (cp Checkpoint, ok bool, err error)
	// checkpoint is Checkpoint sharing what did not change with prev, through scratch (see Store.checkpoint).
	checkpoint(ctx context.Context, prev *Checkpoint, scratch *heldScratch) (cp Checkpoint, ok bool, err error)
	// Commit adds incs and moves the checkpoint from prev to next atomically, or returns ErrConflict.
	Commit(ctx context.Context, prev *Checkpoint, next Checkpoint, incs []Increment) error
	Sum(ctx context.Context, q Query) ([]Row, error)
	// sum calls row for each line of Sum (or breakdown, with idle), in Sum's order.
	sum(ctx context.Context, q Query, idle bool, row func(Usage)) error
	breakdown(ctx context.Context, q Query) ([]Usage, error)
	hourly(ctx context.Context, q Query) ([]HourTotals, error)
	userWindows(ctx context.Context, today, d7, d30, current time.Time) (map[string][3]Totals, error)
	rollingSums(ctx context.Context, current time.Time, windows []time.Duration) (map[time.Duration]*RollingSums, error)
	bucketSums(ctx context.Context, buckets []time.Time) (map[int64]map[string]map[string]float64, error)
	decayedSums(ctx context.Context, current, from time.Time, halfLife time.Duration) (map[string]map[string]float64, error)
	WaitlistState(ctx context.Context) (WaitlistState, error)
	PutWaitlistState(ctx context.Context, ifVersion int64, state json.RawMessage, now time.Time) (WaitlistState, error)
	PutProfiles(ctx context.Context, days []ProfileDay, keepFrom time.Time) error
	Profiles(ctx context.Context, from time.Time, user string) ([]ProfileDay, error)
	ScanProfiles(ctx context.Context, from time.Time, user string, fn func(*ProfileDay) error) error
}

// Ledger integrates samples into the store and keeps per-user window totals in memory for the fast path.
type Ledger struct {
	store store
	opts  Options

	mu sync.Mutex // serializes Record
	cp *Checkpoint
	// mark is the monotonic reading at cp.At when this process committed cp (marked); a checkpoint re-read
	// from the store has none.
	mark   time.Duration
	marked bool
	// origin is the first now with a monotonic reading; readings are taken relative to it.
	origin    time.Time
	hasOrigin bool
	steps     atomic.Int64

	// seen is what this process observed since its last successful commit, while commits fail or have nothing
	// to commit (the database is down): per pod and key, so that a pod that ends before a commit goes through
	// again is charged up to the last tick that saw it, not only up to the checkpoint. It is cleared only by a
	// successful commit. A conflict re-read needs nothing dropped: what seen holds is charged from the
	// checkpoint on only, so whatever a checkpoint covers (another writer's, or this process's own commit whose
	// answer was lost) is not charged again. seenSeq numbers the ticks remembered; untracked is the most
	// holdings one tick could not add for the MaxSeen bound.
	seen      map[seenKey]*seenHolding
	seenSeq   uint64
	untracked int

	// held and heldSort are the memory holdings builds a tick's holdings in and sorts them through, charge the
	// charger's: kept from tick to tick (used under mu only), since at 20,000 pods a steady tick allocated them
	// anew, some 14 MB, and the garbage collection of a tick's garbage slows the API's requests. None of it is
	// reachable from what a tick returns, commits or caches (see holdings and charger).
	held, heldSort []Holding
	charge         charger
	// followHeld is the memory Follow reads the writer's held rows into (see Store.checkpoint).
	followHeld heldScratch

	cacheMu sync.RWMutex
	cache   windowCache
	// late counts the commits to buckets other than the current one (the first tick after an outage, a clock
	// step) and the reloads after another writer moved the checkpoint: the rolling windows' completed sums are
	// stale when it moved.
	late atomic.Uint64

	rolling rollingCache
	decay   decayCache
}

// Result tells what one Record did.
type Result struct {
	At time.Time
	// Charged is the time since the checkpoint that this tick integrated (monotonic time after a clock step);
	// zero on the first tick of a new ledger, when the clock did not move forward, or on a re-anchoring.
	Charged time.Duration
	// Gap is the part of a gap longer than MaxGap, beyond the last interval, over which some holding was
	// unknown (a pod ended during it, a sample with no pod or start time) and so not charged in full.
	Gap time.Duration
	// PerKey is GPU-seconds added per key.
	PerKey map[Key]Totals
	// ClockStep is how far the wall clock stepped since the last tick (wall minus monotonic elapsed time), zero
	// if it did not: the tick integrated monotonic time and re-anchored the checkpoint on the wall clock.
	ClockStep time.Duration
	// Ended counts pods gone after a gap longer than MaxGap whose end is unknown: held at the checkpoint and
	// not seen by this process since (it restarted), or seen while commits failed and then not observed for
	// longer than MaxGap before it was found gone. Each is charged up to the last time it was seen.
	Ended int
	// Untracked is at least how many holdings (pod and key) this process saw while its commits failed but did
	// not keep, for the MaxSeen bound: those that ended were charged as after a restart.
	Untracked int
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
	if opts.MaxSeen <= 0 {
		opts.MaxSeen = defaultMaxSeen
	}
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

// ClockSteps counts the wall-clock steps the ledger has re-anchored on (a metric's counter).
func (l *Ledger) ClockSteps() int64 { return l.steps.Load() }

// monotonic reads the monotonic clock at now; ok is false when there is none (a fake clock without Monotonic).
func (l *Ledger) monotonic(now time.Time) (time.Duration, bool) {
	if l.opts.Monotonic != nil {
		return l.opts.Monotonic(), true
	}
	if now == now.Round(0) { //nolint:staticcheck // QF1009: == is meant: it compares the monotonic readings too, so it is true only when now has none
		return 0, false
	}
	if !l.hasOrigin {
		l.origin, l.hasOrigin = now, true
	}
	return now.Sub(l.origin), true // both carry monotonic readings: Sub uses them
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
// there: each instant is charged once whichever writer charges it. When nothing is committed (an error, or
// nothing to integrate yet), the samples' holdings are remembered until a commit goes through (see seen).
func (l *Ledger) Record(ctx context.Context, now time.Time, samples []Sample) (Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	mono, hasMono := l.monotonic(now)
	now = now.Round(0).UTC()
	at := sighting{wall: now, mono: mono, hasMono: hasMono}
	held, ended := l.holdings(samples), endings(samples)
	conflict := false
	for attempt := 0; ; attempt++ {
		res, next, incs, ok := l.integrate(at, samples, held)
		if !ok {
			l.remember(at, held, ended)
			res.Conflict = conflict
			return res, nil
		}
		err := l.store.Commit(ctx, l.cp, next, incs)
		if err == nil {
			l.cp = &next
			l.mark, l.marked = mono, hasMono
			l.seen, l.untracked = nil, 0
			if res.ClockStep != 0 {
				l.steps.Add(1)
			}
			l.applyToCache(ctx, now, incs)
			res.Conflict = conflict
			return res, nil
		}
		if !errors.Is(err, ErrConflict) || attempt == maxConflictRetries {
			// The commit may have gone through with its answer lost: the next tick then finds the checkpoint
			// moved, re-reads it, and charges what is remembered from it on only.
			l.remember(at, held, ended)
			return Result{}, err
		}
		conflict = true
		if err := l.reload(ctx, now); err != nil {
			l.remember(at, held, ended)
			return Result{}, fmt.Errorf("after a ledger conflict: %w", err)
		}
	}
}

// sighting is the instant of one Record: its wall time and, when there is one, its monotonic reading.
type sighting struct {
	wall    time.Time
	mono    time.Duration
	hasMono bool
}

// back returns the sighting of the earlier instant t (at most s): its monotonic reading is s's less the wall time
// in between.
func (s sighting) back(t time.Time) sighting {
	t = minTime(t, s.wall)
	out := sighting{wall: t, hasMono: s.hasMono}
	if s.hasMono {
		out.mono = s.mono - s.wall.Sub(t)
	}
	return out
}

// place returns when the sighting s happened on the wall clock of now: its own wall time, unless the wall clock
// stepped in between (wall and monotonic elapsed times differ by more than stepTolerance), then now less the
// monotonic time elapsed since s. Without a step the wall time is kept, so that it compares exactly with
// checkpoints, which are wall times.
func place(s, now sighting) time.Time {
	if s.hasMono && now.hasMono {
		elapsed := now.mono - s.mono
		if (now.wall.Sub(s.wall) - elapsed).Abs() > stepTolerance(elapsed) {
			return now.wall.Add(-elapsed)
		}
	}
	return s.wall
}

type seenKey struct {
	pod string
	Key
}

// seenHolding is what this process saw of one pod's holding of one key while nothing was committed.
type seenHolding struct {
	// Holding: Allocated is the least seen (never charge more than was held), Since the last seen.
	Holding
	// first and last are the first and the last tick whose samples held it; last is when it went where a sample
	// said so (Sample.Until).
	first, last sighting
	// gone is the first tick after last whose samples did not hold it, or when it went; zero wall while it is
	// still held.
	gone sighting
	seq  uint64 // the last remembered tick that held it
}

// remember adds the holdings observed at a tick that committed nothing to seen, and the holdings that ended
// since the last tick (Sample.Until) as last seen when they ended.
func (l *Ledger) remember(at sighting, held []Holding, ended []ending) {
	if l.seen == nil {
		l.seen = map[seenKey]*seenHolding{}
	}
	l.seenSeq++
	dropped := 0
	var pace yield.Pass // a follower remembers every tick: on one CPU the API's requests wait for these loops otherwise
	for _, h := range held {
		pace.Item()
		k := seenKey{h.Pod, h.Key}
		e := l.seen[k]
		if e == nil {
			if len(l.seen) >= l.opts.MaxSeen {
				dropped++
				continue
			}
			e = &seenHolding{Holding: h, first: at}
			l.seen[k] = e
		}
		e.Allocated = min(e.Allocated, h.Allocated)
		e.Since = h.Since
		e.last, e.gone, e.seq = at, sighting{}, l.seenSeq
	}
	for _, d := range ended {
		pace.Item()
		k := seenKey{d.Pod, d.Key}
		end := at.back(d.until)
		e := l.seen[k]
		if e == nil {
			if len(l.seen) >= l.opts.MaxSeen {
				dropped++
				continue
			}
			e = &seenHolding{Holding: d.Holding, first: end, last: end}
			l.seen[k] = e
		}
		e.Allocated = min(e.Allocated, d.Allocated)
		e.Since = d.Since
		if end.wall.After(e.last.wall) {
			e.last = end
		}
		e.gone, e.seq = e.last, l.seenSeq
	}
	for _, e := range l.seen {
		pace.Item()
		if e.seq != l.seenSeq && e.gone.wall.IsZero() {
			e.gone = at
		}
	}
	l.untracked = max(l.untracked, dropped)
}

// maxConflictRetries bounds how often one Record re-reads the checkpoint when other writers keep moving it.
const maxConflictRetries = 3

// reload replaces the in-memory checkpoint and window cache with the store's, after another writer moved them.
func (l *Ledger) reload(ctx context.Context, now time.Time) error {
	cp, ok, err := l.store.Checkpoint(ctx)
	if err != nil {
		return err
	}
	l.cp, l.marked = nil, false
	if ok {
		l.cp = &cp
	}
	l.late.Add(1)
	return l.refreshCache(ctx, now)
}

// integrate computes the increments and the next checkpoint for a tick at now; ok is false when there is
// nothing to commit.
//
// Each sample is charged from the checkpoint to now, except a pod that started holding since the checkpoint,
// charged from its start. After a gap longer than MaxGap (the service or its database was down), the
// observation at now stands for the last interval only: before it utilization is unknown. A pod held at the
// checkpoint and still held now was Running all along (a pod never goes back to Pending), so it is charged for
// the whole gap; a pod gone since is charged up to the checkpoint (its end is unknown), unless this process saw
// it after the checkpoint (below); a sample with neither identity nor start time gets only the last interval.
// Such unknown holdings, and holdings seen but not kept (MaxSeen), add the gap to GapSeconds.
//
// A pod gone now that this process saw after the checkpoint, while its commits failed (seen), is charged from
// the checkpoint (held then), else from its start (else from when it was first seen) up to the last tick that
// saw it, with utilization unknown: no tick committed it, and the span is charged from the checkpoint on only,
// so nothing a checkpoint covers is charged twice. Its end is known, to within the ticks that saw it and then
// found it gone, unless those were more than MaxGap apart.
//
// How long since the checkpoint is measured on the monotonic clock when this process committed it, so that a
// wall-clock step neither stops accrual (back) nor charges the step (forward): the integrated span is then
// re-anchored to end at the wall clock's now. A checkpoint from the store (a restart, another writer) is
// measured on the wall clock; if that is more than MaxGap behind it, the clock stepped back and how long
// passed is unknown: the checkpoint is re-anchored at now and nothing is charged.
func (l *Ledger) integrate(at sighting, samples []Sample, held []Holding) (res Result, next Checkpoint, incs []Increment, ok bool) {
	now, mono, hasMono := at.wall, at.mono, at.hasMono
	// The maps of a tick are sized for its samples (one key each at most): grown entry by entry, they were most of
	// the ledger's garbage at 20,000 pods, and garbage collection slows the API's requests.
	res = Result{At: now, PerKey: make(map[Key]Totals, len(samples))}
	if l.cp == nil {
		// A new ledger starts now: nothing before it is charged.
		return res, Checkpoint{At: now, Ticks: 1, Held: held, LeftSince: now}, nil, true
	}
	next = *l.cp
	next.At, next.Ticks, next.Held = now, l.cp.Ticks+1, held
	from := l.cp.At
	switch wallElapsed := now.Sub(l.cp.At); {
	case l.marked && hasMono:
		elapsed := mono - l.mark
		if elapsed <= 0 {
			return res, next, nil, false // the same instant: nothing to integrate
		}
		if step := wallElapsed - elapsed; step.Abs() > stepTolerance(elapsed) {
			res.ClockStep, from = step, now.Add(-elapsed)
		}
	case wallElapsed > 0:
		// A checkpoint read from the store: wall time since it.
	case -wallElapsed <= l.opts.MaxGap:
		// The same instant, or the checkpoint of another writer whose clock is ahead: wait until the wall
		// clock passes it, then charge from it (delayed, nothing lost). Re-anchoring here would let two
		// writers with skewed clocks each charge the skew.
		return res, next, nil, false
	default:
		// Far behind: this clock stepped back across a restart. How long passed is unknown; re-anchor.
		res.ClockStep = wallElapsed
		l.depart(&next, nil)
		return res, next, nil, true
	}
	res.Charged = now.Sub(from)
	long := res.Charged > l.opts.MaxGap
	observedFrom := from
	if long {
		observedFrom = now.Add(-l.opts.Interval)
	}
	unknown := false
	c := &l.charge
	c.reset(piece{from, now}, len(samples))
	// charged are the pods gone now whose charge goes on after the checkpoint: until when (a sample's Until, the
	// last sighting of a seen holding).
	charged := map[string]time.Time{}
	for _, s := range samples {
		c.pace.Item()
		end := now
		if !s.Until.IsZero() {
			end = minTime(s.Until.Round(0).UTC(), now)
		}
		begin := from
		switch {
		case s.Pod != "" && l.cp.holds(s.Pod):
			// Held at the checkpoint and now (or until it went): Running all along.
		case !s.Since.IsZero():
			begin = l.chargeFrom(s.Pod, s.Since, from)
		case long:
			begin, unknown = observedFrom, true
		}
		begin = minTime(begin, end)
		c.add(s, begin, observedFrom, end)
		if !s.Until.IsZero() && s.Pod != "" && begin.Before(end) && end.After(charged[s.Pod]) {
			charged[s.Pod] = end
		}
	}
	if !long && len(l.seen) == 0 {
		l.depart(&next, charged)
		incs = c.increments(&next.Sums, res.PerKey)
		return res, next, incs, true
	}
	present := make(map[string]bool, len(samples))
	for _, s := range samples {
		present[s.Pod] = true
	}
	// ends are the pods gone now, after a long gap: when they were last seen and first found gone.
	type podEnd struct{ last, gone time.Time }
	var ends map[string]podEnd
	if long {
		ends = map[string]podEnd{}
		for _, h := range l.cp.Held {
			if !present[h.Pod] {
				ends[h.Pod] = podEnd{last: from, gone: now} // not seen since the checkpoint, unless seen says so
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(l.seen), compareSeenKeys) { // sorted: the sums' rounding is the same each run
		e := l.seen[k]
		if present[e.Pod] {
			continue // charged above, as observed now
		}
		last := minTime(place(e.last, at), now)
		heldAtCP := l.cp.holds(e.Pod)
		begin := from
		switch {
		case heldAtCP:
			// Running from the checkpoint to its last sighting.
		case !e.Since.IsZero():
			begin = l.chargeFrom(e.Pod, e.Since, from)
		default:
			begin = maxTime(from, place(e.first, at))
		}
		c.rate(piece{begin, last}, e.Key, Totals{Allocated: e.Allocated, UsedUnknown: e.Allocated})
		if begin.Before(last) && last.After(charged[e.Pod]) {
			charged[e.Pod] = last
		}
		if ends == nil || !last.After(from) {
			continue // before the checkpoint: a checkpoint (this process's or another writer's) covers it
		}
		gone := now
		if !e.gone.wall.IsZero() {
			gone = minTime(place(e.gone, at), now)
		}
		if pe, ok := ends[e.Pod]; !ok || !last.Before(pe.last) {
			ends[e.Pod] = podEnd{last: last, gone: gone}
		}
	}
	res.Untracked = l.untracked
	if long {
		for _, pe := range ends {
			if pe.gone.Sub(pe.last) > l.opts.MaxGap {
				res.Ended++
			}
		}
		if unknown || res.Ended > 0 || res.Untracked > 0 {
			res.Gap = res.Charged - l.opts.Interval
			next.GapSeconds += res.Gap.Seconds()
		}
	}
	l.depart(&next, charged)
	incs = c.increments(&next.Sums, res.PerKey)
	return res, next, incs, true
}

// departureMemory is how long a departure stays in Checkpoint.Left: longer than any delay between a pod's start
// and the first tick that sees it (an informer's lag, a writer's restart), and than a gap a pod comes back from.
const departureMemory = 10 * time.Minute

// chargeFrom returns where the charge of a pod not held at the checkpoint (at from) begins. If it is in Left,
// where its charge stopped: it comes back (a writer whose informer lagged missed it) and ran all along. Else
// nothing was charged for it since LeftSince (it would be in Left or held), so at its start, or LeftSince if
// it started before: a pod the ticks before this one did not see yet is charged from its start, not from the
// last checkpoint. A checkpoint from before Left knows none of that: at the checkpoint.
func (l *Ledger) chargeFrom(pod string, since, from time.Time) time.Time {
	switch until, left := l.cp.departed(pod); {
	case pod == "" || l.cp.LeftSince.IsZero():
		return maxTime(from, since)
	case left:
		return maxTime(since, until)
	default:
		return maxTime(since, l.cp.LeftSince)
	}
}

// depart sets next.Left: the checkpoint's departures and the pods it held that next does not, less those held
// again and those older than the memory. A pod's charge stopped at the checkpoint, or later where charged (the
// seen holdings of a pod gone now) says so. The lists are sorted by pod: one merge, no map of every pod.
func (l *Ledger) depart(next *Checkpoint, charged map[string]time.Time) {
	since := l.cp.LeftSince
	if since.IsZero() {
		since = l.cp.At // a checkpoint from before Left: departures are known from it on
	}
	next.LeftSince = maxTime(since, next.At.Add(-max(departureMemory, l.opts.MaxGap)))
	var out []Departure
	keep := func(d Departure) {
		if t, ok := charged[d.Pod]; ok {
			d.Until = maxTime(d.Until, t)
			delete(charged, d.Pod)
		}
		if !d.Until.Before(next.LeftSince) {
			out = append(out, d)
		}
	}
	left, held, now := l.cp.Left, l.cp.Held, next.Held
	heldNow := func(pod string) bool {
		for len(now) > 0 && now[0].Pod < pod {
			now = now[1:]
		}
		return len(now) > 0 && now[0].Pod == pod
	}
	for len(left) > 0 || len(held) > 0 {
		var d Departure
		if len(held) == 0 || len(left) > 0 && left[0].Pod < held[0].Pod {
			d, left = left[0], left[1:]
		} else {
			var first []Holding
			first, held = cutPod(held)
			d = Departure{Pod: first[0].Pod, Until: l.cp.At}
			if len(left) > 0 && left[0].Pod == d.Pod {
				left = left[1:] // not written so, but held at the checkpoint says more
			}
		}
		if !heldNow(d.Pod) {
			keep(d)
		}
	}
	for pod, t := range charged { // seen after the checkpoint only
		if !t.Before(next.LeftSince) {
			out = append(out, Departure{Pod: pod, Until: t})
		}
	}
	sortDepartures(out)
	next.Left = out
}

func compareSeenKeys(a, b seenKey) int {
	return cmp.Or(strings.Compare(a.pod, b.pod), strings.Compare(a.User, b.User), cmp.Compare(a.Kind, b.Kind),
		strings.Compare(a.Class, b.Class))
}

// stepTolerance is how far wall and monotonic elapsed times may differ before it counts as a clock step: NTP
// slews both clocks alike, by at most 500 ppm, so a second plus 0.1 % leaves room.
func stepTolerance(elapsed time.Duration) time.Duration { return time.Second + elapsed/1000 }

// sortHoldings orders holdings by byte order of (pod, user, kind, class), the order the held-rows diff and the
// binary search by pod rely on. It is applied in Go, not by ORDER BY: PostgreSQL sorts text by the database's
// collation, which need not be byte order. buf is the sort's merge buffer (yield.SortFuncBuffer); nil: its own.
// Paced: 10,000 holdings take several milliseconds, which the API's requests would wait for on one CPU.
func sortHoldings(hs []Holding, buf *[]Holding) {
	var pace yield.Pass
	if buf == nil {
		yield.SortFunc(&pace, hs, compareHoldings)
		return
	}
	yield.SortFuncBuffer(&pace, hs, buf, compareHoldings)
}

func compareHoldings(a, b Holding) int {
	return cmp.Or(strings.Compare(a.Pod, b.Pod), strings.Compare(a.User, b.User), cmp.Compare(a.Kind, b.Kind),
		strings.Compare(a.Class, b.Class))
}

// holdings are the holdings of the samples' pods that still hold (no Until), sorted by pod and key, a pod's units
// of one key summed.
//
// They are built in l.held. When they equal the checkpoint's (a steady tick: the same pods hold the same), the
// checkpoint's own Held is returned and l.held is kept for the next tick: nothing of the tick is left for the
// garbage collector. Otherwise l.held's memory is returned and given up (l.held is nil): it may become the next
// checkpoint's Held, which readers share (Checkpoint) and which is never written to. Either way the slice returned
// is never written to again.
func (l *Ledger) holdings(samples []Sample) []Holding {
	out := reused(l.held, len(samples))
	l.heldSort = reused(l.heldSort, len(samples))
	var pace yield.Pass // gathering 20,000 holdings takes 0.3 ms, comparing them as long
	for i, s := range samples {
		if i%holdingsPerItem == 0 {
			pace.Item()
		}
		if s.Pod != "" && s.Until.IsZero() {
			out = append(out, Holding{Pod: s.Pod, Key: s.Key, Allocated: s.Allocated, Since: s.Since.Round(0).UTC()})
		}
	}
	held := merge(out, &l.heldSort)
	if len(held) == 0 || l.cp != nil && sameHoldings(&pace, held, l.cp.Held) {
		l.held = out[:0]
		if len(held) == 0 {
			return nil
		}
		return l.cp.Held
	}
	l.held = nil
	return held
}

// holdingsPerItem is how many samples holdings gathers, or holdings it compares, between two Items of its
// yield.Pass (an Item reads the clock, which takes longer than one of them).
const holdingsPerItem = 256

// sameHoldings reports whether a and b hold the same, element by element.
func sameHoldings(pace *yield.Pass, a, b []Holding) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if i%holdingsPerItem == 0 {
			pace.Item()
		}
		if !a[i].equal(b[i]) {
			return false
		}
	}
	return true
}

// ending is a pod's holding of one key that ended since the last tick, and when (Sample.Until).
type ending struct {
	Holding
	until time.Time
}

// endings are the holdings of the samples' pods that went since the last tick (Until set), a pod's units of one
// key summed.
func endings(samples []Sample) []ending {
	var hs []Holding
	until := map[string]time.Time{}
	for _, s := range samples {
		if s.Pod != "" && !s.Until.IsZero() {
			hs = append(hs, Holding{Pod: s.Pod, Key: s.Key, Allocated: s.Allocated, Since: s.Since.Round(0).UTC()})
			until[s.Pod] = maxTime(until[s.Pod], s.Until.Round(0).UTC())
		}
	}
	var out []ending
	for _, h := range merge(hs, nil) {
		out = append(out, ending{Holding: h, until: until[h.Pod]})
	}
	return out
}

// merge sorts holdings by pod and key (through buf, see sortHoldings) and sums a pod's units of one key, in
// place; nil when there are none.
func merge(out []Holding, buf *[]Holding) []Holding {
	sortHoldings(out, buf)
	merged := out[:0]
	for _, h := range out {
		if n := len(merged); n > 0 && merged[n-1].Pod == h.Pod && merged[n-1].Key == h.Key {
			merged[n-1].Allocated += h.Allocated
			continue
		}
		merged = append(merged, h)
	}
	if len(merged) == 0 {
		return nil
	}
	return slices.Clip(merged)
}

// charger accumulates per-second rates over time pieces, then cuts them into hour-bucket increments; pace lets
// the API's requests run between its items (on one CPU they wait for a tick of 10,000 users' samples otherwise).
// One charger (Ledger.charge) serves every tick, reset at each: its maps and slices are kept and emptied rather
// than allocated anew (about 9 MB a tick at 20,000 pods; see emptied and reused for when they are not).
type charger struct {
	rates map[piece]map[Key]Totals
	pace  yield.Pass
	// hint sizes main's map: the tick's whole span, which every sample but a new pod's is charged over.
	main piece
	hint int

	// mainRates is main's map, made for mainMade keys; the other pieces' maps (new pods, an outage's) are small
	// and made anew.
	mainRates map[Key]Totals
	mainMade  int
	pieces    []piece
	// acc sums the increments by key and hour bucket, made for accMade entries.
	acc     map[bucketKey]Totals
	accMade int
	// incs are the increments returned by increments, valid until the next reset: Commit and applyToCache read
	// them before Record returns, and nothing keeps them (they are in no Result, checkpoint or cache).
	// incsSort is their sort's merge buffer.
	incs, incsSort []Increment
}

type bucketKey struct {
	Key
	bucket time.Time
}

// reset readies c for a tick whose span is main, of hint samples.
func (c *charger) reset(main piece, hint int) {
	clear(c.rates)
	c.pace = yield.Pass{}
	c.main, c.hint = main, hint
}

// Memory kept from tick to tick for a tick's n elements is given back when n is under a quarter of it (the cluster
// shrank); a slice too short is replaced by one with an eighth to spare, so that a growing cluster's next ticks
// still fit in it.

// emptied returns m emptied, or a new map for n entries when there is none or when it was made for, or grew to,
// over four times n (*made). A map too small grows by itself, in place.
func emptied[K comparable, V any](m map[K]V, made *int, n int) map[K]V {
	if m == nil || n < *made/4 {
		*made = n
		return make(map[K]V, n)
	}
	clear(m)
	*made = max(*made, n)
	return m
}

// reused returns s emptied, or a new empty slice with room for n and an eighth more when s has less room than n
// or over four times as much.
func reused[S ~[]E, E any](s S, n int) S {
	if n <= cap(s) && n >= cap(s)/4 {
		return s[:0]
	}
	return make(S, 0, n+n/8)
}

type piece struct {
	from, to time.Time
}

func (c *charger) rate(p piece, k Key, t Totals) {
	if !p.from.Before(p.to) || t == (Totals{}) {
		return
	}
	if c.rates == nil {
		c.rates = map[piece]map[Key]Totals{}
	}
	m := c.rates[p]
	if m == nil {
		if p == c.main {
			c.mainRates = emptied(c.mainRates, &c.mainMade, c.hint)
			m = c.mainRates
		} else {
			m = map[Key]Totals{}
		}
		c.rates[p] = m
	}
	r := m[k]
	r.add(t)
	m[k] = r
}

// add charges s over (begin, end]: before observedFrom its utilization is unknown, after it the observation.
func (c *charger) add(s Sample, begin, observedFrom, end time.Time) {
	c.rate(piece{begin, minTime(observedFrom, end)}, s.Key, Totals{Allocated: s.Allocated, UsedUnknown: s.Allocated})
	obs := Totals{Allocated: s.Allocated, UsedUnknown: s.Allocated}
	if s.UsedKnown {
		obs = Totals{Allocated: s.Allocated, Used: s.Used}
	}
	c.rate(piece{maxTime(begin, observedFrom), end}, s.Key, obs)
}

// increments returns one increment per key and hour bucket, sorted, and adds them to sums and perKey. The slice
// is c's: it is valid until the next reset.
func (c *charger) increments(sums *Totals, perKey map[Key]Totals) []Increment {
	c.pieces = slices.AppendSeq(c.pieces[:0], maps.Keys(c.rates))
	slices.SortFunc(c.pieces, func(a, b piece) int {
		return cmp.Or(a.from.Compare(b.from), a.to.Compare(b.to))
	})
	n := 0
	for _, m := range c.rates {
		n += len(m)
	}
	c.acc = emptied(c.acc, &c.accMade, n) // a key's pieces mostly share one bucket
	acc := c.acc
	for _, p := range c.pieces {
		for _, sp := range splitHours(p.from, p.to) {
			secs := sp.d.Seconds()
			for k, r := range c.rates[p] {
				c.pace.Item()
				bk := bucketKey{k, sp.bucket}
				t := acc[bk]
				t.add(r.scale(secs))
				acc[bk] = t
			}
		}
	}
	incs := reused(c.incs, len(acc))
	c.incsSort = reused(c.incsSort, len(acc))
	for bk, t := range acc {
		c.pace.Item()
		incs = append(incs, Increment{Key: bk.Key, Bucket: bk.bucket, Totals: t})
		sums.add(t)
		pk := perKey[bk.Key]
		pk.add(t)
		perKey[bk.Key] = pk
	}
	yield.SortFuncBuffer(&c.pace, incs, &c.incsSort, func(a, b Increment) int {
		return cmp.Or(strings.Compare(a.User, b.User), cmp.Compare(a.Kind, b.Kind), strings.Compare(a.Class, b.Class),
			a.Bucket.Compare(b.Bucket))
	})
	c.incs = incs
	return incs
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

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
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
	hour      time.Time    // current hour bucket
	starts    [3]time.Time // first bucket of today, 7 d, 30 d
	completed map[string][3]Totals
	current   map[string]Totals
	// currentByKey is the current hour by user and class, for the rolling windows.
	currentByKey map[Key]Totals
}

func (l *Ledger) windowStarts(hour time.Time) (today, d7, d30 time.Time) {
	y, m, d := hour.In(l.opts.Location).Date()
	today = time.Date(y, m, d, 0, 0, 0, 0, l.opts.Location).UTC()
	return today, hour.Add(-(7*24 - 1) * time.Hour), hour.Add(-(30*24 - 1) * time.Hour)
}

func (l *Ledger) refreshCache(ctx context.Context, now time.Time) error {
	hour := now.UTC().Truncate(time.Hour)
	cur, err := l.currentHour(ctx, hour)
	if err != nil {
		return err
	}
	return l.refreshWindows(ctx, hour, cur)
}

// refreshWindows re-sums the completed hours of every window and replaces the cache with them and cur, the
// current hour's sums.
func (l *Ledger) refreshWindows(ctx context.Context, hour time.Time, cur hourSums) error {
	today, d7, d30 := l.windowStarts(hour)
	completed, err := l.store.userWindows(ctx, today, d7, d30, hour)
	if err != nil {
		return err
	}
	l.cacheMu.Lock()
	l.cache = windowCache{hour: hour, starts: [3]time.Time{today, d7, d30}, completed: completed, current: cur.byUser, currentByKey: cur.byKey}
	l.cacheMu.Unlock()
	return nil
}

// hourSums are one hour bucket's GPU-seconds by user, by key and in all.
type hourSums struct {
	byUser map[string]Totals
	byKey  map[Key]Totals
	total  Totals
}

// currentHour sums the store's rows of the hour bucket that starts at hour.
//
// The maps become the cache's, which readers share: they are new, but sized as the cache's (a follower re-sums
// the hour every tick; grown row by row they allocated about twice as much). The rows are summed as they are
// read, without a []Row of them.
func (l *Ledger) currentHour(ctx context.Context, hour time.Time) (hourSums, error) {
	l.cacheMu.RLock()
	users, keys := len(l.cache.current), len(l.cache.currentByKey)
	l.cacheMu.RUnlock()
	out := hourSums{byUser: make(map[string]Totals, users), byKey: make(map[Key]Totals, keys)}
	var last Key // the row before: rows come by user, kind and class, and many users share a kind and a class
	err := l.store.sum(ctx, Query{From: hour, To: hour.Add(time.Hour)}, false, func(u Usage) {
		r := u.Row
		// Equal kinds and classes share one string, not one each in the cache's keys.
		if r.Kind == last.Kind {
			r.Kind = last.Kind
		}
		if r.Class == last.Class {
			r.Class = last.Class
		}
		last = r.Key
		t := out.byUser[r.User]
		t.add(r.Totals)
		out.byUser[r.User] = t
		k := out.byKey[r.Key]
		k.add(r.Totals)
		out.byKey[r.Key] = k
		out.total.add(r.Totals)
	})
	if err != nil {
		return hourSums{}, err
	}
	return out, nil
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
	// A chunk of users at a time, with the lock let go and the processor given up in between: the API's requests
	// read the cache. A user's increments (incs is sorted by user: charger.increments) go in together, so a reader
	// sees each user's sums before or after this tick, never half of it; a reader of several users (the admin
	// list, Rolling) may see this tick applied to some of them and not yet to others for those few milliseconds.
	var pace yield.Pass
	for len(incs) > 0 {
		n := min(cacheChunk, len(incs))
		for n < len(incs) && incs[n].User == incs[n-1].User {
			n++
		}
		l.addToCache(incs[:n])
		incs = incs[n:]
		pace.Item()
	}
}

// cacheChunk is how many increments applyToCache adds under one hold of the cache's lock.
const cacheChunk = 512

func (l *Ledger) addToCache(incs []Increment) {
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	for _, inc := range incs {
		switch {
		case inc.Bucket.Equal(l.cache.hour):
			t := l.cache.current[inc.User]
			t.add(inc.Totals)
			l.cache.current[inc.User] = t
			k := l.cache.currentByKey[inc.Key]
			k.add(inc.Totals)
			l.cache.currentByKey[inc.Key] = k
		default:
			l.late.Add(1)
			// Another hour: the first tick after an outage fills earlier ones; after the wall clock stepped
			// back, later ones hold what was charged before the step.
			w := l.cache.completed[inc.User]
			for i, start := range l.cache.starts {
				if !inc.Bucket.Before(start) {
					w[i].add(inc.Totals)
				}
			}
			l.cache.completed[inc.User] = w
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

// Hourly returns GPU-hours per hour bucket over a window, summed over every user (or q.User), from the store:
// the admin view's chart of held and idle-but-held GPU-hours. Buckets without GPU-hours are left out.
func (l *Ledger) Hourly(ctx context.Context, q Query) ([]HourTotals, error) {
	hs, err := l.store.hourly(ctx, q)
	if err != nil {
		return nil, err
	}
	const h = 1.0 / 3600
	for i := range hs {
		hs[i].Totals, hs[i].Idle = hs[i].scale(h), hs[i].Idle*h
	}
	return hs, nil
}

// Breakdown is Hours with each key's idle-but-held GPU-hours (Usage.Idle), for the admin view.
func (l *Ledger) Breakdown(ctx context.Context, q Query) ([]Usage, error) {
	us, err := l.store.breakdown(ctx, q)
	if err != nil {
		return nil, err
	}
	const h = 1.0 / 3600
	for i := range us {
		us[i].Totals, us[i].Idle = us[i].scale(h), us[i].Idle*h
	}
	return us, nil
}

// MaxRollingWindows bounds the windows of one Rolling call (one query column pair each).
const MaxRollingWindows = 16

// Rolling returns every user's allocated GPU-hours by class (gpu.Allocation.Class) in each rolling window
// [asOf-w, asOf], w whole hours. The ledger counts in hour buckets: the window's first bucket, partly inside it,
// is prorated by the part inside (use within an hour is taken as even), the current bucket counts what was
// recorded up to the last tick. Users without GPU-hours in a window are left out of it.
//
// The completed buckets come from a cache (rollingCache): computed once with one grouped query, rolled forward
// each hour with a query of two buckets, computed again after a commit to an earlier bucket. The current hour
// comes from memory. So gpu-quota's refresh every few seconds costs no full scan.
func (l *Ledger) Rolling(ctx context.Context, windows []time.Duration, asOf time.Time) (map[time.Duration]map[string]map[string]float64, error) {
	if len(windows) > MaxRollingWindows {
		return nil, fmt.Errorf("ledger: at most %d rolling windows at once", MaxRollingWindows)
	}
	for _, w := range windows {
		if w < time.Hour || w%time.Hour != 0 {
			return nil, fmt.Errorf("ledger: a rolling window is whole hours, not %s", w)
		}
	}
	l.cacheMu.RLock()
	hour := l.cache.hour
	current := make(map[Key]Totals, len(l.cache.currentByKey))
	maps.Copy(current, l.cache.currentByKey)
	l.cacheMu.RUnlock()

	sums, err := l.rollingSums(ctx, hour, windows)
	if err != nil {
		return nil, err
	}
	// The part of the first bucket inside the window: all of it at the start of the current hour, none of it
	// at its end (or later, before the next tick opens a new bucket).
	f := max(0, min(1, 1-asOf.Sub(hour).Hours()))
	out := make(map[time.Duration]map[string]map[string]float64, len(windows))
	for _, w := range windows {
		if out[w] != nil {
			continue
		}
		s := sums[w]
		m := make(map[string]map[string]float64, len(s.Full))
		add := func(user, class string, seconds float64) {
			if seconds <= 0 {
				return
			}
			c := m[user]
			if c == nil {
				c = map[string]float64{}
				m[user] = c
			}
			c[class] += seconds / 3600
		}
		for user, classes := range s.Full {
			for class, v := range classes {
				add(user, class, v)
			}
		}
		for user, classes := range s.Edge {
			for class, v := range classes {
				add(user, class, f*v)
			}
		}
		for k, t := range current {
			add(k.User, k.Class, t.Allocated)
		}
		out[w] = m
	}
	return out, nil
}

// rollingCache keeps the completed part of rolling windows (RollingSums) as of one current hour.
type rollingCache struct {
	mu   sync.Mutex
	hour time.Time // the current hour bucket the sums leave out
	late uint64    // Ledger.late when they were computed
	sums map[time.Duration]*RollingSums
	// call is the computation under way: callers wait for it rather than each run the same scan, and it runs
	// to the end even when they give up (a first scan of a large ledger can outlast a client's timeout).
	call *rollingCall
}

type rollingCall struct {
	done chan struct{}
	err  error
}

// maxRollHours is the most hours the cache is rolled forward one bucket at a time; a longer pause re-sums.
const maxRollHours = 24

// rollingTimeout bounds one computation of the sums.
const rollingTimeout = 5 * time.Minute

// rollingSums returns the completed sums of windows as of the current hour bucket hour.
func (l *Ledger) rollingSums(ctx context.Context, hour time.Time, windows []time.Duration) (map[time.Duration]*RollingSums, error) {
	c := &l.rolling
	for {
		c.mu.Lock()
		if c.call == nil && c.hour.Equal(hour) && c.late == l.late.Load() && hasAll(c.sums, windows) {
			out := make(map[time.Duration]*RollingSums, len(windows))
			for _, w := range windows {
				out[w] = c.sums[w]
			}
			c.mu.Unlock()
			return out, nil
		}
		call := c.call
		if call == nil {
			call = &rollingCall{done: make(chan struct{})}
			c.call = call
			go l.computeRolling(call, hour, windows)
		}
		c.mu.Unlock()
		select {
		case <-call.done:
			if call.err != nil {
				return nil, call.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func hasAll(sums map[time.Duration]*RollingSums, windows []time.Duration) bool {
	for _, w := range windows {
		if _, ok := sums[w]; !ok {
			return false
		}
	}
	return true
}

// computeRolling brings the cache to hour: rolled forward from the hour it holds when nothing was written
// late since, else afresh; then the windows it lacks in one grouped query.
func (l *Ledger) computeRolling(call *rollingCall, hour time.Time, windows []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), rollingTimeout)
	defer cancel()
	c := &l.rolling
	c.mu.Lock()
	from, late, sums := c.hour, c.late, c.sums
	c.mu.Unlock()
	nowLate := l.late.Load()
	steps := int(hour.Sub(from) / time.Hour)
	if late != nowLate || from.IsZero() || steps < 0 || steps > maxRollHours {
		sums = map[time.Duration]*RollingSums{}
	}
	var err error
	for h := from; err == nil && len(sums) > 0 && h.Before(hour); h = h.Add(time.Hour) {
		sums, err = l.rollHour(ctx, h, sums)
	}
	var missing []time.Duration
	for _, w := range windows {
		if _, ok := sums[w]; !ok && !slices.Contains(missing, w) {
			missing = append(missing, w)
		}
	}
	if err == nil && len(missing) > 0 {
		var got map[time.Duration]*RollingSums
		if got, err = l.store.rollingSums(ctx, hour, missing); err == nil {
			maps.Copy(sums, got)
		}
	}
	c.mu.Lock()
	if err == nil {
		c.hour, c.late, c.sums = hour, nowLate, sums
	}
	c.call, call.err = nil, err
	c.mu.Unlock()
	close(call.done)
}

// rollHour moves sums from current hour h to h+1h: bucket h is complete now and joins every window; for each
// window w, bucket h+1h-w leaves the buckets wholly inside and becomes the first one.
func (l *Ledger) rollHour(ctx context.Context, h time.Time, sums map[time.Duration]*RollingSums) (map[time.Duration]*RollingSums, error) {
	buckets := []time.Time{h}
	for w := range sums {
		buckets = append(buckets, h.Add(time.Hour-w))
	}
	got, err := l.store.bucketSums(ctx, buckets)
	if err != nil {
		return nil, err
	}
	out := make(map[time.Duration]*RollingSums, len(sums))
	for w, s := range sums {
		edge := h.Add(time.Hour - w).Unix()
		full := make(map[string]map[string]float64, len(s.Full))
		for u, cs := range s.Full {
			full[u] = maps.Clone(cs)
		}
		for u, cs := range got[h.Unix()] {
			for class, v := range cs {
				addTo(full, u, class, v)
			}
		}
		for u, cs := range got[edge] {
			for class, v := range cs {
				addTo(full, u, class, -v)
				if full[u][class] < 1e-6 { // float dust of the subtraction
					delete(full[u], class)
					if len(full[u]) == 0 {
						delete(full, u)
					}
				}
			}
		}
		out[w] = &RollingSums{Full: full, Edge: got[edge]}
		if out[w].Edge == nil {
			out[w].Edge = map[string]map[string]float64{}
		}
	}
	return out, nil
}
