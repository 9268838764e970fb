package usage

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// History keeps each user's last hour at sampling resolution in compact fixed-size samples (10 bytes): the
// tick's time is stored once for all users, a user's ring is made when they first hold GPUs and is dropped an
// hour after their last sample. A ring's samples are consecutive ticks up to its newest (a tick the user was
// not in is an absent sample), so a sample needs no time or sequence number of its own; the price is that a
// user who holds GPUs now and then within the hour has a ring as long as one who holds them throughout.
type History struct {
	mu     sync.RWMutex
	size   int      // ticks per window
	times  []int64  // unix ms of tick seq, at seq % size
	stamps [][]byte // the same times formatted for JSON; each slice is immutable once stored
	seq    uint64   // last tick's sequence number (the first tick's is 1)
	users  map[string]*ring
	pool   samplePool // full-window buffers, outside the Go heap
}

// sample keeps used as utilization x scale (used = util / 100 x scale) so that both the user's utilization and
// their used GPUs come back from 10 bytes: on a time-sliced GPU used is not allocated x utilization. Only
// 2-byte fields, so that a ring of them has no padding.
type sample struct {
	allocated [2]uint16 // the float32 bits of the allocated GPUs, high half first
	util      uint16    // hundredths of a percent; utilUnknown when used is unknown; utilAbsent: no sample
	scale     uint16    // the GPU time the user's units can reach, in 1/scaleUnits GPUs, saturating at ~390 GPUs
	mem16MiB  uint16    // memory used in 16 MiB units, saturating at 1 TiB
}

const (
	memUnit     = 16 << 20
	utilUnknown = math.MaxUint16
	utilAbsent  = math.MaxUint16 - 1
	// scaleUnits is divisible by the slice counts of MIG GPUs (7, 4) and by 1, 2, 3, 6 and 8, so that MIG
	// scales (g/slices) are stored exactly.
	scaleUnits = 168
)

// absent stands for a tick at which the user held no GPU, between two that they did.
var absent = sample{util: utilAbsent}

// known reports whether used and utilization are known.
func (s sample) known() bool { return s.util != utilUnknown }

func (s sample) utilPercent() float64 { return float64(s.util) / 100 }

func (s sample) used() float64 { return s.utilPercent() / 100 * float64(s.scale) / scaleUnits }

func (s sample) allocatedGPUs() float32 {
	return math.Float32frombits(uint32(s.allocated[0])<<16 | uint32(s.allocated[1]))
}

func packAllocated(v float32) [2]uint16 {
	b := math.Float32bits(v)
	return [2]uint16{uint16(b >> 16), uint16(b)}
}

// ring is one user's samples of consecutive ticks, the newest at tick last.
type ring struct {
	buf  []sample
	head int // next write position once len(buf) == the window's size
	last uint64
}

// Point is one history sample as the API returns it (JSON through Points.MarshalJSON).
type Point struct {
	T             time.Time
	AllocatedGPUs float64
	// UsedGPUs and SMUtilPercent are known when UsedKnown (null in JSON otherwise); SMUtilPercent also needs
	// AllocatedGPUs > 0.
	UsedGPUs        float64
	SMUtilPercent   float64
	UsedKnown       bool
	MemoryUsedBytes uint64
	stamp           []byte // T formatted once per tick, shared and never modified
}

// NewHistory keeps window at interval resolution.
func NewHistory(window, interval time.Duration) *History {
	size := max(1, int(window/interval))
	return &History{size: size, times: make([]int64, size), stamps: make([][]byte, size), users: map[string]*ring{}, pool: samplePool{size: size}}
}

// addChunk is how many users Add records under one hold of the lock. Readers (every API answer) wait for the
// lock, and on a single CPU they also wait for the tick goroutine to give up the processor: chunks with a yield
// in between keep both waits to a fraction of a millisecond instead of the whole pass over every user.
const addChunk = 256

