package budget

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const bobQuota = `{"user":"bob","exempt":false,"concurrent":{"maxGPUs":0.4286,"heldGPUs":0.1429,"maxServers":1,"servers":1},` +
	`"budgets":[{"window":"24h","windowSeconds":86400,"gpuHours":2,"usedGPUHours":0.5,"remainingGPUHours":1.5,"status":"ok"}],"notice":null}`

type fakeQuota struct {
	hits   atomic.Int32
	status atomic.Int32
	delay  atomic.Int64
	paths  sync.Map
}

func (f *fakeQuota) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	f.paths.Store(r.URL.EscapedPath(), true)
	if r.Header.Get("Authorization") != "token usage-token" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if d := time.Duration(f.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	if s := int(f.status.Load()); s != 0 && s != http.StatusOK {
		w.WriteHeader(s)
		_, _ = w.Write([]byte(`{"message":"informers not synced yet"}`))
		return
	}
	_, _ = w.Write([]byte(bobQuota + "\n"))
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func setup(t *testing.T, token string) (*Client, *fakeQuota, *clock) {
	t.Helper()
	f := &fakeQuota{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	clk := &clock{t: time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)}
	c, err := New(Options{URL: srv.URL + "/services/gpu-quota", Token: token, Timeout: 200 * time.Millisecond, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return c, f, clk
}

func status(t *testing.T, body json.RawMessage) (string, string) {
	t.Helper()
	var m struct{ Status, Reason string }
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return m.Status, m.Reason
}

// waitFetched waits for the background refresh to land.
func waitFetched(t *testing.T, c *Client, user string) {
	t.Helper()
	for range 200 {
		c.mu.Lock()
		e := c.entries[user]
		done := e != nil && e.fetching == nil
		c.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the refresh did not end")
}

func TestGetCachesAndRefreshes(t *testing.T) {
	c, f, clk := setup(t, "usage-token")
	ctx := context.Background()
	if diff := cmp.Diff(bobQuota, string(c.Get(ctx, "bob"))); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	if _, ok := f.paths.Load("/services/gpu-quota/api/v1/users/bob/quota"); !ok {
		t.Error("bob's quota was not asked at its path")
	}
	clk.Add(9 * time.Second)
	c.Get(ctx, "bob")
	if n := f.hits.Load(); n != 1 {
		t.Errorf("hits within the TTL = %d, want 1", n)
	}
	// A little old: served at once, refreshed in the background.
	clk.Add(2 * time.Second)
	f.delay.Store(int64(time.Second))
	start := time.Now()
	if got := c.Get(ctx, "bob"); string(got) != bobQuota {
		t.Errorf("stale answer: %s", got)
	}
	// It did not wait for the refresh (which takes the fake's 1 s): how much less depends on the machine's load.
	if d := time.Since(start); d >= time.Duration(f.delay.Load()) {
		t.Errorf("a stale answer waited %v, as long as the refresh", d)
	}
	waitFetched(t, c, "bob")
	// Too old to serve: fetched first; gpu-quota hangs, so the answer is unavailable after the timeout.
	clk.Add(time.Minute)
	start = time.Now()
	st, reason := status(t, c.Get(ctx, "bob"))
	if d := time.Since(start); d > time.Second {
		t.Errorf("an unavailable answer took %v", d)
	}
	if st != "unavailable" || !strings.Contains(reason, "did not answer within 200ms") {
		t.Errorf("status %q, reason %q", st, reason)
	}
	// The failure is kept a few seconds: the next polls do not wait again.
	hits := f.hits.Load()
	clk.Add(time.Second)
	c.Get(ctx, "bob")
	if f.hits.Load() != hits {
		t.Error("a failure was not kept")
	}
}

func TestUnavailableReasons(t *testing.T) {
	ctx := context.Background()
	t.Run("refused", func(t *testing.T) {
		c, _, _ := setup(t, "wrong")
		if st, reason := status(t, c.Get(ctx, "bob")); st != "unavailable" || !strings.Contains(reason, "--reader-services") {
			t.Errorf("status %q, reason %q", st, reason)
		}
	})
	t.Run("not ready", func(t *testing.T) {
		c, f, _ := setup(t, "usage-token")
		f.status.Store(http.StatusServiceUnavailable)
		if st, reason := status(t, c.Get(ctx, "bob")); st != "unavailable" || reason != "the quota service cannot answer right now: informers not synced yet" {
			t.Errorf("status %q, reason %q", st, reason)
		}
	})
	t.Run("down", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		c, err := New(Options{URL: url + "/", Token: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if st, reason := status(t, c.Get(ctx, "bob")); st != "unavailable" || reason != "the quota service cannot be reached" {
			t.Errorf("status %q, reason %q", st, reason)
		}
	})
	t.Run("a name is one path segment", func(t *testing.T) {
		c, f, _ := setup(t, "usage-token")
		c.Get(ctx, "a/b?c")
		if _, ok := f.paths.Load("/services/gpu-quota/api/v1/users/a%2Fb%3Fc/quota"); !ok {
			f.paths.Range(func(k, _ any) bool { t.Errorf("asked %s", k); return true })
		}
	})
	if _, err := New(Options{URL: "gpu-quota:8000"}); err == nil {
		t.Error("a URL without a scheme was accepted")
	}
}

func TestConcurrentCallersShareOneFetch(t *testing.T) {
	c, f, _ := setup(t, "usage-token")
	f.delay.Store(int64(50 * time.Millisecond))
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if got := c.Get(context.Background(), "bob"); string(got) != bobQuota {
				t.Errorf("Get: %s", got)
			}
		})
	}
	wg.Wait()
	if n := f.hits.Load(); n != 1 {
		t.Errorf("hits = %d, want 1", n)
	}
}
