package snooze

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices/noticestest"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/notice"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

var t0 = time.Date(2026, 11, 23, 14, 50, 0, 0, time.UTC)

const policyYAML = `
gpu:
  warn: 15m
  snooze: 1h
  maxSnoozes: 2
  idleWhenContended: 20m
kinds:
  shared:
    snooze: 30m
    maxSnoozes: 1
profiles:
  gpu-h100-80gb-hbm3:
    maxSnoozes: 0
`

func mustPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	var p policy.Policy
	if err := ipolicy.Decode("test.yaml", []byte(policyYAML), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// podBuilder builds single-user pods.
type podBuilder struct{ p *corev1.Pod }

func pod(user string) *podBuilder {
	return &podBuilder{&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: "jupyter-" + user, ResourceVersion: "10", Labels: map[string]string{},
			Annotations: map[string]string{"hub.jupyter.org/username": user, "hub.jupyter.org/servername": ""}},
		Spec: corev1.PodSpec{NodeName: "gpu-0", Containers: []corev1.Container{{Name: "notebook"}}},
	}}
}

func (b *podBuilder) gpus(n int64) *podBuilder {
	b.p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpu.ResourceGPU: *resource.NewQuantity(n, resource.DecimalSI)}
	return b
}

func (b *podBuilder) profile(slug string) *podBuilder { b.p.Labels[LabelProfile] = slug; return b }

func (b *podBuilder) notice(reason decide.Reason, deadline time.Time, snoozes int) *podBuilder {
	n := notices.Notice(reason, "Your GPU has been idle for 50 min; ...", deadline, t0.Add(-10*time.Minute), snoozes, policy.Rule{})
	v, _ := jsonString(n)
	b.p.Annotations[notices.Key] = v
	return b
}

func (b *podBuilder) deleting() *podBuilder {
	b.p.DeletionTimestamp = &metav1.Time{Time: t0}
	return b
}

func jsonString(n notice.Notice) (string, error) {
	b, err := json.Marshal(n)
	return string(b), err
}

type fixture struct {
	c    *fake.Clientset
	s    *Snoozer
	log  *decision.Log
	pods map[string]*corev1.Pod
}

func newFixture(t *testing.T, pol *policy.Policy, pods ...*corev1.Pod) *fixture {
	t.Helper()
	f := &fixture{pods: map[string]*corev1.Pod{}}
	objs := make([]runtime.Object, 0, len(pods))
	for _, p := range pods {
		f.pods[p.Annotations["hub.jupyter.org/username"]] = p
		objs = append(objs, p.DeepCopy())
	}
	f.c = fake.NewClientset(objs...)
	noticestest.Versioned(f.c, "pods")
	var err error
	f.log, err = decision.NewLog(decision.Options{Service: "gpu-culler"})
	if err != nil {
		t.Fatal(err)
	}
	f.s = New(Options{
		Client: f.c, Decisions: f.log, Now: func() time.Time { return t0 },
		Pods: func(user, server string) (*corev1.Pod, bool) {
			p, ok := f.pods[user]
			return p, ok && server == ""
		},
		Policy: func() *policy.Policy { return pol },
		NodeLabels: func(node string) map[string]string {
			if node != "gpu-0" {
				return nil
			}
			return map[string]string{gpu.LabelProduct: "Tesla-T4", gpu.LabelReplicas: "4", gpu.LabelSharingStrategy: "time-slicing"}
		},
	})
	return f
}

