package dcgm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
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

// A dcgm-exporter that accepts the connection and never answers: the scrape
// gives up after Timeout.
func TestMIGUtilizationTimeout(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); srv.Close() })

	start := time.Now()
	_, err := New(srv.URL, Options{HTTPClient: srv.Client(), Timeout: 100 * time.Millisecond}).MIGUtilization(context.Background())
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Errorf("MIGUtilization against a hung exporter = %v after %s, want an error within the 100ms timeout", err, took)
	}
}
