package benchkit

import (
	"fmt"
	"slices"
	"time"
)

// Median of xs (the upper one of an even count); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// MinMax of xs; 0, 0 for none.
func MinMax(xs []float64) (lo, hi float64) {
	for i, x := range xs {
		if i == 0 || x < lo {
			lo = x
		}
		if i == 0 || x > hi {
			hi = x
		}
	}
	return lo, hi
}

// Ratio is how many times b is a, "12x"; "-" when a is 0.
func Ratio(a, b float64) string {
	if a == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fx", b/a)
}

// US formats d in microseconds, MS in milliseconds.
func US(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d.Nanoseconds())/1e3) }

// MS formats d in milliseconds.
func MS(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Nanoseconds())/1e6) }

// Verdict is a target judged on each run: Met of Runs runs met it. The target is met only if every run met it:
// a median of the runs' values hides the runs that missed.
type Verdict struct{ Met, Runs int }

// PerRun judges runs 0..n-1, ok(i) saying whether run i met the target.
func PerRun(n int, ok func(i int) bool) Verdict {
	v := Verdict{Runs: n}
	for i := range n {
		if ok(i) {
			v.Met++
		}
	}
	return v
}

// AtMost judges each run's value against an upper bound.
func AtMost(values []float64, bound float64) Verdict {
	return PerRun(len(values), func(i int) bool { return values[i] <= bound })
}

// OK is whether every run met the target (and there was one).
func (v Verdict) OK() bool { return v.Runs > 0 && v.Met == v.Runs }

// String is "met (3 of 3 runs)", "NOT met (met in 2 of 3 runs)" or "not measured".
func (v Verdict) String() string {
	switch {
	case v.Runs == 0:
		return "not measured"
	case v.OK():
		return fmt.Sprintf("met (%d of %d runs)", v.Met, v.Runs)
	}
	return fmt.Sprintf("NOT met (met in %d of %d runs)", v.Met, v.Runs)
}
