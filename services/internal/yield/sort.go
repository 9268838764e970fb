package yield

import "slices"

// sortRun is how many elements SortFunc sorts at once: a few hundred microseconds of comparisons of strings.
const sortRun = 1024

// mergeStep is how many elements a merge moves between two Items.
const mergeStep = 256

// SortFunc sorts s by cmp, as slices.SortFunc does (not stable), calling p.Item as it goes: runs of a thousand
// elements are sorted one after another, then merged in pairs. slices.SortFunc of 20,000 usage increments takes
// about 10 ms, which a request arriving meanwhile would wait for on one processor. It allocates a buffer as long
// as s when s is longer than one run.
func SortFunc[S ~[]E, E any](p *Pass, s S, cmp func(a, b E) int) {
	sortFunc(p, s, nil, cmp)
}

// SortFuncBuffer is SortFunc merging through *buf, which the caller keeps from one sort to the next: a pass that
// sorts as many elements every few seconds (the ledger's tick) then allocates nothing once *buf is long enough.
// A *buf shorter than s is replaced by a longer one. It is left holding copies of some of s's elements.
func SortFuncBuffer[S ~[]E, E any](p *Pass, s S, buf *S, cmp func(a, b E) int) {
	*buf = sortFunc(p, s, *buf, cmp)
}

// sortFunc is SortFunc merging through buf, or a new buffer when buf is shorter than s; it returns the buffer.
func sortFunc[S ~[]E, E any](p *Pass, s S, buf S, cmp func(a, b E) int) S {
	n := len(s)
	if n <= sortRun {
		slices.SortFunc(s, cmp)
		return buf
	}
	for lo := 0; lo < n; lo += sortRun {
		slices.SortFunc(s[lo:min(lo+sortRun, n)], cmp)
		p.Item()
	}
	if cap(buf) < n {
		buf = make(S, n)
	}
	buf = buf[:n]
	src, dst := s, buf
	for width := sortRun; width < n; width *= 2 {
		for lo := 0; lo < n; lo += 2 * width {
			mid, hi := min(lo+width, n), min(lo+2*width, n)
			merge(p, dst[lo:hi], src[lo:mid], src[mid:hi], cmp)
		}
		src, dst = dst, src
	}
	if &src[0] != &s[0] {
		copy(s, src)
	}
	return buf
}

// merge merges the sorted a and b into out (len(a)+len(b) long), a's element first of two equal ones.
func merge[S ~[]E, E any](p *Pass, out, a, b S, cmp func(a, b E) int) {
	i, j := 0, 0
	for k := 0; k < len(out); p.Item() {
		for end := min(k+mergeStep, len(out)); k < end; k++ {
			if j == len(b) || i < len(a) && cmp(b[j], a[i]) >= 0 {
				out[k] = a[i]
				i++
			} else {
				out[k] = b[j]
				j++
			}
		}
	}
}
