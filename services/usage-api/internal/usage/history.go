package usage

import (
	"math"
	"sync"
	"time"
)

// History keeps each user's last hour at sampling resolution in compact fixed-size samples (16 bytes): the
// tick's time is stored once for all users, a user's ring grows only while they hold GPUs and is dropped an
// hour after their last sample.
type History struct {
	mu    sync.RWMutex
	size  int     // ticks per window
	times []int64 // unix ms of tick seq, at seq % size
	seq   uint32  // last tick's sequence number (1-based)
	users map[string]*ring
}

type sample struct {
	seq       uint32
	allocated float32
	used      float32 // NaN when unknown
	memMiB    uint32
}

type ring struct {
	buf  []sample
	head int // next write position once len(buf) == cap
}

// Point is one history sample as the API returns it.
type Point struct {
	T               time.Time `json:"t"`
	AllocatedGPUs   float64   `json:"allocatedGPUs"`
	UsedGPUs        *float64  `json:"usedGPUs"`
	SMUtilPercent   *float64  `json:"smUtilPercent"`
	MemoryUsedBytes uint64    `json:"memoryUsedBytes"`
}

// NewHistory keeps window at interval resolution.
func NewHistory(window, interval time.Duration) *History {
	size := max(1, int(window/interval))
	return &History{size: size, times: make([]int64, size), users: map[string]*ring{}}
}

// Add records one tick for every user in v.
func (h *History) Add(v *View) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.times[int(h.seq)%h.size] = v.SampledAt.UnixMilli()
	for name, u := range v.Users {
		r := h.users[name]
		if r == nil {
			r = &ring{}
			h.users[name] = r
		}
		s := sample{seq: h.seq, allocated: float32(u.Share.AllocatedGPUs), used: float32(math.NaN()), memMiB: uint32(u.Share.MemoryUsedBytes >> 20)}
		if u.Share.UsedGPUs != nil {
			s.used = float32(*u.Share.UsedGPUs)
		}
		r.push(s, h.size)
	}
	// Forget users whose newest sample left the window.
	if h.seq%uint32(h.size) == 0 {
		for name, r := range h.users {
			if !h.inWindow(r.newest().seq) {
				delete(h.users, name)
			}
		}
	}
}

func (r *ring) push(s sample, size int) {
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

func (r *ring) newest() sample {
	if len(r.buf) < cap(r.buf) || r.head == 0 {
		return r.buf[len(r.buf)-1]
	}
	return r.buf[r.head-1]
}

func (h *History) inWindow(seq uint32) bool { return seq != 0 && h.seq-seq < uint32(h.size) }

// User returns a user's samples of the last window, oldest first, those after since only (zero: all).
func (h *History) User(name string, since time.Time) []Point {
	h.mu.RLock()
	defer h.mu.RUnlock()
	r := h.users[name]
	if r == nil {
		return []Point{}
	}
	out := make([]Point, 0, len(r.buf))
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
		t := h.times[int(s.seq)%h.size]
		if !since.IsZero() && t <= sinceMS {
			continue
		}
		p := Point{T: time.UnixMilli(t).UTC(), AllocatedGPUs: float64(s.allocated), MemoryUsedBytes: uint64(s.memMiB) << 20}
		if !math.IsNaN(float64(s.used)) {
			used := float64(s.used)
			p.UsedGPUs = &used
			if s.allocated > 0 {
				u := min(100, used/float64(s.allocated)*100)
				p.SMUtilPercent = &u
			}
		}
		out = append(out, p)
	}
	return out
}

// Len is the number of users with history (for tests and the footprint benchmark).
func (h *History) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.users)
}
