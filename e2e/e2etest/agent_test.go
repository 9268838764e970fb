//go:build e2e

package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestGPUAgentDaemonSet runs gpuhub's gpu-agent as a DaemonSet: the real controller manager creates
// one pod per GPU node, the scheduler binds them, the emulator runs bin/gpu-agent bound to each pod
// IP with a kubeconfig of the pod's ServiceAccount (so RBAC applies), and every agent serves a
// simulated snapshot for its node. Deleting the DaemonSet removes pods and processes.
func TestGPUAgentDaemonSet(t *testing.T) {
	if os.Getenv("GPUHUB_GPU_AGENT") == "" {
		t.Fatal("GPUHUB_GPU_AGENT is not set; run `make e2e` (it builds bin/gpu-agent)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "gpuhub"
	c := st.Client
	labels := map[string]string{"app.kubernetes.io/component": "gpu-agent", "app.kubernetes.io/part-of": "gpuhub"}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	must(c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "gpu-agent"}}, metav1.CreateOptions{}))
	must(c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "gpuhub-e2e-gpu-agent"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}))
	must(c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gpuhub-e2e-gpu-agent"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gpuhub-e2e-gpu-agent"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "gpu-agent", Namespace: ns}},
	}, metav1.CreateOptions{}))
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-agent", Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "gpu-agent",
					NodeSelector:       map[string]string{"nvidia.com/gpu.present": "true"},
					Containers: []corev1.Container{{
						Name: "agent", Image: "ghcr.io/gpuhub/gpu-agent:dev",
						Args:  []string{"--backend=simulated", "--listen=:9400", "--interval=1s"},
						Env:   []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9400}},
						ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}},
					}},
				},
			},
		},
	}
	must(c.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}))

	var pods []corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=gpu-agent"})
		if err != nil {
			return false, nil
		}
		pods = list.Items
		ready := 0
		for _, p := range pods {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == 3, nil
	})
	if err != nil {
		t.Fatalf("gpu-agent pods not all ready: %v; pods: %s", err, podSummary(pods))
	}
	nodes := map[string]string{}
	for _, p := range pods {
		snap := struct {
			Node    string `json:"node"`
			Backend string `json:"backend"`
		}{}
		url := fmt.Sprintf("http://%s:9400/api/v1/snapshot", p.Status.PodIP)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		err = json.NewDecoder(resp.Body).Decode(&snap)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %v", url, resp.Status, err)
		}
		nodes[p.Spec.NodeName] = snap.Node + "/" + snap.Backend
		if env := processEnv(t, podPID(t, &p)); !strings.HasSuffix(env["KUBECONFIG"], "/kubeconfig") {
			t.Errorf("agent on %s has KUBECONFIG %q, want the pod's ServiceAccount kubeconfig", p.Spec.NodeName, env["KUBECONFIG"])
		}
	}
	want := map[string]string{
		"gpu-a100-0": "gpu-a100-0/simulated", "gpu-h100-0": "gpu-h100-0/simulated", "gpu-t4-0": "gpu-t4-0/simulated",
	}
	if diff := cmp.Diff(want, nodes); diff != "" {
		t.Errorf("agent snapshots per node (-want +got):\n%s", diff)
	}

	if err := c.AppsV1().DaemonSets(ns).Delete(ctx, "gpu-agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range pods {
		waitPodGone(ctx, t, &pods[i])
		if pids := st.Emulator.Processes()[ns+"/"+pods[i].Name]; len(pids) != 0 {
			t.Errorf("processes %v of %s survive its deletion", pids, pods[i].Name)
		}
	}
}

func podSummary(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "\n  %s on %s: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if tm := cs.State.Terminated; tm != nil {
				fmt.Fprintf(&b, " terminated %d", tm.ExitCode)
			}
		}
	}
	return b.String()
}
