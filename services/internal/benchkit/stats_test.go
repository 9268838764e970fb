package benchkit

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAtMostJudgesEachRun(t *testing.T) {
	tests := map[string]struct {
		p99s        []float64 // ms, one per run
		target      float64
		wantVerdict Verdict
		wantOK      bool
		wantString  string
	}{
		"every run met": {
			p99s: []float64{3.3, 4.9, 4.9}, target: 5,
			wantVerdict: Verdict{Met: 3, Runs: 3}, wantOK: true, wantString: "met (3 of 3 runs)",
		},
		// The case the median hid: the median (4.9 ms) meets 5 ms, one run (7.3 ms) does not.
		"median met, one run missed": {
			p99s: []float64{7.3, 4.9, 3.7}, target: 5,
			wantVerdict: Verdict{Met: 2, Runs: 3}, wantOK: false, wantString: "NOT met (met in 2 of 3 runs)",
		},
		"on the bound": {
			p99s: []float64{5}, target: 5,
			wantVerdict: Verdict{Met: 1, Runs: 1}, wantOK: true, wantString: "met (1 of 1 runs)",
		},
		"no run met": {
			p99s: []float64{27.7, 25, 38}, target: 10,
			wantVerdict: Verdict{Met: 0, Runs: 3}, wantOK: false, wantString: "NOT met (met in 0 of 3 runs)",
		},
		"no runs": {
			target: 5, wantVerdict: Verdict{}, wantOK: false, wantString: "not measured",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := AtMost(tc.p99s, tc.target)
			if diff := cmp.Diff(tc.wantVerdict, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.OK() != tc.wantOK {
				t.Errorf("OK() = %v, want %v", got.OK(), tc.wantOK)
			}
			if got.String() != tc.wantString {
				t.Errorf("String() = %q, want %q", got.String(), tc.wantString)
			}
		})
	}
}

func TestMedianHidesAMissedRun(t *testing.T) {
	p99s := []float64{7.3, 4.9, 3.7}
	if m := Median(p99s); m > 5 {
		t.Fatalf("median %v: the case needs a median that meets 5", m)
	}
	if v := AtMost(p99s, 5); v.OK() {
		t.Errorf("AtMost(%v, 5) = %v: one run missed, want not met", p99s, v)
	}
}

func TestPerRun(t *testing.T) {
	ours, floor := []float64{4, 9, 2}, []float64{2, 2, 1}
	// ours <= 3x the floor in the same run: 6, 6, 3 -> runs 0 and 2.
	got := PerRun(len(ours), func(i int) bool { return ours[i] <= 3*floor[i] })
	if diff := cmp.Diff(Verdict{Met: 2, Runs: 3}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
