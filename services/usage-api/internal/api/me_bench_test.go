package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/notice"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// benchLedger answers from memory: the ledger's window cache for today, 7 d and 30 d, one row for the
// difference to local midnight (cached by the handler after the first request).
type benchLedger struct{}

func (benchLedger) Available() error { return nil }
func (benchLedger) UserWindows(string) ledger.Windows {
	return ledger.Windows{Today: ledger.Totals{Allocated: 3.25, Used: 1.5, UsedUnknown: 0.25},
		Days7: ledger.Totals{Allocated: 21.5, Used: 9.75}, Days30: ledger.Totals{Allocated: 64.428571, Used: 30.1, UsedUnknown: 2.75}}
}
func (benchLedger) Hours(context.Context, ledger.Query) ([]ledger.Row, error) {
	return []ledger.Row{{Totals: ledger.Totals{Allocated: 0.5, Used: 0.25}}}, nil
}
func (benchLedger) Rolling(context.Context, []time.Duration, time.Time) (map[time.Duration]map[string]map[string]float64, error) {
	return nil, nil
}
func (benchLedger) Decayed(context.Context, time.Duration, time.Duration, time.Time) (map[string]map[string]float64, error) {
	return nil, nil
}

// benchBudget answers like budget.Client from its cache: the same bytes every time.
type benchBudget struct{}

var benchQuota = json.RawMessage(aliceQuota)

func (benchBudget) Get(context.Context, string) json.RawMessage { return benchQuota }

// benchWriter is a ResponseWriter that keeps nothing but the status, so that the benchmark counts what the
// handler allocates and not a recorder's copy of the body.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *benchWriter) WriteHeader(status int)      { w.status = status }

// benchHandler is the API with alice holding two servers (a MIG instance and a time-sliced replica), a notice
// and a budget, with an hour of history (720 samples), authenticated before the handler.
func benchHandler(b *testing.B) http.Handler {
	b.Helper()
	state := usage.NewState(usage.NewHistory(time.Hour, 5*time.Second))
	servers := []usage.Server{
		{Name: "", Pod: "jupyter-alice", Namespace: "jhub", Node: "gpu-a100-0", Ready: true, AllocatedGPUs: 3.0 / 7, UsedGPUs: f(0.3),
			GPUs: []usage.GPU{{Kind: "mig", Resource: "nvidia.com/mig-3g.20gb", Product: "NVIDIA-A100-SXM4-40GB", Profile: "3g.20gb",
				Class: "mig A100-SXM4-40GB 3g.20gb", Share: 3.0 / 7, ShareNumerator: 3, ShareDenominator: 7, Description: "3g.20gb MIG instance of an A100",
				UUID: "MIG-7d0c6b5e-2f4a-5b9c-8e1d-3a6f9b2c4d5e", SMUtilPercent: f(70), UtilizationSource: "dcgm", UsedGPUs: f(0.3),
				MemoryUsedBytes: 12 << 30, MemoryTotalBytes: 20 << 30}}},
		{Name: "big", Pod: "jupyter-alice--big", Namespace: "jhub", Node: "gpu-t4-3", Ready: true, AllocatedGPUs: 0.25, UsedGPUs: f(0.125),
			GPUs: []usage.GPU{{Kind: "shared", Resource: "nvidia.com/gpu.shared", Product: "Tesla-T4", Class: "shared Tesla-T4",
				Share: 0.25, ShareNumerator: 1, ShareDenominator: 4, Description: "a quarter of a T4 (time-sliced)",
				UUID: "GPU-0a1b2c3d-4e5f-6789-abcd-ef0123456789", SMUtilPercent: f(12.5), UtilizationSource: "nvml", UsedGPUs: f(0.125),
				MemoryUsedBytes: 3 << 30, MemoryTotalBytes: 16 << 30}}},
	}
	for i := 719; i >= 0; i-- {
		at := now.Add(-time.Duration(i) * 5 * time.Second)
		state.Publish(&usage.View{
			SampledAt: at, Interval: 5 * time.Second,
			Users: map[string]*usage.User{"alice": {Name: "alice", Groups: []string{"physics"},
				Share:   usage.Share{AllocatedGPUs: 3.0/7 + 0.25, UsedGPUs: f(0.425 + float64(i%7)/100), MemoryUsedBytes: 15 << 30, MemoryTotalBytes: 36 << 30},
				Servers: servers}},
			Hub: usage.Directory{Users: map[string]usage.HubUser{"alice": {Name: "alice", Groups: []string{"physics"}}}},
			Notices: map[string][]usage.Notice{"alice": {{Server: "big", Notice: notice.Notice{Service: "gpu-culler", Kind: notice.KindIdle, Reason: "idle",
				Message: "Your server big has been idle for 50 minutes: it stops at 11:00 UTC.", Deadline: now.Add(30 * time.Minute), Snoozable: true, CreatedAt: now}}}},
		})
	}
	return New(Options{Prefix: prefix, State: state, Ledger: benchLedger{}, Budget: benchBudget{}, Now: func() time.Time { return now },
		Auth: func(next http.Handler) http.Handler { return next }})
}

// BenchmarkMeHandler is the handler's cost of one me answer (allocs/op and B/op are what the collector has to
// clear at 2,000 requests a second): "full" is a panel's first request (an hour of history), "poll" each
// following one (the newest point), both in the user's zone and escaped as the panel escapes them
// (encodeURIComponent).
func BenchmarkMeHandler(b *testing.B) {
	tz := "&tz=" + url.QueryEscape("Europe/Berlin")
	for _, bc := range []struct{ name, query string }{
		{"full", "?history=true" + tz},
		{"poll", "?since=" + url.QueryEscape(now.Add(-5*time.Second).Format(time.RFC3339Nano)) + tz},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := benchHandler(b)
			ctx := hubauth.NewContext(context.Background(), &hubauth.Identity{Kind: "user", Name: "alice", Groups: []string{"physics"}})
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, prefix+"api/v1/me"+bc.query, nil)
			if err != nil {
				b.Fatal(err)
			}
			w := &benchWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}
