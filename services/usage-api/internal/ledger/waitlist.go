package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// WaitlistState is gpu-quota's waitlist as it stores it in the ledger's database: the usage API is the one
// writer of that database, so the queue survives a restart of either service. The state is opaque here; the
// version orders the writes (compare-and-swap).
type WaitlistState struct {
	// Version is 0 while nothing is stored, then 1, 2, ... one per write.
	Version int64
	// State is the JSON object last written; nil while nothing is stored.
	State     json.RawMessage
	UpdatedAt time.Time
}

// StaleVersionError is the answer to a write based on a version that is no longer the stored one: another
// writer stored a newer state since it was read.
type StaleVersionError struct {
	Asked, Stored int64
}

func (e *StaleVersionError) Error() string {
	return fmt.Sprintf("the waitlist state is at version %d, not %d: another writer stored it since it was read", e.Stored, e.Asked)
}

// WaitlistState reads the stored waitlist state; Version 0 and a nil State when nothing is stored yet.
func (s *Store) WaitlistState(ctx context.Context) (WaitlistState, error) {
	var st WaitlistState
	var state string
	var updatedNS int64
	err := s.db.QueryRowContext(ctx, `SELECT version, state, updated_at_ns FROM waitlist_state WHERE id = 1`).
		Scan(&st.Version, &state, &updatedNS)
	if errors.Is(err, sql.ErrNoRows) {
		return WaitlistState{}, nil
	}
	if err != nil {
		return WaitlistState{}, fmt.Errorf("read waitlist state: %w", err)
	}
	st.State, st.UpdatedAt = json.RawMessage(state), time.Unix(0, updatedNS).UTC()
	return st, nil
}

// PutWaitlistState stores state as the version after ifVersion, if ifVersion is the stored version (0: nothing
// stored yet), in one transaction; otherwise nothing is written and a *StaleVersionError says which version is
// stored. Of two writers with the same ifVersion exactly one succeeds.
func (s *Store) PutWaitlistState(ctx context.Context, ifVersion int64, state json.RawMessage, now time.Time) (_ WaitlistState, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return WaitlistState{}, fmt.Errorf("begin waitlist transaction: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	now = now.Round(0).UTC()
	var res sql.Result
	if ifVersion == 0 {
		res, err = tx.ExecContext(ctx, s.q(`INSERT INTO waitlist_state (id, version, state, updated_at_ns) VALUES (1, 1, ?, ?)
			ON CONFLICT (id) DO NOTHING`), string(state), now.UnixNano())
	} else {
		// One statement: PostgreSQL re-checks the version of a row another transaction updated meanwhile, and
		// SQLite runs one writing transaction at a time.
		res, err = tx.ExecContext(ctx, s.q(`UPDATE waitlist_state SET version = version + 1, state = ?, updated_at_ns = ?
			WHERE id = 1 AND version = ?`), string(state), now.UnixNano(), ifVersion)
	}
	if err != nil {
		return WaitlistState{}, fmt.Errorf("write waitlist state: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return WaitlistState{}, fmt.Errorf("write waitlist state: %w", err)
	}
	if n != 1 {
		var stored int64
		err = tx.QueryRowContext(ctx, `SELECT version FROM waitlist_state WHERE id = 1`).Scan(&stored)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return WaitlistState{}, fmt.Errorf("read waitlist state version: %w", err)
		}
		err = &StaleVersionError{Asked: ifVersion, Stored: stored}
		return WaitlistState{}, err
	}
	if err = tx.Commit(); err != nil {
		return WaitlistState{}, fmt.Errorf("commit waitlist state: %w", err)
	}
	return WaitlistState{Version: ifVersion + 1, State: state, UpdatedAt: now}, nil
}

// WaitlistState reads the waitlist state from the ledger's database (Store.WaitlistState).
func (l *Ledger) WaitlistState(ctx context.Context) (WaitlistState, error) {
	return l.store.WaitlistState(ctx)
}

// PutWaitlistState writes the waitlist state if ifVersion is the stored version (Store.PutWaitlistState).
func (l *Ledger) PutWaitlistState(ctx context.Context, ifVersion int64, state json.RawMessage, now time.Time) (WaitlistState, error) {
	return l.store.PutWaitlistState(ctx, ifVersion, state, now)
}
