package pass

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPacerPausesAsLongAsTheStopTook(t *testing.T) {
	tests := map[string]struct {
		took []time.Duration
		want []time.Duration
	}{
		"each stop waits as long as the one before took": {took: []time.Duration{20 * time.Millisecond, 80 * time.Millisecond, 0}, want: []time.Duration{20 * time.Millisecond, 80 * time.Millisecond}},
		"a slow Hub is not waited on for long":           {took: []time.Duration{5 * time.Second, 0}, want: []time.Duration{maxStopPause}},
		"an instant answer needs no pause":               {took: []time.Duration{0, 0}},
		"no pause after the last stop of a pass":         {took: []time.Duration{time.Second}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
			p := newPacer(func() time.Time { return clock })
			var paused []time.Duration
			p.sleep = func(_ context.Context, d time.Duration) error {
				paused = append(paused, d)
				clock = clock.Add(d)
				return nil
			}
			for _, d := range tc.took {
				p.do(t.Context(), func() { clock = clock.Add(d) })
			}
			if diff := cmp.Diff(tc.want, paused); diff != "" {
				t.Errorf("pauses (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPacerSendsOneStopAtATime: the policy's ten workers reach the Hub's stop one after another, never two at
// once, and each after the previous one's pause.
func TestPacerSendsOneStopAtATime(t *testing.T) {
	p := newPacer(time.Now)
	var inFlight, most atomic.Int32
	var mu sync.Mutex
	var ends, starts []time.Time
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			p.do(t.Context(), func() {
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				inFlight.Add(-1)
				mu.Lock()
				ends = append(ends, time.Now())
				mu.Unlock()
			})
		})
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d stops at once, want 1", most.Load())
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(ends[i-1]); gap < 5*time.Millisecond {
			t.Errorf("stop %d began %v after the previous ended, want at least its 5ms", i, gap)
		}
	}
}

func TestPacerPauseEndsWithTheContext(t *testing.T) {
	clock := time.Now()
	p := newPacer(func() time.Time { return clock })
	p.maxPause = time.Hour
	p.do(t.Context(), func() { clock = clock.Add(30 * time.Minute) }) // a stop that took half an hour
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	ran := false
	p.do(ctx, func() { ran = true })
	if took := time.Since(start); took > 10*time.Second || !ran {
		t.Errorf("the next stop ran %v after %v with its context ended, want at once (the pause cut short)", ran, took)
	}
}
