//go:build integration

// This test runs gpu-profiles in-process against a real kube-apiserver (e2e/cluster), as a user holding only the
// rights its README's RBAC section names (list and watch nodes and pods): it checks what the client-go fake
// cannot (RBAC, watch semantics of node status and pod binding updates). Run it with
//
//	GPUHUB_KUBE_BIN=~/.cache/gpuhub/kube/v1.36.3/bin go test -tags integration -run APIServer ./services/gpu-profiles/internal/app/
package app

import (
	"context"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/fixture"
	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

func TestAPIServer(t *testing.T) {
	bin := os.Getenv("GPUHUB_KUBE_BIN")
	if bin == "" {
		t.Fatal("GPUHUB_KUBE_BIN is not set: the directory with kube-apiserver, kube-scheduler and kube-controller-manager (make kube-binaries)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: bin, Etcd: os.Getenv("GPUHUB_ETCD")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	adminCfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// The README's RBAC, for the user gpu-profiles runs as.
	must(admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gpu-profiles"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"list", "watch"}}}},
		metav1.CreateOptions{}))
	must(admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpu-profiles"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "gpu-profiles"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "gpu-profiles"}}}, metav1.CreateOptions{}))
	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "jhub"}}, metav1.CreateOptions{}))

	createNode := func(n *corev1.Node) {
		t.Helper()
		status := n.Status
		created, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = status
		updated, err := admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The API server's TaintNodesByCondition taints a new node not-ready until the node lifecycle
		// controller (off here: no kubelet) sees it Ready; the harness's emulator does what it would.
		updated.Spec.Taints = nil
		must(admin.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{}))
	}
	for _, n := range []*corev1.Node{
		fixture.H100("gpu-h100-0", 2).Res("cpu", 64).Res("memory", 1<<40).Res("pods", 110).Obj(),
		fixture.A100MIGMixed("gpu-a100-0").Res("cpu", 64).Res("memory", 1<<40).Res("pods", 110).Obj(),
		fixture.T4TimeSliced("gpu-t4-0").Res("cpu", 16).Res("memory", 1<<36).Res("pods", 110).Obj(),
		fixture.CPU("cpu-0").Res("memory", 1<<36).Res("pods", 110).Obj(),
	} {
		createNode(n)
	}
	createPod := func(p *corev1.Pod) {
		t.Helper()
		p.Spec.Containers[0].Image = "x"
		var err error
		for range 60 { // the default ServiceAccount appears shortly after the namespace
			if _, err = admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err == nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatal(err)
	}
	// carol's pod is bound and Pending (no kubelet runs here): it holds its H100 as the scheduler counts.
	createPod(fixture.Pod("jupyter-carol").On("gpu-h100-0").Req("nvidia.com/gpu", 1).Obj())

	profilesCfg, err := cp.RESTConfig("gpu-profiles", nil)
	if err != nil {
		t.Fatal(err)
	}
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "alice", Admin: true})
	hub.AddToken("alice-token", "alice")
	hub.AddToken("profiles-token", "gpu-profiles")
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &running{url: "http://" + ln.Addr().String(), logs: &logtest.Buffer{}}
	served := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, Options{Logger: slog.New(slog.NewTextHandler(r.logs, nil)), Registry: prometheus.NewRegistry(), Listener: ln,
			Prefix: prefix, Kube: kubernetes.NewForConfigOrDie(profilesCfg), Token: "profiles-token",
			Auth:      hubauth.New(hubauth.Options{Hub: hub.Client("profiles-token")}).Middleware,
			OnServing: func(_ *server.Server, c *catalog.Catalog) { r.catalog = c; close(served) }})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-served:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}

	form := func(want []string) {
		t.Helper()
		var got []string
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, f := r.profiles(t, "profiles-token", `{"user":"bob","groups":[]}`)
			got = f.summary()
			if code == 200 && cmp.Equal(want, got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("form after 30 s (-want +got):\n%s\nlogs:\n%s", cmp.Diff(want, got), r.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	form([]string{"cpu*", "gpu-h100-80gb-hbm3 1/2", "mig-a100-sxm4-40gb-1g-5gb 8/8", "mig-a100-sxm4-40gb-3g-20gb 2/2", "shared-t4 4/4"})

	// Cordoned by an admin (a spec update): its units are no longer free; the watch brings it.
	n, err := admin.CoreV1().Nodes().Get(ctx, "gpu-h100-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Unschedulable = true
	must(admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}))
	form([]string{"cpu*", "gpu-h100-80gb-hbm3 0/0 unschedulable", "mig-a100-sxm4-40gb-1g-5gb 8/8", "mig-a100-sxm4-40gb-3g-20gb 2/2", "shared-t4 4/4"})

	// Two MIG slices taken; carol's pod gone, the node uncordoned.
	createPod(fixture.Pod("jupyter-dave").On("gpu-a100-0").Req("nvidia.com/mig-3g.20gb", 1).Obj())
	createPod(fixture.Pod("jupyter-erin").On("gpu-a100-0").Req("nvidia.com/mig-3g.20gb", 1).Obj())
	if err := admin.CoreV1().Pods("jhub").Delete(ctx, "jupyter-carol", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	n, err = admin.CoreV1().Nodes().Get(ctx, "gpu-h100-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Unschedulable = false
	must(admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}))
	form([]string{"cpu*", "gpu-h100-80gb-hbm3 2/2", "mig-a100-sxm4-40gb-1g-5gb 8/8", "mig-a100-sxm4-40gb-3g-20gb 0/2 none_free", "shared-t4 4/4"})

	code, data := r.get(t, prefix+"api/v1/inventory", "alice-token")
	if code != 200 {
		t.Errorf("inventory: %d %s", code, data)
	}
}
