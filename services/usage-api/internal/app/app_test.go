package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/logging"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
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
	url      string
	registry *prometheus.Registry
	cancel   context.CancelFunc
	done     chan error
}

func start(t *testing.T, hub *hubapitest.Hub, db string, agentPort int, opts ...func(*Options)) *running {
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
	o := Options{
		Logger: logging.Discard(), Registry: prometheus.NewRegistry(), Listener: ln, Prefix: "/services/gpu-usage/",
		Kube: kc, AgentPort: agentPort, Hub: hub.Client("svc-token"), HubRefresh: time.Minute,
		Auth: hubauth.New(hubauth.Options{Hub: hub.Client("svc-token")}).Middleware, Database: db,
		Interval: 100 * time.Millisecond, OnServing: func(*server.Server) { close(served) },
	}
	for _, f := range opts {
		f(&o)
	}
	r.registry = o.Registry
	go func() { r.done <- Run(ctx, o) }()
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

// eventually polls cond for up to 20 s (the reflector retries a failed watch with a real backoff of up to
// several seconds).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: still not true after 20 s: %s", what, last)
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
	// The ledger connects in the background; until it has, GPU-hours say "unavailable" rather than 0.
	var m meHours
	eventually(t, "ledger connected after restart", func() (bool, string) {
		m = meHours{}
		getJSON(t, base+"me", "alice-token", &m)
		return m.GPUHoursStatus == "ok", fmt.Sprintf("%+v", m)
	})
	if m.GPUHours["today"].Allocated < before {
		t.Errorf("after restart today = %v GPU-h, below %v before", m.GPUHours["today"].Allocated, before)
	}
	eventually(t, "GPU-hours continue after restart", func() (bool, string) {
		getJSON(t, base+"me", "alice-token", &a)
		return a.GPUHours["today"].Allocated > before, fmt.Sprintf("%v vs %v", a.GPUHours["today"].Allocated, before)
	})
}

// newHub is the Hub of the app tests: alice and bob with tokens, and the service's own token.
func newHub(t *testing.T) *hubapitest.Hub {
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "alice", Groups: []string{"physics"}})
	hub.AddUser(hubapi.User{Name: "bob"})
	hub.AddToken("alice-token", "alice")
	hub.AddToken("bob-token", "bob")
	hub.AddToken("svc-token", "gpu-usage", "list:users", "read:users", "read:users:groups")
	return hub
}

// meHours is the GPU-hours part of me.
type meHours struct {
	Share          struct{ AllocatedGPUs float64 }               `json:"share"`
	GPUHours       map[string]*struct{ Allocated, Used float64 } `json:"gpuHours"`
	GPUHoursStatus string                                        `json:"gpuHoursStatus"`
	GPUHoursReason string                                        `json:"gpuHoursReason"`
}

type readiness struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
}

// readyz returns /readyz's status and detail (its body is JSON whether ready or not).
func readyz(t *testing.T, base string) (int, readiness) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var rd readiness
	if err := json.NewDecoder(resp.Body).Decode(&rd); err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	return resp.StatusCode, rd
}

