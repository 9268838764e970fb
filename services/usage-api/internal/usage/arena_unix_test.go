//go:build unix

package usage

import (
	"math"
	"runtime/debug"
	"testing"
	"time"
)

// TestMappedHistoryLowersTheMemoryLimit: with GOMEMLIMIT set, what the history maps outside the heap comes off
// the runtime's soft limit (which counts only the runtime's own memory); without one, nothing is set.
func TestMappedHistoryLowersTheMemoryLimit(t *testing.T) {
	fill := func() *History {
		h := NewHistory(time.Hour, 5*time.Second)
		v := &View{SampledAt: now, Users: map[string]*User{"u": {Name: "u", Share: Share{AllocatedGPUs: 1}}}}
		for i := range 720 {
			v.SampledAt = now.Add(time.Duration(i) * 5 * time.Second)
			h.Add(v)
		}
		return h
	}
	const limit = 1 << 40
	old := debug.SetMemoryLimit(limit)
	defer debug.SetMemoryLimit(old)
	h := fill()
	if h.MappedBytes() == 0 {
		t.Fatal("nothing mapped for a full ring")
	}
	if got, want := debug.SetMemoryLimit(-1), int64(limit)-h.MappedBytes(); got != want {
		t.Errorf("memory limit %d after mapping %d bytes, want %d", got, h.MappedBytes(), want)
	}
	debug.SetMemoryLimit(math.MaxInt64) // none set
	fill()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("memory limit %d, want none set still", got)
	}
}
