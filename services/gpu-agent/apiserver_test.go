//go:build apiserver

// This test runs the real gpu-agent binary (simulated backend, no NVML library
// on its path) against a real kube-apiserver with RBAC, as the chart's agent
// ServiceAccount holding exactly the rights the rendered chart gives it, with
// the snapshot flags the chart renders: it checks what fakes cannot (field
// selectors, RBAC, TokenReview audiences with bound service-account tokens).
// Run it with `make gpu-agent-apiserver-test` (needs `make kube-binaries etcd helm`).
package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

func TestAgentAgainstAPIServer(t *testing.T) {
	bin, helm := os.Getenv("GPUHUB_KUBE_BIN"), os.Getenv("GPUHUB_HELM")
	if bin == "" || helm == "" {
		t.Fatal("GPUHUB_KUBE_BIN or GPUHUB_HELM is not set: run `make gpu-agent-apiserver-test` (it builds kube-apiserver and helm)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	agentBin := filepath.Join(t.TempDir(), "gpu-agent")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", agentBin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build gpu-agent: %v\n%s", err, out)
	}
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: bin, Etcd: os.Getenv("GPUHUB_ETCD")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(cfg)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	must(kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "jhub"}}, metav1.CreateOptions{}))
	// The chart, rendered as the local cluster renders it: its ServiceAccounts, RBAC and the agent's flags.
	objs, err := gpuhubstack.Chart{Helm: helm, Dir: "../../chart/gpuhub", Namespace: "jhub", KubeVersion: "v1.36.3"}.Render(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var agentArgs []string
	var agentSA, usageSA string
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			must(kc.CoreV1().ServiceAccounts("jhub").Create(ctx, o, metav1.CreateOptions{}))
			switch o.Labels["app.kubernetes.io/component"] {
			case "gpu-agent":
				agentSA = o.Name
			case "usage-api":
				usageSA = o.Name
			}
		case *rbacv1.ClusterRole:
			must(kc.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{}))
		case *rbacv1.ClusterRoleBinding:
			must(kc.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{}))
		case *rbacv1.Role:
			must(kc.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{}))
		case *rbacv1.RoleBinding:
			must(kc.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{}))
		case *appsv1.DaemonSet:
			agentArgs = o.Spec.Template.Spec.Containers[0].Args
		}
	}
	if agentSA == "" || usageSA == "" || len(agentArgs) == 0 {
		t.Fatalf("rendered chart lacks the agent or usage ServiceAccount or the agent DaemonSet")
	}
	// The agent's credential: a token of its ServiceAccount, as the kubelet would mount it.
	agentKubeconfig := filepath.Join(t.TempDir(), "agent.kubeconfig")
	writeTokenKubeconfig(t, cp, agentKubeconfig, createToken(ctx, t, kc, agentSA))

	node, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-a100-0", Labels: map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960", "nvidia.com/mig.strategy": "mixed"}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/mig-3g.20gb": resource.MustParse("2"),
		"cpu": resource.MustParse("8"), "memory": resource.MustParse("32Gi"), "pods": resource.MustParse("110")}
	node.Status.Allocatable = node.Status.Capacity
	must(kc.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}))
	must(kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-0"}}, metav1.CreateOptions{}))

	mkPod := func(name, user, nodeName string, limits corev1.ResourceList) string {
		t.Helper()
		var err error
		for range 60 { // the default ServiceAccount appears shortly after the namespace
			var p *corev1.Pod
			p, err = kc.CoreV1().Pods("jhub").Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"hub.jupyter.org/username": user}},
				Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "notebook", Image: "x",
					Resources: corev1.ResourceRequirements{Limits: limits}}}},
			}, metav1.CreateOptions{})
			if err == nil {
				return string(p.UID)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatal(err)
		return ""
	}
	busy := mkPod("jupyter-alice", "alice@example.org", "gpu-a100-0", corev1.ResourceList{"nvidia.com/mig-3g.20gb": resource.MustParse("1")})
	idle := mkPod("jupyter-bob", "bob", "gpu-a100-0", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})
	mkPod("jupyter-carol", "carol", "cpu-0", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})

	// Pod processes as the node emulator starts them: a busy cell and an idle kernel.
	start := func(uid, script string) {
		cmd := exec.CommandContext(ctx, "sh", "-c", script)
		cmd.Env = append(os.Environ(), "GPUHUB_SIM_NODE=gpu-a100-0", "GPUHUB_SIM_POD_UID="+uid)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	start(busy, "while :; do :; done")
	start(idle, "exec sleep 300")

	// Callers: the usage API's ServiceAccount with a token for the agents' audience (what the chart's
	// projected volume holds) and with one for the API server (what it used to send); another ServiceAccount
	// with a token for the agents' audience.
	must(kc.CoreV1().ServiceAccounts("jhub").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}}, metav1.CreateOptions{}))
	audience := flagValue(agentArgs, "snapshot-audience")
	if audience == "" {
		t.Fatalf("the chart's agent has no --snapshot-audience: %v", agentArgs)
	}
	usageToken := createToken(ctx, t, kc, usageSA, audience)
	usageAPIServerToken := createToken(ctx, t, kc, usageSA)
	intruderToken := createToken(ctx, t, kc, "intruder", audience)
	agentOwnToken := createToken(ctx, t, kc, agentSA, audience)

	port := cluster.FreePort()
	// The chart's flags, then the local ones (the last value of a flag wins).
	args := append(append([]string{}, agentArgs...), "--node-name=gpu-a100-0", "--kubeconfig="+agentKubeconfig,
		fmt.Sprintf("--listen=127.0.0.1:%d", port))
	agent := exec.CommandContext(ctx, agentBin, args...)
	agent.Env = []string{"PATH=/usr/bin:/bin"} // no NVML library anywhere: simulated must not need it
	logs := &strings.Builder{}
	agent.Stdout, agent.Stderr = logs, logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.Process.Signal(os.Interrupt)
		_ = agent.Wait()
		t.Logf("agent log:\n%s", logs)
	})

	get := func(path, token string) (int, []byte) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for {
		if code, _ := get("/readyz", ""); code == http.StatusOK {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("agent never ready")
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // a few samples, so CPU deltas exist

	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"no token":                               {"", http.StatusUnauthorized},
		"usage ServiceAccount, API audience":     {usageAPIServerToken, http.StatusUnauthorized},
		"another ServiceAccount, agent audience": {intruderToken, http.StatusForbidden},
		"agent's own ServiceAccount":             {agentOwnToken, http.StatusForbidden},
		"not a token":                            {"forged", http.StatusUnauthorized},
	} {
		if code, body := get("/api/v1/snapshot", tc.token); code != tc.want {
			t.Errorf("snapshot with %s: %d, want %d: %s", name, code, tc.want, body)
		}
	}
	code, body := get("/api/v1/snapshot", usageToken)
	if code != http.StatusOK {
		t.Fatalf("snapshot with the usage API's token: %d %s", code, body)
	}
	var snap snapshot.Snapshot
	if err := json.Unmarshal(body, &snap); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot: %s", body)
	users := map[string]snapshot.Pod{}
	for _, p := range snap.Pods {
		users[p.User] = p
	}
	if _, ok := users["carol"]; ok || len(users) != 2 {
		t.Errorf("pods %v: want alice and bob only (carol is on another node)", users)
	}
	alice, bob := users["alice@example.org"], users["bob"]
	if snap.Backend != "simulated" || alice.SMUtilPercent == nil || *alice.SMUtilPercent < 10 || alice.UtilizationSource != "simulated" ||
		len(alice.Devices) != 1 || alice.Devices[0].Resource != "nvidia.com/mig-3g.20gb" {
		t.Errorf("alice (busy cell on a MIG 3g.20gb): %+v", alice)
	}
	if bob.SMUtilPercent == nil || *bob.SMUtilPercent > 5 || len(bob.Devices) != 1 || bob.Devices[0].Resource != "nvidia.com/gpu" {
		t.Errorf("bob (idle notebook on a whole GPU): %+v", bob)
	}

	// The usage API's rights from the chart: pods only in its namespaces, nodes everywhere, nothing else.
	usageClient := tokenClient(t, cp, usageAPIServerToken)
	for name, tc := range map[string]struct {
		call    func() error
		allowed bool
	}{
		"list pods in jhub": {func() error {
			_, err := usageClient.CoreV1().Pods("jhub").List(ctx, metav1.ListOptions{})
			return err
		}, true},
		"list nodes": {func() error { _, err := usageClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }, true},
		"list pods in all namespaces": {func() error {
			_, err := usageClient.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		}, false},
		"list pods in kube-system": {func() error {
			_, err := usageClient.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}, false},
		"create a TokenReview": {func() error {
			_, err := usageClient.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: "x"}}, metav1.CreateOptions{})
			return err
		}, false},
	} {
		err := tc.call()
		if tc.allowed && err != nil {
			t.Errorf("usage API: %s: %v", name, err)
		}
		if !tc.allowed && !apierrors.IsForbidden(err) {
			t.Errorf("usage API: %s: %v, want forbidden", name, err)
		}
	}
}

func createToken(ctx context.Context, t *testing.T, kc kubernetes.Interface, sa string, audiences ...string) string {
	t.Helper()
	tr, err := kc.CoreV1().ServiceAccounts("jhub").CreateToken(ctx, sa,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func writeTokenKubeconfig(t *testing.T, cp *cluster.ControlPlane, path, token string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.CAData()}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "sa"}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

func tokenClient(t *testing.T, cp *cluster.ControlPlane, token string) kubernetes.Interface {
	t.Helper()
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAData()}})
}

func flagValue(args []string, name string) string {
	v := ""
	for _, a := range args {
		if s, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			v = s
		}
	}
	return v
}
