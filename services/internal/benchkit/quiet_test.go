package benchkit

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseCPUTimes(t *testing.T) {
	got, err := parseCPUTimes("cpu  100 5 50 800 40 1 2 2 7 0\ncpu0 50 2 25 400 20 0 1 1 3 0\nintr 1 2\n")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cpuTimes{idle: 840, total: 1000}, got, cmp.AllowUnexported(cpuTimes{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := parseCPUTimes("intr 1 2\n"); err == nil {
		t.Error("no cpu line: want an error")
	}
	if b := busyFraction(cpuTimes{idle: 840, total: 1000}, cpuTimes{idle: 1020, total: 1200}); b < 0.0999 || b > 0.1001 {
		t.Errorf("busy %v, want 0.1", b)
	}
}

func TestWaitQuietEnds(t *testing.T) {
	// Busy or not, it returns by its timeout.
	start := time.Now()
	WaitQuiet(context.Background(), 0, 50*time.Millisecond, 200*time.Millisecond)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("waited %v, want about 200 ms at most", d)
	}
}
