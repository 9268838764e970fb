// Package telemetry keeps each running GPU server's recent GPU use as the usage API measures it: every replica
// samples the usage API's `servers` endpoint (one request for every server), so a replica that takes over the
// Lease already knows how long each GPU has been idle. The history is bucketed so that a long idle period costs
// a bounded number of buckets per server.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// MaxBuckets bounds each server's history: a window of w keeps buckets of max(sampling period, w/MaxBuckets).
const MaxBuckets = 256

// Options configure a Sampler.
type Options struct {
	// URL is the usage API's base URL with its prefix (http://gpu-usage:8000/services/gpu-usage/).
	URL string
	// Token is the culler's own Hub token: the usage API lets its reader services read every server.
	Token  string
	Client *http.Client
	// Every is the sampling period (default 10 s).
	Every time.Duration
	// Window is how far back the history must reach: the longest idle period of the policy in force.
	Window func() time.Duration
	Logger *slog.Logger
	Now    func() time.Time
}

// Info is what the usage API last said about a server, beside its samples.
type Info struct {
	// Known is false when the usage API does not list the server (no GPU, or not seen yet).
	Known         bool
	Kind          gpu.Kind
	Class         string
	AllocatedGPUs float64
	// Why the newest answer added no sample: the server's telemetry is stale, or its utilization unknown.
	Stale       bool
	StaleReason string
	Unknown     string
}

type key struct{ user, server string }

type bucket struct {
	first, last time.Time
	maxUtil     float64
	memLo       int64
	memHi       int64
}

type series struct {
	pod     string // namespace/name: another pod under the same server starts a new history
	info    Info
	buckets []bucket // oldest first
}

// Sampler samples the usage API and answers per server.
type Sampler struct {
	o Options

	mu        sync.RWMutex
	servers   map[key]*series
	sampledAt time.Time // of the newest answer
	lastOK    time.Time // when an answer last came
	lastErr   error
}

