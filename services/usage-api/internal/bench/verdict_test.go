package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

func run(p50, p99 time.Duration, errors int, cpu float64) measured {
	return measured{LoadResult: LoadResult{P50: p50, P99: p99, Errors: errors}, CPUPercent: cpu}
}

func TestJudgeB1EachRun(t *testing.T) {
	ms := time.Millisecond
	floor := []measured{run(ms/2, 4*ms, 0, 20), run(ms/2, 5*ms, 0, 20), run(ms/2, 4*ms, 0, 20)}
	tests := map[string]struct {
		runs []measured
		want b1Verdict
	}{
		"every run met": {
			runs: []measured{run(ms, 10*ms, 0, 30), run(ms, 12*ms, 0, 31), run(ms, 11*ms, 0, 29)},
			want: b1Verdict{p50: benchkit.Verdict{Met: 3, Runs: 3}, p99: benchkit.Verdict{Met: 3, Runs: 3},
				floor: benchkit.Verdict{Met: 3, Runs: 3}, errors: benchkit.Verdict{Met: 3, Runs: 3}, cpu: benchkit.Verdict{Met: 3, Runs: 3}},
		},
		// The median p99 (12 ms) meets 20 ms and 3x the floor; run 1 (25 ms) meets neither, run 3 (13 ms) is over
		// 3x its own run's floor (12 ms).
		"median met, runs missed": {
			runs: []measured{run(ms, 25*ms, 0, 30), run(ms, 12*ms, 0, 31), run(3*ms, 13*ms, 2, 60)},
			want: b1Verdict{p50: benchkit.Verdict{Met: 2, Runs: 3}, p99: benchkit.Verdict{Met: 2, Runs: 3},
				floor: benchkit.Verdict{Met: 1, Runs: 3}, errors: benchkit.Verdict{Met: 2, Runs: 3}, cpu: benchkit.Verdict{Met: 2, Runs: 3}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := judgeB1(tc.runs, floor)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(b1Verdict{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// Without the floor's run the ratio cannot be met.
	if got := judgeB1([]measured{run(ms, 10*ms, 0, 30)}, nil).floor; got.OK() {
		t.Errorf("no floor: %v, want not met", got)
	}
}

func TestWriteB1Verdicts(t *testing.T) {
	var b bytes.Buffer
	ms := time.Millisecond
	floor := []measured{run(ms/2, 4*ms, 0, 20), run(ms/2, 5*ms, 0, 20), run(ms/2, 4*ms, 0, 20)}
	v := judgeB1([]measured{run(ms, 25*ms, 0, 30), run(ms, 12*ms, 0, 31), run(ms, 11*ms, 0, 29)}, floor)
	writeB1Verdicts(&b, 2000, []string{"usage-api me (1 h history)"}, []b1Verdict{v})
	want := "| usage-api me (1 h history) | met (3 of 3 runs) | NOT met (met in 2 of 3 runs) | NOT met (met in 2 of 3 runs) | met (3 of 3 runs) | met (3 of 3 runs) |\n"
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("got\n%s\nwant it to end with\n%s", b.String(), want)
	}
	if !strings.Contains(b.String(), "| p50 <= 2.00 ms | p99 <= 20.00 ms | p99 <= 3x the Go floor's, same run | 0 errors | <= 50% of one core |") {
		t.Errorf("header: got\n%s", b.String())
	}
}
