package gpuhubstack

import (
	"bytes"
	"context"
	"flag"
	"os"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

var update = flag.Bool("update", false, "rewrite testdata/rendered.yaml with $GPUHUB_HELM")

// TestRenderedCurrent keeps testdata/rendered.yaml equal to what Chart.Render gets from helm for
// chart/gpuhub (make e2e runs it with GPUHUB_HELM; -update rewrites the file).
func TestRenderedCurrent(t *testing.T) {
	helm := os.Getenv("GPUHUB_HELM")
	if helm == "" {
		t.Skip("GPUHUB_HELM is not set; make e2e runs this check with helm")
	}
	got, err := Chart{Helm: helm, Dir: "../../chart/gpuhub", Namespace: "jhub", KubeVersion: "v1.36.3"}.renderYAML(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("testdata/rendered.yaml", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/rendered.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("testdata/rendered.yaml is stale: chart/gpuhub changed; run `GPUHUB_HELM=%s go test ./e2e/gpuhubstack -run TestRenderedCurrent -args -update`", helm)
	}
}

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
		"rolebindings", "roles", "serviceaccounts", "serviceaccounts"}
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
	for _, a := range []string{"--backend=simulated", "--snapshot-auth=tokenreview", "--snapshot-audience=gpuhub-agent",
		"--snapshot-allowed-users=system:serviceaccount:jhub:gpuhub-usage"} {
		if !contains(args, a) {
			t.Errorf("agent args %v lack %s", args, a)
		}
	}
	// The usage process is told what the chart tells the usage Deployment, except where its token lies.
	if in.AgentAudience != "gpuhub-agent" {
		t.Errorf("agent audience %q, want gpuhub-agent", in.AgentAudience)
	}
	wantArgs := []string{"--agent-namespace=jhub",
		"--agent-selector=app.kubernetes.io/component=gpu-agent,app.kubernetes.io/instance=gpuhub,app.kubernetes.io/name=gpuhub",
		"--agent-service-account=gpuhub-agent", "--agent-port=9400"}
	if diff := cmp.Diff(wantArgs, in.UsageAgentArgs); diff != "" {
		t.Errorf("usage agent args (-want +got):\n%s", diff)
	}
	spec2 := Usage{AgentTokenFile: "/state/agent-token", AgentArgs: in.UsageAgentArgs}.Spec()
	if !contains(spec2.Args, "--agent-token-file=/state/agent-token") {
		t.Errorf("usage args %v lack the agent token file", spec2.Args)
	}
}

// TestInstallPodNamespace: with the single-user pods in another namespace, the usage API's pod Role is
// created there too, and Uninstall removes it (deleting the release namespace does not).
func TestInstallPodNamespace(t *testing.T) {
	data, err := os.ReadFile("testdata/rendered.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.Role:
			o.Namespace = "z2jh"
		case *rbacv1.RoleBinding:
			o.Namespace = "z2jh"
		}
	}
	c := fake.NewClientset()
	in, err := Install(context.Background(), c, "jhub", objs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().Roles("z2jh").Get(context.Background(), "gpuhub-usage", metav1.GetOptions{}); err != nil {
		t.Fatalf("role in z2jh: %v", err)
	}
	in.Uninstall(context.Background(), c)
	if _, err := c.RbacV1().Roles("z2jh").Get(context.Background(), "gpuhub-usage", metav1.GetOptions{}); err == nil {
		t.Error("role in z2jh survives Uninstall")
	}
	if _, err := c.RbacV1().RoleBindings("z2jh").Get(context.Background(), "gpuhub-usage", metav1.GetOptions{}); err == nil {
		t.Error("role binding in z2jh survives Uninstall")
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
