// Package agent is the gpu-agent service: it samples a backend (NVML or
// simulated) at a fixed interval, attributes GPU processes to pods, and
// serves the result as a JSON snapshot and as Prometheus metrics.
package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
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
}

type sampleState struct {
	snap         *snapshot.Snapshot // latest successful sample
	ok           bool               // whether the latest attempt succeeded
	err          error
	duration     time.Duration
	unattributed int
}

// Agent holds the latest sample.
type Agent struct {
	node     string
	backend  snapshot.Backend
	interval time.Duration
	sampler  Sampler
	pods     PodSource
	resolver CgroupResolver
	now      func() time.Time
	logger   *slog.Logger

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
	return &Agent{node: c.Node, backend: c.Backend, interval: c.Interval, sampler: c.Sampler, pods: c.Pods,
		resolver: c.Resolver, now: c.Now, logger: c.Logger}
}

func (a *Agent) state() sampleState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

// Snapshot returns the latest successful snapshot, nil before the first.
func (a *Agent) Snapshot() *snapshot.Snapshot { return a.state().snap }

// SampleOnce takes one sample. On failure the previous snapshot stays
// (its sampledAt tells readers its age) and the failure shows in
// gpuhub_agent_last_sample_success and /readyz.
func (a *Agent) SampleOnce(ctx context.Context) error {
	start := a.now()
	r, err := a.sampler.Sample(ctx)
	if err != nil {
		a.mu.Lock()
		a.st.ok, a.st.err, a.st.duration = false, err, a.now().Sub(start)
		a.mu.Unlock()
		return err
	}
	asm := assemble(r, a.node, start, a.interval, a.pods, a.resolver)
	d := a.now().Sub(start)
	a.mu.Lock()
	a.st = sampleState{snap: &asm.snap, ok: true, duration: d, unattributed: asm.unattributed}
	a.mu.Unlock()
	return nil
}

// Loop samples now and then every interval until ctx is done.
func (a *Agent) Loop(ctx context.Context) {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	failing := false
	for {
		err := a.SampleOnce(ctx)
		switch {
		case err != nil && !failing:
			a.logger.Warn("sample failed", "err", err)
		case err != nil:
			a.logger.Debug("sample failed", "err", err)
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

// Ready fails until a sample succeeded, and while the latest one failed.
func (a *Agent) Ready(context.Context) error {
	st := a.state()
	switch {
	case st.snap == nil && st.err != nil:
		return st.err
	case st.snap == nil:
		return errors.New("no sample yet")
	case !st.ok:
		return st.err
	}
	return nil
}

// Handler serves GET /api/v1/snapshot.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		snap := a.Snapshot()
		if snap == nil {
			server.WriteError(w, http.StatusServiceUnavailable, "no sample yet; retry after the sampling interval")
			return
		}
		server.WriteJSON(w, http.StatusOK, snap)
	})
	return mux
}

type noPods struct{}

func (noPods) Pod(string) (cluster.Pod, bool) { return cluster.Pod{}, false }
func (noPods) Pods() []cluster.Pod            { return nil }
