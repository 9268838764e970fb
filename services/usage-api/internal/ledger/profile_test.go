package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestProfiles: right-size profile days are written, replaced, read back by another handle (a restart), filtered
// by user and day, and days before the retention are deleted in the same transaction.
func TestProfiles(t *testing.T) {
	ctx := context.Background()
	open := testDatabase(t)
	s := open()
	day := DayOf(t0)
	hist := func(at ...int) []uint32 {
		h := make([]uint32, SMBins)
		for _, i := range at {
			h[i]++
		}
		return h
	}
	alice := ProfileDay{User: "alice", Server: "", Class: "gpu H100-80GB-HBM3", Day: day, Kind: "gpu", Product: "H100-80GB-HBM3",
		MemoryTotalBytes: 81559 << 20, HeldGPUs: 1, Scale: 1, First: t0, Last: t0.Add(time.Hour),
		HeldS: 3600, BusyS: 1200, UnknownS: 5, ContendedS: 60, BusySamples: 240, PeakMemoryBytes: 4 << 30, Simulated: true,
		MemoryHist: hist(5, 5, 100), SMHist: hist(0, 10, 100)}
	old := alice
	old.Day, old.First, old.Last = day.AddDate(0, 0, -31), t0.AddDate(0, 0, -31), t0.AddDate(0, 0, -31).Add(time.Minute)
	bob := alice
	bob.User, bob.Server, bob.Class, bob.Simulated, bob.SMHist = "bob", "big", "mig H100-80GB-HBM3 1g.10gb", false, hist()
	if err := s.PutProfiles(ctx, []ProfileDay{old, alice, bob}, day.AddDate(0, 0, -40)); err != nil {
		t.Fatal(err)
	}
	// Replaced: the same key written again holds the new numbers.
	alice.BusyS, alice.BusySamples, alice.Last = 1800, 360, t0.Add(2*time.Hour)
	if err := s.PutProfiles(ctx, []ProfileDay{alice}, day.AddDate(0, 0, -30)); err != nil {
		t.Fatal(err)
	}
	got, err := open().Profiles(ctx, day.AddDate(0, 0, -60), "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ProfileDay{alice, bob}, got); diff != "" {
		t.Errorf("all users, the 31-day-old day gone (-want +got):\n%s", diff)
	}
	got, err = s.Profiles(ctx, t0, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ProfileDay{bob}, got); diff != "" {
		t.Errorf("bob (-want +got):\n%s", diff)
	}
	got, err = s.Profiles(ctx, day.AddDate(0, 0, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("from tomorrow: %d days, want none", len(got))
	}
}

func TestHistEncoding(t *testing.T) {
	for name, h := range map[string][]uint32{
		"empty":  make([]uint32, SMBins),
		"ends":   append(append([]uint32{7}, make([]uint32, SMBins-2)...), 4294967295),
		"middle": append(append(make([]uint32, 50), 3), make([]uint32, SMBins-51)...),
	} {
		got := make([]uint32, SMBins)
		got[3] = 9 // what the buffer held before: cleared
		if err := decodeHist([]byte(encodeHist(h)), got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(h, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	for _, bad := range []string{"1,2,3", "1,,2", "1,x", "4294967296", "1,"} {
		if err := decodeHist([]byte(bad), make([]uint32, 2)); err == nil {
			t.Errorf("%q decoded into two bins", bad)
		}
	}
}
