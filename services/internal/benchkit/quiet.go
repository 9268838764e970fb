package benchkit

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"
)

// WaitQuiet waits until the machine's CPUs, all together, were at most maxBusy (0 to 1) busy over one window,
// or until timeout; it returns how long it waited and whether it got quiet. What a run leaves behind (an API
// server collecting the garbage of the anchor's 10,000-pod LISTs, answers still being written) would otherwise
// land on the next run's measurement. Without /proc/stat it returns at once, quiet.
func WaitQuiet(ctx context.Context, maxBusy float64, window, timeout time.Duration) (time.Duration, bool) {
	start := time.Now()
	prev, err := readCPUTimes()
	if err != nil {
		return 0, true
	}
	for time.Since(start) < timeout {
		select {
		case <-ctx.Done():
			return time.Since(start), false
		case <-time.After(window):
		}
		cur, err := readCPUTimes()
		if err != nil {
			return time.Since(start), true
		}
		if busyFraction(prev, cur) <= maxBusy {
			return time.Since(start), true
		}
		prev = cur
	}
	return time.Since(start), false
}

// Settle waits, up to 20 s, until the machine's CPUs were at most 10 % busy over a second (see WaitQuiet): the
// control plane idle again, the systems under test waiting for load.
func Settle(ctx context.Context) {
	WaitQuiet(ctx, 0.10, time.Second, 20*time.Second)
}

// cpuTimes are the aggregate CPU line of /proc/stat, in clock ticks.
type cpuTimes struct{ idle, total uint64 }

func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPUTimes(string(b))
}

// parseCPUTimes reads the "cpu" line: user nice system idle iowait irq softirq steal (guest time is already in
// user); idle is idle + iowait.
func parseCPUTimes(stat string) (cpuTimes, error) {
	for line := range strings.SplitSeq(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "cpu" {
			continue
		}
		var t cpuTimes
		for i, s := range f[1:min(len(f), 9)] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return cpuTimes{}, err
			}
			t.total += v
			if i == 3 || i == 4 {
				t.idle += v
			}
		}
		return t, nil
	}
	return cpuTimes{}, errors.New("/proc/stat has no cpu line")
}

// busyFraction is the share of CPU time not idle between two readings.
func busyFraction(a, b cpuTimes) float64 {
	if b.total <= a.total {
		return 0
	}
	return 1 - float64(b.idle-a.idle)/float64(b.total-a.total)
}
