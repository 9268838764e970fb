package gpu

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Words for people: how much of a GPU a number of GPU-equivalents is, and what units a user holds, in the
// phrases the services' messages use ("3/7 of a GPU", "one MIG 3g.20gb slice on an A100").

// maxDenominator bounds the fractions FormatGPUs writes: every share the vocabulary makes from the GPUs and
// sharing configurations gpuhub knows (7ths, 4ths, 14ths, 28ths) and sums of a few of them.
const maxDenominator = 100

// FormatGPUs writes GPU-equivalents as people read them: a whole number ("2"), a fraction with a small
// denominator ("3/7", "1/4"), a whole number and a fraction ("1 1/2"), else a decimal with at most two places
// ("0.43"). +Inf is "unlimited".
func FormatGPUs(x float64) string {
	switch {
	case math.IsNaN(x):
		return "unknown"
	case math.IsInf(x, 1):
		return "unlimited"
	case math.IsInf(x, -1):
		return "-unlimited"
	case x < 0:
		return "-" + FormatGPUs(-x)
	}
	if n, d, ok := fraction(x); ok {
		whole, rest := n/d, n%d
		switch {
		case rest == 0:
			return strconv.FormatInt(whole, 10)
		case whole == 0:
			return fmt.Sprintf("%d/%d", rest, d)
		default:
			return fmt.Sprintf("%d %d/%d", whole, rest, d)
		}
	}
	return strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64)
}

// fraction finds n/d = x with the smallest denominator up to maxDenominator, within floating-point rounding
// (a sum such as 3/7 + 3/7 is not exactly 6/7 in float64).
func fraction(x float64) (n, d int64, ok bool) {
	if x > 1<<40 {
		return 0, 0, false
	}
	tol := 1e-9 * math.Max(1, x)
	for d = 1; d <= maxDenominator; d++ {
		n = int64(math.Round(x * float64(d)))
		if math.Abs(x-float64(n)/float64(d)) <= tol {
			return n, d, true
		}
	}
	return 0, 0, false
}

// Amount is a quantity of GPU-equivalents in words: "3/7 of a GPU", "1 GPU", "1 1/2 GPUs", "2 GPUs",
// "no GPU", "unlimited GPUs".
func Amount(x float64) string {
	s := FormatGPUs(x)
	switch {
	case s == "0":
		return "no GPU"
	case s == "1":
		return "1 GPU"
	case x > 0 && x < 1:
		return s + " of a GPU"
	}
	return s + " GPUs"
}

// Plural names the units of a kind in general: "whole GPUs", "MIG slices", "time-sliced GPU shares", "MPS GPU
// shares", "time-sliced shares of MIG slices" (as in "students may not use whole GPUs").
func (k Kind) Plural() string {
	switch k {
	case KindGPU:
		return "whole GPUs"
	case KindMIG:
		return "MIG slices"
	case KindShared:
		return "time-sliced GPU shares"
	case KindMPS:
		return "MPS GPU shares"
	case KindSharedMIG:
		return "time-sliced shares of MIG slices"
	}
	return string(k) + " GPUs"
}

// KindList names every kind in the order of Kinds, as policy errors list them: "gpu, mig, shared, mps,
// mig-shared".
func KindList() string {
	kinds := Kinds()
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// Units says what an allocation holds in words, with its count: "one whole H100", "two MIG 3g.20gb slices on
// an A100", "one time-sliced share of a T4", "one MPS share of an A100", "one time-sliced share of a MIG
// 1g.5gb slice on an A100".
func (a Allocation) Units() string {
	family := familyName(ShortProduct(a.Product))
	count := a.Count
	if count < 1 {
		count = 1
	}
	many := count > 1
	var s string
	switch a.Kind {
	case KindMIG:
		s = "MIG " + a.Profile + " slice" + plural(many) + on(family)
	case KindSharedMIG:
		s = "time-sliced share" + plural(many) + " of a MIG " + a.Profile + " slice" + on(family)
	case KindShared:
		s = "time-sliced share" + plural(many) + " of " + modelOrGPU(family)
	case KindMPS:
		s = "MPS share" + plural(many) + " of " + modelOrGPU(family)
	default:
		if family == "" {
			family = "GPU"
		}
		s = "whole " + family + plural(many)
	}
	return CountWord(count) + " " + s
}

// JoinUnits says what several allocations hold: "one whole H100 and one MIG 3g.20gb slice on an A100".
// Allocations that read the same are counted together ("two whole H100s").
func JoinUnits(as []Allocation) string {
	type group struct {
		a     Allocation
		one   string // a.Units() of one
		count int64
	}
	var buf [4]group // a server asks for one to three kinds of unit: no map, nothing on the heap
	groups := buf[:0]
	for _, a := range as {
		one := a
		one.Count = 1
		key := one.Units()
		i := slices.IndexFunc(groups, func(g group) bool { return g.one == key })
		if i < 0 {
			i = len(groups)
			groups = append(groups, group{a: one, one: key})
		}
		groups[i].count += max(a.Count, 1)
	}
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		if g.count == 1 {
			parts = append(parts, g.one)
			continue
		}
		g.a.Count = g.count
		parts = append(parts, g.a.Units())
	}
	switch len(parts) {
	case 0:
		return "no GPU"
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

func plural(many bool) string {
	if many {
		return "s"
	}
	return ""
}

func on(family string) string {
	if family == "" {
		return ""
	}
	return " on " + WithArticle(family)
}

func modelOrGPU(family string) string {
	if family == "" {
		return "a GPU"
	}
	return WithArticle(family)
}

var countWords = [...]string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}

// CountWord writes a small count as a word ("no", "one", ... "ten"), a larger one in digits.
func CountWord(n int64) string {
	if n >= 0 && n < int64(len(countWords)) {
		return countWords[n]
	}
	return strconv.FormatInt(n, 10)
}

// Capitalize upper-cases the first letter of a sentence ("one H100 is free" -> "One H100 is free").
func Capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
