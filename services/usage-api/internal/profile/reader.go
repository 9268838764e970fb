package profile

import (
	"context"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/rightsize"
)

// Reader answers merged profiles. Everyone's (the admin savings and the right-size gauge, both over every
// server) are kept for Every and computed once however many ask at the same time: reading a month of every
// server is the usage API's largest read, and what it measures changes over days. One user's are read as
// asked (a few rows).
type Reader struct {
	src   Scanner
	every time.Duration

	mu  sync.Mutex
	all map[int64]*everyone // by the period's first day
}

type everyone struct {
	mu  sync.Mutex // held while computing: the others wait for its answer
	at  time.Time
	ps  []rightsize.Profile
	set bool
}

// NewReader returns a Reader over src that keeps everyone's profiles for every.
func NewReader(src Scanner, every time.Duration) *Reader {
	return &Reader{src: src, every: every, all: map[int64]*everyone{}}
}

// Profiles merges the days from the day of from on, of one user ("" for everyone), as of now. Everyone's answer
// is shared: the caller must not change it.
func (r *Reader) Profiles(ctx context.Context, from, now time.Time, user string) ([]rightsize.Profile, error) {
	if user != "" {
		return Read(ctx, r.src, from, user)
	}
	r.mu.Lock()
	for k, e := range r.all { // a period's first day moves on at midnight: forget the old ones
		if e.mu.TryLock() {
			if e.set && now.Sub(e.at) >= r.every {
				delete(r.all, k)
			}
			e.mu.Unlock()
		}
	}
	e := r.all[from.Unix()]
	if e == nil {
		e = &everyone{}
		r.all[from.Unix()] = e
	}
	r.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.set && now.Sub(e.at) < r.every && !now.Before(e.at) {
		return e.ps, nil
	}
	ps, err := Read(ctx, r.src, from, "")
	if err != nil {
		return nil, err
	}
	e.ps, e.at, e.set = ps, now, true
	return ps, nil
}
