package yield

import (
	"context"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fakeEnv is a clock that moves only when told or slept on, and a processor whose give-ups are recorded, as
// offsets from the start.
type fakeEnv struct {
	start, t time.Time
	gaveUp   []time.Duration
	sleeps   int
	onSleep  func(n int) // after the clock moved for the nth sleep (from 1)
}

func newFakeEnv() *fakeEnv {
	t0 := time.Now() // after epoch, as the real clock is
	return &fakeEnv{start: t0, t: t0}
}

func (f *fakeEnv) env() *env {
	return &env{
		clock: func() time.Time { return f.t },
		wait: func(d time.Duration) {
			f.t = f.t.Add(d)
			f.sleeps++
			if f.onSleep != nil {
				f.onSleep(f.sleeps)
			}
		},
		yield: func() { f.gaveUp = append(f.gaveUp, f.t.Sub(f.start)) },
	}
}

// at sets the clock to d after the start.
func (f *fakeEnv) at(d time.Duration) { f.t = f.start.Add(d) }

// TestPass: a pass gives the processor up at its first Item once Slice has gone by since its first Item or its
// last give-up, and only then; an item that took several slices (it blocked) costs one give-up.
func TestPass(t *testing.T) {
	tests := map[string]struct {
		items      []time.Duration // when Item is called, after the start
		wantGaveUp []time.Duration
	}{
		"one item":               {items: []time.Duration{0}},
		"within the first slice": {items: []time.Duration{0, Slice / 2, Slice - 1}},
		"a slice gone by":        {items: []time.Duration{0, Slice - 1, Slice}, wantGaveUp: []time.Duration{Slice}},
		"counted from the last give-up": {
			items:      []time.Duration{0, Slice + Slice/2, 2*Slice + Slice/2 - 1, 2*Slice + Slice/2, 3 * Slice},
			wantGaveUp: []time.Duration{Slice + Slice/2, 2*Slice + Slice/2},
		},
		"counted from the first item": {items: []time.Duration{Slice, 2*Slice - 1, 2 * Slice}, wantGaveUp: []time.Duration{2 * Slice}},
		"an item that blocked":        {items: []time.Duration{0, 10 * Slice, 10*Slice + 1}, wantGaveUp: []time.Duration{10 * Slice}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fe := newFakeEnv()
			pace := Pass{env: fe.env()}
			for _, d := range tc.items {
				fe.at(d)
				pace.Item()
			}
			if diff := cmp.Diff(tc.wantGaveUp, fe.gaveUp, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("gave the processor up at (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGiveUp: on one processor, a goroutine made runnable before the pass gives the processor up runs before the
// pass goes on (the runtime would preempt the pass only after 10 ms). With more processors another one may run
// it or not, so only one is asserted.
func TestGiveUp(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var other atomic.Bool
	go other.Store(true)
	giveUp()
	if !other.Load() {
		t.Error("a goroutine runnable before the give-up did not run before it returned")
	}
}

// TestForeground: busy while work runs and for exactly Quiet after; nil is never busy.
func TestForeground(t *testing.T) {
	var nilFG *Foreground
	nilFG.Start()
	nilFG.Done()
	nilFG.wait()
	if nilFG.Busy() {
		t.Error("nil Foreground busy")
	}
	fe := newFakeEnv()
	fg := Foreground{env: fe.env()}
	busy := func(when string, want bool) {
		t.Helper()
		if got := fg.Busy(); got != want {
			t.Errorf("%s: busy %v, want %v", when, got, want)
		}
	}
	busy("before any work", false)
	fg.Start()
	fg.Start()
	fg.Done()
	busy("one of two pieces of work running", true)
	fe.at(time.Hour)
	busy("the other running an hour later", true)
	fg.Done()
	busy("as work ended", true)
	fe.at(time.Hour + Quiet - 1)
	busy("Quiet less 1ns after", true)
	fe.at(time.Hour + Quiet)
	busy("Quiet after", false)
}

// TestPassBehind: a pass behind a Foreground gives the processor up, then holds while the foreground is busy,
// for at most MaxHold; its next slice counts from the end of the hold.
func TestPassBehind(t *testing.T) {
	tests := map[string]struct {
		nilBehind bool
		setup     func(fg *Foreground, fe *fakeEnv) // at Slice, before the Item that gives up
		wantHold  time.Duration
	}{
		"none":                {nilBehind: true},
		"idle":                {setup: func(*Foreground, *fakeEnv) {}},
		"ended Quiet before":  {setup: func(fg *Foreground, fe *fakeEnv) { fe.at(Slice - Quiet); fg.Start(); fg.Done(); fe.at(Slice) }},
		"ended as it gave up": {setup: func(fg *Foreground, _ *fakeEnv) { fg.Start(); fg.Done() }, wantHold: Quiet},
		"running throughout":  {setup: func(fg *Foreground, _ *fakeEnv) { fg.Start() }, wantHold: MaxHold},
		"ends during the hold": {
			setup: func(fg *Foreground, fe *fakeEnv) {
				fg.Start()
				fe.onSleep = func(n int) {
					if n == 3 {
						fg.Done()
					}
				}
			},
			wantHold: 3*holdPoll + Quiet,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fe := newFakeEnv()
			fg := &Foreground{env: fe.env()}
			pace := Pass{Behind: fg, env: fe.env()}
			if tc.nilBehind {
				pace.Behind = nil
			}
			pace.Item()
			fe.at(Slice)
			if tc.setup != nil {
				tc.setup(fg, fe)
			}
			pace.Item()
			if diff := cmp.Diff([]time.Duration{Slice}, fe.gaveUp); diff != "" {
				t.Errorf("gave the processor up at (-want +got):\n%s", diff)
			}
			if hold := fe.t.Sub(fe.start) - Slice; hold != tc.wantHold {
				t.Errorf("held %s after giving up, want %s", hold, tc.wantHold)
			}
			// The next slice counts from the end of the hold.
			end := fe.t.Sub(fe.start)
			fe.onSleep = nil
			fe.at(end + Slice - 1)
			pace.Item()
			fe.at(end + Slice)
			pace.Item()
			if diff := cmp.Diff([]time.Duration{Slice, end + Slice}, fe.gaveUp); diff != "" {
				t.Errorf("after the hold, gave the processor up at (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkArrivalDuringPass is a burst of 16 loopback HTTP requests while a CPU-bound pass runs on the one
// processor (GOMAXPROCS=1), the pass yielding every 256 items with runtime.Gosched alone ("gosched", as before),
// paced by a Pass ("pass"), and paced by a Pass behind the requests' Foreground ("behind"). It reports the
// requests' p50 and p99 and how many items the pass got through per second meanwhile: with Gosched alone a
// request waits for sysmon's network poll (up to ~20 ms); behind, the pass gets little done while bursts come
// back to back, as here, and stays out of them.
func BenchmarkArrivalDuringPass(b *testing.B) {
	var fg Foreground // the requests' handler marks them, for "behind"
	for _, tc := range []struct {
		name string
		item func() func(i int)
	}{
		{"gosched", func() func(int) {
			return func(i int) {
				if i%256 == 255 {
					runtime.Gosched()
				}
			}
		}},
		{"pass", func() func(int) {
			var pace Pass
			return func(int) { pace.Item() }
		}},
		{"behind", func() func(int) {
			pace := Pass{Behind: &fg}
			return func(int) { pace.Item() }
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const burst = 16
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fg.Start()
				defer fg.Done()
				_, _ = io.WriteString(w, "ok")
			}))
			defer srv.Close()
			client := srv.Client()
			client.Transport.(*http.Transport).MaxIdleConnsPerHost = burst
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
			if err != nil {
				b.Fatal(err)
			}
			var failed atomic.Pointer[error] // the calls run in goroutines of their own: no b.Fatal there
			get := func() {
				resp, err := client.Do(req)
				if err != nil {
					failed.Store(&err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			var warm sync.WaitGroup // connections kept alive, not measured
			for range burst {
				warm.Go(get)
			}
			warm.Wait()

			ctx, cancel := context.WithCancel(context.Background())
			var (
				wg    sync.WaitGroup
				items int
			)
			item := tc.item()
			wg.Go(func() { // the pass: an item is hashing a few hundred bytes, again and again until the end
				h := fnv.New64a()
				buf := make([]byte, 512)
				for i := 0; ctx.Err() == nil; i++ {
					for range 8 {
						_, _ = h.Write(buf)
					}
					items++
					item(i)
				}
			})
			lat := make([]time.Duration, 0, burst*b.N)
			var mu sync.Mutex
			start := time.Now()
			for b.Loop() {
				var calls sync.WaitGroup
				for range burst {
					calls.Go(func() {
						t0 := time.Now()
						get()
						took := time.Since(t0)
						mu.Lock()
						lat = append(lat, took)
						mu.Unlock()
					})
				}
				calls.Wait()
			}
			elapsed := time.Since(start)
			cancel()
			wg.Wait()
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(items)/elapsed.Seconds(), "items/s")
		})
	}
}
