package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

const goodPolicy = `# campus
default:
  maxGPUs: 1
  maxServers: 2
groups:
  students:
    maxGPUs: 3/7
    maxServers: 1
    allowedKinds: [mig, shared]
    budgets:
      - {window: 24h, gpuHours: 2}
  racers:
    maxGPUs: unlimited
    maxServers: 7
`

const prefix = "/services/gpu-quota/"

// node is a Ready node offering n units of res.
func node(name string, labels map[string]string, res string, n int64) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func gpuPod(name, user, nodeName, res string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{"hub.jupyter.org/username": user, "hub.jupyter.org/servername": ""}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "notebook",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(1, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func objects() []runtime.Object {
	return []runtime.Object{
		node("gpu-h100", map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "nvidia.com/gpu", 2),
		node("gpu-a100", map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed"}, "nvidia.com/mig-1g.5gb", 7),
		node("gpu-t4", map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.sharing-strategy": "time-slicing",
			"nvidia.com/gpu.replicas": "4"}, "nvidia.com/gpu.shared", 400),
		gpuPod("jupyter-carol", "carol", "gpu-h100", "nvidia.com/gpu"),
	}
}

// usageAPI is a fake usage API's bulk GPU-hours endpoint.
type usageAPI struct {
	mu    sync.Mutex
	hours map[string]map[string]map[string]float64
	calls int
}

func (u *usageAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls++
	if r.Header.Get("Authorization") != "token quota-token" {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	out := map[string]any{"asOf": time.Now().UTC(), "windows": map[string]any{}}
	for _, win := range strings.Split(r.URL.Query().Get("windows"), ",") {
		h := u.hours[win]
		if h == nil {
			h = map[string]map[string]float64{}
		}
		out["windows"].(map[string]any)[win] = h
	}
	_ = json.NewEncoder(w).Encode(out)
}

type running struct {
	url      string
	registry *prometheus.Registry
	engine   *admit.Engine
	hub      *hubapitest.Hub
	kube     *fake.Clientset
	kubeOps  *atomic.Int64
	usage    *usageAPI
	policy   string
	reload   chan struct{}
	polls    atomic.Int64 // policy polls Run's watcher has taken
	logs     *logtest.Buffer
	cancel   context.CancelFunc
	done     chan error
}

func start(t *testing.T, opts ...func(*Options)) *running {
	t.Helper()
	r := &running{hub: hubapitest.New(t), kube: fake.NewClientset(objects()...), kubeOps: &atomic.Int64{},
		usage: &usageAPI{hours: map[string]map[string]map[string]float64{}}, reload: make(chan struct{}, 1), logs: &logtest.Buffer{}}
	r.kube.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		r.kubeOps.Add(1)
		return false, nil, nil
	})
	r.kube.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		r.kubeOps.Add(1)
		return false, nil, nil
	})
	r.hub.AddUser(hubapi.User{Name: "bob", Groups: []string{"students"}})
	r.hub.AddUser(hubapi.User{Name: "carol", Groups: []string{"researchers"}})
	r.hub.AddUser(hubapi.User{Name: "alice", Admin: true})
	r.hub.AddToken("bob-token", "bob")
	r.hub.AddToken("alice-token", "alice")
	r.hub.AddToken("quota-token", "gpu-quota", "list:users", "read:users:name", "read:users:groups", "read:servers", "delete:servers")
	usageSrv := httptest.NewServer(r.usage)
	t.Cleanup(usageSrv.Close)
	r.policy = filepath.Join(t.TempDir(), "policy.yaml")
	if err := replaceFile(r.policy, []byte(goodPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.url, r.cancel, r.done = "http://"+ln.Addr().String(), cancel, make(chan error, 1)
	served := make(chan struct{})
	// The policy is polled every 20 ms by a ticker of the test's: each poll the watcher takes is counted.
	ticks := make(chan time.Time)
	go func() {
		for {
			select {
			case ticks <- time.Now():
				r.polls.Add(1)
			case <-ctx.Done():
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	o := Options{
		Logger: slog.New(slog.NewTextHandler(r.logs, nil)), Registry: prometheus.NewRegistry(), Listener: ln, Prefix: prefix,
		PolicyPath: r.policy, PolicyTicks: ticks, Reload: r.reload,
		Kube: r.kube, Namespace: "jhub", Hub: r.hub.Client("quota-token"), HubRefresh: time.Hour, Token: "quota-token",
		Auth: hubauth.New(hubauth.Options{Hub: r.hub.Client("quota-token")}).Middleware, ReaderServices: []string{"gpu-usage"},
		UsageURL: usageSrv.URL + "/services/gpu-usage/", UsageRefresh: time.Hour, ReservationTTL: time.Minute,
		OnServing: func(_ *server.Server, e *admit.Engine) { r.engine = e; close(served) },
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
	t.Cleanup(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
	r.waitReady(t)
	return r
}

func (r *running) readyz(t *testing.T) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(r.url + "/readyz") //nolint:noctx // a test
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Checks map[string]string `json:"checks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("readyz answer %d: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, body.Checks
}

func (r *running) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, checks := r.readyz(t)
		if code == 200 && checks["usage"] == "ok" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 10 s: %d %v", code, checks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *running) admit(t testing.TB, client *http.Client, body string) (int, admit.Result) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, r.url+prefix+"api/v1/admit", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token quota-token")
	resp, err := client.Do(req)
	if err != nil {
		t.Error(err)
		return 0, admit.Result{}
	}
	defer func() { _ = resp.Body.Close() }()
	var res admit.Result
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = json.Unmarshal(data, &res)
	}
	if err != nil { // Errorf: some callers run in goroutines of their own
		t.Errorf("admit answer %d: %v\n%s", resp.StatusCode, err, data)
	}
	return resp.StatusCode, res
}

func TestAdmitOverHTTP(t *testing.T) {
	r := start(t)
	code, res := r.admit(t, http.DefaultClient, `{"user":"bob","resources":{"nvidia.com/mig-1g.5gb":1},
		"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-A100-SXM4-40GB","nvidia.com/mig.strategy":"mixed"}}`)
	if code != 200 || !res.Allow || res.Reservation == "" || res.OnUnavailable != "open" {
		t.Fatalf("bob's first MIG slice: %d %+v", code, res)
	}
	_, res = r.admit(t, http.DefaultClient, `{"user":"bob","server":"two","resources":{"nvidia.com/gpu.shared":1},
		"nodeSelector":{"nvidia.com/gpu.product":"Tesla-T4-SHARED"}}`)
	if res.Allow || res.Reason != "max_servers" || !strings.Contains(res.Message, "at most 1 GPU server") {
		t.Errorf("bob's second server: %+v", res)
	}
	// carol holds one H100; dave (no groups: default, 1 GPU) takes the other; then none is free for erin.
	_, res = r.admit(t, http.DefaultClient, `{"user":"dave","groups":[],"resources":{"nvidia.com/gpu":1},"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"}}`)
	if !res.Allow {
		t.Errorf("dave: %+v", res)
	}
	_, res = r.admit(t, http.DefaultClient, `{"user":"erin","groups":[],"resources":{"nvidia.com/gpu":1},"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"}}`)
	if res.Reason != "none_free" || !strings.HasPrefix(res.Message, "No H100 is free right now.") || len(res.CanTake) != 2 {
		t.Errorf("erin: %+v", res)
	}

	// The panel's quota for bob (the reservation counts) and the decisions for an admin.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, r.url+prefix+"api/v1/users/bob/quota", nil)
	req.Header.Set("Authorization", "token bob-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var q admit.QuotaStatus
	err = json.NewDecoder(resp.Body).Decode(&q)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("bob's quota answer %d: %v", resp.StatusCode, err)
	}
	if q.Concurrent.Servers != 1 || len(q.Budgets) != 1 || q.Budgets[0].Status != "ok" {
		t.Errorf("bob's quota %+v", q)
	}

	if err := testutil.GatherAndCompare(r.registry, strings.NewReader(`
# HELP gpuhub_quota_decisions_total Decisions by action (admit, deny, notice, stop, clear) and reason.
# TYPE gpuhub_quota_decisions_total counter
gpuhub_quota_decisions_total{action="admit",reason="ok"} 2
gpuhub_quota_decisions_total{action="deny",reason="max_servers"} 1
gpuhub_quota_decisions_total{action="deny",reason="none_free"} 1
# HELP gpuhub_quota_reservations GPU reservations of admitted servers whose pod has not appeared yet (per replica).
# TYPE gpuhub_quota_reservations gauge
gpuhub_quota_reservations 2
`), "gpuhub_quota_decisions_total", "gpuhub_quota_reservations"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(r.registry, "gpuhub_quota_admit_duration_seconds"); n != 1 {
		t.Errorf("admit duration histogram: %d series", n)
	}
}

// TestDecisionLinesFlushedAtStop: a decision's log line waits DecisionLogDelay (off the answer's path) and is
// written when the service stops, before Run returns.
func TestDecisionLinesFlushedAtStop(t *testing.T) {
	r := start(t, func(o *Options) { o.DecisionLogDelay = time.Hour })
	if code, res := r.admit(t, http.DefaultClient, `{"user":"bob","server":"two","groups":["students"],"resources":{}}`); code != 200 || res.DecisionID == "" {
		t.Fatalf("admit: %d %+v", code, res)
	}
	if strings.Contains(r.logs.String(), "msg=decision") {
		t.Errorf("the line was written before the delay:\n%s", r.logs)
	}
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.done <- nil // for start's cleanup
	if !strings.Contains(r.logs.String(), "msg=decision") || !strings.Contains(r.logs.String(), "user=bob server=two") {
		t.Errorf("no decision line after Run returned:\n%s", r.logs)
	}
}

// TestNoReadsPerDecision: once ready, decisions read nothing from the API server and nothing from the Hub.
func TestNoReadsPerDecision(t *testing.T) {
	r := start(t)
	kube, hub := r.kubeOps.Load(), r.hub.TotalRequests()
	for i := range 100 {
		r.admit(t, http.DefaultClient, fmt.Sprintf(`{"user":"bob","server":"s%d","resources":{"nvidia.com/mig-1g.5gb":1},
			"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-A100-SXM4-40GB"}}`, i))
		r.admit(t, http.DefaultClient, `{"user":"nobody-known","resources":{"nvidia.com/gpu":1}}`)
	}
	if n := r.kubeOps.Load() - kube; n != 0 {
		t.Errorf("%d API-server requests during 200 decisions, want 0", n)
	}
	if n := r.hub.TotalRequests() - hub; n != 0 {
		t.Errorf("%d Hub requests during 200 decisions, want 0", n)
	}
}

// TestConcurrentAdmitsOverHTTP: 1,000 concurrent admissions over HTTP against a limit of 7 servers admit
// exactly 7.
func TestConcurrentAdmitsOverHTTP(t *testing.T) {
	raceSevenOf1000(t, start(t))
}

// raceSevenOf1000 sends 1,000 admissions at once against the racers' limit of 7 servers, request i to
// replicas[i%len(replicas)], and wants exactly 7 admitted and 993 refused with max_servers.
func raceSevenOf1000(t *testing.T, replicas ...*running) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var admitted, refused atomic.Int64
	begin := make(chan struct{})
	for i := range 1000 {
		to := replicas[i%len(replicas)]
		wg.Go(func() {
			<-begin
			code, res := to.admit(t, client, fmt.Sprintf(`{"user":"racer","server":"s%d","groups":["racers"],
				"resources":{"nvidia.com/gpu.shared":1},"nodeSelector":{"nvidia.com/gpu.product":"Tesla-T4-SHARED"}}`, i))
			switch {
			case code != 200:
				t.Errorf("status %d", code)
			case res.Allow:
				admitted.Add(1)
			case res.Reason == "max_servers":
				refused.Add(1)
			default:
				t.Errorf("unexpected %+v", res)
			}
		})
	}
	close(begin)
	wg.Wait()
	if admitted.Load() != 7 || refused.Load() != 993 {
		t.Errorf("%d admitted and %d refused of 1,000, want exactly 7 and 993", admitted.Load(), refused.Load())
	}
}

func TestPolicyReload(t *testing.T) {
	r := start(t)
	gauge := func() float64 {
		return testutil.ToFloat64(mustCollector(t, r.registry, "gpuhub_quota_policy_last_reload_success"))
	}
	// A bad file: the last good policy stays, the error is logged with file:line:column, counted and in /readyz.
	bad := strings.Replace(goodPolicy, "maxServers: 1", "maxServer: 1", 1)
	if err := replaceFile(r.policy, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the bad reload is noticed", func() bool { return gauge() == 0 })
	code, checks := r.readyz(t)
	wantPlace := r.policy + `:8:5: groups.students: unknown key "maxServer" (did you mean "maxServers"?)`
	if code != 200 || !strings.Contains(checks["policy-reload"], wantPlace) {
		t.Errorf("readyz %d %v, want 200 (the last good policy serves) with %q", code, checks, wantPlace)
	}
	logged := r.policy + ":8:5: groups.students: unknown key" // the text handler quotes the rest
	// The gauge is set before the line is logged: wait for the line too (a loaded machine can part them).
	eventually(t, "the bad reload is logged", func() bool { return strings.Contains(r.logs.String(), logged) })
	_, res := r.admit(t, http.DefaultClient, `{"user":"bob","resources":{"nvidia.com/gpu":1}}`)
	if res.Reason != "kind_not_allowed" {
		t.Errorf("with the last good policy: %+v", res)
	}
	// Three more polls of the same bad file (the third taken once the second was done): reported once.
	polled := r.polls.Load()
	eventually(t, "three more polls of the bad file", func() bool { return r.polls.Load() >= polled+3 })
	if n := strings.Count(r.logs.String(), logged); n != 1 {
		t.Errorf("the bad file was reported %d times, want once", n)
	}

	// A good file: in use at once; students may now use whole GPUs.
	good := strings.Replace(goodPolicy, "allowedKinds: [mig, shared]", "allowedKinds: [gpu, mig, shared]", 1)
	if err := replaceFile(r.policy, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the good reload", func() bool { return gauge() == 1 })
	if _, checks := r.readyz(t); checks["policy-reload"] != "ok" {
		t.Errorf("readyz after a good reload: %v", checks)
	}
	_, res = r.admit(t, http.DefaultClient, `{"user":"bob","server":"x","resources":{"nvidia.com/gpu":1},"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"}}`)
	if res.Reason == "kind_not_allowed" {
		t.Errorf("after the reload: %+v", res)
	}

	// SIGHUP rereads the file even when unchanged.
	r.reload <- struct{}{}
	eventually(t, "SIGHUP reread", func() bool { return strings.Contains(r.logs.String(), "policy reread: unchanged") })
	if err := testutil.GatherAndCompare(r.registry, strings.NewReader(`
# HELP gpuhub_quota_policy_reloads_total Reload attempts of the policy file (it changed, or SIGHUP) by result: success, failure (the last good one stays in use).
# TYPE gpuhub_quota_policy_reloads_total counter
gpuhub_quota_policy_reloads_total{result="failure"} 1
gpuhub_quota_policy_reloads_total{result="success"} 2
`), "gpuhub_quota_policy_reloads_total"); err != nil {
		t.Error(err)
	}
}

func TestBadPolicyAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("default:\n  maxGPUs: lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hub := hubapitest.New(t)
	err := Run(context.Background(), Options{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		Kube: fake.NewClientset(), Hub: hub.Client("t"), Auth: func(h http.Handler) http.Handler { return h },
		PolicyPath: path, Token: "t"})
	var pe *PolicyError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), path+":2:12: default.maxGPUs: expected a number") {
		t.Errorf("err %v, want a PolicyError with file:line:column", err)
	}
}

func TestWhileLeader(t *testing.T) {
	led := make(chan Leading, 1)
	r := start(t, func(o *Options) {
		o.Identity, o.LeaseDuration, o.RenewDeadline, o.LeaseRetryPeriod = "gpu-quota-0", 2*time.Second, 1500*time.Millisecond, 50*time.Millisecond
		o.EnforceInterval = 30 * time.Second
		o.WhileLeader = func(ctx context.Context, l Leading) {
			led <- l
			<-ctx.Done()
		}
	})
	select {
	case l := <-led:
		if l.Engine != r.engine || l.Interval != 30*time.Second || l.Namespace != "jhub" || l.Policy.Current() == nil {
			t.Errorf("leading with %+v", l)
		}
		views, err := l.Engine.Views()
		if err != nil || len(views) != 1 || views[0].Name != "carol" {
			t.Errorf("views %v %v", views, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never led")
	}
	if _, err := r.kube.CoordinationV1().Leases("jhub").Get(context.Background(), "gpu-quota", metav1.GetOptions{}); err != nil {
		t.Errorf("lease: %v", err)
	}
}

// eventually waits up to 30 s: on a loaded machine (make test runs packages in parallel, with -race) a missed lease
// renewal costs the waitlist's leader up to a lease duration (15 s) before it acts again.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mustCollector finds one gauge by name in the registry.
func mustCollector(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "", nil, nil), prometheus.GaugeValue, m.GetGauge().GetValue())
				}
			}
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// replaceFile writes data to path as a ConfigMap update does, in one step (a new file renamed over the old): a
// watcher polling meanwhile never reads a half-written file.
func replaceFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
