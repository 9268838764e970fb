// Package collect polls the gpu-agents' snapshots. Agents are found through the Kubernetes API (pods labelled
// app.kubernetes.io/component=gpu-agent); their snapshot JSON is the contract in docs/architecture.md, defined
// once in services/internal/snapshot (the agent writes it with the same types).
package collect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// Agent is one gpu-agent pod to poll.
type Agent struct {
	Pod  string // namespace/name, for logs
	Node string
	IP   string
}

// Result is the latest snapshot of one node's agent.
type Result struct {
	Agent    Agent
	Snapshot *snapshot.Snapshot // the last good snapshot; nil if none yet
	// FetchedAt is when Snapshot was fetched (collector clock).
	FetchedAt time.Time
	// SampleSeenAt is when the collector first fetched a snapshot with Snapshot.SampledAt (collector clock). A
	// sample that does not move ages on this clock even when the agent's clock is ahead of ours.
	SampleSeenAt time.Time
	// Err is the last poll's error, nil when it succeeded; FailingSince is when the polls started failing
	// (collector clock), zero when the last one succeeded.
	Err          error
	FailingSince time.Time
}

// Options configure a Collector.
type Options struct {
	Client      *http.Client // default: 2 s timeout
	Port        int          // default 9400
	Concurrency int          // polls in flight; default 16
	Logger      *slog.Logger
	Now         func() time.Time
}

// Collector polls agents and keeps the last good snapshot per node.
type Collector struct {
	opts Options
	mu   sync.Mutex
	last map[string]Result // by node
}

// New returns a Collector.
func New(opts Options) *Collector {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 2 * time.Second}
	}
	if opts.Port == 0 {
		opts.Port = 9400
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 16
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Collector{opts: opts, last: map[string]Result{}}
}

// maxSnapshotBytes bounds what an agent may send.
const maxSnapshotBytes = 32 << 20

// Poll fetches every agent's snapshot once, concurrently, and returns the latest result per node. A failed poll
// keeps the node's previous snapshot and its times (its age then tells it is stale) and records the error;
// when several agent pods serve one node (a rolling update), the newest good snapshot wins. Nodes whose agent
// is gone are dropped.
func (c *Collector) Poll(ctx context.Context, agents []Agent) (map[string]Result, error) {
	type out struct {
		agent Agent
		snap  *snapshot.Snapshot
		at    time.Time
		err   error
	}
	results := make(chan out, len(agents))
	sem := make(chan struct{}, c.opts.Concurrency)
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			snap, err := c.fetch(ctx, a)
			results <- out{agent: a, snap: snap, at: c.opts.Now(), err: err}
		}()
	}
	wg.Wait()
	close(results)

	c.mu.Lock()
	defer c.mu.Unlock()
	next := make(map[string]Result, len(agents))
	var errs []error
	for r := range results {
		node := r.agent.Node
		if r.err != nil {
			errs = append(errs, r.err)
			c.opts.Logger.Warn("agent snapshot failed", "agent", r.agent.Pod, "node", node, "err", r.err)
			if _, ok := next[node]; ok {
				continue // another agent pod of this node (a rolling update) already answered or failed in this poll
			}
			// A failed poll refreshes nothing: the previous snapshot keeps its fetch and first-seen times.
			res := c.last[node]
			res.Agent, res.Err = r.agent, r.err
			if res.FailingSince.IsZero() {
				res.FailingSince = r.at
			}
			next[node] = res
			continue
		}
		if cur, ok := next[node]; ok && cur.Err == nil && !r.snap.SampledAt.After(cur.Snapshot.SampledAt) {
			continue // two agent pods answered for one node: keep the newer sample
		}
		res := Result{Agent: r.agent, Snapshot: r.snap, FetchedAt: r.at, SampleSeenAt: r.at}
		if prev := c.last[node]; prev.Snapshot != nil && prev.Snapshot.SampledAt.Equal(r.snap.SampledAt) {
			res.SampleSeenAt = prev.SampleSeenAt
		}
		next[node] = res
	}
	c.last = next
	copyOut := make(map[string]Result, len(next))
	for k, v := range next {
		copyOut[k] = v
	}
	return copyOut, errors.Join(errs...)
}

func (c *Collector) fetch(ctx context.Context, a Agent) (*snapshot.Snapshot, error) {
	url := "http://" + net.JoinHostPort(a.IP, strconv.Itoa(c.opts.Port)) + "/api/v1/snapshot"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", a.Pod, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.opts.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", a.Pod, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("agent %s: snapshot answered %s", a.Pod, resp.Status)
	}
	var s snapshot.Snapshot
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxSnapshotBytes)).Decode(&s); err != nil {
		return nil, fmt.Errorf("agent %s: decode snapshot: %w", a.Pod, err)
	}
	if s.Node == "" {
		s.Node = a.Node
	}
	return &s, nil
}
