package inventory

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodFromPending: what gpu-profiles reads to explain a Pending pod: its creation, the scheduler's verdict
// and why its containers wait (init containers first). A running pod's waiting container is a restart: not
// listed.
func TestPodFromPending(t *testing.T) {
	created := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	unschedulable := func(b *podBuilder) *podBuilder {
		b.p.CreationTimestamp = metav1.NewTime(created)
		b.p.Status.Phase = corev1.PodPending
		b.p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/4 nodes are available: 1 Insufficient nvidia.com/gpu.",
			LastTransitionTime: metav1.NewTime(created.Add(time.Second))}}
		return b
	}
	waiting := func(b *podBuilder, phase corev1.PodPhase) *podBuilder {
		b.p.Status.Phase = phase
		b.p.Spec.NodeName = "gpu-h100-0"
		b.p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "fetch", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "back-off pulling"}}}}
		b.p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "notebook", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
		return b
	}
	base := Pod{UID: "uid-jupyter-bob", Namespace: "jhub", Name: "jupyter-bob", User: "bob", Resources: map[string]int64{"nvidia.com/gpu": 1}}
	cases := map[string]struct {
		pod  *corev1.Pod
		want func(Pod) Pod
	}{
		"unschedulable": {
			pod: unschedulable(newPod("jhub", "jupyter-bob").user("bob", "").limit("nvidia.com/gpu", 1)).obj(),
			want: func(p Pod) Pod {
				p.Phase, p.Created = corev1.PodPending, created
				p.Scheduled = Condition{Status: corev1.ConditionFalse, Reason: "Unschedulable",
					Message: "0/4 nodes are available: 1 Insufficient nvidia.com/gpu.", Since: created.Add(time.Second)}
				return p
			},
		},
		"bound, pulling": {
			pod: waiting(newPod("jhub", "jupyter-bob").user("bob", "").limit("nvidia.com/gpu", 1), corev1.PodPending).obj(),
			want: func(p Pod) Pod {
				p.Phase, p.Node = corev1.PodPending, "gpu-h100-0"
				p.Waiting = []Waiting{{Container: "fetch", Init: true, Reason: "ImagePullBackOff"}, {Container: "notebook", Reason: "PodInitializing"}}
				return p
			},
		},
		"running, a container restarting": {
			pod: waiting(newPod("jhub", "jupyter-bob").user("bob", "").limit("nvidia.com/gpu", 1), corev1.PodRunning).obj(),
			want: func(p Pod) Pod {
				p.Phase, p.Node = corev1.PodRunning, "gpu-h100-0"
				return p
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := PodFrom(tc.pod)
			if !ok {
				t.Fatal("PodFrom: not a GPU pod")
			}
			if diff := cmp.Diff(tc.want(base), got); diff != "" {
				t.Errorf("PodFrom (-want +got):\n%s", diff)
			}
		})
	}
}
