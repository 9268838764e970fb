package dcgm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMIGUtilization(t *testing.T) {
	body, err := os.ReadFile("testdata/dcgm-exporter-mig.txt")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(body)
	}))
	defer srv.Close()

	got, err := New(srv.URL+"/metrics", Options{HTTPClient: srv.Client()}).MIGUtilization(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[Key]float64{
		{GPUUUID: "GPU-11111111-2222-3333-4444-555555555555", GPUInstanceID: 1}: 49,
		{GPUUUID: "GPU-11111111-2222-3333-4444-555555555555", GPUInstanceID: 2}: 0,
		{GPUUUID: "GPU-11111111-2222-3333-4444-555555555555", GPUInstanceID: 9}: 100,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MIGUtilization (-want +got):\n%s", diff)
	}
}

func TestMIGUtilizationErrors(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		"status": func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) },
		"garbage": func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("DCGM_FI_PROF_GR_ENGINE_ACTIVE{ 1\n"))
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			if _, err := New(srv.URL, Options{HTTPClient: srv.Client()}).MIGUtilization(context.Background()); err == nil {
				t.Error("want an error")
			}
		})
	}
}

// An exposition can carry sample timestamps (a federating proxy, or an
// exporter that reports when it read DCGM): a value older than the allowed
// age is not a measurement of now and must not be used.
func TestMIGUtilizationDropsOldValues(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 5, 0, time.UTC)
	body := fmt.Sprintf(`# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-1",GPU_I_ID="1"} 0.5 %d
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-1",GPU_I_ID="2"} 0.97 %d
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-1",GPU_I_ID="3"} 0.25
`, now.Add(-10*time.Second).UnixMilli(), now.Add(-10*time.Minute).UnixMilli())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()

	got, err := New(srv.URL, Options{HTTPClient: srv.Client(), Now: func() time.Time { return now }}).MIGUtilization(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[Key]float64{
		{GPUUUID: "GPU-1", GPUInstanceID: 1}: 50, // 10 s old: fresh
		// GPU instance 2: 10 min old, a wedged DCGM's last value: dropped
		{GPUUUID: "GPU-1", GPUInstanceID: 3}: 25, // no timestamp: read now
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MIGUtilization (-want +got):\n%s", diff)
	}
}

// hungExporter accepts a scrape and never answers it; abandoned gets a value when the client gave one up (its
// connection closed).
func hungExporter(t testing.TB) (srv *httptest.Server, abandoned chan struct{}) {
	hang, abandoned := make(chan struct{}), make(chan struct{}, 1)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
			select {
			case abandoned <- struct{}{}:
			default: // a benchmark's many: nobody counts them
			}
		}
	}))
	t.Cleanup(func() { close(hang); srv.Close() })
	return srv, abandoned
}

// A dcgm-exporter that accepts the connection and never answers: the scrape gives up at its own Timeout (a
// deadline error while the caller's context is live) and drops the request. How soon is
// BenchmarkMIGUtilizationHung's to say.
func TestMIGUtilizationTimeout(t *testing.T) {
	srv, abandoned := hungExporter(t)
	// The caller's context ends only by cancellation, and only if the scrape hangs on: a deadline error can
	// then be the scrape's own alone.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer time.AfterFunc(time.Minute, cancel).Stop()
	_, err := New(srv.URL, Options{HTTPClient: srv.Client(), Timeout: 100 * time.Millisecond}).MIGUtilization(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || !strings.Contains(err.Error(), "(timeout 100ms)") {
		t.Fatalf("MIGUtilization against a hung exporter = %v (caller's context: %v), want the scrape's own 100ms deadline", err, ctx.Err())
	}
	select {
	case <-abandoned:
	case <-time.After(10 * time.Second):
		t.Error("the exporter's request was not dropped")
	}
}

// BenchmarkMIGUtilizationHung is how long a scrape of a hung exporter takes with a 10 ms Timeout: the timeout
// and the cost of giving up (a new connection each time).
func BenchmarkMIGUtilizationHung(b *testing.B) {
	srv, _ := hungExporter(b)
	c := New(srv.URL, Options{HTTPClient: srv.Client(), Timeout: 10 * time.Millisecond})
	for b.Loop() {
		if _, err := c.MIGUtilization(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
			b.Fatalf("MIGUtilization against a hung exporter = %v, want its deadline", err)
		}
	}
}
