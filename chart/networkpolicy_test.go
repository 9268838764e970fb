//go:build chart

package chart

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// ingress is what one NetworkPolicy lets in: the pods it guards (a gpuhub component), the sources (peers) and the
// ports.
type ingress struct {
	Guards string
	From   []string
	Ports  []string
}

// metricsFrom is a Prometheus in its own namespace, as networkPolicy.metricsFrom names it.
const metricsFrom = `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}},` +
	`"podSelector":{"matchLabels":{"app.kubernetes.io/name":"prometheus"}}}]`

// TestNetworkPolicies reads every rendered NetworkPolicy and checks whom it lets reach which port: gpuhub's
// services only from the z2jh proxy (what users call through /services/<name>/), the Hub (the glue; the Hub's
// service checks), the gpuhub services that call them and networkPolicy.metricsFrom; the agents only from the usage
// API and metricsFrom. Each policy's port is the port its pods listen on, and every gpuhub workload is guarded.
func TestNetworkPolicies(t *testing.T) {
	// Peers as the test prints them.
	const (
		proxy      = "z2jh proxy"
		hub        = "z2jh hub"
		proxyZ2JH  = "z2jh proxy in namespace z2jh"
		hubZ2JH    = "z2jh hub in namespace z2jh"
		usage      = "gpuhub usage-api"
		quota      = "gpuhub gpu-quota"
		profiles   = "gpuhub gpu-profiles"
		culler     = "gpuhub gpu-culler"
		prometheus = "app.kubernetes.io/name=prometheus in kubernetes.io/metadata.name=monitoring"
	)
	every := []string{"--set", "quota.enabled=true", "--set", "profiles.enabled=true", "--set", "culler.enabled=true"}
	tests := map[string]struct {
		set  []string
		want map[string]ingress // by NetworkPolicy name
	}{
		"default: agents and the usage API": {
			want: map[string]ingress{
				"gpuhub-agent": {Guards: "gpu-agent", From: []string{usage}, Ports: []string{"9400"}},
				"gpuhub-usage": {Guards: "usage-api", From: []string{proxy, hub}, Ports: []string{"8000"}},
			},
		},
		"every service, z2jh in its own namespace, Prometheus": {
			set: append(slices.Clone(every), "--set", "usage.podNamespace=z2jh", "--set-json", "networkPolicy.metricsFrom="+metricsFrom),
			want: map[string]ingress{
				"gpuhub-agent": {Guards: "gpu-agent", From: []string{usage, prometheus}, Ports: []string{"9400"}},
				// The panel and the admin view through the proxy; gpu-quota reads GPU-hours, gpu-culler telemetry.
				"gpuhub-usage": {Guards: "usage-api", From: []string{proxyZ2JH, hubZ2JH, quota, culler, profiles, prometheus}, Ports: []string{"8000"}},
				// The panel's waitlist through the proxy, admission from the glue; the usage API (the panel's quota),
				// gpu-profiles (assess) and gpu-culler (contended classes).
				"gpuhub-quota": {Guards: "gpu-quota", From: []string{proxyZ2JH, hubZ2JH, usage, profiles, culler, prometheus}, Ports: []string{"8000"}},
				// Only the glue asks for the form: no proxy, no other service.
				"gpuhub-profiles": {Guards: "gpu-profiles", From: []string{hubZ2JH, prometheus}, Ports: []string{"8000"}},
				// The panel's countdown and snooze through the proxy, the home page's "why" from the glue, the admin
				// view's decisions from the usage API.
				"gpuhub-culler": {Guards: "gpu-culler", From: []string{proxyZ2JH, hubZ2JH, usage, prometheus}, Ports: []string{"8000"}},
			},
		},
		"every service in z2jh's namespace, other ports": {
			set: append(slices.Clone(every), "--set", "agent.port=9500", "--set", "usage.port=8100", "--set", "quota.port=8200",
				"--set", "profiles.port=8300", "--set", "culler.port=8400"),
			want: map[string]ingress{
				"gpuhub-agent":    {Guards: "gpu-agent", From: []string{usage}, Ports: []string{"9500"}},
				"gpuhub-usage":    {Guards: "usage-api", From: []string{proxy, hub, quota, culler, profiles}, Ports: []string{"8100"}},
				"gpuhub-quota":    {Guards: "gpu-quota", From: []string{proxy, hub, usage, profiles, culler}, Ports: []string{"8200"}},
				"gpuhub-profiles": {Guards: "gpu-profiles", From: []string{hub}, Ports: []string{"8300"}},
				"gpuhub-culler":   {Guards: "gpu-culler", From: []string{proxy, hub, usage}, Ports: []string{"8400"}},
			},
		},
		// A service left out is left out of the others' sources too.
		"gpu-quota and gpu-profiles without gpu-culler": {
			set: []string{"--set", "quota.enabled=true", "--set", "profiles.enabled=true"},
			want: map[string]ingress{
				"gpuhub-agent":    {Guards: "gpu-agent", From: []string{usage}, Ports: []string{"9400"}},
				"gpuhub-usage":    {Guards: "usage-api", From: []string{proxy, hub, quota, profiles}, Ports: []string{"8000"}},
				"gpuhub-quota":    {Guards: "gpu-quota", From: []string{proxy, hub, usage, profiles}, Ports: []string{"8000"}},
				"gpuhub-profiles": {Guards: "gpu-profiles", From: []string{hub}, Ports: []string{"8000"}},
			},
		},
		// Two replicas of gpu-quota reach each other: a standby relays to the decider and follows its reservations.
		"two gpu-quota replicas": {
			set: []string{"--set", "quota.enabled=true", "--set", "quota.replicas=2"},
			want: map[string]ingress{
				"gpuhub-agent": {Guards: "gpu-agent", From: []string{usage}, Ports: []string{"9400"}},
				"gpuhub-usage": {Guards: "usage-api", From: []string{proxy, hub, quota}, Ports: []string{"8000"}},
				"gpuhub-quota": {Guards: "gpu-quota", From: []string{proxy, hub, usage, quota}, Ports: []string{"8000"}},
			},
		},
		"networkPolicy.enabled=false": {
			set:  append(slices.Clone(every), "--set", "networkPolicy.enabled=false"),
			want: map[string]ingress{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs := rendered(t, tc.set...)
			got := map[string]ingress{}
			for _, o := range objs {
				np, ok := o.(*networkingv1.NetworkPolicy)
				if !ok {
					continue
				}
				got[np.Name] = ingressOf(t, np)
				checkPorts(t, np, objs)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NetworkPolicies (-want +got):\n%s", diff)
			}
			if len(tc.want) == 0 {
				return
			}
			// Every workload of the chart is guarded by one of them.
			for key, o := range objs {
				if tmpl := podTemplate(o); tmpl != nil && guardedBy(tmpl.Labels, objs) == 0 {
					t.Errorf("%s: no NetworkPolicy selects its pods", key)
				}
			}
		})
	}
}

