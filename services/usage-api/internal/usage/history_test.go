package usage

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

// TestSampleSize: a sample is 10 bytes (an hour at 5 s is 7.2 KB per user holding GPUs; B5).
func TestSampleSize(t *testing.T) {
	if got := unsafe.Sizeof(sample{}); got != 10 {
		t.Errorf("sample is %d bytes, want 10", got)
	}
}

// TestHistoryGapsAndJSON: ticks a user missed between two of theirs are absent (no point), the points after the
// gap keep their own times, and AppendUserJSON writes exactly what User's points marshal to, with and without
// since, for users with and without gaps, a user back after more than a window away, and an unknown user.
func TestHistoryGapsAndJSON(t *testing.T) {
	h := NewHistory(time.Minute, 5*time.Second) // 12 slots
	tick := func(i int) time.Time { return now.Add(time.Duration(i) * 5 * time.Second) }
	at := map[string]func(i int) bool{
		"steady":   func(int) bool { return true },
		"gappy":    func(i int) bool { return i%3 == 0 },
		"returner": func(i int) bool { return i < 5 || i > 22 },
	}
	for i := range 30 {
		v := &View{SampledAt: tick(i), Users: map[string]*User{}}
		for name, on := range at {
			if on(i) {
				v.Users[name] = &User{Name: name, Share: Share{AllocatedGPUs: float64(i%4) / 7, UsedGPUs: f(float64(i%4) / 14)},
					SMUtilPercent: f(50)}
			}
		}
		h.Add(v)
	}
	times := func(ps Points) []time.Time {
		var out []time.Time
		for _, p := range ps {
			out = append(out, p.T)
		}
		return out
	}
	want := map[string][]time.Time{ // the window holds ticks 18..29
		"steady":   {tick(18), tick(19), tick(20), tick(21), tick(22), tick(23), tick(24), tick(25), tick(26), tick(27), tick(28), tick(29)},
		"gappy":    {tick(18), tick(21), tick(24), tick(27)},
		"returner": {tick(23), tick(24), tick(25), tick(26), tick(27), tick(28), tick(29)},
	}
	for name, w := range want {
		if diff := cmp.Diff(w, times(h.User(name, time.Time{}))); diff != "" {
			t.Errorf("%s's points (-want +got):\n%s", name, diff)
		}
	}
	for _, name := range []string{"steady", "gappy", "returner", "nobody"} {
		for _, since := range []time.Time{{}, tick(20), tick(29)} {
			ps := h.User(name, since)
			wantJSON, _ := ps.MarshalJSON()
			got := h.AppendUserJSON([]byte("x"), name, since)
			if diff := cmp.Diff("x"+string(wantJSON), string(got)); diff != "" {
				t.Errorf("%s since %v: AppendUserJSON (-Points.MarshalJSON +got):\n%s", name, since, diff)
			}
		}
	}
	if got := h.User("gappy", time.Time{})[1]; got.AllocatedGPUs != float64(float32(21%4)/7) || !got.UsedKnown {
		t.Errorf("gappy at tick 21 = %+v, want allocated %v", got, float32(21%4)/7)
	}
}

// TestAppendUserJSONAllocatesNoPoints: encoding an hour allocates a few objects, never one per point (720 Points
// would be ~63 KB): the copies of the visible samples come from a pool (which -race empties at random, so the
// count is bounded, not compared with a shorter history's).
func TestAppendUserJSONAllocatesNoPoints(t *testing.T) {
	h := NewHistory(time.Hour, 5*time.Second)
	for i := range 800 {
		v := &View{SampledAt: now.Add(time.Duration(i) * 5 * time.Second), Users: map[string]*User{
			"full": {Name: "full", Share: Share{AllocatedGPUs: 1, UsedGPUs: f(float64(i%3) / 2)}, SMUtilPercent: f(float64(i%3) * 50)}}}
		if i >= 798 {
			v.Users["two"] = &User{Name: "two", Share: Share{AllocatedGPUs: 1, UsedGPUs: f(0.5)}, SMUtilPercent: f(50)}
		}
		h.Add(v)
	}
	buf := make([]byte, 0, 256<<10)
	full := testing.AllocsPerRun(20, func() { buf = h.AppendUserJSON(buf[:0], "full", time.Time{}) })
	two := testing.AllocsPerRun(20, func() { buf = h.AppendUserJSON(buf[:0], "two", time.Time{}) })
	if full > 10 {
		t.Errorf("AppendUserJSON: %.0f allocations for 720 points (%.0f for 2), want at most 10", full, two)
	}
	if n := len(h.User("full", time.Time{})); n != 720 {
		t.Errorf("%d points, want 720", n)
	}
	want, _ := h.User("full", time.Time{}).MarshalJSON()
	if got := h.AppendUserJSON(nil, "full", time.Time{}); string(got) != string(want) {
		t.Error("AppendUserJSON differs from the points' JSON for a user whose samples change every tick")
	}
}

