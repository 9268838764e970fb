package usage

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// TestNotices: every pending notice on a user's pods, one per service (the earliest deadline), with its server;
// pods being deleted and values that are not notices are left out; pending pods count; the culler's snooze
// counts pass through.
func TestNotices(t *testing.T) {
	quota := func(deadline string) string {
		return `{"service":"gpu-quota","kind":"budget","reason":"budget_exhausted","message":"over","deadline":"` + deadline +
			`","snoozable":false,"createdAt":"2026-11-22T09:50:00Z"}`
	}
	ps := pods()
	ps[0].Server = "train"
	ps[0].Notices = map[string]string{notice.Key("gpu-quota"): quota("2026-11-22T10:10:00Z"),
		notice.Key("gpu-culler"): `{"service":"gpu-culler","kind":"idle","reason":"idle","message":"idle","snoozable":true,"createdAt":"2026-11-22T09:00:00Z","snoozes":1,"maxSnoozes":2}`}
	second := ps[0]
	second.Server, second.UID, second.Name = "", "ua2", "jupyter-alice-2"
	second.Notices = map[string]string{notice.Key("gpu-quota"): quota("2026-11-22T10:05:00Z")}
	going := ps[0]
	going.Server, going.Terminating = "old", true
	going.Notices = map[string]string{notice.Key("gpu-quota"): quota("2026-11-22T10:00:00Z")}
	ps[1].Notices = map[string]string{notice.Key("hand"): "not json"}
	ps[2].Notices = map[string]string{notice.Key("gpu-quota"): quota("2026-11-22T10:20:00Z")} // carol's pending pod
	ps = append(ps, second, going)

	v := Build(Input{Now: now, Interval: 5 * time.Second, Pods: ps, Nodes: nodes(), Hub: hub()})
	at := func(s string) time.Time { t, _ := time.Parse(time.RFC3339, s); return t }
	created := at("2026-11-22T09:50:00Z")
	want := map[string][]Notice{
		"alice": {
			{Notice: notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle", Message: "idle", Snoozable: true, CreatedAt: at("2026-11-22T09:00:00Z"),
				Snoozes: 1, MaxSnoozes: 2}, Server: "train"},
			{Notice: notice.Notice{Service: "gpu-quota", Kind: "budget", Reason: "budget_exhausted", Message: "over", Deadline: at("2026-11-22T10:05:00Z"), CreatedAt: created}},
		},
		"carol": {{Notice: notice.Notice{Service: "gpu-quota", Kind: "budget", Reason: "budget_exhausted", Message: "over", Deadline: at("2026-11-22T10:20:00Z"), CreatedAt: created}}},
	}
	if diff := cmp.Diff(want, v.Notices); diff != "" {
		t.Errorf("Notices (-want +got):\n%s", diff)
	}
}
