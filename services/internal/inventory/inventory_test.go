package inventory

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// podBuilder builds test pods fluently.
type podBuilder struct{ p *corev1.Pod }

func newPod(ns, name string) *podBuilder {
	return &podBuilder{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{}, Labels: map[string]string{}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook"}}},
	}}
}

func (b *podBuilder) user(u, server string) *podBuilder {
	b.p.Annotations[AnnotationUser] = u
	if server != "" {
		b.p.Annotations[AnnotationServer] = server
	}
	return b
}

func (b *podBuilder) limit(name string, n int64) *podBuilder {
	c := &b.p.Spec.Containers[0]
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	c.Resources.Limits[corev1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
	return b
}

func (b *podBuilder) running(node, ip string, ready bool) *podBuilder {
	b.p.Spec.NodeName = node
	b.p.Status.Phase = corev1.PodRunning
	b.p.Status.PodIP = ip
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	b.p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return b
}

// started records the pod's start (status.startTime) and, if containerAt is not zero, its container's.
func (b *podBuilder) started(podAt, containerAt time.Time, restarted bool) *podBuilder {
	b.p.Status.StartTime = &metav1.Time{Time: podAt}
	if containerAt.IsZero() {
		return b
	}
	st := corev1.ContainerStatus{Name: "notebook", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(containerAt)}}}
	if restarted {
		// The instance before the restart started a minute after the pod; the running one later.
		st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{StartedAt: metav1.NewTime(podAt.Add(time.Minute))}
	}
	b.p.Status.ContainerStatuses = []corev1.ContainerStatus{st}
	return b
}

func (b *podBuilder) label(k, v string) *podBuilder { b.p.Labels[k] = v; return b }

func (b *podBuilder) obj() *corev1.Pod { return b.p }

func TestPodFrom(t *testing.T) {
	podStart := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		pod    *corev1.Pod
		want   Pod
		wantOK bool
	}{
		"MIG pod running": {
			pod: newPod("jhub", "jupyter-alice").user("alice", "").limit("nvidia.com/mig-3g.20gb", 1).limit("cpu", 2).running("gpu-a100-0", "127.0.0.5", true).obj(),
			want: Pod{UID: "uid-jupyter-alice", Namespace: "jhub", Name: "jupyter-alice", Node: "gpu-a100-0", User: "alice",
				Phase: corev1.PodRunning, Ready: true, IP: "127.0.0.5", Resources: map[string]int64{"nvidia.com/mig-3g.20gb": 1}},
			wantOK: true,
		},
		"pending named server": {
			pod: newPod("jhub", "jupyter-bob--x").user("bob", "x").limit("nvidia.com/gpu.shared", 1).obj(),
			want: Pod{UID: "uid-jupyter-bob--x", Namespace: "jhub", Name: "jupyter-bob--x", User: "bob", Server: "x",
				Resources: map[string]int64{"nvidia.com/gpu.shared": 1}},
			wantOK: true,
		},
		"no GPU": {pod: newPod("jhub", "jupyter-carol").user("carol", "").limit("cpu", 1).obj()},
		"started: the running container's start, not the pod's (image pulls)": {
			pod: newPod("jhub", "jupyter-dave").user("dave", "").limit("nvidia.com/gpu", 1).running("gpu-h100-0", "127.0.0.7", true).
				started(podStart, podStart.Add(3*time.Minute), false).obj(),
			want: Pod{UID: "uid-jupyter-dave", Namespace: "jhub", Name: "jupyter-dave", Node: "gpu-h100-0", User: "dave",
				Phase: corev1.PodRunning, Ready: true, IP: "127.0.0.7", Resources: map[string]int64{"nvidia.com/gpu": 1}, Started: podStart.Add(3 * time.Minute)},
			wantOK: true,
		},
		"started: a restarted container keeps the earlier instance's start": {
			pod: newPod("jhub", "jupyter-dave").user("dave", "").limit("nvidia.com/gpu", 1).running("gpu-h100-0", "127.0.0.7", true).
				started(podStart, podStart.Add(30*time.Minute), true).obj(),
			want: Pod{UID: "uid-jupyter-dave", Namespace: "jhub", Name: "jupyter-dave", Node: "gpu-h100-0", User: "dave",
				Phase: corev1.PodRunning, Ready: true, IP: "127.0.0.7", Resources: map[string]int64{"nvidia.com/gpu": 1}, Started: podStart.Add(time.Minute)},
			wantOK: true,
		},
		"started: no container status yet, status.startTime": {
			pod: newPod("jhub", "jupyter-dave").user("dave", "").limit("nvidia.com/gpu", 1).running("gpu-h100-0", "127.0.0.7", false).
				started(podStart, time.Time{}, false).obj(),
			want: Pod{UID: "uid-jupyter-dave", Namespace: "jhub", Name: "jupyter-dave", Node: "gpu-h100-0", User: "dave",
				Phase: corev1.PodRunning, IP: "127.0.0.7", Resources: map[string]int64{"nvidia.com/gpu": 1}, Started: podStart},
			wantOK: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := PodFrom(tc.pod)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PodFrom (-want +got):\n%s", diff)
			}
			if got.Allocated() != (tc.want.Phase == corev1.PodRunning) {
				t.Errorf("Allocated() = %v", got.Allocated())
			}
		})
	}
}

