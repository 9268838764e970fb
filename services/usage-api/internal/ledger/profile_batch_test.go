package ledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// manyDays are n servers' days, each its own row.
func manyDays(n int, day time.Time) []ProfileDay {
	out := make([]ProfileDay, n)
	for i := range out {
		out[i] = ProfileDay{User: fmt.Sprintf("user%05d", i), Server: "", Class: "gpu H100-80GB-HBM3", Day: day, Kind: "gpu",
			Product: "H100-80GB-HBM3", MemoryTotalBytes: 80 << 30, HeldGPUs: 1, Scale: 1, First: day.Add(time.Hour), Last: day.Add(2 * time.Hour),
			HeldS: float64(i), BusyS: 1, BusySamples: int64(i), PeakMemoryBytes: uint64(i) << 20,
			MemoryHist: make([]uint32, MemoryBins), SMHist: make([]uint32, SMBins)}
		out[i].SMHist[i%SMBins] = uint32(i)
	}
	return out
}

// TestPutProfilesMany: more days than one statement writes are all written and replaced (SQLite, and PostgreSQL
// under with-postgres.sh).
func TestPutProfilesMany(t *testing.T) {
	ctx := context.Background()
	s := testDatabase(t)()
	day := DayOf(t0)
	days := manyDays(2*profileBatch+1, day)
	if err := s.PutProfiles(ctx, days, day.AddDate(0, 0, -30)); err != nil {
		t.Fatal(err)
	}
	days[profileBatch].BusyS = 7 // in the second statement
	if err := s.PutProfiles(ctx, days, day.AddDate(0, 0, -30)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Profiles(ctx, day, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(days) {
		t.Fatalf("%d rows, want %d", len(got), len(days))
	}
	for i, d := range got {
		if d.User != days[i].User || d.HeldS != days[i].HeldS || d.BusyS != days[i].BusyS || d.SMHist[i%SMBins] != uint32(i) {
			t.Fatalf("row %d: %+v, want %+v", i, d, days[i])
		}
	}
}

// TestPutProfilesRoundTrips: 2,000 servers are written in a few statements, not one each (on PostgreSQL each
// statement is a round trip, and the writes ran inside the tick).
func TestPutProfilesRoundTrips(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	drv := s.db.Driver()
	_ = s.db.Close()
	c := &countingConnector{drv: drv, dsn: "file:" + path + "?_pragma=busy_timeout(10000)&_txlock=immediate"}
	s.db = sql.OpenDB(c)
	t.Cleanup(func() { _ = s.db.Close() })
	day := DayOf(t0)
	if err := s.PutProfiles(ctx, manyDays(2000, day), day.AddDate(0, 0, -30)); err != nil {
		t.Fatal(err)
	}
	// 2,000 / profileBatch upserts and the retention's delete.
	if n, want := c.execs.Load(), int32(2000/profileBatch+1); n != want {
		t.Errorf("%d statements for 2,000 days, want %d", n, want)
	}
}

type countingConnector struct {
	drv   driver.Driver
	dsn   string
	execs atomic.Int32
}

func (c *countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

func (c *countingConnector) Driver() driver.Driver { return c.drv }

type countingConn struct {
	driver.Conn
	c *countingConnector
}

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.c.execs.Add(1)
	if e, ok := c.Conn.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return nil, errors.New("no BeginTx")
}
