//go:build chart

// Package chart tests the Helm chart by rendering it with the helm binary named in $HELM.
package chart

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// kubeVersion is the release the local cluster runs; helm built from source defaults to an old one.
const kubeVersion = "1.36.3"

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		t.Fatal("HELM is not set: run `make chart-test`, which installs helm")
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return errb.String(), err
	}
	return out.String(), nil
}

// TestRender compares rendered manifests with golden files, one per values case.
func TestRender(t *testing.T) {
	tests := map[string][]string{
		"default":   nil,
		"simulated": {"--set", "agent.backend=simulated", "--set", "usage.adminGroups={gpu-admins,staff}"},
		"postgres":  {"--set", "usage.databaseURLSecret=gpuhub-db", "--set", "networkPolicy.enabled=false"},
		// z2jh in its own namespace; agents without token auth (NetworkPolicy only).
		"pod-namespace": {"--set", "usage.podNamespace=z2jh", "--set", "agent.snapshotAuth=none"},
		// gpu-quota with a policy, z2jh in its own namespace under a base URL.
		"quota": {"--set", "quota.enabled=true", "--set", "usage.podNamespace=z2jh", "--set", "hub.baseURL=/jupyter/",
			"--set", "quota.adminGroups={gpu-admins}", "--set-file", "quota.policy=testdata/quota-policy.yaml"},
		// gpu-profiles next to gpu-quota (--quota-url is this release's), with overrides, z2jh in its own namespace.
		"profiles": {"--set", "profiles.enabled=true", "--set", "quota.enabled=true", "--set", "usage.podNamespace=z2jh",
			"--set", "profiles.pendingEndAfter=2m", "--set-file", "profiles.config=testdata/profiles-config.yaml"},
		// gpu-culler next to gpu-quota (the usage API reads for both), z2jh in its own namespace under a base URL.
		// The waitlist: gpu-quota keeps its queue in the usage API and gpu-culler reads the contended classes.
		"waitlist": {"--set", "culler.enabled=true", "--set", "quota.enabled=true", "--set", "quota.waitlist.enabled=true",
			"--set", "quota.waitlist.hold=5m", "--set-file", "culler.policy=testdata/culler-policy.yaml"},
		"culler": {"--set", "culler.enabled=true", "--set", "quota.enabled=true", "--set", "usage.podNamespace=z2jh",
			"--set", "hub.baseURL=/jupyter/", "--set", "culler.readerServices={gpu-usage}",
			"--set-file", "culler.policy=testdata/culler-policy.yaml"},
		// The shipped rules (as a PrometheusRule and a ConfigMap) and the Grafana dashboard.
		"monitoring": {"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.prometheusRule.labels.release=kps",
			"--set", "monitoring.rulesConfigMap.enabled=true", "--set", "monitoring.grafanaDashboard.enabled=true",
			"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.labels.release=kps",
			"--set", "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring"},
	}
	for name, extra := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"template", "gpuhub", "gpuhub", "--namespace", "jhub", "--kube-version", kubeVersion}, extra...)
			got, err := helm(t, args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, got)
			}
			// yaml.v3 refuses a mapping key given twice, which Kubernetes' decoders may refuse or resolve silently.
			for dec := yaml.NewDecoder(strings.NewReader(got)); ; {
				var doc any
				if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatalf("rendered manifests are not valid YAML: %v", err)
				}
			}
			golden := filepath.Join("testdata", name+".yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run `make chart-test UPDATE=1` to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("rendered manifests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSchemaRejects checks that values.schema.json turns typos and bad values into errors at install time.
func TestSchemaRejects(t *testing.T) {
	tests := map[string]struct {
		set     string
		wantErr string
	}{
		"unknown key":              {set: "agent.backnd=nvml", wantErr: "backnd"},
		"bad backend":              {set: "agent.backend=dcgm", wantErr: "backend"},
		"bad interval":             {set: "usage.interval=often", wantErr: "interval"},
		"bad log format":           {set: "logFormat=xml", wantErr: "logFormat"},
		"bad api url":              {set: "hub.apiURL=hub:8081", wantErr: "apiURL"},
		"bad service key":          {set: "usage.serviceName=GPU Usage", wantErr: "serviceName"},
		"bad namespace":            {set: "usage.podNamespace=Z2JH", wantErr: "podNamespace"},
		"quota typo":               {set: "quota.polcy=x", wantErr: "polcy"},
		"empty policy":             {set: "quota.policy=", wantErr: "policy"},
		"bad poll":                 {set: "quota.policyPoll=10", wantErr: "policyPoll"},
		"bad usage url":            {set: "quota.usageURL=gpuhub-usage:8000", wantErr: "usageURL"},
		"bad quota name":           {set: "quota.serviceName=GPU_Quota", wantErr: "serviceName"},
		"culler typo":              {set: "culler.polcy=x", wantErr: "polcy"},
		"culler policy":            {set: "culler.policy=", wantErr: "policy"},
		"no replicas":              {set: "culler.replicas=0", wantErr: "replicas"},
		"zero profiles":            {set: "profiles.replicas=0", wantErr: "replicas"},
		"two usage APIs on SQLite": {set: "usage.replicas=2", wantErr: "usage.replicas above 1 needs PostgreSQL"},
		"bad sampling":             {set: "culler.sampleEvery=10", wantErr: "sampleEvery"},
		"unknown scope":            {set: "culler.extraHubScopes={admin:users}", wantErr: "extraHubScopes"},
		"culler url":               {set: "culler.usageURL=gpuhub-usage:8000", wantErr: "usageURL"},
		"monitoring typo":          {set: "monitoring.prometheusRules.enabled=true", wantErr: "prometheusRules"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := helm(t, "template", "gpuhub", "gpuhub", "--kube-version", kubeVersion, "--set", tc.set)
			if err == nil {
				t.Fatalf("helm template --set %s succeeded, want a schema error", tc.set)
			}
			if !strings.Contains(out, tc.wantErr) {
				t.Errorf("error does not name %q:\n%s", tc.wantErr, out)
			}
		})
	}
}

