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
