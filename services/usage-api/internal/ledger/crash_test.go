package ledger

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const crashChildEnv = "GPUHUB_LEDGER_CRASH_CHILD"

// TestMain lets the test binary act as the crashing writer when re-executed by TestKill9DuringWrites.
func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		if err := crashChild(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashChild records ticks of 200 users as fast as it can until it is killed. Every tick charges exactly one
// interval, so after k committed ticks (past the first) each user has 5*(k-1) GPU-seconds.
func crashChild(path string) error {
	ctx := context.Background()
	s, err := OpenSQLite(ctx, path)
	if err != nil {
		return err
	}
	start := t0
	if cp, ok, err := s.Checkpoint(ctx); err != nil {
		return err
	} else if ok {
		start = cp.At.Add(interval)
	}
	l, err := New(ctx, s, Options{Interval: interval}, start)
	if err != nil {
		return err
	}
	var batch []Sample
	for i := range 200 {
		batch = append(batch, Sample{Key: Key{User: fmt.Sprintf("user%03d", i), Kind: "gpu", Class: "gpu A100"}, Pod: fmt.Sprintf("uid-%03d", i),
			Allocated: 1, Used: 0.5, UsedKnown: true})
	}
	for i := 0; ; i++ {
		if _, err := l.Record(ctx, start.Add(time.Duration(i)*interval), batch); err != nil {
			return err
		}
		if i == 20 {
			fmt.Println("writing")
		}
	}
}

func TestKill9DuringWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary; skipped with -short")
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	for round := range 3 {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "writing" {
			t.Fatalf("round %d: child did not start writing: %q %v", round, line, err)
		}
		// Let it write a little more, at a different moment each round, then SIGKILL mid-stream.
		time.Sleep(time.Duration(50+round*37) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()

		s, err := OpenSQLite(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		cp := checkConsistent(t, s)
		// Ticks are 5 s apart from t0 and the first one charged nothing: the table must hold exactly
		// 5*(ticks-1) GPU-seconds per user, no more (double count), no less (lost increments).
		wantPerUser := 5 * float64(cp.Ticks-1)
		if got := cp.At.Sub(t0); got != time.Duration(cp.Ticks-1)*interval {
			t.Fatalf("round %d: checkpoint at t0+%v after %d ticks", round, got, cp.Ticks)
		}
		rows, err := s.Sum(context.Background(), Query{From: time.Unix(0, 0), To: time.Unix(1<<40, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if len(cp.Held) != 200 {
			t.Fatalf("round %d: %d pods held at the checkpoint, want 200", round, len(cp.Held))
		}
		if len(rows) != 200 {
			t.Fatalf("round %d: %d users in the ledger, want 200", round, len(rows))
		}
		for _, r := range rows {
			if r.Allocated != wantPerUser || r.Used != wantPerUser/2 {
				t.Fatalf("round %d: %s has %v/%v GPU-s, want %v/%v", round, r.User, r.Allocated, r.Used, wantPerUser, wantPerUser/2)
			}
		}
		t.Logf("round %d: killed after %d committed ticks, consistent", round, cp.Ticks)
		_ = s.Close()
	}
}
