//go:build e2e

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestStartStop starts the control plane, checks that RBAC is on and the admin kubeconfig works,
// then stops it and checks that no process survives and the API server's port is free. With the
// binaries cached the start must take at most 20 s.
func TestStartStop(t *testing.T) {
	bin := os.Getenv("GPUHUB_KUBE_BIN")
	if bin == "" {
		t.Fatal("GPUHUB_KUBE_BIN is not set; run `make e2e`")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	cp, err := Start(ctx, Options{BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("control plane ready in %.1fs", took.Seconds())
	if took > 20*time.Second {
		t.Errorf("control plane took %s to get ready, budget 20s", took)
	}
	stopped := false
	defer func() {
		if !stopped {
			cp.Stop()
		}
	}()

	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server version %s", v.GitVersion)
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Errorf("admin cannot read namespaces: %v", err)
	}
	// RBAC is on: an identity without bindings is refused.
	nobodyCfg, err := cp.RESTConfig("nobody", nil)
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := kubernetes.NewForConfig(nobodyCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nobody.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("user without RBAC bindings may list pods; RBAC is not enforced")
	}

	u, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	pids := cp.Pids()
	dir := cp.Dir
	cp.Stop()
	stopped = true
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still running after Stop", name, pid)
		}
	}
	d := net.Dialer{Timeout: time.Second}
	if c, err := d.DialContext(ctx, "tcp", u.Host); err == nil {
		c.Close()
		t.Errorf("API server port %s still open after Stop", u.Host)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state dir %s not removed: %v", dir, err)
	}
}

// TestRestartAPIServer: StopAPIServer closes the API server's port while etcd, the scheduler and the
// controller manager keep running; StartAPIServer brings it back on the same URL with the same certificates
// and service-account key, so objects (etcd), client certificates and tokens minted before the restart all
// still work, and the controller manager's informers recover (a namespace created afterwards gets its
// default ServiceAccount from the serviceaccount controller).
func TestRestartAPIServer(t *testing.T) {
	bin := os.Getenv("GPUHUB_KUBE_BIN")
	if bin == "" {
		t.Fatal("GPUHUB_KUBE_BIN is not set; run `make e2e`")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	cfg, err := cp.RESTConfig("admin", []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, err := waitDefaultServiceAccount(ctx, admin, "before")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := admin.CoreV1().ServiceAccounts("before").CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldPid := cp.Pids()["kube-apiserver"]
	u, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	cp.StopAPIServer(2 * time.Second)
	t.Logf("kube-apiserver stopped in %.1fs", time.Since(t0).Seconds())
	d := net.Dialer{Timeout: time.Second}
	if c, err := d.DialContext(ctx, "tcp", u.Host); err == nil {
		c.Close()
		t.Fatalf("API server port %s still open after StopAPIServer", u.Host)
	}
	for _, name := range []string{"etcd", "kube-scheduler", "kube-controller-manager"} {
		if err := syscall.Kill(cp.Pids()[name], 0); err != nil {
			t.Errorf("%s stopped with the API server: %v", name, err)
		}
	}

	t0 = time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver ready again in %.1fs", time.Since(t0).Seconds())
	if pid := cp.Pids()["kube-apiserver"]; pid == oldPid {
		t.Errorf("kube-apiserver pid %d unchanged: not restarted", pid)
	}
	// The same client (certificate) and URL; etcd kept the objects.
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace created before the restart: %v", err)
	}
	// The same service-account key: a token minted before the restart still authenticates.
	tr, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tok.Status.Token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:before:default"; !tr.Status.Authenticated || tr.Status.User.Username != want {
		t.Errorf("token minted before the restart: authenticated=%v user=%q error=%q, want %s",
			tr.Status.Authenticated, tr.Status.User.Username, tr.Status.Error, want)
	}
	// The controller manager, which kept running, watches again.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitDefaultServiceAccount(ctx, admin, "after"); err != nil {
		t.Errorf("controller manager after the restart: %v", err)
	}
}

func waitDefaultServiceAccount(ctx context.Context, c kubernetes.Interface, ns string) (*corev1.ServiceAccount, error) {
	var sa *corev1.ServiceAccount
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		sa, err = c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("default serviceaccount in %s: %w", ns, err)
	}
	return sa, nil
}
