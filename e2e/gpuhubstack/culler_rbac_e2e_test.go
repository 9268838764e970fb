//go:build e2e

package gpuhubstack

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
)

// TestCullerRBAC runs on a real API server (RBAC on) with the chart's gpu-culler ServiceAccount, z2jh's pods in
// another namespace than the release: its Roles are enough for what gpu-culler does (an informer on the single-user
// pods and its notice on them, client-go leader election on its Lease, its stops ConfigMap created, read, listed and
// watched by name with a metadata.name field selector, updated) and nothing more (no other ConfigMap, no listing
// them all, no pod deletes, no nodes, no Secrets).
func TestCullerRBAC(t *testing.T) {
	c := startChartRBAC(t)
	ctx, admin, objs := c.ctx, c.admin, c.objs
	const release, pods = testRelease, testPods
	// gpu-culler's ServiceAccount and the names its Deployment is told, from the rendered chart.
	var sa, lease, stops string
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			if o.Labels["app.kubernetes.io/component"] == "gpu-culler" {
				sa = o.Name
			}
		case *appsv1.Deployment:
			if o.Labels["app.kubernetes.io/component"] != "gpu-culler" {
				continue
			}
			for _, a := range o.Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--lease-name="); ok {
					lease = v
				}
				if v, ok := strings.CutPrefix(a, "--stops-configmap="); ok {
					stops = v
				}
			}
		}
	}
	if sa == "" || lease == "" || stops == "" {
		t.Fatalf("rendered chart: gpu-culler ServiceAccount %q, --lease-name %q, --stops-configmap %q", sa, lease, stops)
	}
	culler := c.clientOf(t, sa)
	c.bobsPods(t)
	if _, err := admin.CoreV1().ConfigMaps(release).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	notice := []byte(`{"metadata":{"annotations":{"gpuhub.io/notice-gpu-culler":"{\"kind\":\"idle\"}"}}}`)
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", stops).String()}
	cms := culler.CoreV1().ConfigMaps(release)

	// In order: the ConfigMap is created before it is read, listed, watched and updated.
	allowed := []rightsCheck{
		{"list single-user pods", func() error {
			_, err := culler.CoreV1().Pods(pods).List(ctx, metav1.ListOptions{LabelSelector: "component=singleuser-server"})
			return err
		}},
		{"watch single-user pods", func() error {
			w, err := culler.CoreV1().Pods(pods).Watch(ctx, metav1.ListOptions{LabelSelector: "component=singleuser-server"})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"patch a notice on a single-user pod", func() error {
			_, err := culler.CoreV1().Pods(pods).Patch(ctx, "jupyter-bob", types.MergePatchType, notice, metav1.PatchOptions{})
			return err
		}},
		{"create the stops ConfigMap", func() error {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: stops}}, metav1.CreateOptions{})
			return err
		}},
		{"get the stops ConfigMap", func() error { _, err := cms.Get(ctx, stops, metav1.GetOptions{}); return err }},
		{"list the stops ConfigMap by name", func() error { _, err := cms.List(ctx, byName); return err }},
		{"watch the stops ConfigMap by name", func() error {
			w, err := cms.Watch(ctx, byName)
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"update the stops ConfigMap", func() error {
			cm, err := cms.Get(ctx, stops, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cm.Data = map[string]string{"616c696365": `{"user":"alice"}`}
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}},
	}
	forbidden := map[string]func() error{
		"list every ConfigMap":       func() error { _, err := cms.List(ctx, metav1.ListOptions{}); return err },
		"get another ConfigMap":      func() error { _, err := cms.Get(ctx, "someone-else", metav1.GetOptions{}); return err },
		"delete the stops ConfigMap": func() error { return cms.Delete(ctx, stops, metav1.DeleteOptions{}) },
		"update another ConfigMap": func() error {
			_, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}, metav1.UpdateOptions{})
			return err
		},
		"configmaps in the single-user namespace": func() error {
			_, err := culler.CoreV1().ConfigMaps(pods).Get(ctx, stops, metav1.GetOptions{})
			return err
		},
		"delete a single-user pod": func() error { return culler.CoreV1().Pods(pods).Delete(ctx, "jupyter-bob", metav1.DeleteOptions{}) },
		"list pods in the release namespace": func() error {
			_, err := culler.CoreV1().Pods(release).List(ctx, metav1.ListOptions{})
			return err
		},
		"list nodes":   func() error { _, err := culler.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
		"list secrets": func() error { _, err := culler.CoreV1().Secrets(release).List(ctx, metav1.ListOptions{}); return err },
	}
	checkRights(t, allowed, forbidden)

	// Leader election as gpu-culler does it: client-go on its Lease, create then renew (get, update).
	if !c.leads(t, culler, lease, "gpuhub-culler-test") {
		t.Errorf("gpu-culler's ServiceAccount never led on Lease %s/%s", release, lease)
	}
}
