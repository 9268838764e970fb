package yield

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSortFunc: SortFunc sorts like slices.SortFunc at every length around its runs' boundaries, and gives the
// processor up as it goes on a long slice.
func TestSortFunc(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, sortRun - 1, sortRun, sortRun + 1, 2 * sortRun, 3*sortRun + 7, 8 * sortRun, 20000} {
		s := make([]int, n)
		for i := range s {
			s[i] = rng.IntN(n/2 + 1) // duplicates too
		}
		want := slices.Clone(s)
		slices.Sort(want)
		f := newFakeEnv()
		p := Pass{env: f.env()}
		calls := 0
		SortFunc(&p, s, func(a, b int) int {
			calls++
			if calls%100 == 0 {
				f.t = f.t.Add(10 * time.Microsecond) // comparisons take time
			}
			return cmp.Compare(a, b)
		})
		if !slices.Equal(s, want) {
			t.Fatalf("n=%d: SortFunc did not sort", n)
		}
		if n == 20000 && len(f.gaveUp) == 0 {
			t.Errorf("n=%d: SortFunc never gave the processor up", n)
		}
	}
}

// TestSortFuncMergeOrder: of two equal elements, a merge puts the first run's first.
func TestSortFuncMergeOrder(t *testing.T) {
	type kv struct{ k, v int }
	a := []kv{{1, 0}, {2, 0}, {2, 1}}
	b := []kv{{1, 1}, {2, 2}, {3, 0}}
	out := make([]kv, 6)
	merge(&Pass{}, out, a, b, func(x, y kv) int { return cmp.Compare(x.k, y.k) })
	want := []kv{{1, 0}, {1, 1}, {2, 0}, {2, 1}, {2, 2}, {3, 0}}
	if !slices.Equal(out, want) {
		t.Errorf("merge = %v, want %v", out, want)
	}
}

func BenchmarkSortFunc(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]int, 20000)
	for i := range src {
		src[i] = rng.Int()
	}
	s := make([]int, len(src))
	b.Run("slices", func(b *testing.B) {
		for b.Loop() {
			copy(s, src)
			slices.SortFunc(s, cmp.Compare[int])
		}
	})
	b.Run("yield", func(b *testing.B) {
		for b.Loop() {
			copy(s, src)
			SortFunc(&Pass{}, s, cmp.Compare[int])
		}
	})
}
