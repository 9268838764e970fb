package notice

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestSetParseClear(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: "jupyter-bob",
		Annotations: map[string]string{"hub.jupyter.org/username": "bob"}}})
	at := time.Date(2026, 11, 23, 14, 30, 0, 0, time.UTC)
	want := Notice{Service: "gpu-quota", Kind: KindBudget, Reason: "budget_exhausted", Message: "over your 24 h GPU budget",
		Deadline: at, CreatedAt: at.Add(-10 * time.Minute), Snoozes: 1, MaxSnoozes: 2}
	if err := Set(ctx, c, "jhub", "jupyter-bob", want); err != nil {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods("jhub").Get(ctx, "jupyter-bob", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, errs := Parse(pod.Annotations)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if diff := cmp.Diff([]Notice{want}, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if err := Clear(ctx, c, "jhub", "jupyter-bob", "gpu-quota"); err != nil {
		t.Fatal(err)
	}
	pod, _ = c.CoreV1().Pods("jhub").Get(ctx, "jupyter-bob", metav1.GetOptions{})
	if diff := cmp.Diff(map[string]string{"hub.jupyter.org/username": "bob"}, pod.Annotations); diff != "" {
		t.Errorf("after Clear (-want +got):\n%s", diff)
	}
}

func TestParseSkipsForeignValues(t *testing.T) {
	got, errs := Parse(map[string]string{Key("gpu-culler"): `{"kind":"idle","message":"idle"}`, Key("x"): "not json", "other": "{}"})
	if len(errs) != 1 || len(got) != 1 || got[0].Service != "gpu-culler" {
		t.Errorf("Parse = %+v, %v", got, errs)
	}
}

// TestSnoozesJSON pins the names of the snooze fields (contract C2) and that a notice without snoozes leaves
// them out, so other services' notices do not change.
func TestSnoozesJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 14, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		n    Notice
		want string
	}{
		{Notice{Service: "gpu-culler", Kind: KindIdle, Reason: "idle", Deadline: at, CreatedAt: at, Snoozes: 1, MaxSnoozes: 2},
			`{"service":"gpu-culler","kind":"idle","reason":"idle","message":"","deadline":"2026-11-23T14:30:00Z","snoozable":false,"createdAt":"2026-11-23T14:30:00Z","snoozes":1,"maxSnoozes":2}`},
		{Notice{Service: "gpu-quota", Kind: KindBudget, CreatedAt: at},
			`{"service":"gpu-quota","kind":"budget","reason":"","message":"","snoozable":false,"createdAt":"2026-11-23T14:30:00Z"}`},
	} {
		b, err := json.Marshal(tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, string(b)); diff != "" {
			t.Errorf("JSON (-want +got):\n%s", diff)
		}
	}
}