func TestSnooze(t *testing.T) {
	pol := mustPolicy(t)
	deadline := t0.Add(5 * time.Minute)
	whole := func(user string) *podBuilder { b := pod(user).gpus(1); b.p.Spec.NodeName = "gpu-1"; return b }
	tests := map[string]struct {
		pod        *corev1.Pod
		user       string
		server     string
		want       notice.Notice
		wantErr    error
		wantErrMsg string
		wantShift  time.Duration
		// class is the server's GPU class as the usage API names it; waiting the class someone waits for.
		class, waiting string
		wantContended  bool
	}{
		"first snooze moves the deadline by an hour": {
			pod: whole("alice").notice(decide.ReasonIdle, deadline, 0).p, user: "alice",
			want: notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle", Deadline: deadline.Add(time.Hour), Snoozable: true,
				CreatedAt: t0.Add(-10 * time.Minute), Stops: true, StopsSince: t0.Add(-10 * time.Minute), Snoozes: 1, MaxSnoozes: 2,
				Message: "Snoozed: this server now stops at 15:55 UTC unless you use it (1 snooze left)."},
			wantShift: time.Hour,
		},
		"the last snooze": {
			pod: whole("alice").notice(decide.ReasonIdle, deadline, 1).p, user: "alice",
			want: notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle", Deadline: deadline.Add(time.Hour),
				CreatedAt: t0.Add(-10 * time.Minute), Stops: true, StopsSince: t0.Add(-10 * time.Minute), Snoozes: 2, MaxSnoozes: 2,
				Message: "Snoozed: this server now stops at 15:55 UTC unless you use it (no snoozes left)."},
			wantShift: time.Hour,
		},
		"a deadline passed (the stop is on its way): an hour from now": {
			pod: whole("alice").notice(decide.ReasonIdle, t0.Add(-time.Minute), 0).p, user: "alice",
			want: notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle", Deadline: t0.Add(time.Hour), Snoozable: true,
				CreatedAt: t0.Add(-10 * time.Minute), Stops: true, StopsSince: t0.Add(-10 * time.Minute), Snoozes: 1, MaxSnoozes: 2,
				Message: "Snoozed: this server now stops at 15:50 UTC unless you use it (1 snooze left)."},
			wantShift: time.Hour + time.Minute,
		},
		"a time-sliced share takes the shared rule": {
			pod: pod("alice").gpus(1).notice(decide.ReasonIdle, deadline, 0).p, user: "alice",
			want: notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle", Deadline: deadline.Add(30 * time.Minute),
				CreatedAt: t0.Add(-10 * time.Minute), Stops: true, StopsSince: t0.Add(-10 * time.Minute), Snoozes: 1, MaxSnoozes: 1,
				Message: "Snoozed: this server now stops at 15:25 UTC unless you use it (no snoozes left)."},
			wantShift: 30 * time.Minute,
		},
		"someone waits for the server's class: the snooze lasts idleWhenContended": {
			pod: whole("alice").notice(decide.ReasonIdle, deadline, 0).p, user: "alice", class: "gpu H100-80GB-HBM3", waiting: "gpu H100-80GB-HBM3",
			want: notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle", Deadline: deadline.Add(20 * time.Minute), Snoozable: true,
				CreatedAt: t0.Add(-10 * time.Minute), Stops: true, StopsSince: t0.Add(-10 * time.Minute), Snoozes: 1, MaxSnoozes: 2,
				Message: "Snoozed: this server now stops at 15:15 UTC unless you use it (1 snooze left). Someone is waiting for this kind of GPU, so a snooze lasts 20 min."},
			wantShift: 20 * time.Minute, wantContended: true,
		},
		"someone waits for another class: the full snooze": {
			pod: whole("alice").notice(decide.ReasonIdle, deadline, 0).p, user: "alice", class: "gpu A100-SXM4-40GB", waiting: "gpu H100-80GB-HBM3",
			want: notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle", Deadline: deadline.Add(time.Hour), Snoozable: true,
				CreatedAt: t0.Add(-10 * time.Minute), Stops: true, StopsSince: t0.Add(-10 * time.Minute), Snoozes: 1, MaxSnoozes: 2,
				Message: "Snoozed: this server now stops at 15:55 UTC unless you use it (1 snooze left)."},
			wantShift: time.Hour,
		},
		"someone waits for the class the pod and its node name (no usage API class)": {
			pod: pod("alice").gpus(1).notice(decide.ReasonIdle, deadline, 0).p, user: "alice", waiting: "shared T4",
			want: notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle", Deadline: deadline.Add(20 * time.Minute),
				CreatedAt: t0.Add(-10 * time.Minute), Stops: true, StopsSince: t0.Add(-10 * time.Minute), Snoozes: 1, MaxSnoozes: 1,
				Message: "Snoozed: this server now stops at 15:15 UTC unless you use it (no snoozes left). Someone is waiting for this kind of GPU, so a snooze lasts 20 min."},
			wantShift: 20 * time.Minute, wantContended: true,
		},
		"no snoozes left": {
			pod: whole("alice").notice(decide.ReasonIdle, deadline, 2).p, user: "alice", wantErr: ErrNothing,
			wantErrMsg: "nothing to snooze: the stop of alice's default server was snoozed 2 times already, the most allowed; use the server to keep it",
		},
		"max age is not snoozable": {
			pod: whole("alice").notice(decide.ReasonMaxAge, deadline, 0).p, user: "alice", wantErr: ErrNothing,
			wantErrMsg: "nothing to snooze: alice's default server has run for the longest time allowed, and that stop cannot be snoozed; save your work",
		},
		"a profile without snoozes": {
			pod: whole("alice").profile("gpu-h100-80gb-hbm3").notice(decide.ReasonIdle, deadline, 0).p, user: "alice", wantErr: ErrNothing,
			wantErrMsg: "nothing to snooze: the policy allows no snoozes for alice's default server",
		},
		"no notice": {
			pod: whole("alice").p, user: "alice", wantErr: ErrNothing,
			wantErrMsg: "nothing to snooze: no stop is announced for alice's default server",
		},
		"stopping": {
			pod: whole("alice").notice(decide.ReasonIdle, deadline, 0).deleting().p, user: "alice", wantErr: ErrNothing,
			wantErrMsg: "nothing to snooze: alice's default server is stopping already",
		},
		"no such server": {
			pod: whole("alice").notice(decide.ReasonIdle, deadline, 0).p, user: "alice", server: "other", wantErr: ErrNoServer,
			wantErrMsg: `no such running server: alice's server "other" is not running; start it from the Hub home`,
		},
		"another user's pod is not found": {
			pod: whole("alice").notice(decide.ReasonIdle, deadline, 0).p, user: "bob", wantErr: ErrNoServer,
			wantErrMsg: `no such running server: bob's default server is not running; start it from the Hub home`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, pol, tc.pod)
			f.s.o.Class = func(string, string) string { return tc.class }
			f.s.o.Contended = func(class string) bool { return class == tc.waiting }
			got, err := f.s.Snooze(context.Background(), "admin", tc.user, tc.server)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || err.Error() != tc.wantErrMsg {
					t.Fatalf("err = %v\nwant %v: %s", err, tc.wantErr, tc.wantErrMsg)
				}
				if n := len(f.log.List(decision.Filter{})); n != 0 {
					t.Errorf("%d decisions recorded for a refused snooze", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("notice (-want +got):\n%s", diff)
			}
			stored, _ := f.c.CoreV1().Pods("jhub").Get(context.Background(), tc.pod.Name, metav1.GetOptions{})
			if _, back, _ := notices.FromPod(stored.Annotations); !cmp.Equal(tc.want, back) {
				t.Errorf("on the pod: %+v", back)
			}
			recs := f.log.List(decision.Filter{})
			if len(recs) != 1 {
				t.Fatalf("%d decisions, want 1", len(recs))
			}
			r := recs[0]
			r.ID, r.Time = "", time.Time{}
			want := decision.Record{Service: "gpu-culler", Actor: "admin", User: tc.user, Action: decision.ActionSnooze, Reason: "idle",
				Message: tc.want.Message, Numbers: map[string]float64{"snoozes": float64(tc.want.Snoozes), "max_snoozes": float64(tc.want.MaxSnoozes),
					"snooze_seconds": tc.want.Deadline.Sub(latest(deadline, t0)).Seconds(), "deadline_shift_seconds": tc.wantShift.Seconds()}}
			if strings.Contains(name, "passed") {
				want.Numbers["snooze_seconds"] = time.Hour.Seconds()
			}
			if tc.wantContended {
				want.Numbers["contended"] = 1
			}
			if diff := cmp.Diff(want, r); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestSnoozeAfterAConcurrentPass: the cached pod is older than the API server's (a pass rewrote the notice in
// between): the first write conflicts, the snooze re-reads and applies to the pass's notice.
func TestSnoozeAfterAConcurrentPass(t *testing.T) {
	p := pod("alice").gpus(1).notice(decide.ReasonIdle, t0.Add(5*time.Minute), 0).p
	p.Spec.NodeName = "gpu-1"
	f := newFixture(t, mustPolicy(t), p)
	// The pass: a new message and deadline, written with the pod's version.
	passed := notices.Notice(decide.ReasonIdle, "Your GPU has been idle for 51 min; ...", t0.Add(6*time.Minute), t0.Add(-10*time.Minute), 0, mustPolicy(t).Rule(gpu.KindGPU, ""))
	if err := notices.Write(context.Background(), f.c, p, &passed); err != nil {
		t.Fatal(err)
	}
	got, err := f.s.Snooze(context.Background(), "alice", "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(6*time.Minute + time.Hour); !got.Deadline.Equal(want) || got.Snoozes != 1 {
		t.Errorf("snooze on the pass's notice: deadline %v snoozes %d, want %v and 1", got.Deadline, got.Snoozes, want)
	}
	gets := 0
	for _, a := range f.c.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("%d fresh reads, want 1 (after the conflict)", gets)
	}
}

