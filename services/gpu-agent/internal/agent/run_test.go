package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

const usageSA = "system:serviceaccount:jhub:gpu-usage"

func simCluster() *fake.Clientset {
	c := fake.NewClientset(
		&corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-a100-0", Labels: map[string]string{
				"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960", "nvidia.com/mig.strategy": "mixed"}},
			Status: corev1.NodeStatus{Capacity: corev1.ResourceList{"nvidia.com/mig-3g.20gb": resource.MustParse("2")}},
		},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "jupyter-alice", Namespace: "jhub", UID: "uid-alice",
				Annotations: map[string]string{"hub.jupyter.org/username": "alice"}},
			Spec: corev1.PodSpec{NodeName: "gpu-a100-0", Containers: []corev1.Container{{Name: "notebook",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-3g.20gb": resource.MustParse("1")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		},
	)
	// The API server's TokenReview: two known tokens, both issued for whatever audience is asked.
	c.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tr := action.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		switch tr.Spec.Token {
		case "usage-token":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: usageSA}, Audiences: tr.Spec.Audiences}
		case "other-token":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:jhub:default"}, Audiences: tr.Spec.Audiences}
		}
		return true, tr, nil
	})
	return c
}

func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestRunSimulated starts the whole agent in-process on 127.0.0.1:0 with
// the simulated backend, a fake API server and a fake /proc.
func TestRunSimulated(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	proc := fstest.MapFS{
		"4242/environ": {Data: []byte("GPUHUB_SIM_NODE=gpu-a100-0\x00GPUHUB_SIM_POD_UID=uid-alice\x00")},
		"4242/stat":    {Data: []byte("4242 (python) S 1 1 1 0 -1 0 0 0 0 0 10 5 0 0 20 0 1 0 1 1 1")},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Kube: simCluster(), Node: "gpu-a100-0", Backend: snapshot.BackendSimulated, Interval: 20 * time.Millisecond,
			Listener: ln, Proc: proc, Registry: prometheus.NewRegistry(),
			SnapshotAuth: AuthTokenReview, SnapshotAllowedUsers: []string{usageSA},
		})
	}()

	if code, _ := get(t, base+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, base+"/readyz", "")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}

	cases := map[string]struct {
		token    string
		wantCode int
	}{
		"no token":           {wantCode: http.StatusUnauthorized},
		"unknown token":      {token: "nope", wantCode: http.StatusUnauthorized},
		"not an allowed SA":  {token: "other-token", wantCode: http.StatusForbidden},
		"usage API's token":  {token: "usage-token", wantCode: http.StatusOK},
		"cached second time": {token: "usage-token", wantCode: http.StatusOK},
	}
	for _, name := range []string{"no token", "unknown token", "not an allowed SA", "usage API's token", "cached second time"} {
		tc := cases[name]
		code, body := get(t, base+"/api/v1/snapshot", tc.token)
		if code != tc.wantCode {
			t.Errorf("%s: status %d, want %d (%s)", name, code, tc.wantCode, body)
		}
		if strings.Contains(string(body), "usage-token") {
			t.Errorf("%s: the token is echoed in the answer", name)
		}
		if code != http.StatusOK {
			continue
		}
		var snap snapshot.Snapshot
		if err := json.Unmarshal(body, &snap); err != nil {
			t.Fatal(err)
		}
		if snap.Backend != "simulated" || len(snap.GPUs) != 1 || len(snap.GPUs[0].MIGDevices) != 2 || len(snap.Pods) != 1 {
			t.Fatalf("snapshot: %s", body)
		}
		p := snap.Pods[0]
		if p.User != "alice" || len(p.Devices) != 1 || p.Devices[0].Resource != "nvidia.com/mig-3g.20gb" ||
			p.UtilizationSource != "simulated" || len(p.Processes) != 1 || p.Processes[0].PID != 4242 {
			t.Errorf("alice's pod: %+v", p)
		}
	}

	_, metrics := get(t, base+"/metrics", "")
	for _, want := range []string{
		`gpuhub_agent_info{backend="simulated",node="gpu-a100-0"} 1`,
		`gpuhub_agent_last_sample_success 1`,
		`gpuhub_agent_pod_sm_utilization_ratio{backend="simulated",gpu="0",mig="3g.20gb",namespace="jhub",node="gpu-a100-0",pod="jupyter-alice",source="simulated",user="alice"`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRunErrors(t *testing.T) {
	cases := map[string]struct {
		opts Options
		want string
	}{
		"unknown backend": {opts: Options{Kube: simCluster(), Node: "n", Backend: "cuda", Interval: time.Second, SnapshotAuth: AuthNone}, want: "unknown backend"},
		"no library": {opts: Options{Kube: simCluster(), Node: "n", Backend: "nvml", NVMLLibrary: "/nonexistent/libnvidia-ml.so.1",
			Interval: time.Second, SnapshotAuth: AuthNone}, want: "--backend=simulated"},
		"no node":     {opts: Options{Kube: simCluster(), Backend: "simulated", Interval: time.Second, SnapshotAuth: AuthNone}, want: "NODE_NAME"},
		"bad auth":    {opts: Options{Kube: simCluster(), Node: "n", Backend: "simulated", Interval: time.Second, SnapshotAuth: "basic"}, want: "snapshot-auth"},
		"no interval": {opts: Options{Kube: simCluster(), Node: "n", Backend: "simulated", SnapshotAuth: AuthNone}, want: "interval"},
		"no kube":     {opts: Options{Node: "n", Backend: "simulated", Interval: time.Second, SnapshotAuth: AuthNone}, want: "Kubernetes client"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := Run(ctx, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error about %q", err, tc.want)
			}
		})
	}
}

