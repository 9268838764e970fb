package benchkit

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

var sink atomic.Pointer[[]byte]

// TestBurstsQuietCollector: the load generator's collector does not run while bursts are in flight, and its
// settings are back afterwards.
func TestBurstsQuietCollector(t *testing.T) {
	percent := debug.SetGCPercent(100)
	defer debug.SetGCPercent(percent)
	var first, last atomic.Uint32
	l := Bursts(context.Background(), 8, time.Millisecond, 50*time.Millisecond, func(context.Context, int) error {
		b := make([]byte, 256<<10) // 8 x 256 KiB a burst: a collection a few bursts in with GOGC=100
		sink.Store(&b)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		first.CompareAndSwap(0, ms.NumGC+1)
		last.Store(ms.NumGC + 1)
		return nil
	})
	if l.N == 0 || l.Errors != 0 {
		t.Fatalf("Bursts: %d calls, %d errors", l.N, l.Errors)
	}
	if first.Load() != last.Load() {
		t.Errorf("the collector ran %d times during the bursts, want none", last.Load()-first.Load())
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC after Bursts = %d, want 100 restored", got)
	}
}