// rendered decodes helm template output into typed objects, keyed "Kind namespace/name".
func rendered(t *testing.T, extra ...string) map[string]runtime.Object {
	t.Helper()
	args := append([]string{"template", "gpuhub", "gpuhub", "--namespace", "jhub", "--kube-version", kubeVersion}, extra...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	objs := map[string]runtime.Object{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		if !hasContent(doc) {
			continue
		}
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode: %v\n%s", err, doc)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		ns := m.GetNamespace()
		if ns == "" && gvk.Kind != "ClusterRole" && gvk.Kind != "ClusterRoleBinding" {
			ns = "jhub" // helm template leaves the release namespace out
		}
		objs[gvk.Kind+" "+ns+"/"+m.GetName()] = obj
	}
}

// hasContent reports whether a YAML document has more than comments (helm's "# Source:" headers).
func hasContent(doc []byte) bool {
	for _, l := range strings.Split(string(doc), "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "---" && !strings.HasPrefix(l, "#") {
			return true
		}
	}
	return false
}

func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestAgentTokenWiring: the usage API reads a projected token for the audience the agents check, at the
// path it is told, and polls exactly the pods the agent DaemonSet creates (labels and ServiceAccount); the
// agents admit exactly the usage API's ServiceAccount.
func TestAgentTokenWiring(t *testing.T) {
	objs := rendered(t)
	ds := objs["DaemonSet jhub/gpuhub-agent"].(*appsv1.DaemonSet)
	dep := objs["Deployment jhub/gpuhub-usage"].(*appsv1.Deployment)
	agentArgs, usageArgs := ds.Spec.Template.Spec.Containers[0].Args, dep.Spec.Template.Spec.Containers[0].Args

	audience, _ := flagValue(agentArgs, "snapshot-audience")
	allowed, _ := flagValue(agentArgs, "snapshot-allowed-users")
	tokenFile, _ := flagValue(usageArgs, "agent-token-file")
	selector, _ := flagValue(usageArgs, "agent-selector")
	agentSA, _ := flagValue(usageArgs, "agent-service-account")
	agentNS, _ := flagValue(usageArgs, "agent-namespace")

	var projected *corev1.ServiceAccountTokenProjection
	var mountPath string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Projected != nil && len(v.Projected.Sources) == 1 && v.Projected.Sources[0].ServiceAccountToken != nil {
			projected = v.Projected.Sources[0].ServiceAccountToken
			for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
				if m.Name == v.Name {
					mountPath = m.MountPath
				}
			}
		}
	}
	if projected == nil {
		t.Fatal("usage Deployment has no projected serviceAccountToken volume")
	}
	type wiring struct {
		Audience, TokenFile, Selector, AgentSA, AgentNS, Allowed string
		Expiration                                               int64
	}
	want := wiring{
		Audience: "gpuhub-agent", TokenFile: "/var/run/secrets/gpuhub/agent-token/token",
		Selector: metav1.FormatLabelSelector(ds.Spec.Selector), AgentSA: ds.Spec.Template.Spec.ServiceAccountName, AgentNS: "jhub",
		Allowed: "system:serviceaccount:jhub:" + dep.Spec.Template.Spec.ServiceAccountName, Expiration: 3600,
	}
	got := wiring{
		Audience: projected.Audience, TokenFile: mountPath + "/" + projected.Path,
		Selector: selector, AgentSA: agentSA, AgentNS: agentNS, Allowed: allowed, Expiration: *projected.ExpirationSeconds,
	}
	if audience != projected.Audience {
		t.Errorf("agent --snapshot-audience=%s, projected token audience %s", audience, projected.Audience)
	}
	if tokenFile != got.TokenFile {
		t.Errorf("usage --agent-token-file=%s, token mounted at %s", tokenFile, got.TokenFile)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent token wiring (-want +got):\n%s", diff)
	}
}

