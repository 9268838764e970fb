package admit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/usagecache"
	"github.com/gpuhub/gpuhub/services/internal/decision"
)

// benchPolicy is the demo's shape at campus scale: students, researchers, a default with a budget.
const benchPolicy = `
default:
  maxGPUs: 1
  maxServers: 2
  budgets: [{window: 24h, gpuHours: 8}, {window: 30d, gpuHours: 100}]
  weights: {"gpu H100-80GB-HBM3": 2, shared: 0.25}
groups:
  students:
    maxGPUs: 3/7
    maxServers: 1
    allowedKinds: [mig, shared]
    budgets: [{window: 24h, gpuHours: 2}, {window: 7d, gpuHours: 6}]
  researchers:
    maxGPUs: 2
    maxGPUsPerKind: {mig: 3/7}
    maxServers: 3
    allowedKinds: [gpu, mig]
users:
  user00042: {exempt: true}
`

// benchRig is an engine holding users users with one GPU pod each on a cluster of 100 H100 nodes (8 each),
// 200 A100s in MIG and 100 T4 nodes (4 GPUs x 4 shares), fed through its event handlers as the informers do;
// its GPU-hours come from a usage cache loaded from a fake usage API with every user's use.
func benchRig(b testing.TB, users int) (*Engine, []Request) {
	b.Helper()
	log, err := decision.NewLog(decision.Options{Service: Service})
	if err != nil {
		b.Fatal(err)
	}
	pol := mustPolicy(b, benchPolicy)
	dir := make(map[string][]string, users)
	hours := map[string]map[string]map[string]float64{"24h": {}, "7d": {}, "30d": {}}
	for i := range users {
		name := fmt.Sprintf("user%05d", i)
		dir[name] = []string{[]string{"students", "researchers"}[i%2]}
		for _, w := range []string{"24h", "7d", "30d"} {
			hours[w][name] = map[string]float64{classMIG1: 0.5, classT4: 1}
		}
	}
	usageAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"asOf": time.Now().UTC(), "windows": hours})
	}))
	b.Cleanup(usageAPI.Close)
	cache, err := usagecache.New(usagecache.Options{URL: usageAPI.URL + "/", Refresh: time.Hour,
		Windows: func() []time.Duration { return []time.Duration{day, 7 * day, 30 * day} }})
	if err != nil {
		b.Fatal(err)
	}
	cache.Refresh(context.Background())
	e, err := New(Options{Policy: func() *quota.Policy { return pol }, Hours: cache, Log: log,
		Directory: func() (map[string][]string, error) { return dir, nil }})
	if err != nil {
		b.Fatal(err)
	}
	nodes := e.NodeHandler()
	for i := range 100 {
		nodes.OnAdd(node(fmt.Sprintf("h100-%03d", i), h100Labels, map[string]int64{"nvidia.com/gpu": 8}), true)
		nodes.OnAdd(node(fmt.Sprintf("t4-%03d", i), t4Labels, map[string]int64{"nvidia.com/gpu.shared": 16}), true)
	}
	for i := range 200 {
		nodes.OnAdd(node(fmt.Sprintf("a100-%03d", i), a100Labels, map[string]int64{"nvidia.com/mig-3g.20gb": 2, "nvidia.com/mig-1g.5gb": 1}), true)
	}
	pods := e.PodHandler()
	for i := range users {
		name := fmt.Sprintf("user%05d", i)
		var p = pod("jupyter-"+name, name, "", fmt.Sprintf("t4-%03d", i%100), "nvidia.com/gpu.shared", started(time.Now().Add(-time.Hour)))
		switch i % 4 {
		case 1:
			p = pod("jupyter-"+name, name, "", fmt.Sprintf("a100-%03d", i%200), "nvidia.com/mig-3g.20gb")
		case 3:
			p = pod("jupyter-"+name, name, "", fmt.Sprintf("h100-%03d", i%100), "nvidia.com/gpu")
		}
		pods.OnAdd(p, true)
	}
	var reqs []Request
	for i := range 1024 {
		name := fmt.Sprintf("user%05d", (i*7919)%users)
		switch i % 3 {
		case 0:
			reqs = append(reqs, t4(name, "second"))
		case 1:
			reqs = append(reqs, mig(name, "", "1g.5gb"))
		default:
			reqs = append(reqs, h100(name, "gpu", 1))
		}
	}
	return e, reqs
}

// BenchmarkAdmit is one in-process decision with 10,000 users holding 10,000 GPU pods (issue 10, B2: p99
// <= 100 µs). It reports the p50 and p99 of the decisions it made.
func BenchmarkAdmit(b *testing.B) {
	e, reqs := benchRig(b, 10_000)
	lat := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if _, err := e.Admit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	}
}

// BenchmarkAssess is one form's assessment (the six choices of the test cluster) for the same 10,000 users:
// it runs at every render of the spawn form, so it must cost about one admission.
func BenchmarkAssess(b *testing.B) {
	e, reqs := benchRig(b, 10_000)
	opts := formOptions()
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := reqs[i%len(reqs)]
		if _, err := e.Assess(ctx, AssessRequest{User: r.User, Server: r.Server, Options: opts}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkViews is what the enforcer reads every pass: every GPU user's view, for the same 10,000 users.
func BenchmarkViews(b *testing.B) {
	e, _ := benchRig(b, 10_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Views(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerdictPass is one pass of a watch of verdicts over the same 10,000 users and the six choices of the
// test cluster: the first table (every line, encoded as the stream sends it), and a full pass after a change
// that moves no verdict (every user assessed, no line).
func BenchmarkVerdictPass(b *testing.B) {
	e, _ := benchRig(b, 10_000)
	ctx := context.Background()
	b.Run("first table", func(b *testing.B) {
		enc := json.NewEncoder(io.Discard)
		emit := func(l VerdictLine) error { return enc.Encode(l) }
		b.ReportAllocs()
		for b.Loop() {
			w := e.WatchVerdicts(formOptions())
			if _, err := w.Pass(ctx, emit); err != nil {
				b.Fatal(err)
			}
			w.Close()
		}
	})
	b.Run("nothing moved", func(b *testing.B) {
		w := e.WatchVerdicts(formOptions())
		defer w.Close()
		emit := func(VerdictLine) error { return nil }
		if _, err := w.Pass(ctx, emit); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			e.Changed()
			if kind, err := w.Pass(ctx, func(VerdictLine) error { return errors.New("a line") }); err != nil || kind != PassFull {
				b.Fatal(kind, err)
			}
		}
	})
}
