package usage

import "sync/atomic"

// State is the latest View, swapped atomically each tick, and the history; readers never block the tick.
type State struct {
	view    atomic.Pointer[View]
	History *History
}

// NewState returns an empty state with the given history.
func NewState(h *History) *State { return &State{History: h} }

// View returns the latest view, nil before the first tick.
func (s *State) View() *View { return s.view.Load() }

// Publish makes v the latest view and records it in the history.
func (s *State) Publish(v *View) {
	s.History.Add(v)
	s.view.Store(v)
}
