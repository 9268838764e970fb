//go:build chart

package chart

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cullerServiceName is gpu-culler's Hub service name (chart value culler.serviceName).
const cullerServiceName = "gpu-culler"

// TestCullerWiring: gpu-culler finds the usage API (Service, port, prefix under hub.baseURL) and the usage API lets
// it read (--reader-services); the policy reaches it verbatim through a directory mount; the Lease and the stops
// ConfigMap it is told to use are the ones its Role names; its Hub token is the one z2jh generates; two replicas
// under a PodDisruptionBudget, spread over nodes; only the proxy and the Hub may reach it.
func TestCullerWiring(t *testing.T) {
	objs := rendered(t, "--set", "culler.enabled=true", "--set", "quota.enabled=true", "--set", "usage.podNamespace=z2jh",
		"--set", "hub.baseURL=/jupyter/", "--set-file", "culler.policy=testdata/culler-policy.yaml")
	culler := objs["Deployment jhub/gpuhub-culler"].(*appsv1.Deployment)
	usage := objs["Deployment jhub/gpuhub-usage"].(*appsv1.Deployment)
	cc, uc := culler.Spec.Template.Spec.Containers[0], usage.Spec.Template.Spec.Containers[0]
	env := func(c corev1.Container, name string) string {
		for _, e := range c.Env {
			if e.Name == name {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					return "secret " + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				}
				return e.Value
			}
		}
		return ""
	}
	usageSvc := objs["Service jhub/gpuhub-usage"].(*corev1.Service)
	cullerSvc := objs["Service jhub/gpuhub-culler"].(*corev1.Service)

	policyArg, _ := flagValue(cc.Args, "policy")
	var policyFile string
	for _, m := range cc.VolumeMounts {
		for _, v := range culler.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && strings.HasPrefix(policyArg, m.MountPath+"/") {
				if m.SubPath != "" {
					t.Errorf("policy mounted with subPath %q: ConfigMap updates would never reach the pod", m.SubPath)
				}
				cm := objs["ConfigMap jhub/"+v.ConfigMap.Name].(*corev1.ConfigMap)
				policyFile = cm.Data[strings.TrimPrefix(policyArg, m.MountPath+"/")]
			}
		}
	}
	wantPolicy, err := os.ReadFile("testdata/culler-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if policyFile != string(wantPolicy) {
		t.Errorf("--policy=%s holds:\n%s\nwant culler.policy verbatim:\n%s", policyArg, policyFile, wantPolicy)
	}

	named := map[string][]string{} // resource -> names the state Role allows get/update on
	for _, r := range objs["Role jhub/gpuhub-culler-state"].(*rbacv1.Role).Rules {
		for _, res := range r.Resources {
			named[res] = append(named[res], r.ResourceNames...)
		}
	}
	type wiring struct {
		UsageURL, ReaderOfUsage, Namespace, LeaseNS, Lease, Stops, LeaderElect, Token, Prefix, ServiceName, Listen string
		LeaseRoleNames, StopsRoleNames                                                                             []string
		Replicas                                                                                                   int32
		ServicePort                                                                                                string
	}
	got := wiring{Token: env(cc, "JUPYTERHUB_API_TOKEN"), Prefix: env(cc, "JUPYTERHUB_SERVICE_PREFIX"),
		ServiceName: env(cc, "JUPYTERHUB_SERVICE_NAME"), LeaseRoleNames: named["leases"], StopsRoleNames: named["configmaps"],
		Replicas: *culler.Spec.Replicas, ServicePort: fmt.Sprintf("%d->%s", cullerSvc.Spec.Ports[0].Port, cullerSvc.Spec.Ports[0].TargetPort.String())}
	got.UsageURL, _ = flagValue(cc.Args, "usage-url")
	got.ReaderOfUsage, _ = flagValue(uc.Args, "reader-services")
	got.Namespace, _ = flagValue(cc.Args, "namespace")
	got.LeaseNS, _ = flagValue(cc.Args, "lease-namespace")
	got.Lease, _ = flagValue(cc.Args, "lease-name")
	got.Stops, _ = flagValue(cc.Args, "stops-configmap")
	got.LeaderElect, _ = flagValue(cc.Args, "leader-elect")
	got.Listen, _ = flagValue(cc.Args, "listen")
	want := wiring{
		UsageURL:      fmt.Sprintf("http://%s.jhub:%d%s", usageSvc.Name, usageSvc.Spec.Ports[0].Port, env(uc, "JUPYTERHUB_SERVICE_PREFIX")),
		ReaderOfUsage: "gpu-quota," + cullerServiceName,
		Namespace:     "z2jh", LeaseNS: "jhub", Lease: "gpuhub-culler", Stops: "gpuhub-culler-stops", LeaderElect: "true",
		Token: "secret hub/hub.services.gpu-culler.apiToken", Prefix: "/jupyter/services/gpu-culler/", ServiceName: cullerServiceName,
		Listen:         fmt.Sprintf(":%d", cc.Ports[0].ContainerPort),
		LeaseRoleNames: []string{"gpuhub-culler"}, StopsRoleNames: []string{"gpuhub-culler-stops"},
		Replicas: 2, ServicePort: "8000->http",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gpu-culler wiring (-want +got):\n%s", diff)
	}
	if want.UsageURL != "http://gpuhub-usage.jhub:8000/jupyter/services/gpu-usage/" {
		t.Errorf("gpu-culler --usage-url = %s", want.UsageURL)
	}

	// Two replicas stay apart and are drained one at a time.
	pdb := objs["PodDisruptionBudget jhub/gpuhub-culler"].(*policyv1.PodDisruptionBudget)
	if diff := cmp.Diff(culler.Spec.Selector, pdb.Spec.Selector); diff != "" {
		t.Errorf("PodDisruptionBudget selector (-Deployment +PDB):\n%s", diff)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable = %v, want 1", pdb.Spec.MaxUnavailable)
	}
	aff := culler.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("gpu-culler pods have no preferred anti-affinity: %+v", aff)
	}
	term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != "kubernetes.io/hostname" || metav1.FormatLabelSelector(term.LabelSelector) != metav1.FormatLabelSelector(culler.Spec.Selector) {
		t.Errorf("anti-affinity term %+v does not keep the Deployment's pods on different nodes", term)
	}
	if culler.Spec.Template.Labels["hub.jupyter.org/network-access-hub"] != "true" {
		t.Error("gpu-culler pods lack hub.jupyter.org/network-access-hub: z2jh's hub NetworkPolicy would drop them")
	}

	// NetworkPolicy: the proxy (the panel) and the Hub (the home page) in z2jh's namespace; the usage API admits it.
	from := func(name string) []string {
		np := objs["NetworkPolicy jhub/"+name].(*networkingv1.NetworkPolicy)
		var out []string
		for _, peer := range np.Spec.Ingress[0].From {
			s := metav1.FormatLabelSelector(peer.PodSelector)
			if peer.NamespaceSelector != nil {
				s += " in " + metav1.FormatLabelSelector(peer.NamespaceSelector)
			}
			out = append(out, s)
		}
		return out
	}
	wantFrom := []string{
		"app=jupyterhub,component=proxy in kubernetes.io/metadata.name=z2jh",
		"app=jupyterhub,component=hub in kubernetes.io/metadata.name=z2jh",
		// The usage API's admin view lists the culler's decisions.
		"app.kubernetes.io/component=usage-api,app.kubernetes.io/instance=gpuhub,app.kubernetes.io/name=gpuhub",
	}
	if diff := cmp.Diff(wantFrom, from("gpuhub-culler")); diff != "" {
		t.Errorf("gpu-culler ingress (-want +got):\n%s", diff)
	}
	cullerPods := "app.kubernetes.io/component=gpu-culler,app.kubernetes.io/instance=gpuhub,app.kubernetes.io/name=gpuhub"
	if !slices.Contains(from("gpuhub-usage"), cullerPods) {
		t.Errorf("usage API ingress %v does not admit gpu-culler (%s)", from("gpuhub-usage"), cullerPods)
	}

	// The admin view reads the decisions with the usage API's token: --culler-url to this Service, and gpu-culler
	// admits gpu-usage (with culler.readerServices kept, and named once).
	cullerURL, _ := flagValue(uc.Args, "culler-url")
	if want := fmt.Sprintf("http://%s.jhub:%d%s", cullerSvc.Name, cullerSvc.Spec.Ports[0].Port, got.Prefix); cullerURL != want {
		t.Errorf("usage --culler-url=%s, want %s", cullerURL, want)
	}
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, "gpu-usage"},
		{[]string{"--set", "culler.readerServices={reporting}"}, "reporting,gpu-usage"},
		{[]string{"--set", "culler.readerServices={gpu-usage}"}, "gpu-usage"},
	} {
		objs := rendered(t, append([]string{"--set", "culler.enabled=true"}, tc.set...)...)
		if got, _ := flagValue(objs["Deployment jhub/gpuhub-culler"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args, "reader-services"); got != tc.want {
			t.Errorf("%v: gpu-culler --reader-services=%s, want %s", tc.set, got, tc.want)
		}
	}

	// Next to gpu-quota, gpu-culler asks its waitlist who waits for which GPU class, and gpu-quota admits it.
	quotaSvc := objs["Service jhub/gpuhub-quota"].(*corev1.Service)
	quotaPrefix := env(objs["Deployment jhub/gpuhub-quota"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0], "JUPYTERHUB_SERVICE_PREFIX")
	quotaURL, _ := flagValue(cc.Args, "quota-url")
	if got, want := quotaURL, fmt.Sprintf("http://%s.jhub:%d%s", quotaSvc.Name, quotaSvc.Spec.Ports[0].Port, quotaPrefix); got != want {
		t.Errorf("gpu-culler --quota-url=%s, want %s", got, want)
	}
	if !slices.Contains(from("gpuhub-quota"), cullerPods) {
		t.Errorf("gpu-quota ingress %v does not admit gpu-culler (%s)", from("gpuhub-quota"), cullerPods)
	}

	// One replica: no PodDisruptionBudget (it would block every drain).
	if _, ok := rendered(t, "--set", "culler.enabled=true", "--set", "culler.replicas=1")["PodDisruptionBudget jhub/gpuhub-culler"]; ok {
		t.Error("culler.replicas=1 renders a PodDisruptionBudget")
	}
	// Alone, the usage API lets gpu-culler read and nothing else is named.
	alone := rendered(t, "--set", "culler.enabled=true")
	if got, _ := flagValue(alone["Deployment jhub/gpuhub-usage"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args, "reader-services"); got != cullerServiceName {
		t.Errorf("usage --reader-services=%s next to gpu-culler alone, want %s", got, cullerServiceName)
	}
	// Without gpu-quota there is no waitlist: no --quota-url, nothing is contended.
	if got, ok := flagValue(alone["Deployment jhub/gpuhub-culler"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args, "quota-url"); ok {
		t.Errorf("gpu-culler alone has --quota-url=%s", got)
	}
	// Without telemetry the culler could only skip: the chart says so at install.
	if out, err := helm(t, "template", "gpuhub", "gpuhub", "--kube-version", kubeVersion, "--set", "culler.enabled=true", "--set", "usage.enabled=false"); err == nil || !strings.Contains(out, "culler.usageURL") {
		t.Errorf("culler without a usage API: err %v, output does not name culler.usageURL:\n%s", err, out)
	}

	// Off by default, and nothing of it rendered then.
	for key, o := range rendered(t) {
		if strings.Contains(key, "culler") {
			t.Errorf("culler.enabled=false renders %s", key)
		}
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == "gpuhub-usage" {
			if got, _ := flagValue(d.Spec.Template.Spec.Containers[0].Args, "reader-services"); strings.Contains(got, cullerServiceName) {
				t.Errorf("usage --reader-services=%s without gpu-culler", got)
			}
			if got, ok := flagValue(d.Spec.Template.Spec.Containers[0].Args, "culler-url"); ok {
				t.Errorf("usage --culler-url=%s without gpu-culler", got)
			}
		}
	}
}
