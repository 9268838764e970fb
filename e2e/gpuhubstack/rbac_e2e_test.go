//go:build e2e

package gpuhubstack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/gpuhub/gpuhub/e2e/cluster"
)

// TestQuotaRBAC runs on a real API server (RBAC on) with the chart's gpu-quota ServiceAccount, z2jh's pods in
// another namespace than the release: the rights it grants are enough for everything gpu-quota does (informers
// on nodes and single-user pods, the notice annotation, client-go leader election on its Lease) and nothing more
// (no pod deletes, no pods outside the single-user namespace, no other Lease, no Secrets).
func TestQuotaRBAC(t *testing.T) {
	kubeBin, helm := os.Getenv("GPUHUB_KUBE_BIN"), os.Getenv("GPUHUB_HELM")
	if kubeBin == "" || helm == "" {
		t.Skip("GPUHUB_KUBE_BIN or GPUHUB_HELM is not set; make e2e sets them")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: kubeBin, Dir: filepath.Join(t.TempDir(), "cluster")})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	adminCfg, err := cp.RESTConfig("admin", []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		t.Fatal(err)
	}
	version, err := ServerVersion(admin)
	if err != nil {
		t.Fatal(err)
	}
	const release, pods = "gpuhub", "jhub"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pods}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, err := Chart{Helm: helm, Dir: "../../chart/gpuhub", Namespace: release, PodNamespace: pods, KubeVersion: version}.Render(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in, err := InstallRBAC(ctx, admin, release, objs)
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := in.WriteKubeconfig(ctx, admin, in.QuotaServiceAccount, cp.URL, cp.CAData(), kc); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	quota, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{pods, release} {
		// Pods need the namespace's default ServiceAccount, which the controller manager creates.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if _, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "jupyter-bob", Annotations: map[string]string{"hub.jupyter.org/username": "bob"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x"}}},
		}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("pod in %s: %v", ns, err)
		}
	}
	lease := ""
	for _, a := range in.QuotaArgs {
		if v, ok := strings.CutPrefix(a, "--lease-name="); ok {
			lease = v
		}
	}
	if lease == "" {
		t.Fatalf("no --lease-name in the chart's gpu-quota args %v", in.QuotaArgs)
	}
	notice := []byte(`{"metadata":{"annotations":{"gpuhub.io/notice-gpu-quota":"{\"kind\":\"budget\"}"}}}`)

	allowed := map[string]func() error{
		"list nodes": func() error { _, err := quota.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
		"watch nodes": func() error {
			w, err := quota.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"list single-user pods": func() error { _, err := quota.CoreV1().Pods(pods).List(ctx, metav1.ListOptions{}); return err },
		"watch single-user pods": func() error {
			w, err := quota.CoreV1().Pods(pods).Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"patch a notice on a single-user pod": func() error {
			_, err := quota.CoreV1().Pods(pods).Patch(ctx, "jupyter-bob", types.MergePatchType, notice, metav1.PatchOptions{})
			return err
		},
	}
	for name, do := range allowed {
		if err := do(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	forbidden := map[string]func() error{
		"delete a single-user pod": func() error {
			return quota.CoreV1().Pods(pods).Delete(ctx, "jupyter-bob", metav1.DeleteOptions{})
		},
		"list pods in the release namespace": func() error {
			_, err := quota.CoreV1().Pods(release).List(ctx, metav1.ListOptions{})
			return err
		},
		"patch a pod in the release namespace": func() error {
			_, err := quota.CoreV1().Pods(release).Patch(ctx, "jupyter-bob", types.MergePatchType, notice, metav1.PatchOptions{})
			return err
		},
		"list pods cluster-wide": func() error { _, err := quota.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err },
		"list secrets":           func() error { _, err := quota.CoreV1().Secrets(release).List(ctx, metav1.ListOptions{}); return err },
		"update a node": func() error {
			_, err := quota.CoreV1().Nodes().Patch(ctx, "none", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
			return err
		},
		"lease in the single-user namespace": func() error {
			_, err := quota.CoordinationV1().Leases(pods).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lease}}, metav1.CreateOptions{})
			return err
		},
	}
	for name, do := range forbidden {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: error %v, want Forbidden", name, err)
		}
	}

	// Leader election as gpu-quota does it: client-go on a Lease, create then renew (get, update).
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, release, lease, quota.CoreV1(), quota.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: "gpuhub-quota-test"})
	if err != nil {
		t.Fatal(err)
	}
	leCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	var led atomic.Bool
	leaderelection.RunOrDie(leCtx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				// Hold it over a few renewals (get + update), then give it back.
				time.Sleep(time.Second)
				led.Store(true)
				stop()
			},
			OnStoppedLeading: func() {},
		},
	})
	if !led.Load() {
		t.Errorf("gpu-quota's ServiceAccount never led on Lease %s/%s", release, lease)
	}
	got, err := admin.CoordinationV1().Leases(release).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	if got.Spec.HolderIdentity == nil || (*got.Spec.HolderIdentity != "gpuhub-quota-test" && *got.Spec.HolderIdentity != "") {
		t.Errorf("lease holder = %v", ptr.Deref(got.Spec.HolderIdentity, "<nil>"))
	}
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}
	if _, err := admin.CoordinationV1().Leases(release).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := quota.CoordinationV1().Leases(release).Update(ctx, other, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("update another Lease: error %v, want Forbidden", err)
	}
	if err := quota.CoordinationV1().Leases(release).Delete(ctx, lease, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete its Lease: error %v, want Forbidden", err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("test ran out of time")
	}
}
