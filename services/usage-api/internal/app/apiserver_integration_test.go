//go:build integration

// This test runs two usage API replicas in-process against a real kube-apiserver (e2e/cluster), each as the user
// the chart's RBAC names (nodes and pods read; its own Lease and Deployment), on one ledger database: what the
// client-go fake cannot show is the election on a real Lease. Run it with
//
//	GPUHUB_KUBE_BIN=~/.cache/gpuhub/kube/v1.36.3/bin go test -tags integration -run APIServer ./services/usage-api/internal/app/
package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/logging"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// TestAPIServerOneLedgerWriter: two replicas campaign for the ledger's Lease with the chart's RBAC; one writes,
// the other follows (no conflict on either: never two writers); when the writer stops (a drain), the other
// takes the Lease and the ledger's checkpoint moves on under it.
func TestAPIServerOneLedgerWriter(t *testing.T) {
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
	const ns, lease, user = "jhub", "gpuhub-usage-ledger", "gpu-usage"
	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	// The chart's RBAC (chart/gpuhub/templates/usage.yaml), for the user the replicas run as.
	subject := []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}
	must(admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}}}},
		metav1.CreateOptions{}))
	must(admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user}, Subjects: subject}, metav1.CreateOptions{}))
	must(admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user + "-lease"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{lease}, Verbs: []string{"get", "update"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{"gpuhub-usage"}, Verbs: []string{"get"}},
		}}, metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-lease"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user + "-lease"}, Subjects: subject}, metav1.CreateOptions{}))
	asUser := rest.CopyConfig(adminCfg)
	asUser.Impersonate = rest.ImpersonationConfig{UserName: user}

	hub := newHub(t)
	db := filepath.Join(t.TempDir(), "ledger.db")
	type replica struct {
		reg    *prometheus.Registry
		cancel context.CancelFunc
		done   chan error
	}
	startReplica := func(identity string) *replica {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		r := &replica{reg: prometheus.NewRegistry(), cancel: rcancel, done: make(chan error, 1)}
		served := make(chan struct{})
		o := Options{
			Logger: logging.Discard(), Registry: r.reg, Listener: ln, Prefix: "/services/gpu-usage/",
			Kube: kubernetes.NewForConfigOrDie(asUser), Namespace: ns, AgentNamespace: ns,
			Hub: hub.Client("svc-token"), HubRefresh: time.Minute,
			Auth: hubauth.New(hubauth.Options{Hub: hub.Client("svc-token")}).Middleware, Database: db,
			Interval: 200 * time.Millisecond, OnServing: func(*server.Server) { close(served) },
			LedgerLease: LeaseOptions{Namespace: ns, Name: lease, Identity: identity},
		}
		go func() { r.done <- Run(rctx, o) }()
		select {
		case <-served:
		case err := <-r.done:
			t.Fatalf("Run: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("not serving after 30 s")
		}
		return r
	}
	leading := func(r *replica) float64 { return metric(t, r.reg, "gpuhub_usage_ledger_leader") }
	a := startReplica("usage-0")
	b := startReplica("usage-1")
	eventually(t, "one of the two writes the ledger", func() (bool, string) {
		la, lb := leading(a), leading(b)
		return la+lb == 1, fmt.Sprintf("usage-0 %v, usage-1 %v", la, lb)
	})
	writer, follower := a, b
	if leading(b) == 1 {
		writer, follower = b, a
	}
	ticks := func() int64 {
		s, err := ledger.OpenSQLite(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		c, _, err := s.Checkpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c.Ticks
	}
	first := ticks()
	eventually(t, "the writer commits", func() (bool, string) { n := ticks(); return n > first+5, fmt.Sprint(n) })
	for name, r := range map[string]*replica{"writer": writer, "follower": follower} {
		if n := metric(t, r.reg, "gpuhub_usage_ledger_conflicts_total"); n != 0 {
			t.Errorf("the %s met %v ledger conflicts: two replicas wrote", name, n)
		}
	}

	// A drain: the writer stops (and gives the Lease back); the follower takes it and writes.
	writer.cancel()
	if err := <-writer.done; err != nil {
		t.Errorf("the old writer's Run: %v", err)
	}
	eventually(t, "the follower takes the Lease", func() (bool, string) { return leading(follower) == 1, "" })
	handover := ticks()
	eventually(t, "the new writer commits", func() (bool, string) { n := ticks(); return n > handover+5, fmt.Sprint(n) })
	if n := metric(t, follower.reg, "gpuhub_usage_ledger_conflicts_total"); n != 0 {
		t.Errorf("the new writer met %v ledger conflicts", n)
	}
	follower.cancel()
	if err := <-follower.done; err != nil {
		t.Errorf("the new writer's Run: %v", err)
	}
}
