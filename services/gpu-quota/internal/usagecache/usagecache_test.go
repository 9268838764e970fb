package usagecache

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const day = 24 * time.Hour

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// usageAPI is a fake usage API: it answers the bulk GPU-hours endpoint from body, or fails with status.
type usageAPI struct {
	mu     sync.Mutex
	status int
	asOf   time.Time
	hours  map[string]map[string]map[string]float64 // window param -> user -> class -> hours
	asked  []string
	auth   []string
}

func (u *usageAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r.URL.Path != "/services/gpu-usage/api/v1/gpu-hours" {
		http.NotFound(w, r)
		return
	}
	u.asked = append(u.asked, r.URL.Query().Get("windows"))
	u.auth = append(u.auth, r.Header.Get("Authorization"))
	if u.status != 0 {
		w.WriteHeader(u.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": "the ledger cannot be read"})
		return
	}
	out := map[string]any{"asOf": u.asOf, "windows": map[string]any{}}
	for _, win := range strings.Split(r.URL.Query().Get("windows"), ",") {
		if h, ok := u.hours[win]; ok {
			out["windows"].(map[string]any)[win] = h
		}
	}
	_ = json.NewEncoder(w).Encode(out)
}

func newCache(t *testing.T, api *usageAPI, clk *clock, windows ...time.Duration) (*Cache, *prometheus.Registry) {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	reg := prometheus.NewRegistry()
	c, err := New(Options{URL: srv.URL + "/services/gpu-usage", Token: "quota-token", Refresh: 15 * time.Second, Now: clk.Now,
		Windows: func() []time.Duration { return windows }, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return c, reg
}

func TestGPUHours(t *testing.T) {
	clk := &clock{now: t0}
	api := &usageAPI{asOf: t0.Add(-5 * time.Second), hours: map[string]map[string]map[string]float64{
		"24h": {"bob": {"mig A100-SXM4-40GB 1g.5gb": 0.5}},
		"7d":  {"bob": {"mig A100-SXM4-40GB 1g.5gb": 3}, "carol": {"gpu H100-80GB-HBM3": 10}},
	}}
	c, reg := newCache(t, api, clk, day, 7*day, 30*day)
	c.Refresh(context.Background())
	if diff := cmp.Diff([]string{"24h,7d,30d"}, api.asked); diff != "" {
		t.Errorf("windows asked (-want +got):\n%s", diff)
	}
	if api.auth[0] != "token quota-token" {
		t.Errorf("authorization %q", api.auth[0])
	}
	// bob holds a 1g.5gb slice (1/7 GPU) since before asOf: 30 s later it accrued 1/7 x (30 s + 5 s); his T4
	// share started 10 s after asOf.
	held := []Held{{Class: "mig A100-SXM4-40GB 1g.5gb", GPUs: 1.0 / 7, Since: t0.Add(-time.Hour)},
		{Class: "shared T4", GPUs: 0.25, Since: t0.Add(10 * time.Second)}}
	clk.Add(30 * time.Second)
	got := c.GPUHours("bob", []time.Duration{day, 7 * day, 30 * day}, held, clk.Now())
	accrued := 1.0 / 7 * (35 * time.Second).Hours()
	t4 := 0.25 * (20 * time.Second).Hours()
	want := map[time.Duration]map[string]float64{
		day:     {"mig A100-SXM4-40GB 1g.5gb": 0.5 + accrued, "shared T4": t4},
		7 * day: {"mig A100-SXM4-40GB 1g.5gb": 3 + accrued, "shared T4": t4},
		// 30d is missing from the answer: unavailable
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPU-hours (-want +got):\n%s", diff)
	}
	if got := c.GPUHours("nobody", []time.Duration{day}, nil, clk.Now()); len(got[day]) != 0 || got[day] == nil {
		t.Errorf("a user without use: %v, want an empty window (0 used, readable)", got)
	}
	// Holding nothing, a user gets the answer's own numbers: every window of the answer (0 used where the answer
	// does not name them), 30d still missing, whichever windows were asked for.
	for _, windows := range [][]time.Duration{{day}, {7 * day}, {day, 7 * day, 30 * day}} {
		for user, want := range map[string]map[time.Duration]map[string]float64{
			"carol":  {day: {}, 7 * day: {"gpu H100-80GB-HBM3": 10}},
			"nobody": {day: {}, 7 * day: {}},
			"bob":    {day: {"mig A100-SXM4-40GB 1g.5gb": 0.5}, 7 * day: {"mig A100-SXM4-40GB 1g.5gb": 3}},
		} {
			if diff := cmp.Diff(want, c.GPUHours(user, windows, nil, clk.Now())); diff != "" {
				t.Errorf("%s holding nothing, windows %v (-want +got):\n%s", user, windows, diff)
			}
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gpuhub_quota_usage_refresh_last_run_success 1 when the last poll of the usage API's GPU-hours succeeded, 0 when it failed.
# TYPE gpuhub_quota_usage_refresh_last_run_success gauge
gpuhub_quota_usage_refresh_last_run_success 1
# HELP gpuhub_quota_usage_age_seconds Age of the GPU-hours answer in use from the usage API (-1: none yet; older than 3 refreshes counts as unavailable).
# TYPE gpuhub_quota_usage_age_seconds gauge
gpuhub_quota_usage_age_seconds 30
`), "gpuhub_quota_usage_refresh_last_run_success", "gpuhub_quota_usage_age_seconds"); err != nil {
		t.Error(err)
	}
}

func TestStaleIsUnavailable(t *testing.T) {
	clk := &clock{now: t0}
	api := &usageAPI{asOf: t0, hours: map[string]map[string]map[string]float64{"24h": {"bob": {"shared T4": 1}}}}
	c, reg := newCache(t, api, clk, day)
	if got := c.GPUHours("bob", []time.Duration{day}, nil, clk.Now()); got != nil {
		t.Errorf("before the first answer: %v, want nil (unavailable)", got)
	}
	if err := c.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "no GPU-hours") {
		t.Errorf("check before the first answer: %v", err)
	}
	c.Refresh(context.Background())
	api.mu.Lock()
	api.status = http.StatusServiceUnavailable
	api.mu.Unlock()
	// Failed polls keep the last answer for 3 refreshes.
	for range 3 {
		clk.Add(15 * time.Second)
		c.Refresh(context.Background())
	}
	if got := c.GPUHours("bob", []time.Duration{day}, nil, clk.Now()); got[day]["shared T4"] != 1 {
		t.Errorf("3 refreshes old: %v, want the last answer", got)
	}
	if err := c.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "the ledger cannot be read") {
		t.Errorf("check after failures: %v", err)
	}
	clk.Add(time.Second)
	if got := c.GPUHours("bob", []time.Duration{day}, nil, clk.Now()); got != nil {
		t.Errorf("older than 3 refreshes: %v, want nil (unavailable)", got)
	}
	if err := c.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "budgets unavailable") {
		t.Errorf("check when stale: %v", err)
	}
	if n := testutil.ToFloat64(c.failures); n != 3 {
		t.Errorf("failures %v, want 3", n)
	}
	_ = reg
}

func TestNoURL(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Run(context.Background()) // returns at once
	if got := c.GPUHours("bob", []time.Duration{day}, nil, time.Now()); got != nil {
		t.Errorf("no URL: %v, want nil", got)
	}
	if c.Configured() || c.Check(context.Background()) == nil {
		t.Error("no URL: configured or check ok")
	}
}

func TestNoWindowsNeedsNoPoll(t *testing.T) {
	clk := &clock{now: t0}
	api := &usageAPI{asOf: t0}
	c, _ := newCache(t, api, clk)
	c.Refresh(context.Background())
	if len(api.asked) != 0 {
		t.Errorf("asked %v with no windows", api.asked)
	}
	if err := c.Check(context.Background()); err != nil {
		t.Errorf("check: %v", err)
	}
}

func TestParam(t *testing.T) {
	for w, want := range map[time.Duration]string{time.Hour: "1h", day: "24h", 36 * time.Hour: "36h", 7 * day: "7d", 30 * day: "30d"} {
		if got := Param(w); got != want {
			t.Errorf("Param(%v) = %q, want %q", w, got, want)
		}
	}
}

// TestOnChange: the cache tells OnChange when what GPUHours gives may differ: a first answer, other numbers, an
// answer that turned stale (once), a fresh one after it; not a poll with the same numbers.
func TestOnChange(t *testing.T) {
	clk := &clock{now: t0}
	api := &usageAPI{asOf: t0, hours: map[string]map[string]map[string]float64{"24h": {"bob": {"shared T4": 1}}}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	told := 0
	c, err := New(Options{URL: srv.URL + "/services/gpu-usage", Refresh: 15 * time.Second, Now: clk.Now,
		Windows: func() []time.Duration { return []time.Duration{day} }, OnChange: func() { told++ }})
	if err != nil {
		t.Fatal(err)
	}
	set := func(status int, bobT4 float64) func() {
		return func() {
			api.mu.Lock()
			defer api.mu.Unlock()
			api.status, api.asOf = status, clk.Now()
			api.hours["24h"]["bob"]["shared T4"] = bobT4
		}
	}
	steps := []struct {
		name   string
		change func()
		want   int
	}{
		{"the first answer", set(0, 1), 1},
		{"the same numbers, a later asOf", set(0, 1), 0},
		{"other numbers", set(0, 2), 1},
		{"a failed poll, the answer still fresh", set(http.StatusServiceUnavailable, 2), 0},
		{"another", set(http.StatusServiceUnavailable, 2), 0},
		{"a failed poll, the answer now stale", set(http.StatusServiceUnavailable, 2), 1},
		{"still stale", set(http.StatusServiceUnavailable, 2), 0},
		{"fresh again, the same numbers", set(0, 2), 1},
	}
	var got, want []string
	for _, s := range steps {
		told = 0
		s.change()
		c.Refresh(context.Background())
		clk.Add(16 * time.Second)
		got = append(got, fmt.Sprintf("%s: %d", s.name, told))
		want = append(want, fmt.Sprintf("%s: %d", s.name, s.want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("OnChange calls per poll (-want +got):\n%s", diff)
	}
}
