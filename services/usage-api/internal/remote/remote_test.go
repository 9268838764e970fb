package remote

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGet: the token goes in the Authorization header only; answers and failures are kept for TTL; failures
// are plain words naming the service and what to do.
func TestGet(t *testing.T) {
	var calls atomic.Int32
	status := atomic.Int32{}
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") != "token usage-token" || strings.Contains(r.URL.String(), "usage-token") {
			http.Error(w, "bad auth", http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/services/gpu-culler/api/v1/decisions" || r.URL.Query().Get("action") != "stop" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
		if status.Load() == http.StatusOK {
			_, _ = w.Write([]byte(`{"decisions":[]}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":503,"message":"not the acting replica yet"}`))
	}))
	t.Cleanup(srv.Close)
	clock := time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	c, err := New(Options{Service: "gpu-culler", URL: srv.URL + "/services/gpu-culler", Token: "usage-token", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		body, err := c.Get(ctx, "api/v1/decisions?action=stop&limit=100")
		if err != nil || string(body) != `{"decisions":[]}` {
			t.Fatalf("Get = %q, %v", body, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d requests within the TTL, want 1", n)
	}
	status.Store(http.StatusServiceUnavailable)
	advance(6 * time.Second)
	_, err = c.Get(ctx, "api/v1/decisions?action=stop&limit=100")
	if err == nil || err.Error() != "gpu-culler cannot answer (503): not the acting replica yet" {
		t.Errorf("503: %v", err)
	}
	status.Store(http.StatusOK)
	if _, err := c.Get(ctx, "api/v1/decisions?action=stop&limit=100"); err == nil {
		t.Error("a failure was not kept for the TTL")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}

	refusing, _ := New(Options{Service: "gpu-culler", URL: srv.URL + "/services/gpu-culler/", Token: "other", Now: now})
	if _, err := refusing.Get(ctx, "api/v1/decisions?action=stop"); err == nil || err.Error() != "gpu-culler refused the usage API (401): list gpu-usage in gpu-culler's --reader-services" {
		t.Errorf("401: %v", err)
	}
}

// TestGetDown: a service that is not there, and one that hangs, are errors within the timeout.
func TestGetDown(t *testing.T) {
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); slow.Close() })
	c, _ := New(Options{Service: "gpu-quota", URL: slow.URL + "/services/gpu-quota/", Token: "t", Timeout: 50 * time.Millisecond})
	start := time.Now()
	if _, err := c.Get(context.Background(), "api/v1/waitlist"); err == nil || err.Error() != "gpu-quota did not answer within 50ms; see whether it is running and healthy" {
		t.Errorf("hanging: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s", d)
	}
	gone := httptest.NewServer(http.NotFoundHandler())
	url := gone.URL
	gone.Close()
	c, _ = New(Options{Service: "gpu-quota", URL: url + "/services/gpu-quota/", Token: "t"})
	if _, err := c.Get(context.Background(), "api/v1/waitlist"); err == nil || !strings.HasPrefix(err.Error(), "gpu-quota cannot be reached") {
		t.Errorf("gone: %v", err)
	}
	if _, err := New(Options{Service: "gpu-quota", URL: "gpu-quota:8000"}); err == nil {
		t.Error("a URL without a scheme was accepted")
	}
}
