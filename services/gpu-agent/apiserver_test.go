//go:build apiserver

// This test runs the real gpu-agent binary (simulated backend, no NVML library
// on its path) against a real kube-apiserver with RBAC, as an identity holding
// exactly the chart's agent permissions: it checks what fakes cannot (field
// selectors, RBAC, TokenReview with a bound service-account token).
// Run it with `make gpu-agent-apiserver-test` (needs `make kube-binaries etcd`).
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

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

func TestAgentAgainstAPIServer(t *testing.T) {
	bin := os.Getenv("GPUHUB_KUBE_BIN")
	if bin == "" {
		t.Fatal("GPUHUB_KUBE_BIN is not set: run `make gpu-agent-apiserver-test` (it builds kube-apiserver via make kube-binaries)")
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
	// The chart's ClusterRole (chart/gpuhub/templates/agent.yaml), bound to the agent's identity.
	must(kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gpu-agent"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
	}}, metav1.CreateOptions{}))
	must(kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpu-agent"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "gpu-agent"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "gpu-agent"}}}, metav1.CreateOptions{}))
	agentKubeconfig, err := cp.WriteKubeconfig("gpu-agent", "gpu-agent", nil)
	if err != nil {
		t.Fatal(err)
	}

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

	// The caller: the usage API's service account with a bound token.
	must(kc.CoreV1().ServiceAccounts("jhub").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "gpu-usage"}}, metav1.CreateOptions{}))
	tr, err := kc.CoreV1().ServiceAccounts("jhub").CreateToken(ctx, "gpu-usage", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	port := cluster.FreePort()
	agent := exec.CommandContext(ctx, agentBin, "--backend=simulated", "--node-name=gpu-a100-0", "--kubeconfig="+agentKubeconfig,
		fmt.Sprintf("--listen=127.0.0.1:%d", port), "--interval=1s", "--snapshot-auth=tokenreview",
		"--snapshot-allowed-users=system:serviceaccount:jhub:gpu-usage")
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

	if code, body := get("/api/v1/snapshot", ""); code != http.StatusUnauthorized {
		t.Errorf("snapshot without a token: %d %s", code, body)
	}
	code, body := get("/api/v1/snapshot", tr.Status.Token)
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
}
