package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/internal/logging"
)

func TestNormalizePrefix(t *testing.T) {
	tests := map[string]string{
		"":                      "/",
		"/":                     "/",
		"/services/gpu-usage/":  "/services/gpu-usage/",
		"services/gpu-usage":    "/services/gpu-usage/",
		"//services/gpu-usage/": "/services/gpu-usage/",
	}
	for in, want := range tests {
		if got := NormalizePrefix(in); got != want {
			t.Errorf("NormalizePrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLifecycle starts a whole server on 127.0.0.1:0, checks routing and probes, then shuts it down.
func TestLifecycle(t *testing.T) {
	ready := errors.New("informers not synced")
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"path": r.URL.Path})
	})
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{
		Listener:  ln,
		Prefix:    "/services/gpu-test/",
		Handler:   app,
		Registry:  prometheus.NewRegistry(),
		Subsystem: "test",
		Logger:    logging.Discard(),
		ReadyChecks: []Check{{Name: "caches", Fn: func(context.Context) error {
			return ready
		}}, {Name: "extra", Optional: true, Fn: func(context.Context) error {
			return errors.New("database away")
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	base := "http://" + ln.Addr().String()

	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "informers not synced") {
		t.Errorf("/readyz before ready = %d %s", code, body)
	}
	ready = nil
	if code, body := get("/readyz"); code != http.StatusOK || !strings.Contains(body, `"extra":"database away"`) {
		t.Errorf("/readyz after ready = %d %s, want 200 with the optional check's error in the detail", code, body)
	}
	if code, body := get("/services/gpu-test/api/v1/me"); code != http.StatusOK || !strings.Contains(body, `"/services/gpu-test/api/v1/me"`) {
		t.Errorf("app route = %d %s", code, body)
	}
	if code, _ := get("/services/gpu-test"); code != http.StatusMovedPermanently {
		t.Errorf("prefix without slash = %d, want redirect", code)
	}
	if code, _ := get("/elsewhere"); code != http.StatusNotFound {
		t.Errorf("outside prefix = %d, want 404", code)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `gpuhub_test_http_request_duration_seconds_count{code="200",method="get"}`) {
		t.Errorf("/metrics = %d, missing request histogram:\n%s", code, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server did not shut down")
	}
	if _, err := (&net.Dialer{Timeout: time.Second}).DialContext(t.Context(), "tcp", ln.Addr().String()); err == nil {
		t.Error("port still open after shutdown")
	}
}
