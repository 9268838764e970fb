package dcgm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

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

	got, err := New(srv.URL+"/metrics", srv.Client()).MIGUtilization(context.Background())
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
			if _, err := New(srv.URL, srv.Client()).MIGUtilization(context.Background()); err == nil {
				t.Error("want an error")
			}
		})
	}
}
