package profile

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// benchDays is a month of profile days of n servers, each day with its histograms filled as a busy server's are.
func benchDays(n, days int) []ledger.ProfileDay {
	var out []ledger.ProfileDay
	for s := range n {
		for d := range days {
			day := ledger.DayOf(t0).AddDate(0, 0, -d)
			p := ledger.ProfileDay{User: fmt.Sprintf("user%04d", s/2), Server: fmt.Sprintf("s%d", s%2), Class: "gpu " + h100, Day: day,
				Kind: string(gpu.KindGPU), Product: h100, MemoryTotalBytes: 80 * gib, HeldGPUs: 1, Scale: 1,
				First: day.Add(time.Hour), Last: day.Add(time.Duration(s%20+2) * time.Hour), HeldS: 3600 * 8, BusyS: 3600 * 3, UnknownS: 60,
				BusySamples: 2160, PeakMemoryBytes: uint64(s%70+1) * gib, Simulated: s%97 == 0,
				MemoryHist: make([]uint32, ledger.MemoryBins), SMHist: make([]uint32, ledger.SMBins)}
			for i := range p.MemoryHist {
				p.MemoryHist[i] = uint32((i*7 + s + d) % 1000)
				p.SMHist[i] = uint32((i*13 + s*3 + d) % 5000)
			}
			out = append(out, p)
		}
	}
	return out
}

func benchStore(b *testing.B, n, days int) *ledger.Store {
	b.Helper()
	st, err := ledger.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if err := st.PutProfiles(context.Background(), benchDays(n, days), ledger.DayOf(t0).AddDate(0, 0, -days)); err != nil {
		b.Fatal(err)
	}
	return st
}

// BenchmarkProfiles reads 30 days of 2,000 servers into one profile each, as the admin route with period=30d
// did: every day decoded and kept, then merged (BenchmarkProfilesMerged: merged while scanning).
func BenchmarkProfiles(b *testing.B) {
	ctx := context.Background()
	st := benchStore(b, 2000, 30)
	from := ledger.DayOf(t0).AddDate(0, 0, -30)
	b.ReportAllocs()
	for b.Loop() {
		days, err := st.Profiles(ctx, from, "")
		if err != nil {
			b.Fatal(err)
		}
		if ps := Profiles(days); len(ps) != 2000 {
			b.Fatalf("%d profiles", len(ps))
		}
	}
}

// BenchmarkProfilesMerged is BenchmarkProfiles's read merged while scanning (Read).
func BenchmarkProfilesMerged(b *testing.B) {
	ctx := context.Background()
	st := benchStore(b, 2000, 30)
	from := ledger.DayOf(t0).AddDate(0, 0, -30)
	b.ReportAllocs()
	for b.Loop() {
		ps, err := Read(ctx, st, from, "")
		if err != nil {
			b.Fatal(err)
		}
		if len(ps) != 2000 {
			b.Fatalf("%d profiles", len(ps))
		}
	}
}
