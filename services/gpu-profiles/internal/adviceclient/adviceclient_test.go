package adviceclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// fakeUsage answers users/{name}/right-size with one smaller advice per user, or status when it is not 200.
type fakeUsage struct {
	calls  atomic.Int64
	status atomic.Int64
	mu     sync.Mutex
	paths  []string
	auth   []string
}

func (f *fakeUsage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.EscapedPath())
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if s := f.status.Load(); s != 0 && s != http.StatusOK {
		w.WriteHeader(int(s))
		_, _ = w.Write([]byte(`{"status":503,"message":"down"}`))
		return
	}
	name := r.PathValue("name")
	_ = json.NewEncoder(w).Encode(contract.RightSizeResponse{User: name, Period: "7d",
		Servers: []contract.RightSize{{User: name, Verdict: contract.VerdictSmaller}}})
}

func start(t *testing.T) (*fakeUsage, *Client, *time.Time) {
	t.Helper()
	f := &fakeUsage{}
	mux := http.NewServeMux()
	mux.Handle("GET /services/gpu-usage/api/v1/users/{name}/right-size", f)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := New(ctx, Options{URL: srv.URL + "/services/gpu-usage/", Token: "profiles-token", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return f, c, &now
}

func TestAdviceInTheBackground(t *testing.T) {
	f, c, now := start(t)
	if _, ok := c.Advice("a b"); ok {
		t.Fatal("advice before any fetch")
	}
	c.Wait()
	got, ok := c.Advice("a b")
	want := []contract.RightSize{{User: "a b", Verdict: contract.VerdictSmaller}}
	if diff := cmp.Diff(want, got); !ok || diff != "" {
		t.Fatalf("advice (-want +got), ok %v:\n%s", ok, diff)
	}
	if diff := cmp.Diff([]string{"/services/gpu-usage/api/v1/users/a%20b/right-size"}, f.paths); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	if f.auth[0] != "token profiles-token" {
		t.Errorf("Authorization %q", f.auth[0])
	}
	// Within the TTL: no fetch.
	*now = now.Add(9 * time.Minute)
	c.Advice("a b")
	c.Wait()
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("%d calls within the TTL, want 1", n)
	}
	// Due: the held advice is served while it is fetched again.
	*now = now.Add(2 * time.Minute)
	if _, ok := c.Advice("a b"); !ok {
		t.Fatal("held advice not served while due")
	}
	c.Wait()
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("%d calls after the TTL, want 2", n)
	}
}

func TestUsageAPIDown(t *testing.T) {
	f, c, now := start(t)
	c.Advice("alice")
	c.Wait()
	f.status.Store(http.StatusServiceUnavailable)
	*now = now.Add(11 * time.Minute)
	c.Advice("alice")
	c.Wait()
	// The failure keeps what was held.
	if got, ok := c.Advice("alice"); !ok || len(got) != 1 {
		t.Fatalf("held advice lost on a failure: %v %v", got, ok)
	}
	// A user never fetched has none, and is asked again only after Retry.
	if _, ok := c.Advice("bob"); ok {
		t.Fatal("advice for bob while the usage API is down")
	}
	c.Wait()
	calls := f.calls.Load()
	*now = now.Add(30 * time.Second)
	c.Advice("bob")
	c.Wait()
	if f.calls.Load() != calls {
		t.Fatal("asked again before Retry")
	}
	*now = now.Add(31 * time.Second)
	f.status.Store(http.StatusOK)
	c.Advice("bob")
	c.Wait()
	if _, ok := c.Advice("bob"); !ok {
		t.Fatal("no advice for bob after the usage API came back")
	}
}

func TestNeverWaits(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(block) })
	ctx, cancel := context.WithCancel(context.Background())
	c, err := New(ctx, Options{URL: srv.URL + "/", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for range 100 {
		c.Advice("alice")
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("Advice took %v with the usage API hanging", d)
	}
	cancel()
	c.Wait()
}
