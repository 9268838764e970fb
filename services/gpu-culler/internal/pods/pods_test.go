package pods

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

var t0 = time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)

func userPod(name, ns, user, server string, created time.Time, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.NewTime(created),
		Labels:      map[string]string{"component": "singleuser-server"},
		Annotations: map[string]string{inventory.AnnotationUser: user, inventory.AnnotationServer: server}}}
	if deleting {
		d := metav1.NewTime(created.Add(time.Hour))
		p.DeletionTimestamp = &d
	}
	return p
}

// The index finds a server's live pod by KubeSpawner's annotations in its namespace: the newest of several,
// never one being deleted, never a pod that is not a single-user server; nothing before the first list is in.
func TestIndex(t *testing.T) {
	other := userPod("hub-x", "jhub", "alice", "", t0, false)
	other.Labels = map[string]string{"component": "hub"}
	kc := fake.NewClientset(
		userPod("jupyter-alice", "jhub", "alice", "", t0, false),
		userPod("jupyter-alice-new", "jhub", "alice", "", t0.Add(time.Minute), false),
		userPod("jupyter-alice-gone", "jhub", "alice", "", t0.Add(time.Hour), true),
		userPod("jupyter-alice-lab", "jhub", "alice", "lab", t0, false),
		userPod("jupyter-bob", "other", "bob", "", t0, false),
		userPod("no-annotations", "jhub", "", "", t0, false),
		other,
	)
	x, err := New(kc, "jhub")
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Synced(context.Background()); err == nil {
		t.Error("Synced before the informer runs: nil, want an error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x.Start(ctx)
	if err := x.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := x.Synced(ctx); err != nil {
		t.Errorf("Synced after the first list: %v", err)
	}
	tests := []struct {
		user, server string
		want         string
	}{
		{"alice", "", "jupyter-alice-new"},
		{"alice", "lab", "jupyter-alice-lab"},
		{"alice", "other", ""},
		{"bob", "", ""}, // another namespace
		{"", "", ""},
	}
	for _, tt := range tests {
		got := ""
		if p, ok := x.Pod(tt.user, tt.server); ok {
			got = p.Name
		}
		if got != tt.want {
			t.Errorf("Pod(%q, %q) = %q, want %q", tt.user, tt.server, got, tt.want)
		}
	}
	var names []string
	for _, p := range x.UserPods("alice") {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	if diff := cmp.Diff([]string{"jupyter-alice", "jupyter-alice-gone", "jupyter-alice-lab", "jupyter-alice-new"}, names); diff != "" {
		t.Errorf("UserPods(alice) (-want +got):\n%s", diff)
	}
}

// An empty namespace watches every namespace.
func TestAllNamespaces(t *testing.T) {
	kc := fake.NewClientset(userPod("jupyter-bob", "other", "bob", "", t0, false))
	x, err := New(kc, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x.Start(ctx)
	if err := x.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := x.Pod("bob", ""); !ok {
		t.Error("bob's pod in another namespace not found with --namespace empty")
	}
}
