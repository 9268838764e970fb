//go:build e2e

package gpuhubstack

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/gpuhub/gpuhub/e2e/cluster"
)

// The RBAC tests' release and its namespace, and z2jh's single-user namespace: another one, as the chart allows.
const testRelease, testPods = "gpuhub", "jhub"

// chartRBAC is the chart's RBAC (every service enabled) applied to a real API server with RBAC on.
type chartRBAC struct {
	ctx      context.Context // the test's, bounded to 3 minutes
	cp       *cluster.ControlPlane
	adminCfg *rest.Config
	admin    kubernetes.Interface
	objs     []runtime.Object // the rendered chart
	in       *Installed
}

// startChartRBAC starts a control plane for the test (skipped without make e2e's GPUHUB_KUBE_BIN and GPUHUB_HELM),
// creates the single-user namespace and namespaces, and applies the chart's RBAC.
func startChartRBAC(t *testing.T, namespaces ...string) *chartRBAC {
	t.Helper()
	kubeBin, helm := os.Getenv("GPUHUB_KUBE_BIN"), os.Getenv("GPUHUB_HELM")
	if kubeBin == "" || helm == "" {
		t.Skip("GPUHUB_KUBE_BIN or GPUHUB_HELM is not set; make e2e sets them")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: kubeBin, Dir: filepath.Join(t.TempDir(), "cluster")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	c := &chartRBAC{ctx: ctx, cp: cp}
	if c.adminCfg, err = cp.RESTConfig("admin", []string{"system:masters"}); err != nil {
		t.Fatal(err)
	}
	if c.admin, err = kubernetes.NewForConfig(c.adminCfg); err != nil {
		t.Fatal(err)
	}
	version, err := ServerVersion(c.admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range append([]string{testPods}, namespaces...) {
		if _, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	chart := Chart{Helm: helm, Dir: "../../chart/gpuhub", Namespace: testRelease, PodNamespace: testPods, KubeVersion: version}
	if c.objs, err = chart.Render(ctx); err != nil {
		t.Fatal(err)
	}
	if c.in, err = InstallRBAC(ctx, c.admin, testRelease, c.objs); err != nil {
		t.Fatal(err)
	}
	return c
}

// clientOf is a client with a token of the chart's ServiceAccount sa, as the service runs.
func (c *chartRBAC) clientOf(t *testing.T, sa string) kubernetes.Interface {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.in.WriteKubeconfig(c.ctx, c.admin, sa, c.cp.URL, c.cp.CAData(), kc); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// bobsPods creates bob's single-user pod jupyter-bob in the single-user namespace and, as a pod the services must
// not touch, in the release namespace.
func (c *chartRBAC) bobsPods(t *testing.T) {
	t.Helper()
	for _, ns := range []string{testPods, testRelease} {
		// Pods need the namespace's default ServiceAccount, which the controller manager creates.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if _, err := c.admin.CoreV1().ServiceAccounts(ns).Get(c.ctx, "default", metav1.GetOptions{}); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if _, err := c.admin.CoreV1().Pods(ns).Create(c.ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "jupyter-bob", Labels: map[string]string{"component": "singleuser-server"},
				Annotations: map[string]string{"hub.jupyter.org/username": "bob"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x"}}},
		}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("pod in %s: %v", ns, err)
		}
	}
}

// rightsCheck is one thing a service does (or must not do) with its ServiceAccount.
type rightsCheck struct {
	name string
	do   func() error
}

// checkRights runs allowed in order, each must succeed, and forbidden, each must be Forbidden.
func checkRights(t *testing.T, allowed []rightsCheck, forbidden map[string]func() error) {
	t.Helper()
	for _, a := range allowed {
		if err := a.do(); err != nil {
			t.Errorf("%s: %v", a.name, err)
		}
	}
	for name, do := range forbidden {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: error %v, want Forbidden", name, err)
		}
	}
}

// leads runs client-go leader election with client on the Lease release/lease as identity, as the services do:
// create, then renew (get, update) over a few renewals, then give it back. It says whether client led.
func (c *chartRBAC) leads(t *testing.T, client kubernetes.Interface, lease, identity string) bool {
	t.Helper()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, testRelease, lease, client.CoreV1(), client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(c.ctx, 30*time.Second)
	defer stop()
	var led atomic.Bool
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				time.Sleep(time.Second) // a few renewals
				led.Store(true)
				stop()
			},
			OnStoppedLeading: func() {},
		},
	})
	return led.Load()
}