// ingressOf describes np: the component its podSelector picks, its sources and ports. It fails on a policy that is
// not Ingress-only with exactly one rule, since a second rule or a missing `from` would let more in than is read.
func ingressOf(t *testing.T, np *networkingv1.NetworkPolicy) ingress {
	t.Helper()
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("%s: policyTypes %v, want [Ingress]", np.Name, np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) == 0 || len(np.Spec.Ingress[0].Ports) == 0 {
		t.Fatalf("%s: want one ingress rule with sources and ports (an empty list admits everyone), got %+v", np.Name, np.Spec.Ingress)
	}
	out := ingress{Guards: gpuhubComponent(np.Spec.PodSelector)}
	if out.Guards == "" {
		t.Errorf("%s: podSelector %s is not a gpuhub component's", np.Name, metav1.FormatLabelSelector(&np.Spec.PodSelector))
	}
	for _, p := range np.Spec.Ingress[0].From {
		out.From = append(out.From, peerOf(p))
	}
	for _, p := range np.Spec.Ingress[0].Ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP || p.Port == nil || p.EndPort != nil {
			t.Errorf("%s: port %+v, want one TCP port", np.Name, p)
			continue
		}
		out.Ports = append(out.Ports, p.Port.String())
	}
	return out
}

// gpuhubComponent is the component a selector of exactly the chart's selector labels (release gpuhub) picks, or "".
func gpuhubComponent(s metav1.LabelSelector) string {
	l := s.MatchLabels
	if len(s.MatchExpressions) > 0 || len(l) != 3 || l["app.kubernetes.io/name"] != "gpuhub" || l["app.kubernetes.io/instance"] != "gpuhub" {
		return ""
	}
	return l["app.kubernetes.io/component"]
}

