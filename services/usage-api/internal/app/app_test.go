package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/logging"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

func gpuPod(name, user, node, resName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: name, UID: types.UID("uid-" + user),
			Annotations: map[string]string{"hub.jupyter.org/username": user}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "notebook",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(resName): *resource.NewQuantity(1, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func agentPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpuhub", Name: "gpu-agent-" + node,
			Labels: map[string]string{"app.kubernetes.io/component": "gpu-agent", "app.kubernetes.io/instance": "gpuhub"}},
		Spec:   corev1.PodSpec{NodeName: node, ServiceAccountName: "gpuhub-agent"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}
}

func node(name string, labels map[string]string, res string, n int64) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}}}
}

// fakeAgent answers for both nodes (one port for all agents in this test): alice's utilization follows busy.
func fakeAgent(t *testing.T, busy *atomic.Int64) int {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Both agent pods share 127.0.0.1; answer with both nodes' pods in one snapshot per node name is not
		// possible, so the snapshot carries both pods and each node's join picks its own by UID.
		util := float64(busy.Load())
		snap := map[string]any{
			"node": "", "backend": "simulated", "sampledAt": time.Now().UTC(), "intervalSeconds": 0.1, "gpus": []any{},
			"pods": []any{
				map[string]any{"uid": "uid-alice", "namespace": "jhub", "name": "jupyter-alice", "user": "alice",
					"devices":       []any{map[string]any{"uuid": "MIG-1", "parentUUID": "GPU-A", "resource": "nvidia.com/mig-3g.20gb"}},
					"smUtilPercent": util, "utilizationSource": "simulated", "memoryUsedBytes": 0},
				map[string]any{"uid": "uid-bob", "namespace": "jhub", "name": "jupyter-bob", "user": "bob",
					"devices":       []any{map[string]any{"uuid": "GPU-T", "resource": "nvidia.com/gpu.shared"}},
					"smUtilPercent": 0, "utilizationSource": "simulated", "memoryUsedBytes": 0},
			},
		}
		_ = json.NewEncoder(w).Encode(snap)
	}))
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	return port
}

type running struct {
	url    string
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, hub *hubapitest.Hub, db string, agentPort int) *running {
	t.Helper()
	kc := fake.NewClientset(
		node("gpu-a100-0", map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed"}, "nvidia.com/mig-3g.20gb", 2),
		node("gpu-t4-0", map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}, "nvidia.com/gpu.shared", 4),
		gpuPod("jupyter-alice", "alice", "gpu-a100-0", "nvidia.com/mig-3g.20gb"),
		gpuPod("jupyter-bob", "bob", "gpu-t4-0", "nvidia.com/gpu.shared"),
		agentPod("gpu-a100-0"), agentPod("gpu-t4-0"),
	)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{url: "http://" + ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	served := make(chan struct{})
	go func() {
		r.done <- Run(ctx, Options{
			Logger: logging.Discard(), Registry: prometheus.NewRegistry(), Listener: ln, Prefix: "/services/gpu-usage/",
			Kube: kc, AgentPort: agentPort, Hub: hub.Client("svc-token"), HubRefresh: time.Minute,
			Auth: hubauth.New(hubauth.Options{Hub: hub.Client("svc-token")}).Middleware, Database: db,
			Interval: 100 * time.Millisecond, OnServing: func(*server.Server) { close(served) },
		})
	}()
	select {
	case <-served:
	case err := <-r.done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not serving after 10 s")
	}
	return r
}

func (r *running) stop(t *testing.T) {
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}

type me struct {
	User    string                          `json:"user"`
	Share   struct{ AllocatedGPUs float64 } `json:"share"`
	Servers []struct {
		GPUs []struct {
			Kind                             string
			ShareNumerator, ShareDenominator int64
			SMUtilPercent                    *float64
		} `json:"gpus"`
	} `json:"servers"`
	GPUHours map[string]struct{ Allocated, Used float64 } `json:"gpuHours"`
}

func getJSON(t *testing.T, url, token string, into any) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if into != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: still not true after 10 s: %s", what, last)
}

// TestRunEndToEnd is the in-process version of the e2e scenario: alice busy on a MIG slice, bob idle on a
// time-sliced T4, authorization, and GPU-hours that continue across a restart.
func TestRunEndToEnd(t *testing.T) {
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "alice", Groups: []string{"physics"}})
	hub.AddUser(hubapi.User{Name: "bob"})
	hub.AddToken("alice-token", "alice")
	hub.AddToken("bob-token", "bob")
	hub.AddToken("svc-token", "gpu-usage", "list:users", "read:users", "read:users:groups")
	var busy atomic.Int64
	busy.Store(90)
	port := fakeAgent(t, &busy)
	db := filepath.Join(t.TempDir(), "ledger.db")

	r := start(t, hub, db, port)
	base := r.url + "/services/gpu-usage/api/v1/"
	eventually(t, "ready", func() (bool, string) {
		code := getJSON(t, r.url+"/readyz", "", nil)
		return code == http.StatusOK, fmt.Sprint(code)
	})
	var a, b me
	eventually(t, "alice busy on 3/7 MIG", func() (bool, string) {
		getJSON(t, base+"me", "alice-token", &a)
		ok := len(a.Servers) == 1 && a.Servers[0].GPUs[0].Kind == "mig" && a.Servers[0].GPUs[0].ShareNumerator == 3 &&
			a.Servers[0].GPUs[0].ShareDenominator == 7 && a.Servers[0].GPUs[0].SMUtilPercent != nil && *a.Servers[0].GPUs[0].SMUtilPercent == 90
		return ok, fmt.Sprintf("%+v", a)
	})
	getJSON(t, base+"me", "bob-token", &b)
	if len(b.Servers) != 1 || b.Servers[0].GPUs[0].Kind != "shared" || b.Servers[0].GPUs[0].ShareDenominator != 4 || *b.Servers[0].GPUs[0].SMUtilPercent != 0 {
		t.Errorf("bob: %+v", b)
	}
	busy.Store(5)
	eventually(t, "alice's utilization falls", func() (bool, string) {
		getJSON(t, base+"me", "alice-token", &a)
		return len(a.Servers) == 1 && *a.Servers[0].GPUs[0].SMUtilPercent == 5, fmt.Sprintf("%+v", a)
	})
	if code := getJSON(t, base+"users/alice", "bob-token", nil); code != http.StatusForbidden {
		t.Errorf("bob reads alice: %d, want 403", code)
	}
	eventually(t, "GPU-hours accumulate", func() (bool, string) {
		getJSON(t, base+"me", "alice-token", &a)
		return a.GPUHours["today"].Allocated > 0, fmt.Sprintf("%+v", a.GPUHours)
	})
	r.stop(t)
	before := a.GPUHours["today"].Allocated

	// Restart on the same ledger: the hours continue from where they were, then grow.
	r = start(t, hub, db, port)
	defer r.stop(t)
	base = r.url + "/services/gpu-usage/api/v1/"
	getJSON(t, base+"me", "alice-token", &a)
	if a.GPUHours["today"].Allocated < before {
		t.Errorf("after restart today = %v GPU-h, below %v before", a.GPUHours["today"].Allocated, before)
	}
	eventually(t, "GPU-hours continue after restart", func() (bool, string) {
		getJSON(t, base+"me", "alice-token", &a)
		return a.GPUHours["today"].Allocated > before, fmt.Sprintf("%v vs %v", a.GPUHours["today"].Allocated, before)
	})
}
