package usage

import "unsafe"

// samplePool hands out the full-window sample buffers of the history's rings from memory mapped outside the Go
// heap (where the platform allows; arena_unix.go). The history is most of the usage API's memory (an hour of
// 10-byte samples per user holding GPUs: 72 MB at 10,000 users) and holds no pointers. In the Go heap the
// collector lets the heap grow to twice what is live before it collects (GOGC=100), so every history byte
// would cost two of RSS; outside it, one, and the collector never visits it. Buffers of rings that are dropped
// go to a free list for the next ring; the mapped memory stays with the process. Not safe for concurrent use:
// History calls it under its write lock.
type samplePool struct {
	size   int        // samples per buffer: the window
	free   [][]sample // returned buffers, length 0
	rest   []sample   // the part of the newest mapping not handed out yet
	mapped int64      // bytes mapped so far (not counting heap memory taken where a mapping was refused)
}

// poolChunkBytes is how much one mapping holds (or one buffer, when a buffer is larger).
const poolChunkBytes = 1 << 20

const sampleBytes = int(unsafe.Sizeof(sample{}))

// get returns an empty buffer whose capacity is the window.
func (p *samplePool) get() []sample {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	if len(p.rest) < p.size {
		n := max(1, poolChunkBytes/sampleBytes/p.size) * p.size // whole buffers only
		mem, mapped := mapSamples(n * sampleBytes)
		if mapped {
			p.mapped += int64(len(mem))
		}
		p.rest = unsafe.Slice((*sample)(unsafe.Pointer(unsafe.SliceData(mem))), n)
	}
	b := p.rest[:0:p.size]
	p.rest = p.rest[p.size:]
	return b
}

// put takes back a buffer from get; others (a ring's small, heap-allocated buffer) are left to the collector.
func (p *samplePool) put(b []sample) {
	if cap(b) == p.size && p.size > 0 {
		p.free = append(p.free, b[:0])
	}
}