// peerOf names a source: "gpuhub <component>" (this release, its namespace), "z2jh <component>" (z2jh's pods,
// in the release namespace unless a namespace is named), anything else as its selectors.
func peerOf(p networkingv1.NetworkPolicyPeer) string {
	if p.IPBlock != nil {
		return "ipBlock " + p.IPBlock.CIDR
	}
	ns := ""
	if p.NamespaceSelector != nil {
		ns = metav1.FormatLabelSelector(p.NamespaceSelector)
	}
	if p.PodSelector == nil {
		return "every pod in " + ns
	}
	if c := gpuhubComponent(*p.PodSelector); c != "" && ns == "" {
		return "gpuhub " + c
	}
	l := p.PodSelector.MatchLabels
	if len(l) == 2 && l["app"] == "jupyterhub" && l["component"] != "" && len(p.PodSelector.MatchExpressions) == 0 {
		s := "z2jh " + l["component"]
		if name, ok := strings.CutPrefix(ns, "kubernetes.io/metadata.name="); ok && !strings.Contains(name, ",") {
			s += " in namespace " + name
		} else if ns != "" {
			s += " in " + ns
		}
		return s
	}
	s := metav1.FormatLabelSelector(p.PodSelector)
	if ns != "" {
		s += " in " + ns
	}
	return s
}

// podTemplate is the pod template of a Deployment or DaemonSet, else nil.
func podTemplate(o runtime.Object) *corev1.PodTemplateSpec {
	switch o := o.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template
	case *appsv1.DaemonSet:
		return &o.Spec.Template
	}
	return nil
}

// guardedBy counts the NetworkPolicies whose podSelector picks pods with these labels.
func guardedBy(podLabels map[string]string, objs map[string]runtime.Object) int {
	n := 0
	for _, o := range objs {
		if np, ok := o.(*networkingv1.NetworkPolicy); ok {
			if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err == nil && sel.Matches(labels.Set(podLabels)) {
				n++
			}
		}
	}
	return n
}

// checkPorts: the pods np guards listen on its ports (a policy on another port would cut their clients off).
func checkPorts(t *testing.T, np *networkingv1.NetworkPolicy, objs map[string]runtime.Object) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	guarded := 0
	for _, key := range slices.Sorted(maps.Keys(objs)) {
		tmpl := podTemplate(objs[key])
		if tmpl == nil || !sel.Matches(labels.Set(tmpl.Labels)) {
			continue
		}
		guarded++
		listens := map[string]bool{}
		for _, c := range tmpl.Spec.Containers {
			for _, p := range c.Ports {
				listens[fmt.Sprint(p.ContainerPort)] = true
			}
		}
		for _, p := range np.Spec.Ingress[0].Ports {
			if p.Port != nil && !listens[p.Port.String()] {
				t.Errorf("%s admits port %s, but %s listens on %v", np.Name, p.Port, key, slices.Sorted(maps.Keys(listens)))
			}
		}
	}
	if guarded == 0 {
		t.Errorf("%s selects no pod of the chart", np.Name)
	}
}
