package bench

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

func runs(p99s ...time.Duration) []benchkit.Latencies {
	var out []benchkit.Latencies
	for _, p := range p99s {
		out = append(out, benchkit.Latencies{N: 3200, P99: p})
	}
	return out
}

func TestJudgeAsTheChartShips(t *testing.T) {
	ms := time.Millisecond
	plain := func(r []benchkit.Latencies) *system {
		return &system{name: "gpu-profiles", chart: QuotaDisabled, bursts: r}
	}
	withQuota := func(r []benchkit.Latencies) *system {
		return &system{name: "with gpu-quota", chart: QuotaEnabled, bursts: r}
	}
	baseline := &system{name: "baseline", bursts: runs(32*time.Second, 26*time.Second, 32*time.Second)}
	tests := map[string]struct {
		systems   []*system
		wantP99   []benchkit.Verdict // quota disabled, quota enabled
		wantMet   bool
		wantLines []string
	}{
		// The verdict of 2026-11-23: gpu-profiles alone met 10 ms, the chart's configuration with quota did not.
		"with gpu-quota missed": {
			systems: []*system{plain(runs(7900*time.Microsecond, 7200*time.Microsecond, 9600*time.Microsecond)), baseline,
				withQuota(runs(27700*time.Microsecond, 25*ms, 38*ms))},
			wantP99: []benchkit.Verdict{{Met: 3, Runs: 3}, {Met: 0, Runs: 3}},
			wantLines: []string{
				"quota disabled: p99 <= 10.00 ms: met (3 of 3 runs), each run's p99 7.90 / 7.20 / 9.60 ms",
				"quota enabled:  p99 <= 10.00 ms: NOT met (met in 0 of 3 runs), each run's p99 27.70 / 25.00 / 38.00 ms",
				"B7: NOT met\n",
			},
		},
		// The median of the p99s (8 ms) meets 10 ms; one run (12 ms) does not.
		"median met, one run missed": {
			systems: []*system{plain(runs(5*ms, 6*ms, 7*ms)), baseline, withQuota(runs(8*ms, 12*ms, 7*ms))},
			wantP99: []benchkit.Verdict{{Met: 3, Runs: 3}, {Met: 2, Runs: 3}},
			wantLines: []string{
				"quota enabled:  p99 <= 10.00 ms: NOT met (met in 2 of 3 runs)",
				"B7: NOT met\n",
			},
		},
		"both met": {
			systems:   []*system{plain(runs(5*ms, 6*ms)), baseline, withQuota(runs(8*ms, 9*ms))},
			wantP99:   []benchkit.Verdict{{Met: 2, Runs: 2}, {Met: 2, Runs: 2}},
			wantMet:   true,
			wantLines: []string{"B7: met\n"},
		},
		// Without --quota-bin the chart's configuration with quota is not measured: B7 cannot be met.
		"quota not measured": {
			systems: []*system{plain(runs(5*ms, 6*ms)), baseline},
			wantP99: []benchkit.Verdict{{Met: 2, Runs: 2}, {}},
			wantLines: []string{
				"quota enabled:  not measured (profiles-bench --quota-bin",
				"B7: NOT met\n",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			vs := judge(tc.systems)
			var got []benchkit.Verdict
			for _, v := range vs {
				got = append(got, v.p99)
			}
			if diff := cmp.Diff(tc.wantP99, got); diff != "" {
				t.Errorf("p99 verdicts (-want +got):\n%s", diff)
			}
			if met(vs) != tc.wantMet {
				t.Errorf("met = %v, want %v", met(vs), tc.wantMet)
			}
			var out bytes.Buffer
			RunOptions{Out: &out}.writeVerdicts(vs)
			for _, line := range tc.wantLines {
				if !strings.Contains(out.String(), line) {
					t.Errorf("output lacks %q:\n%s", line, out.String())
				}
			}
		})
	}
}

func TestReportGoesToReport(t *testing.T) {
	var out, table bytes.Buffer
	o := RunOptions{Out: &out, Report: &table, Concurrency: 64, Compare: 20}
	o.printf("progress\n")
	o.reporting().report([]*system{
		{name: "gpu-profiles", chart: QuotaDisabled, bursts: runs(5 * time.Millisecond), saturated: runs(5 * time.Millisecond)},
		{name: "baseline", bursts: runs(30 * time.Second), saturated: runs(30 * time.Second)},
		{name: "with gpu-quota", chart: QuotaEnabled, bursts: runs(27 * time.Millisecond), saturated: runs(27 * time.Millisecond)},
	}, 20)
	if strings.Contains(table.String(), "progress") || !strings.Contains(table.String(), "B7: NOT met") {
		t.Errorf("table:\n%s", table.String())
	}
	if !strings.HasSuffix(out.String(), table.String()) {
		t.Error("stdout does not end with the table")
	}
}

// TestLabelled: the report's lines of counters by label read every series of the family from /metrics, the new
// label pushed among them; waitWatching waits for gpu-profiles' watch to be in sync.
func TestLabelled(t *testing.T) {
	var exposition atomic.Pointer[string]
	text := `# HELP gpuhub_profiles_quota_assess_total x
# TYPE gpuhub_profiles_quota_assess_total counter
gpuhub_profiles_quota_assess_total{result="cached"} 3
gpuhub_profiles_quota_assess_total{result="ok"} 2
gpuhub_profiles_quota_assess_total{result="pushed"} 40725
gpuhub_profiles_quota_watch_in_sync 1
gpuhub_quota_verdict_passes_total{pass="full"} 1
gpuhub_quota_verdict_passes_total{pass="skipped"} 99
`
	exposition.Store(&text)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, *exposition.Load()) }))
	defer srv.Close()
	tests := map[string]struct{ prefix, want string }{
		"gpu-profiles' renders": {`gpuhub_profiles_quota_assess_total{result="`, "cached 3, ok 2, pushed 40725"},
		"gpu-quota's passes":    {`gpuhub_quota_verdict_passes_total{pass="`, "full 1, skipped 99"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, labelled(t.Context(), srv.Client(), srv.URL, tc.prefix)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if err := waitWatching(t.Context(), srv.URL, time.Second); err != nil {
		t.Errorf("waitWatching: %v", err)
	}
	out := strings.Replace(text, "in_sync 1", "in_sync 0", 1)
	exposition.Store(&out)
	if err := waitWatching(t.Context(), srv.URL, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not hold") {
		t.Errorf("waitWatching out of sync: %v", err)
	}
}
