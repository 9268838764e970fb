package app

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuhub/gpuhub/services/internal/logging"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

type nopLedger struct{ err error }

func (l nopLedger) Record(context.Context, time.Time, []ledger.Sample) (ledger.Result, error) {
	return ledger.Result{}, l.err
}
func (l nopLedger) Follow(context.Context, time.Time, []ledger.Sample) error { return l.err }
func (nopLedger) UserWindows(string) ledger.Windows                          { return ledger.Windows{} }
func (nopLedger) Hours(context.Context, ledger.Query) ([]ledger.Row, error) {
	return nil, nil
}
func (nopLedger) Breakdown(context.Context, ledger.Query) ([]ledger.Usage, error) {
	return nil, nil
}
func (nopLedger) Hourly(context.Context, ledger.Query) ([]ledger.HourTotals, error) {
	return nil, nil
}
func (nopLedger) Rolling(context.Context, []time.Duration, time.Time) (map[time.Duration]map[string]map[string]float64, error) {
	return nil, nil
}
func (nopLedger) Decayed(context.Context, time.Duration, time.Duration, time.Time) (map[string]map[string]float64, error) {
	return nil, nil
}
func (nopLedger) WaitlistState(context.Context) (ledger.WaitlistState, error) {
	return ledger.WaitlistState{}, nil
}
func (nopLedger) PutWaitlistState(context.Context, int64, json.RawMessage, time.Time) (ledger.WaitlistState, error) {
	return ledger.WaitlistState{}, nil
}
func (nopLedger) PutProfiles(context.Context, []ledger.ProfileDay, time.Time) error { return nil }
func (nopLedger) Profiles(context.Context, time.Time, string) ([]ledger.ProfileDay, error) {
	return nil, nil
}
func (nopLedger) ScanProfiles(context.Context, time.Time, string, func(*ledger.ProfileDay) error) error {
	return nil
}

// TestLedgerConnRetries: failed opens are counted, explained in the readiness detail and in words for users,
// retried with a backoff that stays within its bounds, until one works.
func TestLedgerConnRetries(t *testing.T) {
	at := time.Date(2026, 11, 22, 14, 2, 11, 0, time.UTC)
	var opens []time.Time
	c, err := newLedgerConn(Options{
		Registry: prometheus.NewRegistry(), Logger: logging.Discard(), Now: func() time.Time { return at }, Interval: 5 * time.Second,
		LedgerRetryMin: 4 * time.Millisecond, LedgerRetryMax: 16 * time.Millisecond,
		OpenLedger: func(context.Context, time.Time) (Ledger, io.Closer, error) {
			opens = append(opens, time.Now())
			if len(opens) <= 5 {
				return nil, nil, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
			}
			return nopLedger{}, io.NopCloser(nil), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Available(); err == nil || err.Error() != "the service is connecting to the ledger database" {
		t.Errorf("before the first attempt: Available = %v", err)
	}
	if _, err := c.record(t.Context(), at, nil); !errors.Is(err, errNotConnected) {
		t.Errorf("record before connecting: %v, want errNotConnected", err)
	}
	c.connect(t.Context())
	if len(opens) != 6 {
		t.Fatalf("%d opens, want 6", len(opens))
	}
	for i := 1; i < len(opens); i++ {
		// Waits are jittered in [backoff/2, backoff], backoff 4, 8, 16, 16, 16 ms: never above the cap (plus
		// scheduling slack).
		if d := opens[i].Sub(opens[i-1]); d < 2*time.Millisecond || d > 16*time.Millisecond+200*time.Millisecond {
			t.Errorf("wait before open %d: %v", i+1, d)
		}
	}
	if got := testutil.ToFloat64(c.connectErrors); got != 5 {
		t.Errorf("connect errors = %v, want 5", got)
	}
	if got := testutil.ToFloat64(c.up); got != 1 {
		t.Errorf("ledger_up = %v after connecting, want 1", got)
	}
	if err := c.Available(); err != nil {
		t.Errorf("Available once connected: %v", err)
	}

	// A commit that fails: unavailable, with when and how often it is retried; the next good commit clears it.
	c.led.Store(&ledgerBox{nopLedger{err: errors.New("driver: bad connection")}})
	if _, err := c.record(t.Context(), at, nil); err == nil {
		t.Fatal("record: nil error from a failing ledger")
	}
	if err := c.Available(); err == nil || err.Error() != "the ledger database stopped answering at 14:02:11 UTC (retrying every 5 s)" {
		t.Errorf("Available while commits fail: %v", err)
	}
	if err := c.check(t.Context()); err == nil || !strings.Contains(err.Error(), "ledger commits failing since 2026-11-22T14:02:11Z: driver: bad connection") {
		t.Errorf("readiness detail while commits fail: %v", err)
	}
	if got := testutil.ToFloat64(c.up); got != 0 {
		t.Errorf("ledger_up = %v while commits fail, want 0", got)
	}
	c.led.Store(&ledgerBox{nopLedger{}})
	if _, err := c.record(t.Context(), at, nil); err != nil || c.Available() != nil || c.check(t.Context()) != nil {
		t.Errorf("after a good commit: record %v, Available %v, check %v", err, c.Available(), c.check(t.Context()))
	}
}

// TestLedgerConnNotConnectedDetail: the readiness detail names the attempts and the last error.
func TestLedgerConnNotConnectedDetail(t *testing.T) {
	at := time.Date(2026, 11, 22, 14, 2, 11, 0, time.UTC)
	c, err := newLedgerConn(Options{Registry: prometheus.NewRegistry(), Logger: logging.Discard(), Now: func() time.Time { return at },
		LedgerRetryMin: time.Hour, LedgerRetryMax: time.Hour,
		OpenLedger: func(context.Context, time.Time) (Ledger, io.Closer, error) {
			return nil, nil, errors.New("unable to open database file")
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { c.connect(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(c.connectErrors) < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	want := "ledger database not connected since 2026-11-22T14:02:11Z (failed attempts: 1, retrying every 3600 s): unable to open database file"
	if err := c.check(t.Context()); err == nil || err.Error() != want {
		t.Errorf("check = %v, want %q", err, want)
	}
	if err := c.Available(); err == nil || err.Error() != "the ledger database cannot be reached (retrying every 3600 s)" {
		t.Errorf("Available = %v", err)
	}
}
