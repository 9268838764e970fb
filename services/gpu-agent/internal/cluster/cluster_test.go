package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

func pod(uid, name string, phase corev1.PodPhase, limits corev1.ResourceList, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "jhub", Annotations: ann},
		Spec: corev1.PodSpec{NodeName: "gpu-0", Containers: []corev1.Container{
			{Name: "notebook", Resources: corev1.ResourceRequirements{Limits: limits}},
			{Name: "sidecar"},
		}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func TestWatcher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{"nvidia.com/gpu.count": "8"}}},
		pod("b-uid", "jupyter-alice", corev1.PodRunning,
			corev1.ResourceList{"nvidia.com/mig-3g.20gb": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("2")},
			map[string]string{AnnotationUser: "alice@example.org", AnnotationServer: "big"}),
		pod("a-uid", "jupyter-bob", corev1.PodRunning, nil, nil),
		pod("c-uid", "done", corev1.PodSucceeded, nil, nil),
	)
	w, err := NewWatcher(client, "gpu-0", 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	syncCtx, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	if !w.WaitForSync(syncCtx) || !w.HasSynced() {
		t.Fatal("caches did not sync")
	}

	got, ok := w.Pod("b-uid")
	if !ok {
		t.Fatal("Pod(b-uid) not found")
	}
	want := Pod{UID: "b-uid", Namespace: "jhub", Name: "jupyter-alice", User: "alice@example.org", Server: "big",
		GPUResources: map[string]int64{"nvidia.com/mig-3g.20gb": 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Pod(b-uid) (-want +got):\n%s", diff)
	}
	if _, ok := w.Pod("nope"); ok {
		t.Error("Pod(nope) found")
	}
	var names []string
	for _, p := range w.Pods() {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"jupyter-bob", "jupyter-alice"}, names); diff != "" {
		t.Errorf("Pods() sorted by UID, terminated left out (-want +got):\n%s", diff)
	}
	n, ok := w.Node()
	if !ok || n.Labels["nvidia.com/gpu.count"] != "8" {
		t.Errorf("Node() = %v, %v", n, ok)
	}
}

func TestNewWatcherNeedsNode(t *testing.T) {
	if _, err := NewWatcher(fake.NewClientset(), "", 0); err == nil {
		t.Error("NewWatcher with no node name: want an error")
	}
}
