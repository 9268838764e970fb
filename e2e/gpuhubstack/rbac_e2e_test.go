//go:build e2e

package gpuhubstack

import (
	"context"
	"errors"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestQuotaRBAC runs on a real API server (RBAC on) with the chart's gpu-quota ServiceAccount, z2jh's pods in
// another namespace than the release: the rights it grants are enough for everything gpu-quota does (informers
// on nodes and single-user pods, the notice annotation, client-go leader election on its Lease) and nothing more
// (no pod deletes, no pods outside the single-user namespace, no other Lease, no Secrets).
func TestQuotaRBAC(t *testing.T) {
	c := startChartRBAC(t)
	ctx, admin, in := c.ctx, c.admin, c.in
	const release, pods = testRelease, testPods
	quota := c.clientOf(t, in.QuotaServiceAccount)
	c.bobsPods(t)
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

	allowed := []rightsCheck{
		{"list nodes", func() error { _, err := quota.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }},
		{"watch nodes", func() error {
			w, err := quota.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"list single-user pods", func() error { _, err := quota.CoreV1().Pods(pods).List(ctx, metav1.ListOptions{}); return err }},
		{"watch single-user pods", func() error {
			w, err := quota.CoreV1().Pods(pods).Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"patch a notice on a single-user pod", func() error {
			_, err := quota.CoreV1().Pods(pods).Patch(ctx, "jupyter-bob", types.MergePatchType, notice, metav1.PatchOptions{})
			return err
		}},
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
	checkRights(t, allowed, forbidden)

	// Leader election as gpu-quota does it: client-go on a Lease, create then renew (get, update).
	if !c.leads(t, quota, lease, "gpuhub-quota-test") {
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
