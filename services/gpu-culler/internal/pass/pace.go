package pass

import (
	"context"
	"sync"
	"time"
)

// pacer spaces the stops a pass sends to the Hub (issue 37, B3). The Hub serves every request on one thread,
// and a stop is among its costliest (the spawner's stop, the database, the proxy's route): ten stops at once
// queued every other Hub request behind all ten, so users felt a culler pass as a stall. Stops now go one at a
// time, and each waits after the one before for as long as that one took (the Hub's measured latency, at most
// maxPause): a request from a person waits behind at most one stop, and the culler takes at most about half of
// the Hub's time however slow the Hub is that day. The wait comes before the next stop, not after the last: a
// pass with one stop records it at once. Reads and pod writes keep the policy's concurrency.
type pacer struct {
	mu       sync.Mutex
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
	maxPause time.Duration
	// next is when the next stop may go: the end of the last one plus as long as it took.
	next time.Time
}

// maxStopPause bounds the wait after one stop: a Hub that took seconds for a stop is not waited on for as long
// again (the pass would stretch over minutes); one second still leaves it most of its time.
const maxStopPause = time.Second

func newPacer(now func() time.Time) *pacer {
	return &pacer{now: now, sleep: sleepCtx, maxPause: maxStopPause}
}

// do waits until the last stop's pause is over (a canceled ctx cuts it short), then runs stop alone.
func (p *pacer) do(ctx context.Context, stop func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if wait := p.next.Sub(p.now()); wait > 0 {
		_ = p.sleep(ctx, wait)
	}
	start := p.now()
	stop()
	end := p.now()
	p.next = end.Add(min(end.Sub(start), p.maxPause))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
