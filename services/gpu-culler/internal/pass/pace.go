package pass

import (
	"context"
	"sync"
	"time"
)

// pacer spaces the stops a pass sends to the Hub (issue 37, B3). The Hub serves every request on one thread,
// and a stop is among its costliest (the spawner's stop, the database, the proxy's route): ten stops at once
// queued every other Hub request behind all ten, so users felt a culler pass as a stall. Stops now go one at a
// time, each followed by a pause as long as it took (the Hub's measured latency, at most maxPause): a request
// from a person waits behind at most one stop, and the culler takes at most about half of the Hub's time however
// slow the Hub is that day. Reads and pod writes keep the policy's concurrency.
type pacer struct {
	mu       sync.Mutex
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
	maxPause time.Duration
}

// maxStopPause bounds the pause after one stop: a Hub that took seconds for a stop is not waited on for as long
// again (the pass would stretch over minutes); one second still leaves it most of its time.
const maxStopPause = time.Second

func newPacer(now func() time.Time) *pacer {
	return &pacer{now: now, sleep: sleepCtx, maxPause: maxStopPause}
}

// do runs stop alone, then pauses for as long as it took; a canceled ctx cuts the pause short.
func (p *pacer) do(ctx context.Context, stop func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := p.now()
	stop()
	_ = p.sleep(ctx, min(p.now().Sub(start), p.maxPause))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
