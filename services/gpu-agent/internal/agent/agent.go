// Package agent is the gpu-agent service: it samples a backend (NVML or
// simulated) at a fixed interval, attributes GPU processes to pods, and
// serves the result as a JSON snapshot and as Prometheus metrics.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/cluster"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// Sampler is a backend: nvidia.Backend or sim.Backend.
type Sampler interface {
	Sample(ctx context.Context) (reading.Reading, error)
}

// Config configures an Agent.
type Config struct {
	Node     string
	Backend  snapshot.Backend
	Interval time.Duration
	Sampler  Sampler
	Pods     PodSource
	Resolver CgroupResolver
	Now      func() time.Time
	Logger   *slog.Logger
	// MaxFailedSamples is how many samples in a row may fail before Ready
	// fails (0: DefaultMaxFailedSamples).
	MaxFailedSamples int
	// SampleTimeout bounds one sample (0: the interval). A backend call
	// that hangs (a wedged driver) never returns an error; past this
	// deadline the attempt counts as failed.
	SampleTimeout time.Duration
}

// DefaultMaxFailedSamples is the default of Config.MaxFailedSamples: one
// failed sample is a blip, three in a row are a broken sampler.
const DefaultMaxFailedSamples = 3

type sampleState struct {
	snap         *snapshot.Snapshot // latest successful sample
	health       snapshot.SamplerHealth
	err          error // the latest attempt's, nil when it succeeded
	duration     time.Duration
	unattributed int
	// stuckSince is when the sample that still holds the backend started,
	// zero when none does.
	stuckSince time.Time
}

// Agent holds the latest sample.
type Agent struct {
	node      string
	backend   snapshot.Backend
	interval  time.Duration
	sampler   Sampler
	pods      PodSource
	resolver  CgroupResolver
	now       func() time.Time
	logger    *slog.Logger
	maxFailed int
	timeout   time.Duration
	// busy holds a token while the backend runs a sample: backends are not
	// safe for concurrent samples, and a hung one keeps its token.
	busy chan struct{}

	mu sync.Mutex
	st sampleState
}

// New returns an Agent.
func New(c Config) *Agent {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Pods == nil {
		c.Pods = noPods{}
	}
	if c.MaxFailedSamples <= 0 {
		c.MaxFailedSamples = DefaultMaxFailedSamples
	}
	if c.SampleTimeout <= 0 {
		c.SampleTimeout = c.Interval
	}
	return &Agent{node: c.Node, backend: c.Backend, interval: c.Interval, sampler: c.Sampler, pods: c.Pods,
		resolver: c.Resolver, now: c.Now, logger: c.Logger, maxFailed: c.MaxFailedSamples, timeout: c.SampleTimeout,
		busy: make(chan struct{}, 1)}
}

func (a *Agent) state() sampleState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

// Snapshot returns the latest successful snapshot with the sampler's
// current health, nil before the first success.
func (a *Agent) Snapshot() *snapshot.Snapshot {
	st := a.state()
	if st.snap == nil {
		return nil
	}
	snap := *st.snap // stored snapshots are never modified: a shallow copy is enough
	snap.Health = st.health
	return &snap
}

// stamp is how times appear in the snapshot.
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// SampleOnce takes one sample. On failure the previous snapshot stays
// (its sampledAt tells readers its age, its health that sampling fails),
// and the failure shows in gpuhub_agent_last_sample_success,
// gpuhub_agent_consecutive_failed_samples and, after MaxFailedSamples in a
// row, /readyz.
func (a *Agent) SampleOnce(ctx context.Context) error {
	start := a.now()
	r, err := a.sample(ctx, start)
	if err != nil {
		a.mu.Lock()
		a.st.err, a.st.duration = err, a.now().Sub(start)
		h := &a.st.health
		h.OK, h.ConsecutiveFailures, h.LastAttemptAt, h.LastError = false, h.ConsecutiveFailures+1, stamp(start), err.Error()
		a.mu.Unlock()
		return err
	}
	asm := assemble(r, a.node, start, a.interval, a.pods, a.resolver)
	d := a.now().Sub(start)
	a.mu.Lock()
	a.st = sampleState{snap: &asm.snap, duration: d, unattributed: asm.unattributed,
		health: snapshot.SamplerHealth{OK: true, LastAttemptAt: asm.snap.SampledAt, LastSuccessAt: asm.snap.SampledAt}}
	a.mu.Unlock()
	return nil
}

// sample runs the backend with a deadline. NVML calls go through cgo and
// cannot be interrupted, so a hung call is abandoned, not stopped: it keeps
// the backend busy, and later attempts fail at once until it returns.
func (a *Agent) sample(ctx context.Context, start time.Time) (reading.Reading, error) {
	select {
	case a.busy <- struct{}{}:
	default:
		since := a.state().stuckSince
		return reading.Reading{}, fmt.Errorf("the backend has not returned from the sample started at %s (%s ago): wedged GPU driver or NVML call?",
			since.UTC().Format(time.TimeOnly+" UTC"), start.Sub(since).Round(time.Second))
	}
	a.mu.Lock()
	a.st.stuckSince = start
	a.mu.Unlock()

	type result struct {
		r   reading.Reading
		err error
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		r, err := a.sampler.Sample(ctx)
		a.mu.Lock()
		a.st.stuckSince = time.Time{}
		a.mu.Unlock()
		<-a.busy // before the result: the next attempt may start as soon as this one returns
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-ctx.Done():
		select {
		case res := <-done: // finished just in time
			return res.r, res.err
		default:
		}
		if err := parent.Err(); err != nil {
			return reading.Reading{}, fmt.Errorf("sampling stopped: %w", err)
		}
		return reading.Reading{}, fmt.Errorf("the backend did not finish the sample within %s (wedged GPU driver or NVML call?): %w",
			a.timeout, ctx.Err())
	}
}

// Loop samples now and then every interval until ctx is done.
func (a *Agent) Loop(ctx context.Context) {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	failing := false
	for {
		err := a.SampleOnce(ctx)
		failures := a.state().health.ConsecutiveFailures
		switch {
		case err != nil && failures == a.maxFailed:
			a.logger.Error("sampling keeps failing: not ready", "failures", failures, "err", err)
		case err != nil && !failing:
			a.logger.Warn("sample failed", "err", err)
		case err != nil:
			a.logger.Debug("sample failed", "failures", failures, "err", err)
		case failing:
			a.logger.Info("sampling recovered")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Ready fails until a sample succeeded, and while the latest
// MaxFailedSamples attempts in a row failed.
func (a *Agent) Ready(context.Context) error {
	st := a.state()
	switch {
	case st.snap == nil && st.err != nil:
		return fmt.Errorf("no successful sample yet: %w", st.err)
	case st.snap == nil:
		return errors.New("no sample yet")
	case st.health.ConsecutiveFailures >= a.maxFailed:
		return fmt.Errorf("the last %d samples failed (last success at %s): %w", st.health.ConsecutiveFailures,
			st.health.LastSuccessAt.Format(time.TimeOnly+" UTC"), st.err)
	}
	return nil
}

// Handler serves GET /api/v1/snapshot.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		snap := a.Snapshot()
		if snap == nil {
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(a.interval.Seconds())))))
			server.WriteError(w, http.StatusServiceUnavailable, "no sample yet; retry after the sampling interval (%s)", a.interval)
			return
		}
		server.WriteJSON(w, http.StatusOK, snap)
	})
	return mux
}

type noPods struct{}

func (noPods) Pod(string) (cluster.Pod, bool) { return cluster.Pod{}, false }
func (noPods) Pods() []cluster.Pod            { return nil }