func ledgerUp(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpuhub_usage_ledger_up" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// TestLedgerUnreachableAtStart (fault 8): a database that cannot be opened at start must not stop the service.
// The live share is served (and /readyz is 200, the ledger's state in its detail) while the ledger retries; once
// the database can be opened GPU-hours are served, without a restart.
func TestLedgerUnreachableAtStart(t *testing.T) {
	hub := newHub(t)
	var busy atomic.Int64
	busy.Store(50)
	port := fakeAgent(t, &busy)
	dir := filepath.Join(t.TempDir(), "not-yet") // SQLite cannot create a file in a missing directory
	r := start(t, hub, filepath.Join(dir, "ledger.db"), port, func(o *Options) {
		o.LedgerRetryMin, o.LedgerRetryMax = 20*time.Millisecond, 100*time.Millisecond
	})
	defer r.stop(t)
	base := r.url + "/services/gpu-usage/api/v1/"

	var m meHours
	eventually(t, "live share served, GPU-hours unavailable", func() (bool, string) {
		m = meHours{}
		code := getJSON(t, base+"me", "alice-token", &m)
		ok := code == http.StatusOK && m.Share.AllocatedGPUs > 0.42 && m.GPUHoursStatus == "unavailable" &&
			m.GPUHours["today"] == nil && strings.Contains(m.GPUHoursReason, "ledger database cannot be reached")
		return ok, fmt.Sprintf("%d %+v", code, m)
	})
	var rd readiness
	eventually(t, "ready without the ledger", func() (bool, string) {
		code := getJSON(t, r.url+"/readyz", "", &rd)
		return code == http.StatusOK && strings.Contains(rd.Checks["ledger"], "not connected"), fmt.Sprintf("%d %+v", code, rd)
	})
	if up := ledgerUp(t, r.registry); up != 0 {
		t.Errorf("gpuhub_usage_ledger_up = %v while unreachable, want 0", up)
	}

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	eventually(t, "GPU-hours served once the database can be opened", func() (bool, string) {
		m = meHours{}
		code := getJSON(t, base+"me", "alice-token", &m)
		ok := code == http.StatusOK && m.GPUHoursStatus == "ok" && m.GPUHoursReason == "" && m.GPUHours["today"] != nil && m.GPUHours["today"].Allocated > 0
		return ok, fmt.Sprintf("%d %+v", code, m)
	})
	getJSON(t, r.url+"/readyz", "", &rd)
	if rd.Checks["ledger"] != "ok" {
		t.Errorf("readiness ledger detail after connecting: %q", rd.Checks["ledger"])
	}
	if up := ledgerUp(t, r.registry); up != 1 {
		t.Errorf("gpuhub_usage_ledger_up = %v once connected, want 1", up)
	}
}

// openWrapped opens a real SQLite ledger at db and hands it to wrap, which injects a fault.
func openWrapped(db string, interval time.Duration, wrap func(*ledger.Ledger) Ledger) OpenLedgerFunc {
	return func(ctx context.Context, now time.Time) (Ledger, io.Closer, error) {
		store, err := ledger.OpenSQLite(ctx, db)
		if err != nil {
			return nil, nil, err
		}
		led, err := ledger.New(ctx, store, ledger.Options{Interval: interval}, now)
		if err != nil {
			return nil, nil, err
		}
		return wrap(led), store, nil
	}
}

// flakyLedger is a real ledger whose commits fail while fail is set, like a database that went away.
type flakyLedger struct {
	*ledger.Ledger
	fail *atomic.Bool
}

func (l flakyLedger) Record(ctx context.Context, now time.Time, samples []ledger.Sample) (ledger.Result, error) {
	if l.fail.Load() {
		return ledger.Result{}, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	return l.Ledger.Record(ctx, now, samples)
}

// TestLedgerFailsLater (fault 8): when commits start failing after a good start, the tick keeps publishing the
// live view, GPU-hours say unavailable (not the numbers of before the outage as if current), readiness stays
// 200 with the ledger error in its detail; when commits work again GPU-hours are back.
func TestLedgerFailsLater(t *testing.T) {
	hub := newHub(t)
	var busy atomic.Int64
	busy.Store(50)
	port := fakeAgent(t, &busy)
	var fail atomic.Bool
	db := filepath.Join(t.TempDir(), "ledger.db")
	r := start(t, hub, db, port, func(o *Options) {
		o.OpenLedger = openWrapped(db, o.Interval, func(led *ledger.Ledger) Ledger { return flakyLedger{Ledger: led, fail: &fail} })
	})
	defer r.stop(t)
	base := r.url + "/services/gpu-usage/api/v1/"
	var m meHours
	eventually(t, "GPU-hours accrue", func() (bool, string) {
		m = meHours{}
		getJSON(t, base+"me", "alice-token", &m)
		return m.GPUHoursStatus == "ok" && m.GPUHours["today"] != nil && m.GPUHours["today"].Allocated > 0, fmt.Sprintf("%+v", m)
	})

	fail.Store(true)
	var a me
	busy.Store(7)
	eventually(t, "GPU-hours unavailable, live view still current", func() (bool, string) {
		m, a = meHours{}, me{}
		getJSON(t, base+"me", "alice-token", &m)
		getJSON(t, base+"me", "alice-token", &a)
		live := len(a.Servers) == 1 && a.Servers[0].GPUs[0].SMUtilPercent != nil && *a.Servers[0].GPUs[0].SMUtilPercent == 7
		ok := live && m.GPUHoursStatus == "unavailable" && m.GPUHours["today"] == nil && strings.Contains(m.GPUHoursReason, "stopped answering")
		return ok, fmt.Sprintf("%+v %+v", m, a)
	})
	var rd readiness
	if code := getJSON(t, r.url+"/readyz", "", &rd); code != http.StatusOK || !strings.Contains(rd.Checks["ledger"], "connection refused") {
		t.Errorf("readyz while commits fail: %d %+v, want 200 with the ledger error in the detail", code, rd)
	}
	if up := ledgerUp(t, r.registry); up != 0 {
		t.Errorf("gpuhub_usage_ledger_up = %v while commits fail, want 0", up)
	}

	fail.Store(false)
	eventually(t, "GPU-hours back", func() (bool, string) {
		m = meHours{}
		getJSON(t, base+"me", "alice-token", &m)
		return m.GPUHoursStatus == "ok" && m.GPUHours["today"] != nil, fmt.Sprintf("%+v", m)
	})
	if up := ledgerUp(t, r.registry); up != 1 {
		t.Errorf("gpuhub_usage_ledger_up = %v after recovery, want 1", up)
	}
}

// hangingLedger is a real ledger whose commits hang until their context ends while hang is set, like a
// PostgreSQL connection that stopped answering.
type hangingLedger struct {
	*ledger.Ledger
	hang *atomic.Bool
}

func (l hangingLedger) Record(ctx context.Context, now time.Time, samples []ledger.Sample) (ledger.Result, error) {
	if l.hang.Load() {
		<-ctx.Done()
		return ledger.Result{}, ctx.Err()
	}
	return l.Ledger.Record(ctx, now, samples)
}

// TestLedgerHangsLiveViewCurrent (fault 8, found in review): a commit that never returns must not freeze the
// live share: the view is published before the commit, and the commit is given up after two intervals.
func TestLedgerHangsLiveViewCurrent(t *testing.T) {
	hub := newHub(t)
	var busy atomic.Int64
	busy.Store(50)
	port := fakeAgent(t, &busy)
	var hang atomic.Bool
	db := filepath.Join(t.TempDir(), "ledger.db")
	r := start(t, hub, db, port, func(o *Options) {
		o.OpenLedger = openWrapped(db, o.Interval, func(led *ledger.Ledger) Ledger { return hangingLedger{Ledger: led, hang: &hang} })
	})
	defer r.stop(t)
	base := r.url + "/services/gpu-usage/api/v1/"
	var a me
	eventually(t, "live view at 50 %", func() (bool, string) {
		a = me{}
		getJSON(t, base+"me", "alice-token", &a)
		return len(a.Servers) == 1 && a.Servers[0].GPUs[0].SMUtilPercent != nil && *a.Servers[0].GPUs[0].SMUtilPercent == 50, fmt.Sprintf("%+v", a)
	})
	hang.Store(true)
	busy.Store(7)
	eventually(t, "live view follows the GPU while the ledger hangs", func() (bool, string) {
		a = me{}
		getJSON(t, base+"me", "alice-token", &a)
		return len(a.Servers) == 1 && a.Servers[0].GPUs[0].SMUtilPercent != nil && *a.Servers[0].GPUs[0].SMUtilPercent == 7, fmt.Sprintf("%+v", a)
	})
	busy.Store(30)
	eventually(t, "and keeps following it", func() (bool, string) {
		a = me{}
		getJSON(t, base+"me", "alice-token", &a)
		return len(a.Servers) == 1 && a.Servers[0].GPUs[0].SMUtilPercent != nil && *a.Servers[0].GPUs[0].SMUtilPercent == 30, fmt.Sprintf("%+v", a)
	})
	hang.Store(false)
}

// TestReadinessFollowsWatches (fault 9): while the pod watch keeps failing (as when the kube-apiserver is away)
// /readyz fails after InformerUnreadyAfter and says which informer, since when and why; it recovers with the
// watch.
func TestReadinessFollowsWatches(t *testing.T) {
	hub := newHub(t)
	var busy atomic.Int64
	port := fakeAgent(t, &busy)
	var failing atomic.Bool
	failing.Store(true)
	r := start(t, hub, filepath.Join(t.TempDir(), "ledger.db"), port, func(o *Options) {
		o.InformerUnreadyAfter = 300 * time.Millisecond
		o.Kube.(*fake.Clientset).PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
			if failing.Load() {
				return true, nil, &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
			}
			return false, nil, nil
		})
	})
	defer r.stop(t)
	eventually(t, "not ready while the pod watch fails", func() (bool, string) {
		code, rd := readyz(t, r.url)
		return code == http.StatusServiceUnavailable && strings.Contains(rd.Checks["watches"], "pods: list/watch failing since") &&
			strings.Contains(rd.Checks["watches"], "connection refused"), fmt.Sprintf("%d %+v", code, rd)
	})
	if _, rd := readyz(t, r.url); rd.Checks["informers"] != "ok" {
		t.Errorf("caches synced from the list, yet informers = %q", rd.Checks["informers"])
	}
	failing.Store(false)
	eventually(t, "ready once the watch works", func() (bool, string) {
		code, rd := readyz(t, r.url)
		return code == http.StatusOK && rd.Checks["watches"] == "ok", fmt.Sprintf("%d %+v", code, rd)
	})
}
