//go:build chart

// Package chart tests the Helm chart by rendering it with the helm binary named in $HELM.
package chart

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
	}
	for name, extra := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"template", "gpuhub", "gpuhub", "--namespace", "jhub", "--kube-version", kubeVersion}, extra...)
			got, err := helm(t, args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, got)
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
		"unknown key":     {set: "agent.backnd=nvml", wantErr: "backnd"},
		"bad backend":     {set: "agent.backend=dcgm", wantErr: "backend"},
		"bad interval":    {set: "usage.interval=often", wantErr: "interval"},
		"bad log format":  {set: "logFormat=xml", wantErr: "logFormat"},
		"bad api url":     {set: "hub.apiURL=hub:8081", wantErr: "apiURL"},
		"bad service key": {set: "usage.serviceName=GPU Usage", wantErr: "serviceName"},
		"bad namespace":   {set: "usage.podNamespace=Z2JH", wantErr: "podNamespace"},
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
					out = append(out, where+": "+strings.Join(r.APIGroups, ",")+"/"+res+" "+strings.Join(r.Verbs, ","))
				}
			}
		}
		sort.Strings(out)
		return out
	}
	cases := map[string]struct {
		set       []string
		wantUsage []string
		wantPodNS string
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
			dep := objs["Deployment jhub/gpuhub-usage"].(*appsv1.Deployment)
			ns, _ := flagValue(dep.Spec.Template.Spec.Containers[0].Args, "namespace")
			if ns != tc.wantPodNS {
				t.Errorf("usage --namespace=%s, want %s (where it may read pods)", ns, tc.wantPodNS)
			}
		})
	}
}
