// Package profile records each running server's GPU use, tick by tick, into bounded per-day profiles (fixed
// histograms of memory and SM utilization, peak memory, held, busy and unknown time) kept in the ledger's
// database for Retention, and turns the days of a period into the profiles right-size advice is computed from
// (services/internal/rightsize, issue 38). Only the ledger's writer records: the others would count twice.
package profile

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// Retention is how long profile days are kept: the longest period advice is asked over (30 d), and the day in
// progress.
const Retention = 30 * 24 * time.Hour

// Store is where the days are kept (the ledger).
type Store interface {
	PutProfiles(ctx context.Context, days []ledger.ProfileDay, keepFrom time.Time) error
	Profiles(ctx context.Context, from time.Time, user string) ([]ledger.ProfileDay, error)
}

type key struct {
	user, server, class string
	day                 int64
}

// Recorder accumulates the days in progress in memory and writes them with Flush.
type Recorder struct {
	// MaxStep bounds the time one observation stands for: after a longer pause (the database, or this process,
	// was down) the missing time is not charged to what was seen after it.
	MaxStep time.Duration

	flushMu sync.Mutex // one flush at a time
	mu      sync.Mutex
	gen     int // counts resets: a flush in flight across one keeps nothing
	days    map[key]*ledger.ProfileDay
	dirty   map[key]bool
	loaded  map[int64]bool // days read back from the store (a restart continues them)
	last    time.Time
}

// NewRecorder returns a Recorder whose observations stand for at most maxStep each.
func NewRecorder(maxStep time.Duration) *Recorder {
	return &Recorder{MaxStep: maxStep, days: map[key]*ledger.ProfileDay{}, dirty: map[key]bool{}, loaded: map[int64]bool{}}
}

// Reset forgets everything not yet written: the next flush reads the stored days back first.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.days)
	clear(r.dirty)
	clear(r.loaded)
	r.last = time.Time{}
	r.gen++
}

// Observe adds one tick's view: each running server's memory and utilization, for the time since the last
// tick (the view's interval for the first).
func (r *Recorder) Observe(v *usage.View) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dt := v.Interval
	if !r.last.IsZero() {
		dt = v.SampledAt.Sub(r.last)
	}
	r.last = v.SampledAt
	if dt <= 0 {
		return
	}
	dt = min(dt, r.MaxStep)
	day := ledger.DayOf(v.SampledAt)
	busy := busyReplicas(v)
	for _, u := range v.Users {
		for _, s := range u.Servers {
			if len(s.GPUs) == 0 {
				continue
			}
			k := key{user: u.Name, server: s.Name, class: s.GPUs[0].Class, day: day.Unix()}
			d := r.days[k]
			if d == nil {
				d = &ledger.ProfileDay{User: u.Name, Server: s.Name, Class: k.class, Day: day, First: v.SampledAt,
					MemoryHist: make([]uint32, ledger.MemoryBins), SMHist: make([]uint32, ledger.SMBins)}
				r.days[k] = d
			}
			observe(d, s, v.SampledAt, dt.Seconds(), busy)
			r.dirty[k] = true
		}
	}
}

// contentionKnown says whether a kind's units are measured per pod, so that a neighbour's use can be told from
// one's own: time-sliced and MPS replicas of a whole GPU (NVML per process). On a time-sliced MIG instance
// every pod is shown the instance's number (DCGM), so it is not.
func contentionKnown(k gpu.Kind) bool { return k == gpu.KindShared || k == gpu.KindMPS }

// unitBusy says whether a unit's own utilization is known and at or above the idle line.
func unitBusy(g usage.GPU) bool {
	return g.SMUtilPercent != nil && *g.SMUtilPercent >= usage.IdleBelowPercent
}

// busyReplicas counts, per physical GPU (UUID), the busy replicas on it in the view.
func busyReplicas(v *usage.View) map[string]int {
	n := map[string]int{}
	for _, u := range v.Users {
		for _, s := range u.Servers {
			for _, g := range s.GPUs {
				if contentionKnown(g.Kind) && g.UUID != "" && !s.Stale && unitBusy(g) {
					n[g.UUID]++
				}
			}
		}
	}
	return n
}

