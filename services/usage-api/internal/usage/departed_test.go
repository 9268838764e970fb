package usage

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// A pod that went since the last tick gives the ledger one sample per unit it held, with Until (charged up to
// when it went) and utilization unknown; it is in no view. One still listed as holding, one that held nothing and
// one of no Hub user give none.
func TestBuildDepartedSamples(t *testing.T) {
	went := now.Add(-3 * time.Second)
	erin := inventory.Pod{UID: "ue", Namespace: "jhub", Name: "jupyter-erin", Node: "gpu-a100-0", User: "erin", Phase: corev1.PodRunning,
		Resources: map[string]int64{"nvidia.com/mig-3g.20gb": 2}, Started: now.Add(-time.Minute)}
	mig := ledger.Key{User: "erin", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}
	tests := map[string]struct {
		departed []Departure
		want     []ledger.Sample
	}{
		"gone": {
			departed: []Departure{{Pod: erin, At: went}},
			want: []ledger.Sample{
				{Key: mig, Pod: "ue", Since: now.Add(-time.Minute), Allocated: 3.0 / 7, Until: went},
				{Key: mig, Pod: "ue", Since: now.Add(-time.Minute), Allocated: 3.0 / 7, Until: went},
			},
		},
		"still listed as holding (told between the list and the tick)": {
			departed: []Departure{{Pod: pods()[0], At: went}},
		},
		"held nothing (Pending)": {
			departed: []Departure{{Pod: func() inventory.Pod { p := erin; p.Phase = corev1.PodPending; return p }(), At: went}},
		},
		"not a Hub user's": {
			departed: []Departure{{Pod: func() inventory.Pod { p := erin; p.User = ""; return p }(), At: went}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v := Build(Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: agents(now.Add(-time.Second), f(80)), Hub: hub(),
				Departed: tc.departed})
			var got []ledger.Sample
			for _, s := range v.Samples {
				if !s.Until.IsZero() {
					got = append(got, s)
				} else if s.Pod == "ue" {
					t.Errorf("a sample of the departed pod without Until: %+v", s)
				}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("departed samples (-want +got):\n%s", diff)
			}
			if _, ok := v.Users["erin"]; ok {
				t.Error("a departed pod is in the live view")
			}
			if len(v.Samples)-len(got) != 2 {
				t.Errorf("%d samples of holding pods, want alice's and bob's", len(v.Samples)-len(got))
			}
		})
	}
}
