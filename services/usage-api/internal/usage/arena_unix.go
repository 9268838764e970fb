//go:build unix

package usage

import (
	"math"
	"runtime/debug"
	"syscall"
)

// mapSamples returns n bytes of zeroed memory outside the Go heap (an anonymous private mapping), or from the
// heap when the kernel refuses the mapping.
//
// The runtime's soft memory limit (GOMEMLIMIT, which the chart sets to the container's memory limit) counts
// only the memory the runtime maps itself, so it is lowered by what the history maps: near the container's
// limit the collector then still works harder before the kernel kills the container, not after.
func mapSamples(n int) []byte {
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n)
	}
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		debug.SetMemoryLimit(max(0, limit-int64(len(mem))))
	}
	return mem
}
