//go:build e2e

package e2etest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/e2e/emulator"
	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
	"github.com/gpuhub/gpuhub/e2e/internal/servers"
	"github.com/gpuhub/gpuhub/hubapi"
)

const namespace = "jhub"

// TestNodes checks that every topology node is Ready, schedulable and carries its GPU resources.
func TestNodes(t *testing.T) {
	ctx := context.Background()
	nodes, err := st.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range nodes.Items {
		ready := ""
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = string(c.Status)
			}
		}
		for _, taint := range n.Spec.Taints {
			t.Errorf("node %s has taint %s:%s", n.Name, taint.Key, taint.Effect)
		}
		res := []string{}
		for _, r := range []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-1g.5gb"} {
			if q, ok := n.Status.Allocatable[r]; ok && !q.IsZero() {
				res = append(res, fmt.Sprintf("%s=%s", r, q.String()))
			}
		}
		got[n.Name] = fmt.Sprintf("Ready=%s %s product=%s ip=%s", ready, strings.Join(res, ","),
			n.Labels["nvidia.com/gpu.product"], n.Status.Addresses[0].Address)
	}
	ip := st.Emulator.AddressPrefix() // 127.<block>., the block picked free at start
	want := map[string]string{
		"gpu-a100-0": "Ready=True nvidia.com/mig-3g.20gb=2,nvidia.com/mig-1g.5gb=8 product=NVIDIA-A100-SXM4-40GB ip=" + ip + "1.1",
		"gpu-h100-0": "Ready=True nvidia.com/gpu=2 product=NVIDIA-H100-80GB-HBM3 ip=" + ip + "2.1",
		"gpu-t4-0":   "Ready=True nvidia.com/gpu.shared=4 product=Tesla-T4-SHARED ip=" + ip + "3.1",
		"cpu-0":      "Ready=True  product= ip=" + ip + "4.1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}

// TestSpawnEachProfile spawns one server per profile through the Hub API and checks that the real
// scheduler put it on the right node, that its process carries the pod identity and binds its
// loopback pod IP, that the proxy reaches it at /user/<name>/<server>/, and that stopping it
// removes the pod and the process.
func TestSpawnEachProfile(t *testing.T) {
	tests := map[string]struct {
		user, server, profile string
		wantNode              string
		wantResource          corev1.ResourceName
	}{
		"h100":      {user: "alice", server: "", profile: "h100", wantNode: "gpu-h100-0", wantResource: "nvidia.com/gpu"},
		"a100-3g":   {user: "bob", server: "", profile: "a100-3g", wantNode: "gpu-a100-0", wantResource: "nvidia.com/mig-3g.20gb"},
		"a100-1g":   {user: "carol", server: "", profile: "a100-1g", wantNode: "gpu-a100-0", wantResource: "nvidia.com/mig-1g.5gb"},
		"t4-shared": {user: "admin", server: "", profile: "t4-shared", wantNode: "gpu-t4-0", wantResource: "nvidia.com/gpu.shared"},
		"cpu":       {user: "alice", server: "cpu", profile: "cpu", wantNode: "cpu-0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			if _, err := hubAdmin.StartServer(ctx, tc.user, tc.server, map[string]any{"profile": tc.profile}); err != nil {
				t.Fatalf("start %s/%s: %v", tc.user, tc.server, err)
			}
			defer hub().Stop(t, tc.user, tc.server)
			srv := waitServer(ctx, t, tc.user, tc.server, func(s hubapi.Server) bool { return s.Ready })
			pod := findPod(ctx, t, tc.user, tc.server)

			if pod.Spec.NodeName != tc.wantNode {
				t.Errorf("pod %s on node %q, want %q", pod.Name, pod.Spec.NodeName, tc.wantNode)
			}
			if got := pod.Labels["gpuhub.io/profile"]; got != tc.profile {
				t.Errorf("pod label gpuhub.io/profile = %q, want %q", got, tc.profile)
			}
			if tc.wantResource != "" {
				if q := pod.Spec.Containers[0].Resources.Limits[tc.wantResource]; q.Value() != 1 {
					t.Errorf("pod limit %s = %s, want 1", tc.wantResource, q.String())
				}
			}
			if !strings.HasPrefix(pod.Status.PodIP, st.Emulator.AddressPrefix()) {
				t.Errorf("pod IP %q is not an emulator loopback address", pod.Status.PodIP)
			}
			if pod.Annotations["hub.jupyter.org/username"] != tc.user {
				t.Errorf("annotation hub.jupyter.org/username = %q", pod.Annotations["hub.jupyter.org/username"])
			}
			pid := podPID(t, pod)
			env := processEnv(t, pid)
			for k, want := range map[string]string{
				emulator.EnvPodUID: string(pod.UID), emulator.EnvNode: tc.wantNode,
				emulator.EnvPodName: pod.Name, emulator.EnvPodNamespace: namespace, "JUPYTERHUB_USER": tc.user,
			} {
				if env[k] != want {
					t.Errorf("process %d env %s = %q, want %q", pid, k, env[k], want)
				}
			}
			checkProxy(ctx, t, tc.user, srv.URL)

			hub().Stop(t, tc.user, tc.server)
			waitPodGone(ctx, t, pod)
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("process %d of %s still running after stop", pid, pod.Name)
			}
		})
	}
}

