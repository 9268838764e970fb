package yield

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
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

// TestSortFuncBuffer: SortFuncBuffer sorts like slices.SortFunc, one buffer after another sort, merges through the
// buffer it is given when that is long enough (allocating nothing) and through a longer one it keeps otherwise, and
// gives the processor up on a long slice as SortFunc does.
func TestSortFuncBuffer(t *testing.T) {
	tests := map[string]struct {
		n, bufLen  int
		wantKept   bool // the buffer passed in is the one kept
		wantBufLen int  // the kept buffer's length at least
	}{
		"one run, no buffer":        {n: sortRun, wantKept: true},
		"long, no buffer":           {n: 20000, wantBufLen: 20000},
		"long, buffer too short":    {n: 3*sortRun + 7, bufLen: sortRun, wantBufLen: 3*sortRun + 7},
		"long, buffer just long":    {n: 3*sortRun + 7, bufLen: 3*sortRun + 7, wantKept: true, wantBufLen: 3*sortRun + 7},
		"long, buffer longer":       {n: 2*sortRun + 1, bufLen: 8 * sortRun, wantKept: true, wantBufLen: 2*sortRun + 1},
		"two runs, buffer of stale": {n: 2 * sortRun, bufLen: 2 * sortRun, wantKept: true, wantBufLen: 2 * sortRun},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			buf := make([]int, tt.bufLen)
			for i := range buf {
				buf[i] = -rng.Int() // stale elements: none of them may show up in the sorted slice
			}
			passed := buf
			for round := range 2 { // the second sort reuses what the first one kept
				s := make([]int, tt.n)
				for i := range s {
					s[i] = rng.IntN(tt.n/2 + 1)
				}
				want := slices.Clone(s)
				slices.Sort(want)
				f := newFakeEnv()
				p := Pass{env: f.env()}
				calls := 0
				SortFuncBuffer(&p, s, &buf, func(a, b int) int {
					calls++
					if calls%100 == 0 {
						f.t = f.t.Add(10 * time.Microsecond)
					}
					return cmp.Compare(a, b)
				})
				if diff := gocmp.Diff(want, s); diff != "" {
					t.Fatalf("round %d: sorted (-want +got):\n%s", round, diff)
				}
				if tt.n >= 20000 && len(f.gaveUp) == 0 {
					t.Errorf("round %d: never gave the processor up", round)
				}
			}
			kept := len(passed) > 0 && len(buf) > 0 && &buf[0] == &passed[0] || len(passed) == 0 && len(buf) == 0
			if kept != tt.wantKept || len(buf) < tt.wantBufLen {
				t.Errorf("kept the buffer passed in: %v, want %v; buffer of %d, want at least %d", kept, tt.wantKept, len(buf), tt.wantBufLen)
			}
		})
	}
}

// TestSortFuncBufferAllocates: with a buffer long enough, a sort allocates nothing.
func TestSortFuncBufferAllocates(t *testing.T) {
	src := make([]int, 5*sortRun)
	for i := range src {
		src[i] = len(src) - i
	}
	s, buf := make([]int, len(src)), make([]int, len(src))
	if n := testing.AllocsPerRun(10, func() {
		copy(s, src)
		SortFuncBuffer(&Pass{}, s, &buf, cmp.Compare[int])
	}); n != 0 {
		t.Errorf("SortFuncBuffer allocated %v times a sort, want 0", n)
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
	b.Run("yield-buffer", func(b *testing.B) {
		var buf []int
		b.ReportAllocs()
		for b.Loop() {
			copy(s, src)
			SortFuncBuffer(&Pass{}, s, &buf, cmp.Compare[int])
		}
	})
}