// Add records one tick for every user in v. A reader between two chunks sees the users not yet recorded as they
// were one tick ago, which is what they were until this tick.
func (h *History) Add(v *View) {
	h.mu.Lock()
	h.seq++
	seq := h.seq
	h.times[seq%uint64(h.size)] = v.SampledAt.UnixMilli()
	h.stamps[seq%uint64(h.size)] = v.SampledAt.UTC().AppendFormat(make([]byte, 0, 24), stampLayout)
	h.mu.Unlock()

	n := 0
	var pace yield.Pass
	h.mu.Lock()
	for name, u := range v.Users {
		if n++; n%addChunk == 0 {
			h.mu.Unlock()
			pace.Item()
			h.mu.Lock()
		}
		r := h.users[name]
		if r == nil {
			r = &ring{}
			h.users[name] = r
		}
		s := sample{allocated: packAllocated(float32(u.Share.AllocatedGPUs)), util: utilUnknown,
			mem16MiB: uint16(min(u.Share.MemoryUsedBytes/memUnit, math.MaxUint16))}
		if u.Share.UsedGPUs != nil {
			s.util, s.scale = encodeUse(*u.Share.UsedGPUs, u.SMUtilPercent, u.Share.AllocatedGPUs)
		}
		r.push(s, seq, &h.pool)
	}
	// Forget users whose newest sample left the window.
	if seq%uint64(h.size) == 0 {
		for name, r := range h.users {
			if !h.inWindow(r.last) {
				h.pool.put(r.buf)
				delete(h.users, name)
			}
		}
	}
	h.mu.Unlock()
}

// encodeUse splits used into utilization and scale. A user without SMUtilPercent (a view not made by Build)
// is taken as used / allocated.
func encodeUse(used float64, utilPercent *float64, allocated float64) (util, scale uint16) {
	var pct float64
	switch {
	case utilPercent != nil:
		pct = *utilPercent
	case allocated > 0:
		pct = used / allocated * 100
	}
	pct = min(max(pct, 0), 100)
	util = uint16(math.Round(pct * 100))
	if util == 0 {
		return 0, 0 // used is 0 whatever the scale
	}
	return util, uint16(min(math.Round(used/(float64(util)/10000)*scaleUnits), math.MaxUint16))
}

// push records s as the sample of tick seq. The ticks since the newest sample that the user missed become
// absent samples; after a whole window of them the ring starts again.
func (r *ring) push(s sample, seq uint64, pool *samplePool) {
	size := pool.size
	if r.last != 0 && seq > r.last+1 {
		if gap := seq - r.last - 1; gap >= uint64(size) {
			r.buf, r.head = r.buf[:0], 0
		} else {
			for range gap {
				r.append(absent, pool)
			}
		}
	}
	r.append(s, pool)
	r.last = seq
}

func (r *ring) append(s sample, pool *samplePool) {
	size := pool.size
	if len(r.buf) < size {
		if len(r.buf) == cap(r.buf) {
			// Grow by doubling in the heap while the ring is small, then to the window's size from the pool: a
			// full ring is exactly size samples, outside the heap.
			var nb []sample
			if c := min(size, max(16, 2*cap(r.buf))); c < size {
				nb = make([]sample, len(r.buf), c)
			} else {
				nb = pool.get()[:len(r.buf)]
			}
			copy(nb, r.buf)
			r.buf = nb
		}
		r.buf = append(r.buf, s)
		return
	}
	// A full ring: overwrite the oldest sample, which has just left the window.
	r.buf[r.head] = s
	r.head = (r.head + 1) % size
}

func (h *History) inWindow(seq uint64) bool { return h.seq-seq < uint64(h.size) }

// visit calls f with the tick slot and the sample of each of a user's points of the last window, oldest first,
// those after since only (zero: all), under the read lock.
func (h *History) visit(name string, since time.Time, f func(slot uint64, s sample)) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	r := h.users[name]
	if r == nil {
		return
	}
	n := len(r.buf)
	start := 0
	if n == h.size {
		start = r.head
	}
	sinceMS := since.UnixMilli()
	for i := range n {
		seq := r.last - uint64(n-1-i)
		s := r.buf[(start+i)%n]
		if s.util == utilAbsent || !h.inWindow(seq) {
			continue
		}
		slot := seq % uint64(h.size)
		if !since.IsZero() && h.times[slot] <= sinceMS {
			continue
		}
		f(slot, s)
	}
}

// point is the Point of sample s taken at the tick in slot (under the read lock).
func (h *History) point(slot uint64, s sample) Point {
	p := pointOf(s)
	p.T, p.stamp = time.UnixMilli(h.times[slot]).UTC(), h.stamps[slot]
	return p
}

// pointOf is the Point of sample s without its time.
func pointOf(s sample) Point {
	p := Point{AllocatedGPUs: float64(s.allocatedGPUs()), MemoryUsedBytes: uint64(s.mem16MiB) * memUnit}
	if s.known() {
		p.UsedKnown, p.UsedGPUs, p.SMUtilPercent = true, s.used(), s.utilPercent()
	}
	return p
}

