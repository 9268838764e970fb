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
	"testing"
	"time"
)

// After returns at once, item after item; where it yields is i%Every == Every-1 (the processor is given up,
// which a test cannot see, so this only runs the path).
func TestAfter(t *testing.T) {
	for i := range 3 * Every {
		After(i)
	}
}

// BenchmarkArrivalDuringPass is the round trip of a loopback HTTP request while a CPU-bound pass runs on the
// one processor (GOMAXPROCS=1), the pass yielding every Every items with runtime.Gosched alone ("gosched") and
// with After ("after"). It reports the round trips' p50 and p99 and how many items the pass got through per
// second meanwhile: with Gosched alone a request waits for sysmon's network poll (up to 10 ms).
func BenchmarkArrivalDuringPass(b *testing.B) {
	for _, tc := range []struct {
		name  string
		yield func(i int)
	}{
		{"gosched", func(i int) {
			if i%Every == Every-1 {
				runtime.Gosched()
			}
		}},
		{"after", After},
	} {
		b.Run(tc.name, func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "ok")
			}))
			defer srv.Close()
			client := srv.Client()
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
			if err != nil {
				b.Fatal(err)
			}
			get := func() {
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			get() // a connection kept alive, not measured

			ctx, cancel := context.WithCancel(context.Background())
			var (
				wg    sync.WaitGroup
				items int
			)
			wg.Go(func() { // the pass: an item is hashing a few hundred bytes, again and again until the end
				h := fnv.New64a()
				buf := make([]byte, 512)
				for i := 0; ctx.Err() == nil; i++ {
					for range 8 {
						_, _ = h.Write(buf)
					}
					items++
					tc.yield(i)
				}
			})
			lat := make([]time.Duration, 0, b.N)
			start := time.Now()
			for b.Loop() {
				t0 := time.Now()
				get()
				lat = append(lat, time.Since(t0))
			}
			elapsed := time.Since(start)
			cancel()
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(items)/elapsed.Seconds(), "items/s")
		})
	}
}
