package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

func httpRun(p99 time.Duration, reads float64) pair {
	return pair{ours: benchkit.Latencies{N: 6400, P99: p99, ReadsPerCall: reads, Bursts: make([]time.Duration, 100)},
		naive: benchkit.Latencies{N: 64, P99: 25 * time.Second, ReadsPerCall: 2}}
}

func TestJudgeEachRun(t *testing.T) {
	in := pair{ours: benchkit.Latencies{P99: 20 * time.Microsecond}}
	tests := map[string]struct {
		in   pair
		runs []pair
		race raceResult
		want verdicts
	}{
		"every run met": {
			in: in, runs: []pair{httpRun(3260*time.Microsecond, 0), httpRun(4880*time.Microsecond, 0), httpRun(4940*time.Microsecond, 0)},
			race: raceResult{oursAdmitted: 7, limit: 7},
			want: verdicts{inProcessP99: benchkit.Verdict{Met: 1, Runs: 1}, inProcessReads: benchkit.Verdict{Met: 1, Runs: 1},
				httpP99: benchkit.Verdict{Met: 3, Runs: 3}, httpReads: benchkit.Verdict{Met: 3, Runs: 3}, race: benchkit.Verdict{Met: 1, Runs: 1}},
		},
		// The median of the three p99s (4.88 ms) meets 5 ms; the run at 7.32 ms does not, so B2 does not.
		"median met, one run missed": {
			in: in, runs: []pair{httpRun(7320*time.Microsecond, 0), httpRun(4880*time.Microsecond, 0), httpRun(3690*time.Microsecond, 0.01)},
			race: raceResult{oursAdmitted: 8, limit: 7},
			want: verdicts{inProcessP99: benchkit.Verdict{Met: 1, Runs: 1}, inProcessReads: benchkit.Verdict{Met: 1, Runs: 1},
				httpP99: benchkit.Verdict{Met: 2, Runs: 3}, httpReads: benchkit.Verdict{Met: 2, Runs: 3}, race: benchkit.Verdict{Met: 0, Runs: 1}},
		},
		// Two replicas are judged on their own: a run with an error (a relay without a decider) misses.
		"two replicas": {
			in: in, runs: []pair{twoRun(3*time.Millisecond, 4*time.Millisecond, 0), twoRun(3*time.Millisecond, 6*time.Millisecond, 0), twoRun(3*time.Millisecond, 4*time.Millisecond, 2)},
			race: raceResult{oursAdmitted: 7, limit: 7, two: true, twoAdmitted: 7},
			want: verdicts{inProcessP99: benchkit.Verdict{Met: 1, Runs: 1}, inProcessReads: benchkit.Verdict{Met: 1, Runs: 1},
				httpP99: benchkit.Verdict{Met: 3, Runs: 3}, httpReads: benchkit.Verdict{Met: 3, Runs: 3}, race: benchkit.Verdict{Met: 1, Runs: 1},
				twoHTTPP99: benchkit.Verdict{Met: 1, Runs: 3}, twoHTTPReads: benchkit.Verdict{Met: 3, Runs: 3}, twoRace: benchkit.Verdict{Met: 1, Runs: 1}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := judge(tc.in, tc.runs, tc.race)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(verdicts{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// twoRun is a run of the single replica (p99 one) and of two replicas (p99 two, errs errors).
func twoRun(one, two time.Duration, errs int) pair {
	p := httpRun(one, 0)
	p.two = benchkit.Latencies{N: 6400, P99: two, Errors: errs, Bursts: make([]time.Duration, 100)}
	return p
}

func TestReportTwoReplicas(t *testing.T) {
	var out, table bytes.Buffer
	o := RunOptions{Out: &out, Report: &table, Concurrency: 64, SUTCPU: "0", TwoReplicas: true}
	runs := []pair{twoRun(3*time.Millisecond, 4500*time.Microsecond, 0), twoRun(3*time.Millisecond, 4*time.Millisecond, 0), twoRun(3*time.Millisecond, 6*time.Millisecond, 0)}
	o.report(pair{ours: benchkit.Latencies{P99: 20 * time.Microsecond}}, runs,
		raceResult{oursAdmitted: 7, limit: 7, requests: 1000, two: true, twoAdmitted: 7, relayed: relayed{ok: 9600, calls: 19200}})
	for _, want := range []string{
		"HTTP p99, 64 at once (median)             4.50 ms        3.00 ms      1.50x <= 5.00 ms, no errors, in every run: NOT met (met in 2 of 3 runs)",
		"2 replicas' p99 in each run      4.50 / 4.00 / 6.00 ms",
		"relayed by the standby                     50.0 %                           9600 of 19200 measured calls; 0 found no decider (503)",
		"race: 1000 at once, limit 7            7 admitted     7 admitted            exactly 7: met (1 of 1 runs)",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	o.TwoReplicas = false
	table.Reset()
	o.report(pair{}, runs, raceResult{limit: 7, requests: 1000})
	if strings.Contains(table.String(), "2 replicas") {
		t.Errorf("the table has two replicas' rows, not measured:\n%s", table.String())
	}
}

func TestReportSaysHowManyRunsMet(t *testing.T) {
	var out, table bytes.Buffer
	o := RunOptions{Out: &out, Report: &table, Concurrency: 64}
	o.printf("progress line\n")
	runs := []pair{httpRun(7320*time.Microsecond, 0), httpRun(4880*time.Microsecond, 0), httpRun(3690*time.Microsecond, 0)}
	o.report(pair{ours: benchkit.Latencies{P99: 20 * time.Microsecond}}, runs, raceResult{oursAdmitted: 7, limit: 7, requests: 1000})
	for _, want := range []string{
		"<= 5.00 ms in every run: NOT met (met in 2 of 3 runs)",
		"gpu-quota's p99 in each run      7.32 / 4.88 / 3.69 ms",
		"<= 100.0 µs: met (1 of 1 runs)",
		"exactly 7: met (1 of 1 runs)",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), "progress line") {
		t.Error("the table holds what came before the report")
	}
	if !strings.HasSuffix(out.String(), table.String()) {
		t.Error("stdout does not end with the table")
	}
}

func TestPerRun(t *testing.T) {
	dms := func(x float64) string { return ms(time.Duration(x)) }
	if got, want := perRun([]float64{3.26e6, 4.88e6}, dms), "3.26 / 4.88 ms"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := perRun(nil, dms); got != "-" {
		t.Errorf("none: got %q", got)
	}
}
