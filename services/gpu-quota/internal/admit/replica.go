package admit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// The deciding replica streams its reservations to the standbys, so that a standby that takes the Lease counts
// every spawn the old decider admitted until its own informer shows the pod. Only what the decider chooses is
// sent: a reservation made (or replaced), and one released by a refusal. Matches and TTL expiry are not: each
// replica applies them from its own informer and clock, so that a reservation never stops counting on a
// replica before that replica's index holds its pod.

// ReplicaLine is one line of the stream, in order of Seq.
type ReplicaLine struct {
	Seq uint64 `json:"seq"`
	// Reset starts a snapshot: every reservation the standby mirrors is dropped.
	Reset bool `json:"reset,omitempty"`
	// Synced ends the snapshot: from here on the standby is a copy.
	Synced  bool                 `json:"synced,omitempty"`
	Reserve *MirroredReservation `json:"reserve,omitempty"`
	// Release is a reservation released by a refusal: (user, server) with the reservation's id.
	Release *MirroredReservation `json:"release,omitempty"`
	// Final is the decider's last line: it has stopped deciding and is about to give the Lease back.
	Final bool `json:"final,omitempty"`
}

// MirroredReservation is a reservation as streamed. Release lines carry only ID, User and Server.
type MirroredReservation struct {
	ID      string           `json:"id"`
	User    string           `json:"user"`
	Server  string           `json:"server"`
	Allocs  []gpu.Allocation `json:"allocs,omitempty"`
	Classes []string         `json:"classes,omitempty"`
	Expires time.Time        `json:"expires"`
	Before  []string         `json:"before,omitempty"`
}

// maxBacklog bounds the lines waiting for one subscriber: one that falls that far behind is dropped and
// subscribes again from a snapshot.
const maxBacklog = 100_000

// ErrReplicaDropped ends a subscription that fell maxBacklog lines behind.
var ErrReplicaDropped = errors.New("admit: the standby fell too far behind; subscribe again")

// Subscription is one standby's stream.
type Subscription struct {
	e      *Engine
	mu     sync.Mutex
	lines  []ReplicaLine
	notify chan struct{}
	drop   bool
}

type replicaFeed struct {
	seq  uint64
	subs map[*Subscription]struct{}
}

// Subscribe starts a stream: a snapshot of every live reservation, then each change as it is made.
func (e *Engine) Subscribe() *Subscription {
	s := &Subscription{e: e, notify: make(chan struct{}, 1)}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.res.expire(e.o.Now())
	e.feed.seq++
	s.lines = append(s.lines, ReplicaLine{Seq: e.feed.seq, Reset: true})
	for _, rv := range e.res.queue {
		if !rv.done {
			e.feed.seq++
			s.lines = append(s.lines, ReplicaLine{Seq: e.feed.seq, Reserve: mirrored(rv)})
		}
	}
	e.feed.seq++
	s.lines = append(s.lines, ReplicaLine{Seq: e.feed.seq, Synced: true})
	if e.feed.subs == nil {
		e.feed.subs = map[*Subscription]struct{}{}
	}
	e.feed.subs[s] = struct{}{}
	s.notify <- struct{}{}
	return s
}

// Next returns the lines waiting, waiting for some if none are.
func (s *Subscription) Next(ctx context.Context) ([]ReplicaLine, error) {
	for {
		s.mu.Lock()
		lines, drop := s.lines, s.drop
		s.lines = nil
		s.mu.Unlock()
		if drop {
			return nil, ErrReplicaDropped
		}
		if len(lines) > 0 {
			return lines, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.notify:
		}
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	delete(s.e.feed.subs, s)
}

// FinalLine tells every standby that this replica decides no more (after SetDeciding(false)); it returns the
// line's Seq, 0 when no standby follows.
func (e *Engine) FinalLine() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.feed.subs) == 0 {
		return 0
	}
	e.publishLocked(ReplicaLine{Final: true})
	return e.feed.seq
}

// publishLocked appends l to every subscription; under e.mu, so that lines are in the order of decisions.
func (e *Engine) publishLocked(l ReplicaLine) {
	if len(e.feed.subs) == 0 {
		return
	}
	e.feed.seq++
	l.Seq = e.feed.seq
	for s := range e.feed.subs {
		s.mu.Lock()
		if len(s.lines) >= maxBacklog {
			s.drop = true
			delete(e.feed.subs, s)
		} else {
			s.lines = append(s.lines, l)
		}
		s.mu.Unlock()
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

func mirrored(rv *reservation) *MirroredReservation {
	return &MirroredReservation{ID: rv.id, User: rv.user, Server: rv.server, Allocs: rv.allocs, Classes: rv.classes,
		Expires: rv.expires, Before: rv.before}
}

// ApplyReplica applies a line of the decider's stream to this standby's reservations. A replica that decides
// ignores it: its own decisions are the truth.
func (e *Engine) ApplyReplica(l ReplicaLine) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.notDeciding {
		return
	}
	switch {
	case l.Reset:
		seq, tag, changes := e.res.seq, e.res.tag, e.res.changes
		e.res = newReservations()
		e.res.seq, e.res.tag, e.res.changes = seq, tag, changes+1
	case l.Reserve != nil:
		m := l.Reserve
		e.res.release(e.res.byUser[m.User][m.Server])
		if len(m.Allocs) != len(m.Classes) {
			return
		}
		// This replica's informer may have shown the pod before the line came: then it is matched already.
		for _, p := range e.ix.byUser[m.User] {
			if p.active && p.pod.Server == m.Server && !slices.Contains(m.Before, p.pod.UID) {
				return
			}
		}
		e.res.add(&reservation{id: m.ID, user: m.User, server: m.Server, classified: classified{allocs: m.Allocs, classes: m.Classes},
			expires: m.Expires, made: time.Now(), before: m.Before})
	case l.Release != nil:
		if rv := e.res.byUser[l.Release.User][l.Release.Server]; rv != nil && rv.id == l.Release.ID {
			e.res.release(rv)
		}
	}
}
