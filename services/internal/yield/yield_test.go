package yield

import (
	"context"
	"fmt"
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
)

// TestPass runs a pass past a few slices, on the machine's processors and on one (giving up the processor
// cannot be seen from a test, so this only runs the paths).
func TestPass(t *testing.T) {
	for _, procs := range []int{runtime.GOMAXPROCS(0), 1} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			prev := runtime.GOMAXPROCS(procs)
			defer runtime.GOMAXPROCS(prev)
			// A goroutine made runnable as the pass starts: on one processor it runs before the pass ends only
			// if the pass gives the processor up (Go would preempt the pass only after 10 ms).
			var other atomic.Bool
			go other.Store(true)
			var pace Pass
			yields := 0
			for end := time.Now().Add(3 * Slice); time.Now().Before(end); {
				before := pace.since
				pace.Item()
				if !before.IsZero() && pace.since != before {
					yields++
				}
			}
			if yields == 0 {
				t.Errorf("a pass of 3 slices (%s of wall time) never gave the processor up", 3*Slice)
			}
			if !other.Load() {
				t.Error("a goroutine runnable since the pass began did not run before it ended")
			}
		})
	}
}

// TestForeground: busy while work runs and for Quiet after; a pass behind it waits at most about MaxHold per
// slice; nil is never busy.
func TestForeground(t *testing.T) {
	var nilFG *Foreground
	nilFG.Start()
	nilFG.Done()
	if nilFG.Busy() {
		t.Error("nil Foreground busy")
	}
	var fg Foreground
	if fg.Busy() {
		t.Error("busy before any work")
	}
	fg.Start()
	fg.Start()
	fg.Done()
	if !fg.Busy() {
		t.Error("not busy with one of two pieces of work running")
	}
	ended := time.Now()
	fg.Done()
	if !fg.Busy() && time.Since(ended) < Quiet { // a goroutine descheduled for Quiet may see either
		t.Error("not busy right after work ended")
	}
	time.Sleep(2 * Quiet)
	if fg.Busy() {
		t.Errorf("busy %s after work ended", 2*Quiet)
	}

	fg.Start() // never done: the pass must go on, a slice every MaxHold
	pace := Pass{Behind: &fg}
	start := time.Now()
	slices := 0
	for pace.Item(); slices < 3; {
		if time.Since(pace.since) >= Slice {
			slices++
		}
		pace.Item()
	}
	if took := time.Since(start); took < 2*MaxHold || took > 3*(MaxHold+Slice)+time.Second {
		t.Errorf("3 slices behind busy work took %s, want about 3 x MaxHold (%s)", took, MaxHold)
	}
	fg.Done()
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
