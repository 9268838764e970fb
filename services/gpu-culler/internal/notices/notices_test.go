package notices

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices/noticestest"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

var (
	t0   = time.Date(2026, 11, 23, 14, 40, 0, 0, time.UTC)
	rule = policy.Rule{Warn: 15 * time.Minute, Snooze: time.Hour, MaxSnoozes: 2}
)

func TestFromPod(t *testing.T) {
	good := notice.Notice{Service: Service, Kind: notice.KindIdle, Reason: "idle", Message: "m", Deadline: t0.Add(15 * time.Minute),
		Snoozable: true, CreatedAt: t0, Stops: true, StopsSince: t0, Snoozes: 1, MaxSnoozes: 2}
	tests := map[string]struct {
		annotations map[string]string
		want        decide.Notice
		wantNotice  notice.Notice
		wantOK      bool
	}{
		"none":         {annotations: map[string]string{notice.Key("gpu-quota"): enc(t, good)}},
		"not a notice": {annotations: map[string]string{Key: "{"}},
		"no deadline":  {annotations: map[string]string{Key: `{"kind":"idle","message":"m"}`}},
		"the culler's": {
			annotations: map[string]string{Key: enc(t, good)},
			want:        decide.Notice{Reason: decide.ReasonIdle, Since: t0, Deadline: t0.Add(15 * time.Minute), Snoozes: 1},
			wantNotice:  good, wantOK: true,
		},
		"written by hand, without stopsSince": {
			annotations: map[string]string{Key: `{"reason":"idle","deadline":"2026-11-23T15:00:00Z","createdAt":"2026-11-23T14:40:00Z"}`},
			want:        decide.Notice{Reason: decide.ReasonIdle, Since: t0, Deadline: t0.Add(20 * time.Minute)},
			wantNotice:  notice.Notice{Service: Service, Reason: "idle", Deadline: t0.Add(20 * time.Minute), CreatedAt: t0}, wantOK: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, gotNotice, ok := FromPod(tc.annotations)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decide.Notice (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNotice, gotNotice); diff != "" {
				t.Errorf("notice.Notice (-want +got):\n%s", diff)
			}
		})
	}
}

func enc(t *testing.T, n notice.Notice) string {
	t.Helper()
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBuild writes the notices a pass builds into testdata/build.golden: the annotation values of contract C2.
func TestBuild(t *testing.T) {
	deadline := t0.Add(15 * time.Minute)
	warn := decide.Decision{Action: decide.Warn, Reason: decide.ReasonIdle, Deadline: deadline, Message: "Your GPU has been idle for 45 min; this server stops at 14:55 UTC unless you use it or snooze."}
	tests := []struct {
		name string
		d    decide.Decision
		r    policy.Rule
		prev decide.Notice
	}{
		{name: "first warning", d: warn, r: rule},
		{name: "warning shown since 14:30", d: warn, r: rule, prev: decide.Notice{Reason: decide.ReasonIdle, Since: t0.Add(-10 * time.Minute), Deadline: deadline}},
		{name: "snoozed once, held", r: rule,
			d:    decide.Decision{Action: decide.Skip, Reason: decide.ReasonSnoozed, Would: decide.Stop, Deadline: t0.Add(time.Hour), Message: "Snoozed once. ..."},
			prev: decide.Notice{Reason: decide.ReasonIdle, Since: t0.Add(-20 * time.Minute), Deadline: t0.Add(time.Hour), Snoozes: 1}},
		{name: "no snoozes left", d: warn, r: rule, prev: decide.Notice{Reason: decide.ReasonIdle, Since: t0.Add(-time.Hour), Deadline: deadline, Snoozes: 2}},
		{name: "max age", r: rule, d: decide.Decision{Action: decide.Warn, Reason: decide.ReasonMaxAge, Deadline: deadline, Message: "This server has run for 6 days 23 h..."}},
		{name: "rule without snoozes", d: warn, r: policy.Rule{Warn: 15 * time.Minute}},
	}
	var got []byte
	for _, tc := range tests {
		b, err := json.Marshal(Build(tc.d, tc.r, tc.prev, t0))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, "# "+tc.name+"\n"...)
		got = append(got, b...)
		got = append(got, '\n')
	}
	golden.Check(t, "build.golden", got)
}

func TestWriteSetsClearsAndConflicts(t *testing.T) {
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: "jupyter-alice", ResourceVersion: "7",
		Annotations: map[string]string{"hub.jupyter.org/username": "alice"}}}
	c := fake.NewClientset(pod)
	noticestest.Versioned(c, "pods")
	pods := c.CoreV1().Pods("jhub")

	n := Build(decide.Decision{Action: decide.Warn, Reason: decide.ReasonIdle, Deadline: t0.Add(15 * time.Minute), Message: "m"}, rule, decide.Notice{}, t0)
	if err := Write(ctx, c, pod, &n); err != nil {
		t.Fatal(err)
	}
	got, err := pods.Get(ctx, "jupyter-alice", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, back, ok := FromPod(got.Annotations); !ok || !cmp.Equal(n, back) {
		t.Errorf("read back %+v, %v; want %+v", back, ok, n)
	}
	if got.Annotations["hub.jupyter.org/username"] != "alice" {
		t.Errorf("the other annotations are gone: %v", got.Annotations)
	}

	// The first copy is stale now: a write from it conflicts and changes nothing.
	err = Write(ctx, c, pod, nil)
	if !apierrors.IsConflict(err) {
		t.Fatalf("write from a stale pod: %v, want a Conflict", err)
	}
	if again, _ := pods.Get(ctx, "jupyter-alice", metav1.GetOptions{}); again.Annotations[Key] == "" {
		t.Error("a conflicting clear removed the notice")
	}

	if err := Write(ctx, c, got, nil); err != nil {
		t.Fatal(err)
	}
	got, _ = pods.Get(ctx, "jupyter-alice", metav1.GetOptions{})
	if diff := cmp.Diff(map[string]string{"hub.jupyter.org/username": "alice"}, got.Annotations); diff != "" {
		t.Errorf("after clear (-want +got):\n%s", diff)
	}
}

func TestFromPods(t *testing.T) {
	n := Build(decide.Decision{Action: decide.Warn, Reason: decide.ReasonIdle, Deadline: t0, Message: "m"}, rule, decide.Notice{}, t0)
	pod := func(server string, deleting bool, notice bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationServer: server}}}
		if notice {
			p.Annotations[Key] = enc(t, n)
		}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: t0}
		}
		return p
	}
	got := FromPods([]*corev1.Pod{pod("b", false, true), pod("", false, true), pod("c", true, true), pod("d", false, false)})
	want := []OnServer{{Server: "", Notice: n}, {Server: "b", Notice: n}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FromPods (-want +got):\n%s", diff)
	}
}
