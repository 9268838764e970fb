package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// callRecorder keeps every call duration of a bench run.
type callRecorder struct {
	mu    sync.Mutex
	calls map[string][]time.Duration
}

func (r *callRecorder) add(call string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string][]time.Duration{}
	}
	r.calls[call] = append(r.calls[call], d)
}

// bench takes o.Bench samples Interval apart, then writes the last snapshot
// and a per-call cost table (benchmarks.md B6) to o.Out.
func bench(ctx context.Context, a *Agent, o Options, rec *callRecorder) error {
	var sampleDur []time.Duration
	ru0 := rusage()
	wall0 := time.Now()
	for i := range o.Bench {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(o.Interval):
			}
		}
		if err := a.SampleOnce(ctx); err != nil {
			return fmt.Errorf("sample %d: %w", i+1, err)
		}
		sampleDur = append(sampleDur, a.state().duration)
	}
	wall := time.Since(wall0)
	ru1 := rusage()

	enc := json.NewEncoder(o.Out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(a.Snapshot()); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	tw := tabwriter.NewWriter(o.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "call\tcount\tmean µs\tp50 µs\tp99 µs\tmax µs\t\n")
	rec.mu.Lock()
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range rec.calls {
			if !yield(k) {
				return
			}
		}
	}) {
		writeRow(tw, name, rec.calls[name])
	}
	rec.mu.Unlock()
	writeRow(tw, "(whole sample)", sampleDur)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	cpu := (ru1.cpu - ru0.cpu).Seconds()
	_, err := fmt.Fprintf(o.Out, "samples %d over %s: agent CPU %.3fs (%.3f%% of one core), max RSS %d KiB; "+
		"last sample: %d GPU processes in pods, %d in no pod\n",
		o.Bench, wall.Round(time.Millisecond), cpu, 100*cpu/wall.Seconds(), ru1.maxRSSKiB, attributed(a.Snapshot()), a.state().unattributed)
	if err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

func writeRow(w io.Writer, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	q := func(p float64) time.Duration { return s[min(int(p*float64(len(s))), len(s)-1)] }
	fmt.Fprintf(w, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t\n", name, len(s), us(sum/time.Duration(len(s))), us(q(0.5)), us(q(0.99)), us(s[len(s)-1]))
}

type usage struct {
	cpu       time.Duration
	maxRSSKiB int64
}

func rusage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	return usage{
		cpu:       time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		maxRSSKiB: ru.Maxrss,
	}
}

func attributed(s *snapshot.Snapshot) int {
	n := 0
	if s != nil {
		for _, p := range s.Pods {
			n += len(p.Processes)
		}
	}
	return n
}
