package usage

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// History keeps each user's last hour at sampling resolution in compact fixed-size samples (12 bytes): the
// tick's time is stored once for all users, a user's ring grows only while they hold GPUs and is dropped an
// hour after their last sample.
type History struct {
	mu     sync.RWMutex
	size   int      // ticks per window
	times  []int64  // unix ms of tick seq, at seq % size
	stamps [][]byte // the same times formatted for JSON; each slice is immutable once stored
	seq    uint64   // last tick's sequence number; samples keep its low 16 bits
	users  map[string]*ring
}

// sample keeps used as utilization x scale (used = util / 100 x scale) so that both the user's utilization and
// their used GPUs come back in 12 bytes: on a time-sliced GPU used is not allocated x utilization.
type sample struct {
	allocated float32
	util      uint16 // hundredths of a percent; utilUnknown when used is unknown
	scale     uint16 // the GPU time the user's units can reach, in 1/scaleUnits GPUs, saturating at ~390 GPUs
	seq       uint16
	mem16MiB  uint16 // memory used in 16 MiB units, saturating at 1 TiB
}

const (
	memUnit     = 16 << 20
	utilUnknown = math.MaxUint16
	// scaleUnits is divisible by the slice counts of MIG GPUs (7, 4) and by 1, 2, 3, 6 and 8, so that MIG
	// scales (g/slices) are stored exactly.
	scaleUnits = 168
)

// known reports whether used and utilization are known.
func (s sample) known() bool { return s.util != utilUnknown }

func (s sample) utilPercent() float64 { return float64(s.util) / 100 }

func (s sample) used() float64 { return s.utilPercent() / 100 * float64(s.scale) / scaleUnits }

type ring struct {
	buf  []sample
	head int // next write position once len(buf) == cap
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
	return &History{size: size, times: make([]int64, size), stamps: make([][]byte, size), users: map[string]*ring{}}
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
		s := sample{seq: uint16(seq), allocated: float32(u.Share.AllocatedGPUs), util: utilUnknown,
			mem16MiB: uint16(min(u.Share.MemoryUsedBytes/memUnit, math.MaxUint16))}
		if u.Share.UsedGPUs != nil {
			s.util, s.scale = encodeUse(*u.Share.UsedGPUs, u.SMUtilPercent, u.Share.AllocatedGPUs)
		}
		r.push(s, h.size, h.inWindow)
	}
	// Forget users whose newest sample left the window.
	if seq%uint64(h.size) == 0 {
		for name, r := range h.users {
			if !h.inWindow(r.newest().seq) {
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

func (r *ring) push(s sample, size int, inWindow func(uint16) bool) {
	// In a full ring this push overwrites the oldest sample, which is the one that just left the window in the
	// steady state: only an older sample behind it means a gap.
	keepFrom := 0
	if len(r.buf) == size {
		keepFrom = 1
	}
	if len(r.buf) > keepFrom && !inWindow(r.at(keepFrom).seq) {
		// A user with gaps: drop what left the window, so that a ring never spans more ticks than its 16-bit
		// sequence numbers can tell apart.
		kept := make([]sample, 0, cap(r.buf))
		for i := range len(r.buf) {
			if o := r.at(i); inWindow(o.seq) {
				kept = append(kept, o)
			}
		}
		r.buf, r.head = kept, 0
	}
	if len(r.buf) < size {
		if len(r.buf) == cap(r.buf) {
			// Grow by doubling but never past the window: a full ring is exactly size samples.
			nb := make([]sample, len(r.buf), min(size, max(16, 2*cap(r.buf))))
			copy(nb, r.buf)
			r.buf = nb
		}
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.head] = s
	r.head = (r.head + 1) % size
}

// at returns the i-th oldest sample.
func (r *ring) at(i int) sample {
	if len(r.buf) == cap(r.buf) {
		return r.buf[(r.head+i)%len(r.buf)]
	}
	return r.buf[i]
}

func (r *ring) newest() sample {
	if len(r.buf) < cap(r.buf) || r.head == 0 {
		return r.buf[len(r.buf)-1]
	}
	return r.buf[r.head-1]
}

// age is how many ticks ago a sample was taken (its low 16 bits suffice: a ring never holds a sample older than
// two windows, far below 2^16 ticks).
func (h *History) age(seq uint16) uint64 { return uint64(uint16(h.seq) - seq) }

func (h *History) inWindow(seq uint16) bool { return h.age(seq) < uint64(h.size) }

// User returns a user's samples of the last window, oldest first, those after since only (zero: all).
func (h *History) User(name string, since time.Time) Points {
	h.mu.RLock()
	defer h.mu.RUnlock()
	r := h.users[name]
	if r == nil {
		return Points{}
	}
	var out Points
	if since.IsZero() {
		out = make(Points, 0, len(r.buf))
	}
	n := len(r.buf)
	start := 0
	if n == h.size {
		start = r.head
	}
	sinceMS := since.UnixMilli()
	for i := range n {
		s := r.buf[(start+i)%n]
		if !h.inWindow(s.seq) {
			continue
		}
		slot := (h.seq - h.age(s.seq)) % uint64(h.size)
		t := h.times[slot]
		if !since.IsZero() && t <= sinceMS {
			continue
		}
		p := Point{T: time.UnixMilli(t).UTC(), AllocatedGPUs: float64(s.allocated), MemoryUsedBytes: uint64(s.mem16MiB) * memUnit,
			stamp: h.stamps[slot]}
		if s.known() {
			p.UsedKnown, p.UsedGPUs, p.SMUtilPercent = true, s.used(), s.utilPercent()
		}
		out = append(out, p)
	}
	if out == nil {
		out = Points{}
	}
	return out
}

const stampLayout = "2006-01-02T15:04:05.999Z07:00"

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
// precision. Consecutive points mostly repeat their numbers, so each number's text is reused while it repeats.
func (ps Points) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 16+len(ps)*128)
	b = append(b, '[')
	var alloc, used, util cachedFloat
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"t":"`...)
		if p.stamp != nil {
			b = append(b, p.stamp...)
		} else {
			b = p.T.UTC().AppendFormat(b, stampLayout)
		}
		b = append(b, `","allocatedGPUs":`...)
		b = alloc.append(b, p.AllocatedGPUs, 32)
		b = append(b, `,"usedGPUs":`...)
		if p.UsedKnown {
			b = used.append(b, p.UsedGPUs, 32)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"smUtilPercent":`...)
		if p.UsedKnown && p.AllocatedGPUs > 0 {
			b = util.append(b, p.SMUtilPercent, 64)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"memoryUsedBytes":`...)
		b = strconv.AppendUint(b, p.MemoryUsedBytes, 10)
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

type cachedFloat struct {
	v    float64
	text []byte
}

func (c *cachedFloat) append(b []byte, v float64, bits int) []byte {
	if c.text == nil || v != c.v {
		c.v, c.text = v, strconv.AppendFloat(c.text[:0], v, 'g', -1, bits)
	}
	return append(b, c.text...)
}