// TestAgentDCGMURL: the agents reach their own node's dcgm-exporter: the chart gives each agent its node's
// address in HOST_IP, and a URL naming $(HOST_IP) reaches the agent's args as written, for Kubernetes to expand
// (an env var the container defines, so the kubelet substitutes it; an undefined one would stay literal).
func TestAgentDCGMURL(t *testing.T) {
	const url = "http://$(HOST_IP):9400/metrics"
	objs := rendered(t, "--set", "agent.dcgmExporterURL="+url)
	c := objs["DaemonSet jhub/gpuhub-agent"].(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0]
	if got, _ := flagValue(c.Args, "dcgm-exporter-url"); got != url {
		t.Errorf("--dcgm-exporter-url=%q, want %q", got, url)
	}
	var hostIP *corev1.EnvVar
	for i, e := range c.Env {
		if e.Name == "HOST_IP" {
			hostIP = &c.Env[i]
		}
	}
	if hostIP == nil || hostIP.ValueFrom == nil || hostIP.ValueFrom.FieldRef == nil || hostIP.ValueFrom.FieldRef.FieldPath != "status.hostIP" {
		t.Errorf("agent env HOST_IP = %+v, want the downward API's status.hostIP", hostIP)
	}
	c = rendered(t)["DaemonSet jhub/gpuhub-agent"].(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0]
	if got, ok := flagValue(c.Args, "dcgm-exporter-url"); ok {
		t.Errorf("no dcgmExporterURL, yet --dcgm-exporter-url=%q", got)
	}
}

