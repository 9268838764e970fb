//go:build e2e

package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/e2e/emulator"
	"github.com/gpuhub/gpuhub/hubapi"
)

// usageMe is the part of GET api/v1/me this test reads.
type usageMe struct {
	User    string `json:"user"`
	Servers []struct {
		Node string `json:"node"`
		GPUs []struct {
			Kind              string   `json:"kind"`
			ShareNumerator    int64    `json:"shareNumerator"`
			ShareDenominator  int64    `json:"shareDenominator"`
			SMUtilPercent     *float64 `json:"smUtilPercent"`
			UtilizationSource string   `json:"utilizationSource"`
		} `json:"gpus"`
	} `json:"servers"`
	GPUHours map[string]struct {
		Allocated float64 `json:"allocated"`
	} `json:"gpuHours"`
}

func (m usageMe) gpu() (kind string, num, den int64, util float64, ok bool) {
	if len(m.Servers) != 1 || len(m.Servers[0].GPUs) != 1 || m.Servers[0].GPUs[0].SMUtilPercent == nil {
		return "", 0, 0, 0, false
	}
	g := m.Servers[0].GPUs[0]
	return g.Kind, g.ShareNumerator, g.ShareDenominator, *g.SMUtilPercent, true
}

// usageAPI is a running usage-api process.
type usageAPI struct {
	cmd  *exec.Cmd
	base string // http://127.0.0.1:port/services/gpu-usage/api/v1/
}

// TestUsageAPI (issue 4, item 6): alice runs a busy "cell" on her MIG 3g.20gb slice, bob idles on a
// time-sliced T4 replica; api/v1/me shows each the right kind and share (3/7 vs 1/4) and a utilization that
// rises and falls with the cell; bob's token cannot read alice's data; after a restart of the usage API the
// GPU-hours continue. The gpu-agents run as a DaemonSet with the simulated backend; the usage API runs as a
// process with an admin kubeconfig and the Hub's admin service token, and is called directly (not through the
// proxy) with tokens minted for alice and bob.
func TestUsageAPI(t *testing.T) {
	if os.Getenv("GPUHUB_GPU_AGENT") == "" {
		t.Fatal("GPUHUB_GPU_AGENT is not set; run `make e2e` (it builds bin/gpu-agent)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const ns = "gpuhub-usage"
	startAgents(ctx, t, ns)

	for user, profile := range map[string]string{"alice": "a100-3g", "bob": "t4-shared"} {
		if _, err := hubAdmin.StartServer(ctx, user, "", map[string]any{"profile": profile}); err != nil {
			t.Fatalf("start %s: %v", user, err)
		}
		defer stopServer(t, user, "")
	}
	for _, user := range []string{"alice", "bob"} {
		waitServer(ctx, t, user, "", func(s hubapi.Server) bool { return s.Ready })
	}
	tokens := map[string]string{}
	for _, user := range []string{"alice", "bob"} {
		tok, err := hubAdmin.CreateToken(ctx, user, hubapi.TokenRequest{Note: "usage e2e", ExpiresIn: 3600})
		if err != nil {
			t.Fatalf("token for %s: %v", user, err)
		}
		tokens[user] = tok.Token
	}

	bin := usageBinary(ctx, t)
	kubeconfig, err := st.ControlPlane.WriteKubeconfig("usage-api", "usage-api", []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "ledger.db")
	api := startUsageAPI(ctx, t, bin, kubeconfig, db, ns)

	me := func(user string) (usageMe, int) {
		var m usageMe
		code := getUsage(ctx, t, api.base+"me", tokens[user], &m)
		return m, code
	}
	poll := func(what string, cond func() (bool, string)) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(context.Context) (bool, error) {
			ok, msg := cond()
			last = msg
			return ok, nil
		})
		if err != nil {
			t.Fatalf("%s: %v; last: %s", what, err, last)
		}
	}

	// A busy cell in alice's server: a process in her pod (it inherits the pod's identity, as a kernel does).
	alicePod := findPod(ctx, t, "alice", "")
	busy := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
	for k, v := range processEnv(t, podPID(t, alicePod)) {
		switch k {
		case emulator.EnvNode, emulator.EnvPodUID, emulator.EnvPodName, emulator.EnvPodNamespace:
			busy.Env = append(busy.Env, k+"="+v)
		}
	}
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	stopBusy := func() {
		if busy.ProcessState == nil {
			_ = busy.Process.Kill()
			_ = busy.Wait()
		}
	}
	defer stopBusy()

	poll("alice busy on MIG 3/7", func() (bool, string) {
		m, code := me("alice")
		kind, num, den, util, ok := m.gpu()
		done := code == http.StatusOK && ok && kind == "mig" && num == 3 && den == 7 && util >= 20
		if done {
			t.Logf("alice busy: kind %s share %d/%d smUtil %.0f%%", kind, num, den, util)
		}
		return done, fmt.Sprintf("%d %+v", code, m)
	})
	poll("bob idle on a T4 replica 1/4", func() (bool, string) {
		m, code := me("bob")
		kind, num, den, util, ok := m.gpu()
		done := code == http.StatusOK && ok && kind == "shared" && num == 1 && den == 4 && util < 10
		if done {
			t.Logf("bob idle: kind %s share %d/%d smUtil %.0f%%", kind, num, den, util)
		}
		return done, fmt.Sprintf("%d %+v", code, m)
	})
	stopBusy()
	poll("alice's utilization falls when the cell ends", func() (bool, string) {
		m, _ := me("alice")
		_, _, _, util, ok := m.gpu()
		if ok && util < 10 {
			t.Logf("alice after the cell: smUtil %.0f%%", util)
		}
		return ok && util < 10, fmt.Sprintf("%+v", m)
	})
	if code := getUsage(ctx, t, api.base+"users/alice", tokens["bob"], nil); code != http.StatusForbidden {
		t.Errorf("bob reads alice's usage: status %d, want 403", code)
	}
	if code := getUsage(ctx, t, api.base+"users/alice", tokens["alice"], nil); code != http.StatusOK {
		t.Errorf("alice reads her own usage by name: status %d, want 200", code)
	}
	var before float64
	poll("GPU-hours accumulate", func() (bool, string) {
		m, _ := me("alice")
		before = m.GPUHours["today"].Allocated
		return before > 0, fmt.Sprintf("%+v", m.GPUHours)
	})

	// Restart on the same ledger: the hours continue.
	api.stop(t)
	api = startUsageAPI(ctx, t, bin, kubeconfig, db, ns)
	poll("GPU-hours continue after a restart", func() (bool, string) {
		m, code := me("alice")
		after := m.GPUHours["today"].Allocated
		if code == http.StatusOK && after < before {
			t.Errorf("after restart today = %v GPU-h, below %v before", after, before)
		}
		if code == http.StatusOK && after > before {
			t.Logf("alice today: %.6f GPU-h before the restart, %.6f after", before, after)
		}
		return code == http.StatusOK && after > before, fmt.Sprintf("before %v after %v", before, after)
	})
	api.stop(t)
}