// New returns a Sampler; Run samples.
func New(o Options) *Sampler {
	if o.Every <= 0 {
		o.Every = 10 * time.Second
	}
	if o.Window == nil {
		o.Window = func() time.Duration { return time.Hour }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if !strings.HasSuffix(o.URL, "/") {
		o.URL += "/"
	}
	return &Sampler{o: o, servers: map[key]*series{}}
}

// Run samples every Every until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.o.Every)
	defer t.Stop()
	failing := false
	for {
		err := s.Sample(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			s.o.Logger.Warn("cannot read the usage API's GPU telemetry; GPU servers are left alone until it answers",
				"url", s.o.URL, "err", err)
			failing = true
		case err == nil && failing:
			s.o.Logger.Info("the usage API answers again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample reads the usage API once and adds what it says.
func (s *Sampler) Sample(ctx context.Context) error {
	a, err := s.fetch(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.lastErr = err
		return err
	}
	s.lastErr, s.lastOK = nil, s.o.Now()
	s.add(a)
	return nil
}

func (s *Sampler) fetch(ctx context.Context) (*contract.ServersResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, max(s.o.Every, 5*time.Second))
	defer cancel()
	var a contract.ServersResponse
	err := contract.Caller{Token: s.o.Token, HTTP: s.o.Client}.JSON(ctx, http.MethodGet, s.o.URL+"api/v1/servers", nil, &a)
	if contract.IsStatus(err, http.StatusForbidden) {
		return nil, fmt.Errorf("usage API: %w: add this service to the usage API's --reader-services", err)
	}
	if err != nil {
		return nil, fmt.Errorf("usage API: %w", err)
	}
	if a.SampledAt.IsZero() {
		return nil, errors.New("usage API: the answer has no sampledAt")
	}
	return &a, nil
}

// add merges one answer: servers it does not list are forgotten (stopped, or no longer holding GPUs).
func (s *Sampler) add(a *contract.ServersResponse) {
	window := s.o.Window()
	width := max(s.o.Every, window/MaxBuckets)
	seen := make(map[key]bool, len(a.Servers))
	for _, e := range a.Servers {
		k := key{e.User, e.Server}
		seen[k] = true
		pod := e.Namespace + "/" + e.Pod
		sr := s.servers[k]
		if sr == nil || sr.pod != pod {
			sr = &series{pod: pod}
			s.servers[k] = sr
		}
		sr.info = Info{Known: true, Kind: e.Kind, Class: e.Class, AllocatedGPUs: e.AllocatedGPUs, Stale: e.Stale, StaleReason: e.StaleReason}
		switch {
		case e.Stale:
			continue // no sample: the newest one ages until the culler calls the telemetry stale
		case e.SMUtilPercent == nil:
			sr.info.Unknown = e.UtilizationUnknownReason
			if sr.info.Unknown == "" {
				sr.info.Unknown = "the GPU utilization is unknown"
			}
			continue
		}
		sr.push(a.SampledAt, *e.SMUtilPercent, int64(min(e.MemoryUsedBytes, math.MaxInt64)), s.o.Every, width, window)
	}
	for k := range s.servers {
		if !seen[k] {
			delete(s.servers, k)
		}
	}
	s.sampledAt = a.SampledAt
}

func (sr *series) push(at time.Time, util float64, mem int64, every, width, window time.Duration) {
	if n := len(sr.buckets); n > 0 {
		b := &sr.buckets[n-1]
		if !at.After(b.last) {
			return // the same view again (the usage API samples more slowly than us)
		}
		// A sample after a gap starts a new bucket, so that decide sees the gap where it was.
		if at.Sub(b.first) < width && at.Sub(b.last) <= 2*every {
			b.last, b.maxUtil = at, max(b.maxUtil, util)
			b.memLo, b.memHi = min(b.memLo, mem), max(b.memHi, mem)
			return
		}
	}
	sr.buckets = append(sr.buckets, bucket{first: at, last: at, maxUtil: util, memLo: mem, memHi: mem})
	// Keep what reaches back a window (plus a bucket) before the newest sample, and never more than MaxBuckets+2.
	cut := 0
	for cut < len(sr.buckets)-1 && (at.Sub(sr.buckets[cut].last) > window+width || len(sr.buckets)-cut > MaxBuckets+2) {
		cut++
	}
	if cut > 0 {
		sr.buckets = append(sr.buckets[:0], sr.buckets[cut:]...)
	}
}

// Server is a server's telemetry for decide, and what the usage API last said about it. A bucket is given as
// samples at its highest utilization, the first with its lowest memory and the others with its highest, so
// that decide's thresholds see the worst of the bucket: a bucket with any busy sample is busy, one whose memory
// moved by more than the tolerance ends the idle stretch. A bucket has no gap inside (a gap starts a new one),
// so its samples are spaced at most maxGap apart (decide's staleAfter) where it is wider.
func (s *Sampler) Server(user, server string, maxGap time.Duration) (decide.Telemetry, Info) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sr := s.servers[key{user, server}]
	if sr == nil {
		return decide.Telemetry{}, Info{}
	}
	t := decide.Telemetry{Present: len(sr.buckets) > 0, Samples: make([]decide.Sample, 0, 2*len(sr.buckets))}
	for _, b := range sr.buckets {
		t.Samples = append(t.Samples, decide.Sample{At: b.first, Utilization: b.maxUtil, MemoryBytes: b.memLo})
		step := max(maxGap/2, time.Second)
		for at := b.first.Add(step); at.Before(b.last); at = at.Add(step) {
			t.Samples = append(t.Samples, decide.Sample{At: at, Utilization: b.maxUtil, MemoryBytes: b.memHi})
		}
		if b.last.After(b.first) || b.memHi != b.memLo {
			t.Samples = append(t.Samples, decide.Sample{At: b.last, Utilization: b.maxUtil, MemoryBytes: b.memHi})
		}
	}
	return t, sr.info
}

// Info is what the usage API last said about a server (Known false when it does not list it).
func (s *Sampler) Info(user, server string) Info {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sr := s.servers[key{user, server}]; sr != nil {
		return sr.info
	}
	return Info{}
}

// Usage is the state of the usage API for decide: reachable while its last answer came within three sampling
// periods (one failed request does not stop every decision), At is the newest answer's sampledAt.
func (s *Sampler) Usage() decide.Usage {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ok := !s.lastOK.IsZero() && (s.lastErr == nil || s.o.Now().Sub(s.lastOK) < 3*s.o.Every)
	return decide.Usage{Reachable: ok, At: s.sampledAt}
}

// Err is the last sampling error, nil after a good answer.
func (s *Sampler) Err() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastErr
}

// Len is how many servers have a history.
func (s *Sampler) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.servers)
}
