package benchkit

import (
	"context"
	"runtime"
	"runtime/debug"
	"slices"
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

// TestInterleaved: each system gets its bursts, whole, in turns: never a call of one while the other's are in
// flight, the same number of bursts each.
func TestInterleaved(t *testing.T) {
	var inFlight [2]atomic.Int32
	var overlaps atomic.Int32
	call := func(me int) func(context.Context, int) error {
		return func(context.Context, int) error {
			inFlight[me].Add(1)
			defer inFlight[me].Add(-1)
			if inFlight[1-me].Load() != 0 {
				overlaps.Add(1)
			}
			time.Sleep(100 * time.Microsecond)
			return nil
		}
	}
	ls := Interleaved(context.Background(), 4, 4*time.Millisecond, 40*time.Millisecond, call(0), call(1))
	if len(ls) != 2 {
		t.Fatalf("Interleaved returned %d results, want 2", len(ls))
	}
	if ls[0].N == 0 || ls[0].N%4 != 0 || ls[1].N != ls[0].N {
		t.Errorf("calls = %d and %d, want the same whole number of bursts of 4 each", ls[0].N, ls[1].N)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d calls ran while the other system's burst was in flight, want none", n)
	}
}

func TestBurstsSlowest(t *testing.T) {
	// Calls 8 to 11, the third burst of 4, are slow; no other call waits.
	l := Bursts(context.Background(), 4, 2*time.Millisecond, 30*time.Millisecond, func(_ context.Context, i int) error {
		if i >= 8 && i < 12 {
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	if len(l.Bursts) != l.N/4 || len(l.Bursts) < 3 {
		t.Fatalf("%d bursts for %d calls of bursts of 4, want one per burst and at least 3", len(l.Bursts), l.N)
	}
	if !slices.IsSorted(l.Bursts) {
		t.Errorf("Bursts not sorted: %v", l.Bursts)
	}
	if n := l.SlowBursts(10 * time.Millisecond); n != 1 {
		t.Errorf("SlowBursts(10ms) = %d, want 1 (the third burst): %v", n, l.Bursts)
	}
	if n := l.SlowBursts(0); n != len(l.Bursts) {
		t.Errorf("SlowBursts(0) = %d, want every burst (%d)", n, len(l.Bursts))
	}
}
