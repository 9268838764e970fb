package gpuhubstack

import (
	"bytes"
	"context"
	"flag"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	objs := renderedObjects(t)
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
	// usage API, agent, gpu-quota, gpu-profiles and gpu-culler (pods Role, Lease Role each; gpu-culler has no
	// ClusterRole); not the Deployments, ConfigMaps, PVC, Services, NetworkPolicies, PodDisruptionBudget.
	want := []string{"clusterrolebindings", "clusterrolebindings", "clusterrolebindings", "clusterrolebindings",
		"clusterroles", "clusterroles", "clusterroles", "clusterroles",
		"daemonsets", "namespaces", "rolebindings", "rolebindings", "rolebindings", "rolebindings", "rolebindings",
		"rolebindings", "rolebindings",
		"roles", "roles", "roles", "roles", "roles", "roles", "roles",
		"serviceaccounts", "serviceaccounts", "serviceaccounts", "serviceaccounts", "serviceaccounts"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}
	if in.UsageServiceAccount != "gpuhub-usage" || in.QuotaServiceAccount != "gpuhub-quota" {
		t.Errorf("ServiceAccounts: usage %q, quota %q; want gpuhub-usage, gpuhub-quota", in.UsageServiceAccount, in.QuotaServiceAccount)
	}
	if diff := cmp.Diff([]string{"--lease-name=gpuhub-quota"}, in.QuotaArgs); diff != "" {
		t.Errorf("gpu-quota args from the chart (-want +got):\n%s", diff)
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
	objs := renderedObjects(t)
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

// TestInstallRBAC: only identities and rights, no workload.
func TestInstallRBAC(t *testing.T) {
	objs := renderedObjects(t)
	c := fake.NewClientset()
	in, err := InstallRBAC(context.Background(), c, "jhub", objs)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Actions() {
		if r := a.GetResource().Resource; a.GetVerb() == "create" && r == "daemonsets" {
			t.Errorf("InstallRBAC created %s", r)
		}
	}
	if in.QuotaServiceAccount != "gpuhub-quota" {
		t.Errorf("quota ServiceAccount = %q", in.QuotaServiceAccount)
	}
}

// TestQuotaSpec: the local gpu-quota gets what the chart's Deployment gets, on loopback, and the usage API learns
// where it is.
func TestQuotaSpec(t *testing.T) {
	q := Quota{Binary: "/bin/gpu-quota", Port: 8123, Kubeconfig: "/s/kc", Policy: "/s/policy.yaml", Namespace: "jhub",
		LeaseNamespace: "jhub", LeaseArgs: []string{"--lease-name=gpuhub-quota"}, UsageURL: "http://127.0.0.1:8181/services/gpu-usage/",
		HubAPIURL: "http://127.0.0.1:8081/hub/api", Token: "tok"}
	spec := q.Spec()
	for _, a := range []string{"--listen=127.0.0.1:8123", "--prefix=/services/gpu-quota/", "--policy=/s/policy.yaml", "--namespace=jhub",
		"--kubeconfig=/s/kc", "--lease-namespace=jhub", "--lease-name=gpuhub-quota", "--reader-services=gpu-usage",
		"--usage-url=http://127.0.0.1:8181/services/gpu-usage/"} {
		if !contains(spec.Args, a) {
			t.Errorf("gpu-quota args %v lack %s", spec.Args, a)
		}
	}
	for _, e := range []string{"JUPYTERHUB_API_TOKEN=tok", "JUPYTERHUB_SERVICE_NAME=gpu-quota", "JUPYTERHUB_API_URL=http://127.0.0.1:8081/hub/api"} {
		if !contains(spec.Env, e) {
			t.Errorf("gpu-quota env lacks %s", e)
		}
	}
	if got, want := q.URL(), "http://127.0.0.1:8123/services/gpu-quota/"; got != want {
		t.Errorf("URL = %s, want %s", got, want)
	}
	if got := QuotaHubService(8123, "tok").URL; got != "http://127.0.0.1:8123" {
		t.Errorf("Hub service url = %s", got)
	}
	u := Usage{QuotaURL: q.URL()}.Spec()
	for _, a := range []string{"--quota-url=http://127.0.0.1:8123/services/gpu-quota/", "--reader-services=gpu-quota"} {
		if !contains(u.Args, a) {
			t.Errorf("usage args %v lack %s", u.Args, a)
		}
	}
	if u := (Usage{}).Spec(); slices.ContainsFunc(u.Args, func(a string) bool { return strings.HasPrefix(a, "--quota-url") }) {
		t.Errorf("usage args without gpu-quota: %v", u.Args)
	}
}

// TestHubValues: the local Hub loads the chart's glue file unchanged, as z2jh's hub.extraConfig.gpuhub.
func TestHubValues(t *testing.T) {
	got, err := HubValues("../../chart/gpuhub", map[string]string{"00-z2jh": "c.Spawner.consecutive_failure_limit = 5\n"})
	if err != nil {
		t.Fatal(err)
	}
	glue, err := os.ReadFile("../../chart/gpuhub/" + GlueFile)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Singleuser struct {
			ProfileList []map[string]any `yaml:"profileList"`
		} `yaml:"singleuser"`
		Hub struct {
			ExtraConfig map[string]string `yaml:"extraConfig"`
		} `yaml:"hub"`
	}
	if err := yaml.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	if v.Hub.ExtraConfig["gpuhub"] != string(glue) {
		t.Error("hub.extraConfig.gpuhub is not the chart's glue file")
	}
	if v.Hub.ExtraConfig["00-z2jh"] == "" || len(v.Singleuser.ProfileList) == 0 {
		t.Errorf("values lost the extra snippet or the profiles: %s", got)
	}
}

// TestProfilesSpec: the local gpu-profiles process gets the flags the chart's Deployment sets (the Lease it is
// told to use is the one its Role names), its Hub identity, and gpu-quota's URL when the stack runs gpu-quota.
func TestProfilesSpec(t *testing.T) {
	p := Profiles{Binary: "/bin/gpu-profiles", Port: 8124, Kubeconfig: "/s/kc", Config: "/s/profiles.yaml", Namespace: "jhub",
		LeaseNamespace: "jhub", LeaseArgs: []string{"--lease-name=gpuhub-profiles"}, QuotaURL: "http://127.0.0.1:8123/services/gpu-quota/",
		UsageURL: "http://127.0.0.1:8181/services/gpu-usage/", HubAPIURL: "http://127.0.0.1:8081/hub/api", Token: "tok"}
	spec := p.Spec()
	for _, a := range []string{"--listen=127.0.0.1:8124", "--prefix=/services/gpu-profiles/", "--config=/s/profiles.yaml", "--namespace=jhub",
		"--kubeconfig=/s/kc", "--lease-namespace=jhub", "--lease-name=gpuhub-profiles", "--reader-services=gpu-usage",
		"--quota-url=http://127.0.0.1:8123/services/gpu-quota/", "--usage-url=http://127.0.0.1:8181/services/gpu-usage/", "--pending-end-after=30s"} {
		if !contains(spec.Args, a) {
			t.Errorf("gpu-profiles args %v lack %s", spec.Args, a)
		}
	}
	for _, e := range []string{"JUPYTERHUB_API_TOKEN=tok", "JUPYTERHUB_SERVICE_NAME=gpu-profiles", "JUPYTERHUB_API_URL=http://127.0.0.1:8081/hub/api"} {
		if !contains(spec.Env, e) {
			t.Errorf("gpu-profiles env lacks %s", e)
		}
	}
	if got := (Quota{ProfilesToo: true}).Spec().Args; !contains(got, "--reader-services=gpu-usage,gpu-profiles") {
		t.Errorf("gpu-quota next to gpu-profiles: args %v do not let gpu-profiles assess", got)
	}
}

// TestUsageReaders: the usage API lets the services the chart lists read what the chart lets them: gpu-culler
// every user's data (--reader-services), gpu-profiles each user's right-size advice only (--advice-readers).
// Without gpu-profiles among the advice readers its advice fetches are refused (403) and the spawn form marks
// nothing; among the reader services it could read every user's GPU-hours and every server's telemetry.
func TestUsageReaders(t *testing.T) {
	type readers struct{ Readers, Advice []string }
	for _, tc := range []struct {
		name string
		o    Options
		want readers
	}{
		{"usage API alone", Options{}, readers{}},
		{"gpu-profiles", Options{Profiles: ProfilesOptions{Binary: "p"}}, readers{Advice: []string{"gpu-profiles"}}},
		{"gpu-culler and gpu-profiles", Options{Profiles: ProfilesOptions{Binary: "p"}, Culler: CullerOptions{Binary: "c"}},
			readers{Readers: []string{"gpu-culler"}, Advice: []string{"gpu-profiles"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got readers
			got.Readers, got.Advice = usageReaders(tc.o)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("usageReaders (-want +got):\n%s", d)
			}
		})
	}
	readerArgs := func(args []string) []string {
		var out []string
		for _, a := range args {
			if strings.HasPrefix(a, "--reader-services=") || strings.HasPrefix(a, "--advice-readers=") {
				out = append(out, a)
			}
		}
		return out
	}
	u := Usage{QuotaURL: "http://q/"}
	u.Readers, u.AdviceReaders = usageReaders(Options{Profiles: ProfilesOptions{Binary: "p"}})
	if d := cmp.Diff([]string{"--reader-services=gpu-quota", "--advice-readers=gpu-profiles"}, readerArgs(u.Spec().Args)); d != "" {
		t.Errorf("usage API readers next to gpu-quota and gpu-profiles (-want +got):\n%s", d)
	}

	// With every service, as the chart renders them (testdata/rendered.yaml: gpu-quota, gpu-profiles, gpu-culler).
	objs := renderedObjects(t)
	var chart []string
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == "gpuhub-usage" {
			chart = readerArgs(d.Spec.Template.Spec.Containers[0].Args)
		}
	}
	u = Usage{QuotaURL: "http://q/"}
	u.Readers, u.AdviceReaders = usageReaders(Options{Profiles: ProfilesOptions{Binary: "p"}, Culler: CullerOptions{Binary: "c"}})
	if d := cmp.Diff(chart, readerArgs(u.Spec().Args)); d != "" {
		t.Errorf("the local usage API's readers with every service (-chart +local):\n%s", d)
	}
}

// renderedObjects decodes testdata/rendered.yaml, the chart as helm renders it (TestRenderedCurrent keeps it current).
func renderedObjects(t *testing.T) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile("testdata/rendered.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
