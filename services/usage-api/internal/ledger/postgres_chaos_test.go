package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// GPUHUB_TEST_POSTGRES_RESTART names a script that restarts the throw-away server of
// scripts/with-postgres.sh (pg_ctl restart -m fast: open sessions are terminated, in-flight transactions
// rolled back) and returns once it accepts connections again.
const postgresRestartEnv = "GPUHUB_TEST_POSTGRES_RESTART"

// TestPostgresRestartDuringWrites (issue 9, chaos): a ledger commits a tick of 50 users every few
// milliseconds while the PostgreSQL server is restarted three times under it. Ticks run on a logical clock
// (one interval per tick, whether or not the tick could be committed), so time keeps passing during the
// outage as it does for the real service. Afterwards the writer must be committing again, the usage rows must
// sum to the checkpoint's running sums (each tick's rows and checkpoint committed together or not at all), and
// every user's GPU-seconds must equal share x (last committed instant - first committed instant): nothing
// lost, nothing counted twice. Tolerance: 1e-9 relative (float64 sums of a few thousand terms). The outages
// stay within MaxGap (set to an hour of logical time) so this test is about the restart, not the gap policy.
func TestPostgresRestartDuringWrites(t *testing.T) {
	url := testPostgresURL()
	if url == "" {
		t.Skip("GPUHUB_TEST_POSTGRES_URL not set: PostgreSQL store tests run with `make test-usage-postgres`")
	}
	restart := os.Getenv(postgresRestartEnv)
	if restart == "" {
		t.Fatalf("%s not set: run through services/usage-api/scripts/with-postgres.sh (make test-usage-postgres)", postgresRestartEnv)
	}
	const (
		users    = 50
		share    = 3.0 / 7
		util     = 0.5
		tick     = time.Second // logical
		pace     = 5 * time.Millisecond
		restarts = 3
	)
	// Start 2 minutes before an hour boundary so the logical clock crosses it (increments split by hour).
	start := time.Date(2026, 11, 23, 9, 58, 0, 0, time.UTC)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s := openChaosPostgres(t, url)
	l, err := New(ctx, s, Options{Interval: tick, MaxGap: time.Hour}, start)
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]Sample, 0, users)
	for i := range users {
		batch = append(batch, Sample{Key: Key{User: fmt.Sprintf("user%02d", i), Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"},
			Allocated: share, Used: share * util, UsedKnown: true})
	}

	// The writer: one Record per logical tick, committed or not.
	var (
		mu                sync.Mutex
		firstOK, lastOK   time.Time
		okTicks, failed   int
		conflicts         int
		sinceRestart      int // ticks committed since the last restart returned
		lastErr           error
		lastTickCommitted bool
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(pace):
			}
			now := start.Add(time.Duration(i) * tick)
			_, err := l.Record(ctx, now, batch)
			mu.Lock()
			lastTickCommitted = err == nil
			if err == nil {
				if firstOK.IsZero() {
					firstOK = now
				}
				lastOK = now
				okTicks++
				sinceRestart++
			} else {
				failed++
				lastErr = err
				if errors.Is(err, ErrConflict) {
					conflicts++
				}
			}
			mu.Unlock()
		}
	}()
	waitTicks := func(n int, what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			mu.Lock()
			got, le := sinceRestart, lastErr
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				close(stop)
				<-done
				t.Fatalf("%s: only %d ticks committed in 60 s; last error: %v", what, got, le)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitTicks(20, "before the first restart")
	for r := range restarts {
		t0 := time.Now()
		out, err := exec.CommandContext(ctx, restart).CombinedOutput()
		if err != nil {
			close(stop)
			<-done
			t.Fatalf("restart %d: %v\n%s", r+1, err, out)
		}
		mu.Lock()
		sinceRestart = 0 // count only ticks committed by the restarted server
		mu.Unlock()
		t.Logf("restart %d: pg_ctl restart -m fast took %s", r+1, time.Since(t0).Round(time.Millisecond))
		waitTicks(20, fmt.Sprintf("after restart %d", r+1))
	}
	close(stop)
	<-done

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d ticks committed, %d failed (%d conflicts) during %d restarts; last error: %v", okTicks, failed, conflicts, restarts, lastErr)
	if failed == 0 {
		t.Errorf("no tick failed during %d restarts: the writer never saw the server go away, so nothing was tested", restarts)
	}
	if !lastTickCommitted {
		t.Errorf("the writer's last tick failed after recovery: %v", lastErr)
	}
	// A fresh connection sees exactly what the writer believes it committed.
	cp := checkConsistent(t, s)
	if !cp.At.Equal(lastOK) {
		t.Errorf("stored checkpoint at %s, the writer's last committed tick at %s", cp.At, lastOK)
	}
	if cp.GapSeconds != 0 {
		t.Errorf("checkpoint gap = %v s, want 0 (every outage was within MaxGap)", cp.GapSeconds)
	}
	elapsed := lastOK.Sub(firstOK).Seconds()
	rows, err := s.Sum(context.Background(), Query{From: start.Add(-time.Hour), To: lastOK.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != users {
		t.Fatalf("%d users in the ledger, want %d", len(rows), users)
	}
	relEq := func(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Abs(want) }
	for _, r := range rows {
		if !relEq(r.Allocated, share*elapsed) || !relEq(r.Used, share*util*elapsed) || r.UsedUnknown != 0 {
			t.Errorf("%s: allocated %.9f used %.9f unknown %.9f GPU-s, want %.9f, %.9f, 0 (%.0f s x %.6f)",
				r.User, r.Allocated, r.Used, r.UsedUnknown, share*elapsed, share*util*elapsed, elapsed, share)
		}
	}
	if want := users * share * elapsed; !relEq(cp.Sums.Allocated, want) {
		t.Errorf("checkpoint sums %.6f allocated GPU-s, want %.6f", cp.Sums.Allocated, want)
	}
}

// openChaosPostgres opens the store on a schema of its own (tests share the server).
func openChaosPostgres(t *testing.T, url string) *Store {
	t.Helper()
	schema := fmt.Sprintf("chaos%d", time.Now().UnixNano())
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(t.Context(), "CREATE SCHEMA "+schema)
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	s, err := OpenPostgres(t.Context(), url+sep+"search_path="+schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
