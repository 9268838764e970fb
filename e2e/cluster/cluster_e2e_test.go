//go:build e2e

package cluster

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