// TestRBAC: each binary gets only what it uses, namespaced where the API allows.
func TestRBAC(t *testing.T) {
	grants := func(objs map[string]runtime.Object, subject string) []string {
		rules := map[string][]rbacv1.PolicyRule{}
		for key, o := range objs {
			switch o := o.(type) {
			case *rbacv1.ClusterRole:
				rules["ClusterRole/"+o.Name] = o.Rules
			case *rbacv1.Role:
				rules["Role "+strings.Fields(key)[1]] = o.Rules
			}
		}
		var out []string
		for _, o := range objs {
			var ref rbacv1.RoleRef
			var subjects []rbacv1.Subject
			var where string
			switch o := o.(type) {
			case *rbacv1.ClusterRoleBinding:
				ref, subjects, where = o.RoleRef, o.Subjects, "cluster"
			case *rbacv1.RoleBinding:
				ref, subjects, where = o.RoleRef, o.Subjects, o.Namespace
			default:
				continue
			}
			if len(subjects) != 1 || subjects[0].Kind != "ServiceAccount" || subjects[0].Namespace+"/"+subjects[0].Name != subject {
				continue
			}
			key := "ClusterRole/" + ref.Name
			if ref.Kind == "Role" {
				key = "Role " + where + "/" + ref.Name
			}
			for _, r := range rules[key] {
				for _, res := range r.Resources {
					g := where + ": " + strings.Join(r.APIGroups, ",") + "/" + res + " " + strings.Join(r.Verbs, ",")
					if len(r.ResourceNames) > 0 {
						g += " " + strings.Join(r.ResourceNames, ",")
					}
					out = append(out, g)
				}
			}
		}
		sort.Strings(out)
		return out
	}
	cases := map[string]struct {
		set       []string
		wantUsage []string
		wantQuota []string
		// gpu-culler: the single-user pods (patch for its notices), its own Lease, stops ConfigMap and Deployment
		// (their owner); nothing cluster-wide.
		wantCuller []string
		wantPodNS  string
	}{
		"z2jh in the release namespace": {
			wantUsage: []string{"cluster: /nodes get,list,watch", "jhub: /pods get,list,watch"},
			wantPodNS: "jhub",
		},
		"z2jh in its own namespace": {
			set:       []string{"--set", "usage.podNamespace=z2jh"},
			wantUsage: []string{"cluster: /nodes get,list,watch", "jhub: /pods get,list,watch", "z2jh: /pods get,list,watch"},
			wantPodNS: "z2jh",
		},
		// Several usage APIs: one writes the ledger (its own Lease, and its Deployment as the Lease's owner).
		"two usage APIs": {
			set: []string{"--set", "usage.replicas=2", "--set", "usage.databaseURLSecret=ledger-db"},
			wantUsage: []string{"cluster: /nodes get,list,watch", "jhub: /pods get,list,watch",
				"jhub: apps/deployments get gpuhub-usage", "jhub: coordination.k8s.io/leases create",
				"jhub: coordination.k8s.io/leases get,update gpuhub-usage-ledger"},
			wantPodNS: "jhub",
		},
		// gpu-quota: nodes, the single-user pods (patch for its notices), its own Lease and Deployment (the
		// Lease's owner); nothing else.
		"quota, z2jh in the release namespace": {
			set:       []string{"--set", "quota.enabled=true"},
			wantUsage: []string{"cluster: /nodes get,list,watch", "jhub: /pods get,list,watch"},
			wantQuota: []string{"cluster: /nodes get,list,watch", "jhub: /pods get,list,watch,patch",
				"jhub: apps/deployments get gpuhub-quota",
				"jhub: coordination.k8s.io/leases create", "jhub: coordination.k8s.io/leases get,update gpuhub-quota"},
			wantPodNS: "jhub",
		},
		"quota, z2jh in its own namespace": {
			set:       []string{"--set", "quota.enabled=true", "--set", "usage.podNamespace=z2jh"},
			wantUsage: []string{"cluster: /nodes get,list,watch", "jhub: /pods get,list,watch", "z2jh: /pods get,list,watch"},
			wantQuota: []string{"cluster: /nodes get,list,watch", "jhub: apps/deployments get gpuhub-quota",
				"jhub: coordination.k8s.io/leases create", "jhub: coordination.k8s.io/leases get,update gpuhub-quota",
				"z2jh: /pods get,list,watch,patch"},
			wantPodNS: "z2jh",
		},
		"culler, z2jh in the release namespace": {
			set:       []string{"--set", "culler.enabled=true"},
			wantUsage: []string{"cluster: /nodes get,list,watch", "jhub: /pods get,list,watch"},
			wantCuller: []string{"jhub: /configmaps create", "jhub: /configmaps get,list,watch,update gpuhub-culler-stops",
				"jhub: /pods get,list,watch,patch", "jhub: apps/deployments get gpuhub-culler",
				"jhub: coordination.k8s.io/leases create", "jhub: coordination.k8s.io/leases get,update gpuhub-culler"},
			wantPodNS: "jhub",
		},
		"culler, z2jh in its own namespace": {
			set:       []string{"--set", "culler.enabled=true", "--set", "usage.podNamespace=z2jh"},
			wantUsage: []string{"cluster: /nodes get,list,watch", "jhub: /pods get,list,watch", "z2jh: /pods get,list,watch"},
			wantCuller: []string{"jhub: /configmaps create", "jhub: /configmaps get,list,watch,update gpuhub-culler-stops",
				"jhub: apps/deployments get gpuhub-culler",
				"jhub: coordination.k8s.io/leases create", "jhub: coordination.k8s.io/leases get,update gpuhub-culler",
				"z2jh: /pods get,list,watch,patch"},
			wantPodNS: "z2jh",
		},
	}
	wantAgent := []string{"cluster: /nodes get,list,watch", "cluster: /pods get,list,watch", "cluster: authentication.k8s.io/tokenreviews create"}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := rendered(t, tc.set...)
			if diff := cmp.Diff(tc.wantUsage, grants(objs, "jhub/gpuhub-usage")); diff != "" {
				t.Errorf("usage API rights (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantAgent, grants(objs, "jhub/gpuhub-agent")); diff != "" {
				t.Errorf("agent rights (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantQuota, grants(objs, "jhub/gpuhub-quota")); diff != "" {
				t.Errorf("gpu-quota rights (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCuller, grants(objs, "jhub/gpuhub-culler")); diff != "" {
				t.Errorf("gpu-culler rights (-want +got):\n%s", diff)
			}
			dep := objs["Deployment jhub/gpuhub-usage"].(*appsv1.Deployment)
			ns, _ := flagValue(dep.Spec.Template.Spec.Containers[0].Args, "namespace")
			if ns != tc.wantPodNS {
				t.Errorf("usage --namespace=%s, want %s (where it may read pods)", ns, tc.wantPodNS)
			}
		})
	}
}