// startAgents runs the gpu-agent DaemonSet (simulated backend) in namespace ns and waits for its pods.
func startAgents(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
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
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-gpu-agent"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}))
	must(c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-gpu-agent"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ns + "-gpu-agent"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "gpu-agent", Namespace: ns}},
	}, metav1.CreateOptions{}))
	must(c.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
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
					}},
				},
			},
		},
	}, metav1.CreateOptions{}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, ns+"-gpu-agent", metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(ctx, ns+"-gpu-agent", metav1.DeleteOptions{})
	})
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=gpu-agent"})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				running++
			}
		}
		return running == 3, nil
	})
	if err != nil {
		t.Fatalf("gpu-agent pods not running: %v", err)
	}
}

// usageBinary is $GPUHUB_USAGE_API, or the usage API built for this test.
func usageBinary(ctx context.Context, t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUHUB_USAGE_API"); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "usage-api")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../services/usage-api")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build usage-api: %v\n%s", err, out)
	}
	return bin
}

func startUsageAPI(ctx context.Context, t *testing.T, bin, kubeconfig, db, agentNS string) *usageAPI {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.CommandContext(ctx, bin,
		"--listen=127.0.0.1:"+strconv.Itoa(port), "--prefix=/services/gpu-usage/", "--interval=1s",
		"--namespace="+namespace, "--agent-namespace="+agentNS, "--database="+db, "--kubeconfig="+kubeconfig,
		"--hub-refresh=10s", "--log-level=debug")
	cmd.Env = append(os.Environ(), "JUPYTERHUB_API_URL="+st.Hub.APIURL(), "JUPYTERHUB_API_TOKEN="+st.Hub.AdminToken())
	logPath := filepath.Join(t.TempDir(), "usage-api.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	u := &usageAPI{cmd: cmd, base: fmt.Sprintf("http://127.0.0.1:%d/services/gpu-usage/api/v1/", port)}
	t.Cleanup(func() {
		u.stop(t)
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("usage-api log:\n%s", b)
			}
		}
	})
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return getUsage(ctx, t, ready, "", nil) == http.StatusOK, nil
	})
	if err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("usage-api not ready: %v\n%s", err, b)
	}
	return u
}

func (u *usageAPI) stop(t *testing.T) {
	t.Helper()
	if u.cmd.ProcessState != nil {
		return
	}
	_ = u.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = u.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = u.cmd.Process.Kill()
		<-done
		t.Error("usage-api did not stop within 20 s of SIGTERM")
	}
}

// getUsage GETs url with a Hub token and decodes a 200 answer into into; it returns the status (0 when the
// service cannot be reached).
func getUsage(ctx context.Context, t *testing.T, url, token string, into any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if into != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Errorf("decode %s: %v", url, err)
		}
	}
	return resp.StatusCode
}
