package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/api"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

type noLedger struct{}

func (noLedger) Available() error                  { return nil }
func (noLedger) UserWindows(string) ledger.Windows { return ledger.Windows{} }
func (noLedger) Hours(context.Context, ledger.Query) ([]ledger.Row, error) {
	return nil, nil
}
func (noLedger) Rolling(context.Context, []time.Duration, time.Time) (map[time.Duration]map[string]map[string]float64, error) {
	return nil, nil
}
func (noLedger) Decayed(context.Context, time.Duration, time.Duration, time.Time) (map[string]map[string]float64, error) {
	return nil, nil
}

// meHandler is the API over the synthetic cluster (10,000 users, 1,000 GPUs, 10,000 pods) with ticks samples
// of history (720: an hour), authenticated through hubauth's cache.
func meHandler(tb testing.TB, ticks int) http.Handler {
	tb.Helper()
	now := time.Now()
	c := Synthesize(10000, 1000, 10000, 10, now)
	state := usage.NewState(usage.NewHistory(time.Hour, 5*time.Second))
	v := usage.Build(c.Input(now, 5*time.Second))
	for i := ticks - 1; i >= 0; i-- {
		past := *v
		past.SampledAt = now.Add(-time.Duration(i) * 5 * time.Second)
		state.Publish(&past)
	}
	auth := hubauth.New(hubauth.Options{Hub: tokenChecker{}, MaxEntries: 20000})
	return api.New(api.Options{Prefix: "/services/gpu-usage/", State: state, Ledger: noLedger{}, Auth: auth.Middleware})
}

func TestSynthesize(t *testing.T) {
	c := Synthesize(10000, 1000, 10000, 10, time.Now())
	v := usage.Build(c.Input(time.Now(), 5*time.Second))
	if v.Cluster.Nodes != 125 || len(c.Pods) != 10000 || v.Cluster.CapacityGPUs < 999.99 || v.Cluster.CapacityGPUs > 1000.01 {
		t.Errorf("nodes %d pods %d capacity %v; want 125, 10000, 1000", v.Cluster.Nodes, len(c.Pods), v.Cluster.CapacityGPUs)
	}
	if len(v.Users) != 9400 {
		t.Errorf("%d users hold GPUs, want 9400 (1400 MIG slices + 8000 T4 replicas)", len(v.Users))
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/services/gpu-usage/api/v1/me", nil)
	req.Header.Set("Authorization", "token tok-"+UserName(42))
	meHandler(t, 3).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("me: %d %s", rec.Code, rec.Body)
	}
}

func benchmarkMe(b *testing.B, query string) {
	h := meHandler(b, 720)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/services/gpu-usage/api/v1/me"+query, nil)
		req.Header.Set("Authorization", "token tok-"+UserName(i%10000))
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
		i++
	}
}

// BenchmarkMeFullHistory is the CPU cost of one me answer with an hour of history (720 points).
func BenchmarkMeFullHistory(b *testing.B) { benchmarkMe(b, "") }

// BenchmarkMeSince is a polling panel's request: only the newest point.
func BenchmarkMeSince(b *testing.B) {
	benchmarkMe(b, "?since="+time.Now().Add(-5*time.Second).UTC().Format(time.RFC3339))
}

// BenchmarkBuild is one tick's view of B1's 20,000-user cluster (2,000 GPUs, 20,000 pods): what each tick of the
// usage API allocates for garbage collection to clear, under the requests it serves.
func BenchmarkBuild(b *testing.B) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := Synthesize(20000, 2000, 20000, 4, now)
	b.ReportAllocs()
	for b.Loop() {
		usage.Build(usage.Input{Now: now, Interval: 5 * time.Second, Pods: c.Pods, Nodes: c.Nodes, Agents: c.Agents, Hub: c.Hub})
	}
}
