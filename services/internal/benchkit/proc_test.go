package benchkit

import (
	"os"
	"testing"
	"time"
)

func TestProcessCPU(t *testing.T) {
	before := ProcessCPU(os.Getpid())
	x := 0
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
		x++
	}
	after := ProcessCPU(os.Getpid())
	// /proc counts in ticks of 10 ms: 100 ms of spinning shows as 50 ms at least, whatever else runs.
	if after-before < 50*time.Millisecond {
		t.Errorf("ProcessCPU grew by %v over 100 ms of spinning (%d loops)", after-before, x)
	}
	if got := ProcessCPU(-1); got != 0 {
		t.Errorf("ProcessCPU of no process = %v, want 0", got)
	}
}
