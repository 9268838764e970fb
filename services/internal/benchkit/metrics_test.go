package benchkit

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMetrics(t *testing.T) {
	tests := map[string]struct {
		in   string
		want map[string]float64
	}{
		"gauge and labelled counter": {
			in: `# HELP gpuhub_quota_deciding 1 on the replica that decides
# TYPE gpuhub_quota_deciding gauge
gpuhub_quota_deciding 1
gpuhub_quota_forwarded_total{result="ok"} 3200
gpuhub_quota_forwarded_total{result="unavailable"} 0
`,
			want: map[string]float64{"gpuhub_quota_deciding": 1, `gpuhub_quota_forwarded_total{result="ok"}`: 3200,
				`gpuhub_quota_forwarded_total{result="unavailable"}`: 0},
		},
		"not samples": {in: "\nno_value\nbad_value x\n", want: map[string]float64{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseMetrics(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
