// Package waitlist is the GPU waitlist's state and rules, without locks or I/O: who waits for which GPU class,
// in which order (fair share), who a freed unit is held for and until when. gpu-quota's admission engine owns
// one State under its lock, so that a hold and an admission are decided on the same numbers; the State is
// saved as JSON in the usage API (the ledger's database) so that the queue survives a restart.
package waitlist

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// Entry is one server waiting for one unit of a GPU class.
type Entry struct {
	User   string `json:"user"`
	Server string `json:"server"` // "" is the default server
	// Class is gpu.Allocation.Class of the unit waited for ("gpu H100"), Kind and Description its vocabulary.
	Class       string   `json:"class"`
	Kind        gpu.Kind `json:"kind"`
	Description string   `json:"description"`
	// Resources and NodeSelector are the server's GPU request as the Hub glue sent it (admit.Request).
	Resources    map[string]int64  `json:"resources"`
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	Profile      string            `json:"profile,omitempty"`
	// AutoStart starts the server through the Hub when a unit is held for it, with UserOptions (the spawn
	// form's answer, e.g. {"profile": "h100"}).
	AutoStart   bool           `json:"autoStart"`
	UserOptions map[string]any `json:"userOptions,omitempty"`

	JoinedAt time.Time `json:"joinedAt"`
	// Seq is the arrival order (ties of fair share and of JoinedAt).
	Seq uint64 `json:"seq"`

	// HeldAt and HeldUntil are set while a unit of Class is held for this entry: nobody else may take it until
	// HeldUntil, then it passes to the next in line.
	HeldAt    time.Time `json:"heldAt,omitzero"`
	HeldUntil time.Time `json:"heldUntil,omitzero"`
	// StartRequested is set once the Hub was asked to start the server (AutoStart).
	StartRequested bool `json:"startRequested,omitempty"`
}

// Held reports whether a unit is held for the entry.
func (e Entry) Held() bool { return !e.HeldUntil.IsZero() }

// State is every queue: what is saved and restored.
type State struct {
	Entries []Entry `json:"entries"`
	Seq     uint64  `json:"seq"`
}

// ErrNotQueued is returned for a server that is not in any queue.
var ErrNotQueued = errors.New("not in the waitlist")

// Clone returns a deep enough copy to save while the original changes.
func (s *State) Clone() State {
	return State{Entries: slices.Clone(s.Entries), Seq: s.Seq}
}

// Find returns the index of (user, server)'s entry, or -1.
func (s *State) Find(user, server string) int {
	return slices.IndexFunc(s.Entries, func(e Entry) bool { return e.User == user && e.Server == server })
}

// Join queues e (at now) and returns the stored entry. A server already queued for the same class keeps its
// place (its choices, such as AutoStart, are updated); for another class it starts again at the end.
func (s *State) Join(e Entry, now time.Time) Entry {
	if i := s.Find(e.User, e.Server); i >= 0 {
		old := s.Entries[i]
		if old.Class == e.Class {
			e.JoinedAt, e.Seq, e.HeldAt, e.HeldUntil, e.StartRequested = old.JoinedAt, old.Seq, old.HeldAt, old.HeldUntil, old.StartRequested
			s.Entries[i] = e
			return e
		}
		s.Entries = slices.Delete(s.Entries, i, i+1)
	}
	s.Seq++
	e.JoinedAt, e.Seq, e.HeldAt, e.HeldUntil, e.StartRequested = now, s.Seq, time.Time{}, time.Time{}, false
	s.Entries = append(s.Entries, e)
	return e
}

// Remove takes (user, server) out of the queue and returns its entry.
func (s *State) Remove(user, server string) (Entry, error) {
	i := s.Find(user, server)
	if i < 0 {
		return Entry{}, ErrNotQueued
	}
	e := s.Entries[i]
	s.Entries = slices.Delete(s.Entries, i, i+1)
	return e, nil
}

// Expire removes the entries whose hold ended at now (the unit passes to the next in line) and returns them.
func (s *State) Expire(now time.Time) []Entry {
	var out []Entry
	s.Entries = slices.DeleteFunc(s.Entries, func(e Entry) bool {
		if e.Held() && !now.Before(e.HeldUntil) {
			out = append(out, e)
			return true
		}
		return false
	})
	return out
}

// Classes are the classes someone waits for or holds, sorted.
func (s *State) Classes() []string {
	var out []string
	for _, e := range s.Entries {
		out = append(out, e.Class)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Standing is what orders a class's queue: the user's fair-share factor, then arrival.
type Standing func(user string) float64

// Order returns the entries of class in line order: held entries first (their turn came, in the order it did),
// then the waiting ones by fair-share factor, highest first, ties by arrival.
func (s *State) Order(class string, factor Standing) []Entry {
	var held, waiting []Entry
	for _, e := range s.Entries {
		switch {
		case e.Class != class:
		case e.Held():
			held = append(held, e)
		default:
			waiting = append(waiting, e)
		}
	}
	slices.SortFunc(held, func(a, b Entry) int {
		if c := a.HeldAt.Compare(b.HeldAt); c != 0 {
			return c
		}
		return cmpSeq(a, b)
	})
	f := make(map[string]float64, len(waiting))
	for _, e := range waiting {
		if _, ok := f[e.User]; !ok {
			f[e.User] = factor(e.User)
		}
	}
	slices.SortFunc(waiting, func(a, b Entry) int {
		// Equal within rounding counts as equal, so that arrival breaks the tie and not float noise.
		if fa, fb := f[a.User], f[b.User]; math.Abs(fa-fb) > 1e-12 {
			if fa > fb {
				return -1
			}
			return 1
		}
		if c := a.JoinedAt.Compare(b.JoinedAt); c != 0 {
			return c
		}
		return cmpSeq(a, b)
	})
	return append(held, waiting...)
}

func cmpSeq(a, b Entry) int {
	switch {
	case a.Seq < b.Seq:
		return -1
	case a.Seq > b.Seq:
		return 1
	}
	return 0
}

// Hold marks (user, server)'s entry as served by a unit held from now until now+window.
func (s *State) Hold(user, server string, now time.Time, window time.Duration) (Entry, error) {
	i := s.Find(user, server)
	if i < 0 {
		return Entry{}, ErrNotQueued
	}
	s.Entries[i].HeldAt, s.Entries[i].HeldUntil = now, now.Add(window)
	return s.Entries[i], nil
}

// MarkStartRequested records whether the Hub was asked to start (user, server).
func (s *State) MarkStartRequested(user, server string, on bool) {
	if i := s.Find(user, server); i >= 0 {
		s.Entries[i].StartRequested = on
	}
}
