package app

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/profile"
)

// TestTickRecordsProfiles: the ledger's writer records each server's right-size profile at every tick and
// writes it once a minute; a replica that does not write the ledger records nothing.
func TestTickRecordsProfiles(t *testing.T) {
	const interval = time.Second
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		writer   bool
		wantRows int
	}{
		"writer":   {writer: true, wantRows: 1},
		"follower": {writer: false},
	} {
		t.Run(name, func(t *testing.T) {
			r := newTickRig(t, interval, t0, migPod(t0))
			r.s.profiles = profile.NewRecorder(2 * interval)
			r.s.advice = profile.NewReader(r.s.led, saveableEvery)
			r.s.led.writer = func() bool { return tc.writer }
			for i := range 62 {
				r.tick(t, t0.Add(time.Duration(i)*time.Second))
				r.s.bg.Wait() // the writes run off the tick
			}
			days, err := r.led.Profiles(context.Background(), t0, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(days) != tc.wantRows {
				t.Fatalf("%d profile rows, want %d: %+v", len(days), tc.wantRows, days)
			}
			if !tc.writer {
				return
			}
			d := days[0]
			// Written at the first tick and a minute later (tick 60): 61 ticks of one interval, the last one's not
			// yet. The agent lists no process of carol's: idle, utilization known.
			got := ledger.ProfileDay{User: d.User, Class: d.Class, Kind: d.Kind, HeldS: d.HeldS, BusyS: d.BusyS, UnknownS: d.UnknownS, HeldGPUs: d.HeldGPUs}
			want := ledger.ProfileDay{User: "carol", Class: "mig A100-SXM4-40GB 1g.5gb", Kind: "mig", HeldS: 61, HeldGPUs: 1.0 / 7}
			if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("profile (-want +got):\n%s", diff)
			}
		})
	}
}

// TestShutdownFlushesProfiles: a graceful shutdown writes what was observed since the last write (a rolling
// update would lose up to a minute otherwise).
func TestShutdownFlushesProfiles(t *testing.T) {
	const interval = time.Second
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	r := newTickRig(t, interval, t0, migPod(t0))
	r.s.profiles = profile.NewRecorder(2 * interval)
	for i := range 10 {
		r.tick(t, t0.Add(time.Duration(i)*time.Second))
		r.s.bg.Wait()
	}
	r.s.flushOnShutdown()
	days, err := r.led.Profiles(context.Background(), t0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 1 || days[0].HeldS != 10 {
		t.Fatalf("stored %+v, want one day of 10 s held", days)
	}
}
