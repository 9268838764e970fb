package gpuhubstack

import (
	"context"
	"os"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestInstall applies a helm template output of chart/gpuhub (testdata/rendered.yaml, rendered with
// the values Chart.Render passes) to a fake clientset: only what the local cluster runs is created.
func TestInstall(t *testing.T) {
	data, err := os.ReadFile("testdata/rendered.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(data)
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientset()
	in, err := Install(context.Background(), c, "jhub", objs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range c.Actions() {
		if a.GetVerb() == "create" {
			got = append(got, a.GetResource().Resource)
		}
	}
	sort.Strings(got)
	want := []string{"clusterrolebindings", "clusterrolebindings", "clusterroles", "clusterroles", "daemonsets", "namespaces",
		"serviceaccounts", "serviceaccounts"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}
	if in.UsageServiceAccount != "gpuhub-usage" {
		t.Errorf("usage ServiceAccount = %q, want gpuhub-usage", in.UsageServiceAccount)
	}
	ds, err := c.AppsV1().DaemonSets("jhub").Get(context.Background(), "gpuhub-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if diff := cmp.Diff(GPUNodeSelector, spec.NodeSelector); diff != "" {
		t.Errorf("nodeSelector (-want +got):\n%s", diff)
	}
	if spec.RuntimeClassName != nil {
		t.Errorf("runtimeClassName = %q, want none", *spec.RuntimeClassName)
	}
	args := spec.Containers[0].Args
	for _, a := range []string{"--backend=simulated", "--snapshot-auth=tokenreview", "--snapshot-allowed-users=system:serviceaccount:jhub:gpuhub-usage"} {
		if !contains(args, a) {
			t.Errorf("agent args %v lack %s", args, a)
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestEscapeKey(t *testing.T) {
	if got, want := escapeKey("nvidia.com/gpu.present"), `nvidia\.com/gpu\.present`; got != want {
		t.Errorf("escapeKey = %q, want %q", got, want)
	}
}