// TestHistoryOutsideTheHeap: full rings live in mapped memory (the collector neither scans them nor doubles
// them), and the buffers of users the history forgets go to the next users instead of new mappings.
func TestHistoryOutsideTheHeap(t *testing.T) {
	const users = 500
	h := NewHistory(time.Hour, 5*time.Second) // 720 slots
	// Each user's own allocation, so that two rings sharing a buffer would show another user's numbers.
	alloc := func(prefix string, i int) float64 { return float64(int(prefix[0])*1000 + i) }
	fill := func(prefix string, from int) {
		v := &View{Users: map[string]*User{}}
		for i := range users {
			name := fmt.Sprintf("%s%03d", prefix, i)
			v.Users[name] = &User{Name: name, Share: Share{AllocatedGPUs: alloc(prefix, i), UsedGPUs: f(0.5)}, SMUtilPercent: f(50)}
		}
		for i := range 720 {
			v.SampledAt = now.Add(time.Duration(from+i) * 5 * time.Second)
			h.Add(v)
		}
	}
	before := liveHeap()
	fill("a", 0)
	heapGrew := int64(liveHeap()) - int64(before)
	mapped := h.MappedBytes()
	if want := int64(users * 720 * 10); mapped < want {
		t.Errorf("mapped %d bytes, want at least the %d of %d full rings", mapped, want, users)
	}
	if heapGrew > mapped/4 {
		t.Errorf("the heap grew by %d bytes for %d bytes of history: the rings are not outside it", heapGrew, mapped)
	}
	// Another hour of other users: the first ones are forgotten at the window's sweep and their buffers reused.
	fill("b", 720)
	fill("c", 1440)
	if got := h.MappedBytes(); got > 2*mapped {
		t.Errorf("mapped %d bytes after two more hours of %d new users, want at most %d (buffers reused)", got, users, 2*mapped)
	}
	for i := range users {
		name := fmt.Sprintf("c%03d", i)
		ps := h.User(name, time.Time{})
		if len(ps) != 720 {
			t.Fatalf("%s: %d points, want 720", name, len(ps))
		}
		for _, p := range ps {
			if p.AllocatedGPUs != alloc("c", i) {
				t.Fatalf("%s: a point holds %v allocated GPUs, want its own %v (a buffer shared by two rings?)", name, p.AllocatedGPUs, alloc("c", i))
			}
		}
	}
	if n := len(h.User("a042", time.Time{})); n != 0 {
		t.Errorf("a042, two hours gone: %d points, want 0", n)
	}
	runtime.KeepAlive(h)
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestAppendUserJSONRepeatsAndGaps: the writer reuses a point's numbers only while the sample is the same in every
// field: runs of equal samples, neighbours that differ in one field (utilization, memory, known or not, the
// allocation), and an absent tick between two equal samples all give exactly Points.MarshalJSON's text.
func TestAppendUserJSONRepeatsAndGaps(t *testing.T) {
	h := NewHistory(time.Minute, 5*time.Second) // 12 slots
	shares := []func() *User{
		func() *User { return &User{Share: Share{AllocatedGPUs: 1, UsedGPUs: f(0.5)}, SMUtilPercent: f(50)} },
		func() *User { return &User{Share: Share{AllocatedGPUs: 1, UsedGPUs: f(0.5)}, SMUtilPercent: f(50)} },
		func() *User {
			return &User{Share: Share{AllocatedGPUs: 1, UsedGPUs: f(0.5), MemoryUsedBytes: 1 << 30}, SMUtilPercent: f(50)}
		},
		func() *User { return &User{Share: Share{AllocatedGPUs: 1, MemoryUsedBytes: 1 << 30}} }, // used unknown
		nil, // absent
		func() *User { return &User{Share: Share{AllocatedGPUs: 1, MemoryUsedBytes: 1 << 30}} },
		func() *User {
			return &User{Share: Share{AllocatedGPUs: 1, UsedGPUs: f(0.25), MemoryUsedBytes: 1 << 30}, SMUtilPercent: f(25)}
		},
		func() *User {
			return &User{Share: Share{AllocatedGPUs: 0.5, UsedGPUs: f(0.25), MemoryUsedBytes: 1 << 30}, SMUtilPercent: f(25)}
		},
		func() *User {
			return &User{Share: Share{AllocatedGPUs: 0.5, UsedGPUs: f(0.25), MemoryUsedBytes: 1 << 30}, SMUtilPercent: f(25)}
		},
	}
	for i, share := range shares {
		v := &View{SampledAt: now.Add(time.Duration(i) * 5 * time.Second), Users: map[string]*User{}}
		if share != nil {
			u := share()
			u.Name = "u"
			v.Users["u"] = u
		}
		h.Add(v)
	}
	ps := h.User("u", time.Time{})
	if len(ps) != len(shares)-1 {
		t.Fatalf("%d points, want %d (one tick absent)", len(ps), len(shares)-1)
	}
	want, _ := ps.MarshalJSON()
	if diff := cmp.Diff(string(want), string(h.AppendUserJSON(nil, "u", time.Time{}))); diff != "" {
		t.Errorf("AppendUserJSON (-Points.MarshalJSON +got):\n%s", diff)
	}
}

// TestHistoryRingEdges: a full ring that wrapped (head not 0) and then misses a whole window starts again from
// its next sample, and wraps right when it fills again; a gap of one window less a tick is filled with absent
// ticks (no restart) and shows only the new sample (the old one has just left the window); every point has its
// own tick's time and value.
func TestHistoryRingEdges(t *testing.T) {
	tick := func(i int) time.Time { return now.Add(time.Duration(i) * 5 * time.Second) }
	run := func(at []int, last int) []time.Time {
		h := NewHistory(time.Minute, 5*time.Second)
		on := map[int]bool{}
		for _, i := range at {
			on[i] = true
		}
		for i := range last + 1 {
			v := &View{SampledAt: tick(i), Users: map[string]*User{}}
			if on[i] {
				v.Users["u"] = &User{Name: "u", Share: Share{AllocatedGPUs: float64(i)}}
			}
			h.Add(v)
		}
		var out []time.Time
		for _, p := range h.User("u", time.Time{}) {
			if p.AllocatedGPUs != float64(float32(p.T.Sub(now)/(5*time.Second))) {
				t.Errorf("point at %v holds the allocation of another tick (%v)", p.T, p.AllocatedGPUs)
			}
			out = append(out, p.T)
		}
		return out
	}
	span := func(from, to int) []int {
		var out []int
		for i := from; i <= to; i++ {
			out = append(out, i)
		}
		return out
	}
	times := func(is ...int) []time.Time {
		var out []time.Time
		for _, i := range is {
			out = append(out, tick(i))
		}
		return out
	}
	cases := map[string]struct {
		at   []int
		last int
		want []time.Time
	}{
		// ticks 0..16 fill and wrap the ring (head 5); nothing for a whole window (17..28); back at 29..31.
		"wrapped, then a whole window away": {at: append(span(0, 16), 29, 30, 31), last: 31, want: times(29, 30, 31)},
		"wrapped, away a window, back for more than a window": {at: append(span(0, 16), span(29, 45)...), last: 45,
			want: times(34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45)},
		"away a window less a tick": {at: append(span(0, 16), 28), last: 28, want: times(28)},
		"away exactly a window":     {at: append(span(0, 16), 29), last: 29, want: times(29)},
		"gap inside the window":     {at: append(span(0, 16), 20), last: 20, want: times(9, 10, 11, 12, 13, 14, 15, 16, 20)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, run(tc.at, tc.last)); diff != "" {
				t.Errorf("points' times (-want +got):\n%s", diff)
			}
		})
	}
}
