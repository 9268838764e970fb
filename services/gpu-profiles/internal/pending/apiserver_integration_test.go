//go:build integration

// This test runs the Explainer against a real control plane (etcd, kube-apiserver with RBAC, kube-scheduler):
// a GPU pod the real scheduler cannot place (the only H100 node is cordoned) gets its explanation within 10 s,
// written by a client that holds exactly Rules() and nothing more, and found by the query KubeSpawner's event
// reflector makes (core/v1 events, fieldSelector involvedObject.kind=Pod, filtered by the pod's name), with
// the timestamp KubeSpawner sorts and prints by. Then the hopeless spawn is ended. Run it with
//
//	GPUHUB_KUBE_BIN=~/.cache/gpuhub/kube/v1.36.3/bin go test -tags integration -run TestAgainstAPIServer ./services/gpu-profiles/internal/pending
//
// (etcd from PATH or GPUHUB_ETCD). The Hub is a recorder here: ending a real spawn is the Hub e2e's business.
package pending

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

const eventsUser = "gpuhub:gpu-profiles-test" // holds Rules() in jhub only

// staticCapacity is the catalog's answer for the cluster below: the H100 kind's only node is cordoned.
type staticCapacity struct{ av Availability }

func (c staticCapacity) Lookup(map[string]int64, map[string]string) (Availability, bool) {
	av := c.av
	av.Certain = true
	return av, true
}
func (c staticCapacity) FreeNow(string) []Availability { return []Availability{mig1g} }

func TestAgainstAPIServer(t *testing.T) {
	bin := os.Getenv("GPUHUB_KUBE_BIN")
	if bin == "" {
		t.Fatal("GPUHUB_KUBE_BIN is not set: run `make kube-binaries` and point it at ~/.cache/gpuhub/kube/<version>/bin")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: bin, Etcd: os.Getenv("GPUHUB_ETCD"),
		Controllers: []string{"serviceaccount-controller", "namespace-controller"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := clientFor(t, cp, "admin", []string{"system:masters"})
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "jhub"}}, metav1.CreateOptions{}))
	must(admin.RbacV1().Roles("jhub").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gpu-profiles-events"},
		Rules: Rules()}, metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings("jhub").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpu-profiles-events"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gpu-profiles-events"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: eventsUser}}}, metav1.CreateOptions{}))
	writer := clientFor(t, cp, eventsUser, nil)
	if _, err := writer.CoreV1().Events("jhub").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the events writer may list events (err %v): the test's Role grants more than Rules()", err)
	}

	// The only H100 node, cordoned.
	node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100-0", Labels: h100Labels},
		Spec: corev1.NodeSpec{Unschedulable: true}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity = corev1.ResourceList{resGPU: resource.MustParse("2"), "cpu": resource.MustParse("32"),
		"memory": resource.MustParse("256Gi"), "pods": resource.MustParse("110")}
	node.Status.Allocatable = node.Status.Capacity
	must(admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}))
	waitFor(ctx, t, "the default ServiceAccount in jhub", func() bool {
		_, err := admin.CoreV1().ServiceAccounts("jhub").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})

	// The service's side: the inventory's informers feed the Explainer.
	inv := inventory.New(inventory.Options{Client: admin, Namespace: "jhub", NoAgents: true, MetricsSubsystem: "profiles"})
	hub := &fakeHub{}
	e, err := New(Options{Client: writer, Capacity: staticCapacity{av: blockedH100}, Hub: hub, Synced: func() bool { return inv.Synced(ctx) == nil },
		EndAfter: 4 * time.Second, Recheck: time.Second, Repeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.AddHandlers(e.PodHandler(), nil); err != nil {
		t.Fatal(err)
	}
	inv.Start(ctx)
	if err := inv.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.Run(ctx) }()

	// A KubeSpawner-like pod asking for an H100.
	pod := newPod("bob", "").wants(resGPU, 1, h100Labels).obj()
	pod.ObjectMeta = metav1.ObjectMeta{Name: pod.Name, Annotations: pod.Annotations,
		Labels: map[string]string{"component": "singleuser-server", "app.kubernetes.io/managed-by": "kubespawner"}}
	pod.Status = corev1.PodStatus{}
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	pod.Spec.Containers[0].Image = "quay.io/jupyter/base-notebook:latest"
	created := time.Now()
	if _, err := admin.CoreV1().Pods("jhub").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// KubeSpawner's query: every Pod event of the namespace, as raw JSON; its own pod's kept by name.
	kubespawnerEvents := func() []map[string]any {
		raw, err := admin.CoreV1().RESTClient().Get().Namespace("jhub").Resource("events").
			Param("fieldSelector", "involvedObject.kind=Pod").DoRaw(ctx)
		if err != nil {
			t.Fatalf("list events as KubeSpawner does: %v", err)
		}
		var l struct{ Items []map[string]any }
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatal(err)
		}
		var out []map[string]any
		for _, ev := range l.Items {
			if ev["involvedObject"].(map[string]any)["name"] == pod.Name && ev["reason"] == EventReason {
				out = append(out, ev)
			}
		}
		return out
	}
	var first map[string]any
	waitFor(ctx, t, "the explanation Event", func() bool {
		if evs := kubespawnerEvents(); len(evs) > 0 {
			first = evs[0]
			return true
		}
		return time.Since(created) > 20*time.Second
	})
	took := time.Since(created)
	if first == nil || took > 10*time.Second {
		t.Fatalf("explanation Event after %s (want within 10 s of the pod's creation): %v", took.Round(time.Millisecond), first)
	}
	t.Logf("explanation listed %s after the pod was created: %s", took.Round(time.Millisecond), first["message"])
	last, _ := first["lastTimestamp"].(string)
	if _, err := time.Parse(time.RFC3339, last); err != nil {
		t.Errorf("lastTimestamp %q: KubeSpawner sorts and prints by it: %v", first["lastTimestamp"], err)
	}
	if first["type"] != "Warning" || first["source"].(map[string]any)["component"] != EventComponent ||
		!strings.HasPrefix(first["message"].(string), "Your server cannot start: the only node with whole H100s (gpu-h100-0) is cordoned.") {
		t.Errorf("explanation Event: %v", first)
	}
	// The scheduler's verdict came first: the Event is the explanation of an Unschedulable pod.
	p, err := admin.CoreV1().Pods("jhub").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := inventory.PodFrom(p); got.Scheduled.Reason != corev1.PodReasonUnschedulable {
		t.Errorf("pod's PodScheduled condition: %+v, want Unschedulable", got.Scheduled)
	}

	// Refreshed (patch), then ended: a second Warning and the Hub asked to stop bob's default server.
	waitFor(ctx, t, "the spawn ended", func() bool { return len(hub.called()) > 0 })
	if calls := hub.called(); calls[0] != "bob/" {
		t.Errorf("StopServer calls: %v, want bob's default server without remove", calls)
	}
	evs := kubespawnerEvents()
	var refreshed, ended bool
	for _, ev := range evs {
		if n, _ := ev["count"].(float64); n >= 2 {
			refreshed = true
		}
		if strings.HasPrefix(ev["message"].(string), "Your spawn was ended: waiting would not help.") && ev["type"] == "Warning" {
			ended = true
		}
	}
	if !refreshed || !ended {
		t.Errorf("events: refreshed %v, ended %v, want both: %v", refreshed, ended, evs)
	}
}

func clientFor(t *testing.T, cp *cluster.ControlPlane, user string, groups []string) kubernetes.Interface {
	t.Helper()
	cfg, err := cp.RESTConfig(user, groups)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