// TestInsufficientGPU asks for more H100s than are free: the spawn stays pending and the
// scheduler's reason is visible on the pod and in its events.
func TestInsufficientGPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// alice holds one of the two H100s ...
	if _, err := hubAdmin.StartServer(ctx, "alice", "hold", map[string]any{"profile": "h100"}); err != nil {
		t.Fatal(err)
	}
	defer hub().Stop(t, "alice", "hold")
	waitServer(ctx, t, "alice", "hold", func(s hubapi.Server) bool { return s.Ready })
	// ... so carol's request for two cannot be placed.
	if _, err := hubAdmin.StartServer(ctx, "carol", "big", map[string]any{"profile": "h100-x2"}); err != nil {
		t.Fatal(err)
	}
	defer hub().Stop(t, "carol", "big")
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pod = tryFindPod(ctx, "carol", "big")
		if pod == nil {
			return false, nil
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("carol's pod never reported Unschedulable: %v", err)
	}
	msg := ""
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			msg = c.Message
		}
	}
	if !strings.Contains(msg, "Insufficient nvidia.com/gpu") {
		t.Errorf("PodScheduled message %q does not name Insufficient nvidia.com/gpu", msg)
	}
	events, err := st.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod.Name + ",reason=FailedScheduling"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) == 0 || !strings.Contains(events.Items[0].Message, "Insufficient nvidia.com/gpu") {
		t.Errorf("no FailedScheduling event naming Insufficient nvidia.com/gpu: %+v", events.Items)
	}
	u, err := hubAdmin.GetUser(ctx, "carol")
	if err != nil {
		t.Fatal(err)
	}
	if s := u.Servers["big"]; s.Ready || s.Pending != "spawn" {
		t.Errorf("Hub reports carol/big ready=%v pending=%q, want a pending spawn", s.Ready, s.Pending)
	}
	t.Logf("pending as expected: %s", msg)
}

// TestNotAllowedProgram creates a pod that runs an arbitrary command: the emulator must refuse to
// run it and say why.
func TestNotAllowedProgram(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "not-allowed", Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": "cpu-0"},
			Containers:   []corev1.Container{{Name: "sh", Image: "busybox", Command: []string{"/bin/sh", "-c", "touch /tmp/pwned"}}},
		},
	}
	created, err := st.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got *corev1.ContainerStateWaiting
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := st.Client.CoreV1().Pods(namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		got = p.Status.ContainerStatuses[0].State.Waiting
		return got != nil && got.Reason == emulator.ReasonNotAllowed, nil
	})
	if err != nil {
		t.Fatalf("pod not reported %s (last waiting state %+v): %v", emulator.ReasonNotAllowed, got, err)
	}
	if len(st.Emulator.Processes()[namespace+"/not-allowed"]) != 0 {
		t.Error("a process runs for a pod with a non-allow-listed command")
	}
	if err := st.Client.CoreV1().Pods(namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(ctx, t, created)
}

// hub is the suite's Hub for the helpers that fail the test.
func hub() servers.Hub { return servers.Hub{Admin: hubAdmin, LogTail: st.Hub.LogTail} }

func waitServer(ctx context.Context, t *testing.T, user, server string, cond func(hubapi.Server) bool) hubapi.Server {
	t.Helper()
	var last hubapi.Server
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		u, err := hubAdmin.GetUser(ctx, user)
		if err != nil {
			return false, nil
		}
		last = u.Servers[server]
		return cond(last), nil
	})
	if err != nil {
		t.Fatalf("server %s/%q not ready (last %+v): %v\nhub log:\n%s", user, server, last, err, st.Hub.LogTail(40))
	}
	return last
}

func tryFindPod(ctx context.Context, user, server string) *corev1.Pod {
	pods, err := st.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "component=singleuser-server"})
	if err != nil {
		return nil
	}
	for i, p := range pods.Items {
		if p.Annotations["hub.jupyter.org/username"] == user && p.Annotations["hub.jupyter.org/servername"] == server {
			return &pods.Items[i]
		}
	}
	return nil
}

func findPod(ctx context.Context, t *testing.T, user, server string) *corev1.Pod {
	t.Helper()
	if p := tryFindPod(ctx, user, server); p != nil {
		return p
	}
	t.Fatalf("no pod for %s/%q", user, server)
	return nil
}

func waitPodGone(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := st.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err != nil || p.UID != pod.UID, nil
	})
	if err != nil {
		t.Errorf("pod %s not removed: %v", pod.Name, err)
	}
}

func podPID(t *testing.T, pod *corev1.Pod) int {
	t.Helper()
	pids := st.Emulator.Processes()[pod.Namespace+"/"+pod.Name]
	if len(pids) != 1 {
		t.Fatalf("emulator runs %v for %s, want one process", pids, pod.Name)
	}
	return pids[0]
}

func processEnv(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("environ of %d: %v", pid, err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(data), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// checkProxy fetches the server's API through configurable-http-proxy with a token of the user.
func checkProxy(ctx context.Context, t *testing.T, user, serverURL string) {
	t.Helper()
	tok, err := hubAdmin.CreateToken(ctx, user, hubapi.TokenRequest{ExpiresIn: 600, Note: "e2e proxy check"})
	if err != nil {
		t.Fatalf("token for %s: %v", user, err)
	}
	logscan.Register("Hub token of user "+user+" (e2e proxy check)", tok.Token)
	url := strings.TrimSuffix(st.HubURL(), "/") + serverURL + "api/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+tok.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s through the proxy: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "kernels") {
		t.Errorf("GET %s through the proxy: %s %s", url, resp.Status, body)
	}
	// JupyterLab's page config: the news feed (an outside URL) is off.
	lab := strings.TrimSuffix(st.HubURL(), "/") + serverURL + "lab"
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, lab, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+tok.Token)
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", lab, err)
	}
	defer resp2.Body.Close()
	page, _ := io.ReadAll(resp2.Body)
	if !strings.Contains(string(page), `"news": {"disabled": true}`) {
		t.Errorf("JupyterLab at %s does not have its news feed disabled (%s)", lab, resp2.Status)
	}
}
