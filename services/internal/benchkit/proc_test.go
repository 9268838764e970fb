package benchkit

import (
	"os"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	// Fields after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
	tests := map[string]struct {
		stat string
		want time.Duration
	}{
		"plain":                    {"4242 (usage-api) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0", 3250 * time.Millisecond},
		"a name with spaces and )": {"7 (a b) c)) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0", 70 * time.Millisecond},
		"no name":                  {"7 R 1 7 7 0 -1 0 0 0 0 0 3 4", 0},
		"cut short":                {"7 (x) R 1 7 7 0 -1 0 0 0 0 0 3", 0},
		"not a number":             {"7 (x) R 1 7 7 0 -1 0 0 0 0 0 x 4 0 0", 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := statCPU([]byte(tc.stat)); got != tc.want {
				t.Errorf("statCPU(%q) = %v, want %v", tc.stat, got, tc.want)
			}
		})
	}
}

// TestProcessCPU reads this process's own CPU time: it grows while the test spins. How fast depends on what
// else the machine runs, so the test spins until it has grown by two of /proc's 10 ms ticks, not for a set time.
func TestProcessCPU(t *testing.T) {
	before := ProcessCPU(os.Getpid())
	x := 0
	deadline := time.Now().Add(20 * time.Second)
	for ProcessCPU(os.Getpid())-before < 20*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("ProcessCPU grew by %v in 20 s of spinning (%d loops)", ProcessCPU(os.Getpid())-before, x)
		}
		for range 100_000 {
			x++
		}
	}
	if got := ProcessCPU(-1); got != 0 {
		t.Errorf("ProcessCPU of no process = %v, want 0", got)
	}
}
