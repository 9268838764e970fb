//go:build unix

package usage

import (
	"math"
	"runtime/debug"
	"syscall"
)

// mapSamples returns n bytes of zeroed memory outside the Go heap (an anonymous private mapping; mapped true), or
// from the heap when the kernel refuses the mapping.
//
// The runtime's soft memory limit (GOMEMLIMIT, which the chart sets to the container's memory limit) counts
// only the memory the runtime maps itself, so it is lowered by what the history maps: near the container's
// limit the collector then still works harder before the kernel kills the container, not after. Never below
// minMemoryLimit: a limit near 0 would have the collector run without pause.
func mapSamples(n int) (mem []byte, mapped bool) {
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n), false
	}
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		debug.SetMemoryLimit(max(minMemoryLimit, limit-int64(len(mem))))
	}
	return mem, true
}

// minMemoryLimit is as low as mapSamples takes the runtime's soft memory limit.
const minMemoryLimit = 64 << 20