func TestInformers(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-t4-0", Labels: map[string]string{"nvidia.com/gpu.replicas": "4"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu.shared": *resource.NewQuantity(4, resource.DecimalSI), "cpu": *resource.NewQuantity(8, resource.DecimalSI)}}}
	client := fake.NewClientset(
		node,
		newPod("jhub", "jupyter-bob").user("bob", "").limit("nvidia.com/gpu.shared", 1).running("gpu-t4-0", "127.0.0.6", true).obj(),
		newPod("jhub", "jupyter-carol").user("carol", "").obj(),
		chartAgent("gpuhub", "gpu-agent-abc", "gpu-t4-0", "127.0.0.9").obj(),
		newPod("gpuhub", "gpu-agent-pending").label(LabelComponent, AgentComponent).label("app.kubernetes.io/instance", "gpuhub").serviceAccount("gpuhub-agent").obj(),
	)
	inv := New(Options{Client: client})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inv.Start(ctx)
	if err := inv.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inv.Synced(ctx); err != nil {
		t.Fatal(err)
	}
	pods, err := inv.GPUPods()
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].User != "bob" {
		t.Errorf("GPUPods = %+v, want bob's pod only", pods)
	}
	agents, err := inv.Agents()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Agent{{Pod: "gpuhub/gpu-agent-abc", Node: "gpu-t4-0", IP: "127.0.0.9"}}, agents); diff != "" {
		t.Errorf("Agents (-want +got):\n%s", diff)
	}
	nodes, err := inv.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"nvidia.com/gpu.shared": 4}, nodes["gpu-t4-0"].Allocatable); diff != "" {
		t.Errorf("node allocatable (-want +got):\n%s", diff)
	}
}

// chartAgent is an agent pod as the chart's DaemonSet (release gpuhub) creates it.
func chartAgent(ns, name, node, ip string) *podBuilder {
	b := newPod(ns, name).running(node, ip, true).
		label("app.kubernetes.io/name", "gpuhub").label("app.kubernetes.io/instance", "gpuhub").label(LabelComponent, AgentComponent)
	b.p.Spec.ServiceAccountName = "gpuhub-agent"
	return b
}

func (b *podBuilder) serviceAccount(sa string) *podBuilder {
	b.p.Spec.ServiceAccountName = sa
	return b
}

// TestAgentSelection: the usage API sends its agent token only to the chart's agents: pods of the release
// (labels), in the release namespace, running as the chart's agent ServiceAccount. A pod that copies the
// labels (anyone who may create a pod can) is not polled.
func TestAgentSelection(t *testing.T) {
	client := fake.NewClientset(
		chartAgent("gpuhub", "gpuhub-agent-a", "gpu-a100-0", "127.0.0.9").obj(),
		// Copies every label, runs as another ServiceAccount.
		chartAgent("gpuhub", "lookalike-default-sa", "gpu-t4-0", "127.0.0.10").serviceAccount("default").obj(),
		// Copies every label and the ServiceAccount's name, in another namespace.
		chartAgent("jhub", "lookalike-other-ns", "gpu-t4-0", "127.0.0.11").obj(),
		// The pre-fix selector: only app.kubernetes.io/component=gpu-agent.
		newPod("gpuhub", "component-label-only").label(LabelComponent, AgentComponent).serviceAccount("gpuhub-agent").running("gpu-h100-0", "127.0.0.12", true).obj(),
		// Another release's agents.
		chartAgent("gpuhub", "other-release", "gpu-h100-0", "127.0.0.13").label("app.kubernetes.io/instance", "staging").obj(),
	)
	sel, err := labels.Parse(DefaultAgentSelector)
	if err != nil {
		t.Fatal(err)
	}
	inv := New(Options{Client: client, Namespace: "jhub", AgentNamespace: "gpuhub", AgentSelector: sel, AgentServiceAccount: "gpuhub-agent"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inv.Start(ctx)
	if err := inv.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	agents, err := inv.Agents()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Agent{{Pod: "gpuhub/gpuhub-agent-a", Node: "gpu-a100-0", IP: "127.0.0.9"}}, agents); diff != "" {
		t.Errorf("Agents (-want +got):\n%s", diff)
	}
}
