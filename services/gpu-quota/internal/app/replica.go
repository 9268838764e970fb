package app

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// replicaPath, under the prefix, is the decider's stream of reservations to the standbys (NDJSON, one
// admit.ReplicaLine a line), for gpu-quota's own token only.
const replicaPath = "internal/v1/replica"

// replicaServer serves the stream on the decider.
type replicaServer struct {
	eng      *admit.Engine
	tokenSum []byte
	logger   *slog.Logger

	mu      sync.Mutex
	streams map[*atomic.Uint64]struct{} // each stream's last line written and flushed
}

func newReplicaServer(eng *admit.Engine, token string, logger *slog.Logger) *replicaServer {
	sum := sha256.Sum256([]byte(token))
	return &replicaServer{eng: eng, tokenSum: sum[:], logger: logger, streams: map[*atomic.Uint64]struct{}{}}
}

func (s *replicaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := hubauth.TokenFromRequest(r)
	sum := sha256.Sum256([]byte(tok))
	if tok == "" || subtle.ConstantTimeCompare(sum[:], s.tokenSum) != 1 {
		server.WriteError(w, http.StatusUnauthorized, "the replica stream is for gpu-quota's own token")
		return
	}
	if !s.eng.Deciding() {
		notLeader(w)
		return
	}
	sub := s.eng.Subscribe()
	defer sub.Close()
	flushed := &atomic.Uint64{}
	s.mu.Lock()
	s.streams[flushed] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, flushed)
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for {
		lines, err := sub.Next(r.Context())
		if err != nil {
			if r.Context().Err() == nil {
				s.logger.Warn("a standby's stream ended; it subscribes again", "err", err)
			}
			return
		}
		final := false
		for _, l := range lines {
			if err := enc.Encode(l); err != nil {
				return
			}
			final = final || l.Final
		}
		if err := bw.Flush(); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		flushed.Store(lines[len(lines)-1].Seq)
		if final {
			return
		}
	}
}

// waitFlushed waits until every stream has written line seq, or until timeout.
func (s *replicaServer) waitFlushed(seq uint64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		behind := 0
		s.mu.Lock()
		for f := range s.streams {
			if f.Load() < seq {
				behind++
			}
		}
		s.mu.Unlock()
		if behind == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replicaClient keeps a standby's copy of the decider's reservations: it follows the stream of whoever holds
// the Lease, from a snapshot on, and says whether the copy is in sync (the campaign gate).
type replicaClient struct {
	self, prefix, token string
	leader              func() string
	eng                 *admit.Engine
	client              *http.Client
	logger              *slog.Logger
	// synced is the holder whose snapshot this replica applied; kept when its stream ends (a crash or a
	// handover: the copy is the best there is), cleared when another snapshot starts.
	synced atomic.Pointer[string]
	gauge  prometheus.Gauge
}

// ready reports whether this replica may campaign: its copy is of the holder it last followed, and no other
// holder has taken the Lease since.
func (c *replicaClient) ready() bool {
	p := c.synced.Load()
	if p == nil {
		return false
	}
	h := c.leader()
	return h == "" || h == *p || h == c.self
}

func (c *replicaClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		c.setGauge()
		holder := c.leader()
		url := holderURL(holder, c.self)
		if c.eng.Deciding() || url == "" {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		if err := c.follow(ctx, holder, url); err != nil && ctx.Err() == nil {
			c.logger.Debug("following the deciding replica failed; trying again", "leader", holder, "err", err)
			sleep(ctx, 100*time.Millisecond)
		}
	}
}

func (c *replicaClient) setGauge() {
	if c.ready() {
		c.gauge.Set(1)
	} else {
		c.gauge.Set(0)
	}
}

// follow applies holder's stream until it ends, the holder changes, or this replica decides.
func (c *replicaClient) follow(ctx context.Context, holder, url string) error {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
				c.setGauge()
				if c.leader() != holder || c.eng.Deciding() {
					cancel()
					return
				}
			}
		}
	}()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, url+c.prefix+replicaPath, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "token "+c.token)
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the stream answered %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var last uint64
	for sc.Scan() {
		var l admit.ReplicaLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			c.synced.Store(nil)
			return fmt.Errorf("a line of the stream: %w", err)
		}
		if last != 0 && l.Seq != last+1 {
			c.synced.Store(nil) // a gap: a new snapshot
			return fmt.Errorf("line %d after %d", l.Seq, last)
		}
		last = l.Seq
		if l.Reset {
			c.synced.Store(nil)
		}
		c.eng.ApplyReplica(l)
		if l.Synced {
			h := holder
			c.synced.Store(&h)
			c.setGauge()
			c.logger.Info("in sync with the deciding replica", "leader", holder)
		}
		if l.Final {
			c.logger.Info("the deciding replica handed over", "leader", holder)
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the stream ended")
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