// The whole agent: when sampling starts failing (here the simulated backend
// loses its Node), /readyz turns 503 after --max-failed-samples and the
// snapshot keeps the last good sample with health saying so; when sampling
// recovers, /readyz is 200 again.
func TestRunReadinessFollowsSampling(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	kc := simCluster()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Kube: kc, Node: "gpu-a100-0", Backend: snapshot.BackendSimulated, Interval: 20 * time.Millisecond,
			Listener: ln, Proc: fstest.MapFS{}, Registry: prometheus.NewRegistry(), SnapshotAuth: AuthNone, MaxFailedSamples: 2,
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			t.Logf("Run returned %v after cancel", err)
		case <-time.After(20 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	readyz := func() (int, string) { code, body := get(t, base+"/readyz", ""); return code, string(body) }
	waitFor("ready", func() bool { code, _ := readyz(); return code == http.StatusOK })

	node, err := kc.CoreV1().Nodes().Get(ctx, "gpu-a100-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.CoreV1().Nodes().Delete(ctx, "gpu-a100-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("not ready", func() bool { code, _ := readyz(); return code == http.StatusServiceUnavailable })
	if _, body := readyz(); !strings.Contains(body, "samples failed") || !strings.Contains(body, "not in the cache") {
		t.Errorf("/readyz does not say why: %s", body)
	}
	code, body := get(t, base+"/api/v1/snapshot", "")
	var snap snapshot.Snapshot
	if err := json.Unmarshal(body, &snap); code != http.StatusOK || err != nil {
		t.Fatalf("snapshot while failing: %d %v %s", code, err, body)
	}
	if h := snap.Health; h.OK || h.ConsecutiveFailures < 2 || !h.LastAttemptAt.After(snap.SampledAt) ||
		!h.LastSuccessAt.Equal(snap.SampledAt) || !strings.Contains(h.LastError, "not in the cache") {
		t.Errorf("health while failing = %+v (sampledAt %s)", h, snap.SampledAt)
	}
	_, metrics := get(t, base+"/metrics", "")
	if !bytes.Contains(metrics, []byte("gpuhub_agent_last_sample_success 0")) ||
		bytes.Contains(metrics, []byte("gpuhub_agent_consecutive_failed_samples 0\n")) {
		t.Errorf("/metrics while failing:\n%s", metrics)
	}

	node.ResourceVersion = ""
	if _, err := kc.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("ready again", func() bool { code, _ := readyz(); return code == http.StatusOK })
}