// observe adds one sample of server s, standing for dt seconds, to d; busy counts the busy replicas per
// physical GPU (busyReplicas).
func observe(d *ledger.ProfileDay, s usage.Server, at time.Time, dt float64, busy map[string]int) {
	g0 := s.GPUs[0]
	// The short model name, as the offers name it (rightsize compares compute within one model).
	d.Kind, d.Product, d.HeldGPUs, d.Last = string(g0.Kind), gpu.ShortProduct(g0.Product), s.AllocatedGPUs, at
	d.Simulated = d.Simulated || s.Simulated
	d.HeldS += dt
	var mem, memTotal uint64
	var used, scale float64
	known := !s.Stale
	for _, g := range s.GPUs {
		mem += g.MemoryUsedBytes
		memTotal += g.MemoryTotalBytes
		if g.SMUtilPercent == nil || g.UsedGPUs == nil {
			known = false
			continue
		}
		used += *g.UsedGPUs
		scale += g.UtilizationScale
	}
	d.MemoryTotalBytes = memTotal
	if !s.Stale { // a stale node's memory is its last sample's, not now's
		d.PeakMemoryBytes = max(d.PeakMemoryBytes, mem)
		d.MemoryHist[memoryBin(mem, memTotal)]++
	}
	if !known || scale <= 0 {
		d.UnknownS += dt
		return
	}
	d.Scale = scale
	util := used / scale * 100
	if util < usage.IdleBelowPercent {
		return
	}
	d.BusyS += dt
	d.BusySamples++
	d.SMHist[min(ledger.SMBins-1, int(util))]++
	for _, g := range s.GPUs {
		if contentionKnown(g.Kind) && g.UUID != "" && unitBusy(g) && busy[g.UUID] > 1 {
			d.ContendedS += dt
			break
		}
	}
}

// memoryBin is the hundredth of total that used falls in; the last bin when total is unknown (the percentile
// is then the peak: the safe side).
func memoryBin(used, total uint64) int {
	if total == 0 {
		return ledger.MemoryBins - 1
	}
	return min(ledger.MemoryBins-1, int(float64(used)/float64(total)*100))
}

// Flush writes the days that changed since the last flush and deletes those older than Retention. The first
// flush of a day reads that day back from the store and adds to it, so that a restart continues the day rather
// than starting it over. Days before today are dropped from memory once written. The store is read and written
// without the recorder's lock, from a copy taken under it, so that Observe (the tick) never waits for the
// database; a write that fails leaves its days to the next flush. Flushes run one at a time.
func (r *Recorder) Flush(ctx context.Context, st Store, now time.Time) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	today := ledger.DayOf(now)
	r.mu.Lock()
	gen := r.gen
	var toLoad []int64
	for k := range r.dirty {
		if !r.loaded[k.day] && !slices.Contains(toLoad, k.day) {
			toLoad = append(toLoad, k.day)
		}
	}
	r.mu.Unlock()
	for _, dk := range toLoad {
		day := time.Unix(dk, 0).UTC()
		stored, err := st.Profiles(ctx, day, "")
		if err != nil {
			return fmt.Errorf("read profiles of %s: %w", day.Format(time.DateOnly), err)
		}
		r.mu.Lock()
		if r.gen != gen { // reset meanwhile: what was read belongs to another writer's day
			r.mu.Unlock()
			return nil
		}
		for _, s := range stored {
			if !s.Day.Equal(day) {
				continue
			}
			sk := key{user: s.User, server: s.Server, class: s.Class, day: dk}
			if d := r.days[sk]; d != nil {
				merged := merge(s, *d)
				*d = merged
			} else {
				s := s
				r.days[sk] = &s
			}
		}
		r.loaded[dk] = true
		r.mu.Unlock()
	}
	r.mu.Lock()
	out := make([]ledger.ProfileDay, 0, len(r.dirty))
	keys := make([]key, 0, len(r.dirty))
	for k := range r.dirty {
		if !r.loaded[k.day] { // a day first seen since the read-back: the next flush reads it
			continue
		}
		d := *r.days[k]
		d.MemoryHist, d.SMHist = slices.Clone(d.MemoryHist), slices.Clone(d.SMHist)
		out = append(out, d)
		keys = append(keys, k)
		delete(r.dirty, k)
	}
	r.mu.Unlock()
	err := st.PutProfiles(ctx, out, today.Add(-Retention))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen {
		return err
	}
	if err != nil {
		for _, k := range keys {
			r.dirty[k] = true
		}
		return err
	}
	for k := range r.days {
		if k.day < today.Unix() && !r.dirty[k] {
			delete(r.days, k)
		}
	}
	for d := range r.loaded {
		if d < today.Unix() {
			delete(r.loaded, d)
		}
	}
	return nil
}

// merge adds b (later) to a.
func merge(a, b ledger.ProfileDay) ledger.ProfileDay {
	m := a
	m.MemoryHist, m.SMHist = slices.Clone(a.MemoryHist), slices.Clone(a.SMHist)
	mergeInto(&m, &b)
	return m
}

// mergeInto adds b (later) to m in place: m's histograms are added to, so m owns them.
func mergeInto(m, b *ledger.ProfileDay) {
	if b.Last.After(m.Last) || m.Last.IsZero() {
		m.Kind, m.Product, m.MemoryTotalBytes, m.HeldGPUs, m.Last = b.Kind, b.Product, b.MemoryTotalBytes, b.HeldGPUs, b.Last
		if b.Scale > 0 {
			m.Scale = b.Scale
		}
	}
	if m.First.IsZero() || (!b.First.IsZero() && b.First.Before(m.First)) {
		m.First = b.First
	}
	m.HeldS, m.BusyS, m.UnknownS, m.BusySamples = m.HeldS+b.HeldS, m.BusyS+b.BusyS, m.UnknownS+b.UnknownS, m.BusySamples+b.BusySamples
	m.ContendedS += b.ContendedS
	m.PeakMemoryBytes, m.Simulated = max(m.PeakMemoryBytes, b.PeakMemoryBytes), m.Simulated || b.Simulated
	m.MemoryHist, m.SMHist = addHist(m.MemoryHist, b.MemoryHist), addHist(m.SMHist, b.SMHist)
}