func TestSnoozeGivesUpAfterConflicts(t *testing.T) {
	p := pod("alice").gpus(1).notice(decide.ReasonIdle, t0.Add(5*time.Minute), 0).p
	f := newFixture(t, mustPolicy(t), p)
	f.c.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, p.Name, fmt.Errorf("changed"))
	})
	_, err := f.s.Snooze(context.Background(), "alice", "alice", "")
	if !errors.Is(err, ErrBusy) {
		t.Errorf("err = %v, want ErrBusy", err)
	}
}

func TestNoPolicy(t *testing.T) {
	f := newFixture(t, nil, pod("alice").p)
	if _, err := f.s.Snooze(context.Background(), "alice", "alice", ""); !errors.Is(err, ErrNoPolicy) {
		t.Errorf("err = %v, want ErrNoPolicy", err)
	}
}

func TestClass(t *testing.T) {
	shared := map[string]string{gpu.LabelProduct: "Tesla-T4", gpu.LabelReplicas: "4", gpu.LabelSharingStrategy: "time-slicing"}
	for name, tc := range map[string]struct {
		pod    *corev1.Pod
		labels map[string]string
		want   string
	}{
		"cpu only":                   {pod: pod("a").p, want: ""},
		"whole gpu, product unknown": {pod: pod("a").gpus(1).p, want: ""},
		"whole gpu":                  {pod: pod("a").gpus(1).p, labels: map[string]string{gpu.LabelProduct: "NVIDIA-H100-80GB-HBM3"}, want: "gpu H100-80GB-HBM3"},
		"time-sliced share of a T4":  {pod: pod("a").gpus(1).p, labels: shared, want: "shared T4"},
	} {
		if got := Class(tc.pod, tc.labels); got != tc.want {
			t.Errorf("%s: Class = %q, want %q", name, got, tc.want)
		}
	}
}

func TestKind(t *testing.T) {
	shared := map[string]string{gpu.LabelReplicas: "4", gpu.LabelSharingStrategy: "time-slicing"}
	for name, tc := range map[string]struct {
		pod    *corev1.Pod
		labels map[string]string
		want   gpu.Kind
	}{
		"cpu only":                  {pod: pod("a").p, want: ""},
		"whole gpu":                 {pod: pod("a").gpus(1).p, want: gpu.KindGPU},
		"time-sliced by node label": {pod: pod("a").gpus(1).p, labels: shared, want: gpu.KindShared},
	} {
		if got := Kind(tc.pod, tc.labels); got != tc.want {
			t.Errorf("%s: Kind = %q, want %q", name, got, tc.want)
		}
	}
}