// User returns a user's samples of the last window, oldest first, those after since only (zero: all).
func (h *History) User(name string, since time.Time) Points {
	out := Points{}
	h.visit(name, since, func(slot uint64, s sample) { out = append(out, h.point(slot, s)) })
	return out
}

// AppendUserJSON appends what User(name, since).MarshalJSON writes, without building the points: the panel's
// poll encodes up to an hour of points from the ring into the caller's (reused) buffer. Under the read lock it
// only copies the visible samples and their tick times (formatted once for everyone at the tick, and never
// changed once stored); it encodes after, so a tick's Add never waits for an encoding. A point's numbers are
// encoded again only when its sample differs from the one before (mostly they repeat).
func (h *History) AppendUserJSON(b []byte, name string, since time.Time) []byte {
	seen := visibleBuffers.Get().(*[]visibleSample)
	vs := (*seen)[:0]
	h.visit(name, since, func(slot uint64, s sample) { vs = append(vs, visibleSample{stamp: h.stamps[slot], s: s}) })
	b = append(b, '[')
	var e pointEncoder
	var scratch [160]byte
	values := scratch[:0]
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"t":"`...)
		b = append(b, v.stamp...)
		b = append(b, '"')
		if i == 0 || v.s != vs[i-1].s {
			values = e.appendValues(values[:0], pointOf(v.s))
		}
		b = append(b, values...)
	}
	clear(vs) // drop the stamps' references before the buffer waits in the pool
	*seen = vs[:0]
	visibleBuffers.Put(seen)
	return append(b, ']')
}

// visibleSample is a sample AppendUserJSON copied out of a ring, with its tick's formatted time.
type visibleSample struct {
	stamp []byte
	s     sample
}

// visibleBuffers hold AppendUserJSON's copies between requests (an hour is 720 of them, ~29 KB).
var visibleBuffers = sync.Pool{New: func() any { return new([]visibleSample) }}

const stampLayout = "2006-01-02T15:04:05.999Z07:00"

// MappedBytes is the memory the history holds outside the Go heap (the footprint benchmark adds it to the heap's).
func (h *History) MappedBytes() int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.pool.mapped
}

// Len is the number of users with history (for tests and the footprint benchmark).
func (h *History) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.users)
}

// Points is a history as the API returns it, with a fast JSON encoding: the panel reads up to an hour of
// points every poll, so encoding them is the hot path. Numbers are stored as float32 and written as such.
type Points []Point

// MarshalJSON writes [{"t", "allocatedGPUs", "usedGPUs", "smUtilPercent", "memoryUsedBytes"}], with float32
// precision (History.AppendUserJSON writes the same from the ring).
func (ps Points) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 16+len(ps)*128)
	b = append(b, '[')
	var e pointEncoder
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = e.append(b, p)
	}
	return append(b, ']'), nil
}

// pointEncoder writes points one after another. Consecutive points mostly repeat their numbers, so each
// number's text is reused while it repeats.
type pointEncoder struct {
	alloc, used, util cachedFloat
}

func (e *pointEncoder) append(b []byte, p Point) []byte {
	b = append(b, `{"t":"`...)
	if p.stamp != nil {
		b = append(b, p.stamp...)
	} else {
		b = p.T.UTC().AppendFormat(b, stampLayout)
	}
	b = append(b, '"')
	return e.appendValues(b, p)
}

// appendValues writes a point's members after "t", and the closing brace.
func (e *pointEncoder) appendValues(b []byte, p Point) []byte {
	b = append(b, `,"allocatedGPUs":`...)
	b = e.alloc.append(b, p.AllocatedGPUs, 32)
	b = append(b, `,"usedGPUs":`...)
	if p.UsedKnown {
		b = e.used.append(b, p.UsedGPUs, 32)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"smUtilPercent":`...)
	if p.UsedKnown && p.AllocatedGPUs > 0 {
		b = e.util.append(b, p.SMUtilPercent, 64)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"memoryUsedBytes":`...)
	b = strconv.AppendUint(b, p.MemoryUsedBytes, 10)
	return append(b, '}')
}

// cachedFloat is the text of the last value written, in a buffer of its own: a float's shortest 'g' text is
// at most 24 bytes, so the cache allocates nothing, at every poll (it lives in the encoder, per request).
type cachedFloat struct {
	v   float64
	n   int // len of text in buf; 0: none yet
	buf [32]byte
}

func (c *cachedFloat) append(b []byte, v float64, bits int) []byte {
	if c.n == 0 || v != c.v {
		c.v, c.n = v, len(strconv.AppendFloat(c.buf[:0], v, 'g', -1, bits))
	}
	return append(b, c.buf[:c.n]...)
}