// TestQuotaWiring: gpu-quota and the usage API find each other (Service, port and the Hub service prefix under
// hub.baseURL), the policy reaches gpu-quota verbatim through a directory mount (no subPath: ConfigMap updates
// reach the pod), the Lease it is told to use is the one its Role names, its Hub token is the one z2jh generates
// for the service, and only the Hub and the usage API may reach it.
func TestQuotaWiring(t *testing.T) {
	objs := rendered(t, "--set", "quota.enabled=true", "--set", "usage.podNamespace=z2jh", "--set", "hub.baseURL=/jupyter/",
		"--set-file", "quota.policy=testdata/quota-policy.yaml")
	quota := objs["Deployment jhub/gpuhub-quota"].(*appsv1.Deployment)
	usage := objs["Deployment jhub/gpuhub-usage"].(*appsv1.Deployment)
	qc, uc := quota.Spec.Template.Spec.Containers[0], usage.Spec.Template.Spec.Containers[0]
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
	serviceURL := func(svc string, c corev1.Container) string {
		s := objs["Service jhub/"+svc].(*corev1.Service)
		return fmt.Sprintf("http://%s.jhub:%d%s", s.Name, s.Spec.Ports[0].Port, env(c, "JUPYTERHUB_SERVICE_PREFIX"))
	}

	policyArg, _ := flagValue(qc.Args, "policy")
	var policyFile string
	for _, m := range qc.VolumeMounts {
		for _, v := range quota.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && strings.HasPrefix(policyArg, m.MountPath+"/") {
				if m.SubPath != "" {
					t.Errorf("policy mounted with subPath %q: ConfigMap updates would never reach the pod", m.SubPath)
				}
				cm := objs["ConfigMap jhub/"+v.ConfigMap.Name].(*corev1.ConfigMap)
				policyFile = cm.Data[strings.TrimPrefix(policyArg, m.MountPath+"/")]
			}
		}
	}
	wantPolicy, err := os.ReadFile("testdata/quota-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if policyFile != string(wantPolicy) {
		t.Errorf("--policy=%s holds:\n%s\nwant quota.policy verbatim:\n%s", policyArg, policyFile, wantPolicy)
	}

	leaseRole := objs["Role jhub/gpuhub-quota-lease"].(*rbacv1.Role)
	var leaseNames []string
	for _, r := range leaseRole.Rules {
		if slices.Contains(r.Resources, "leases") {
			leaseNames = append(leaseNames, r.ResourceNames...)
		}
	}
	type wiring struct {
		QuotaURL, UsageURL, ReaderOfQuota, ReaderOfUsage, Namespace, LeaseNS, Lease, Token, Prefix, Listen string
		LeaseRoleNames                                                                                     []string
	}
	got := wiring{Namespace: "", LeaseRoleNames: leaseNames, Token: env(qc, "JUPYTERHUB_API_TOKEN"), Prefix: env(qc, "JUPYTERHUB_SERVICE_PREFIX")}
	got.QuotaURL, _ = flagValue(uc.Args, "quota-url")
	got.UsageURL, _ = flagValue(qc.Args, "usage-url")
	got.ReaderOfQuota, _ = flagValue(qc.Args, "reader-services")
	got.ReaderOfUsage, _ = flagValue(uc.Args, "reader-services")
	got.Namespace, _ = flagValue(qc.Args, "namespace")
	got.LeaseNS, _ = flagValue(qc.Args, "lease-namespace")
	got.Lease, _ = flagValue(qc.Args, "lease-name")
	got.Listen, _ = flagValue(qc.Args, "listen")
	want := wiring{
		QuotaURL: serviceURL("gpuhub-quota", qc), UsageURL: serviceURL("gpuhub-usage", uc),
		// gpu-profiles (profiles.serviceName) assesses spawn choices only where the chart runs it (TestRender "profiles").
		ReaderOfQuota: env(uc, "JUPYTERHUB_SERVICE_NAME"), ReaderOfUsage: env(qc, "JUPYTERHUB_SERVICE_NAME"),
		Namespace: "z2jh", LeaseNS: "jhub", Lease: "gpuhub-quota", LeaseRoleNames: []string{"gpuhub-quota"},
		Token: "secret hub/hub.services.gpu-quota.apiToken", Prefix: "/jupyter/services/gpu-quota/",
		Listen: fmt.Sprintf(":%d", qc.Ports[0].ContainerPort),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gpu-quota wiring (-want +got):\n%s", diff)
	}
	if want.QuotaURL != "http://gpuhub-quota.jhub:8000/jupyter/services/gpu-quota/" {
		t.Errorf("usage --quota-url = %s", want.QuotaURL)
	}

	// NetworkPolicy: who may reach gpu-quota, and that the usage API admits it.
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
		"app.kubernetes.io/component=usage-api,app.kubernetes.io/instance=gpuhub,app.kubernetes.io/name=gpuhub",
	}
	if diff := cmp.Diff(wantFrom, from("gpuhub-quota")); diff != "" {
		t.Errorf("gpu-quota ingress (-want +got):\n%s", diff)
	}
	quotaPods := "app.kubernetes.io/component=gpu-quota,app.kubernetes.io/instance=gpuhub,app.kubernetes.io/name=gpuhub"
	if !slices.Contains(from("gpuhub-usage"), quotaPods) {
		t.Errorf("usage API ingress %v does not admit gpu-quota (%s)", from("gpuhub-usage"), quotaPods)
	}

	// Off by default, and nothing of it rendered then.
	for key := range rendered(t) {
		if strings.Contains(key, "quota") {
			t.Errorf("quota.enabled=false renders %s", key)
		}
	}
}