// addHist adds b to a, in a's array where it is long enough.
func addHist(a, b []uint32) []uint32 {
	if len(a) < len(b) {
		a = append(a, make([]uint32, len(b)-len(a))...)
	}
	for i, c := range b {
		a[i] += c
	}
	return a
}

// Profiles merges days (ordered by user, server, class, day, as the store answers) into one rightsize.Profile
// per user, server and class.
func Profiles(days []ledger.ProfileDay) []rightsize.Profile {
	var out []rightsize.Profile
	var m merger
	for i := range days {
		m.add(&days[i], &out)
	}
	m.flush(&out)
	return out
}

// merger merges a stream of days ordered by user, server, class and day, keeping one day (and its histograms)
// in progress: the memory it needs does not grow with the days.
type merger struct {
	cur     ledger.ProfileDay
	mem, sm []uint32 // cur's histograms, reused from one profile to the next
	some    bool
}

func (m *merger) add(d *ledger.ProfileDay, out *[]rightsize.Profile) {
	if m.some && d.User == m.cur.User && d.Server == m.cur.Server && d.Class == m.cur.Class {
		mergeInto(&m.cur, d)
		return
	}
	m.flush(out)
	m.mem, m.sm = append(m.mem[:0], d.MemoryHist...), append(m.sm[:0], d.SMHist...)
	m.cur = *d
	m.cur.MemoryHist, m.cur.SMHist = m.mem, m.sm
	m.some = true
}

func (m *merger) flush(out *[]rightsize.Profile) {
	if m.some {
		*out = append(*out, toProfile(m.cur))
		m.some = false
	}
}

// Scanner streams the stored days (ledger.Ledger.ScanProfiles).
type Scanner interface {
	ScanProfiles(ctx context.Context, from time.Time, user string, fn func(*ledger.ProfileDay) error) error
}

// Read merges the days from the day of from on, of one user ("" for everyone), into one profile per user,
// server and class while they are read: a month of every server costs the profiles, not the days.
func Read(ctx context.Context, src Scanner, from time.Time, user string) ([]rightsize.Profile, error) {
	var out []rightsize.Profile
	var m merger
	if err := src.ScanProfiles(ctx, from, user, func(d *ledger.ProfileDay) error {
		m.add(d, &out)
		return nil
	}); err != nil {
		return nil, err
	}
	m.flush(&out)
	return out, nil
}

func toProfile(d ledger.ProfileDay) rightsize.Profile {
	p := rightsize.Profile{User: d.User, Server: d.Server,
		Held: rightsize.Offer{Kind: gpu.Kind(d.Kind), Class: d.Class, Product: d.Product, MemoryBytes: d.MemoryTotalBytes, ComputeGPUs: d.HeldGPUs},
		From: d.First, To: d.Last, HeldSeconds: d.HeldS, BusySeconds: d.BusyS, UnknownSeconds: d.UnknownS, ContendedSeconds: d.ContendedS,
		Samples: d.BusySamples, PeakMemoryBytes: d.PeakMemoryBytes, Scale: d.Scale, Simulated: d.Simulated}
	// The percentiles are the upper edges of their bins: the safe side, never above the peak or 100 %.
	if b, ok := percentileBin(d.MemoryHist, 0.95); ok {
		p.P95MemoryBytes = min(d.PeakMemoryBytes, uint64(math.Ceil(float64(d.MemoryTotalBytes)*float64(b+1)/100)))
		if b == ledger.MemoryBins-1 {
			p.P95MemoryBytes = d.PeakMemoryBytes
		}
	}
	if b, ok := percentileBin(d.SMHist, 0.95); ok {
		p.P95SMUtilPercent = float64(min(100, b+1))
	}
	return p
}

// percentileBin is the bin that holds the q-quantile of the counts.
func percentileBin(h []uint32, q float64) (int, bool) {
	var n uint64
	for _, c := range h {
		n += uint64(c)
	}
	if n == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, c := range h {
		seen += uint64(c)
		if seen >= rank {
			return i, true
		}
	}
	return len(h) - 1, true
}

// Advise computes the advice for every profile against the offered kinds, sorted by user, server and class.
func Advise(ps []rightsize.Profile, offers []rightsize.Offer, now time.Time) []contract.RightSize {
	out := make([]contract.RightSize, 0, len(ps))
	for _, p := range ps {
		out = append(out, rightsize.Decide(p, offers, now))
	}
	slices.SortStableFunc(out, func(a, b contract.RightSize) int {
		if a.User != b.User {
			return strings.Compare(a.User, b.User)
		}
		if a.Server != b.Server {
			return strings.Compare(a.Server, b.Server)
		}
		return strings.Compare(a.Held.Class, b.Held.Class)
	})
	return out
}
