//go:build integration

// This test runs the stops store against a real API server, with a client that holds the narrowest Role the
// chart can give it: get, list, watch and update of the one ConfigMap by name, and create (which RBAC cannot
// limit by name). The leader records and clears, another replica's store follows through its watch (a list
// and watch with the metadata.name field selector, which RBAC allows by resourceName). Run it with
//
//	GPUHUB_KUBE_BIN=~/.cache/gpuhub/kube/v1.36.3/bin go test -tags integration -run TestAgainstAPIServer ./services/gpu-culler/internal/stops
//
// (etcd from PATH or GPUHUB_ETCD).
package stops

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster"
)

const cullerUser = "gpuhub:gpu-culler-test"

func TestAgainstAPIServer(t *testing.T) {
	bin := os.Getenv("GPUHUB_KUBE_BIN")
	if bin == "" {
		t.Fatal("GPUHUB_KUBE_BIN is not set: run `make kube-binaries` and point it at ~/.cache/gpuhub/kube/<version>/bin")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: bin, Etcd: os.Getenv("GPUHUB_ETCD"), Controllers: []string{"namespace-controller"}})
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
	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuhub"}}, metav1.CreateOptions{}))
	must(admin.RbacV1().Roles("gpuhub").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gpu-culler-stops"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{DefaultName}, Verbs: []string{"get", "list", "watch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		}}, metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings("gpuhub").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpu-culler-stops"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gpu-culler-stops"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: cullerUser}}}, metav1.CreateOptions{}))
	c := clientFor(t, cp, cullerUser, nil)
	if _, err := c.CoreV1().ConfigMaps("gpuhub").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the culler may list every ConfigMap (err %v): the test's Role grants more than meant", err)
	}

	now := time.Now
	follower := New(Options{Client: c, Namespace: "gpuhub", Now: now})
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = follower.Run(runCtx); close(done) }()
	waitFor(t, follower.Synced)

	leader := New(Options{Client: c, Namespace: "gpuhub", Now: now})
	at := time.Now().UTC().Truncate(time.Second)
	for _, st := range []Stop{
		{User: "alice", At: at, Reason: "idle", Message: "Stopped at 15:10 UTC: GPU idle for 1 h 7 min."},
		{User: "jo@example.org", Server: "train", At: at, Reason: "max_age", Message: "Stopped at 15:10 UTC: the server ran for 7 days."},
	} {
		if err := leader.Record(ctx, st); err != nil {
			t.Fatalf("record (creates the ConfigMap, then updates it): %v", err)
		}
	}
	waitFor(t, func() bool {
		a, ok1 := follower.Last("alice")
		j, ok2 := follower.Last("jo@example.org")
		return ok1 && ok2 && a.At.Equal(at) && j.Server == "train"
	})
	if err := leader.Clear(ctx, "alice", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := follower.Last("alice"); return !ok })

	// A replica started later reads what is there.
	late := New(Options{Client: c, Namespace: "gpuhub", Now: now})
	go func() { _ = late.Run(runCtx) }()
	waitFor(t, func() bool { _, ok := late.Last("jo@example.org"); return ok })
	stopRun()
	<-done
}

func clientFor(t *testing.T, cp *cluster.ControlPlane, user string, groups []string) kubernetes.Interface {
	t.Helper()
	cfg, err := cp.RESTConfig(user, groups)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}
