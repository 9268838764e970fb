package enforce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/notice"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

const ns = "jhub"

const testPolicy = `
grace: 10m
groups:
  students:
    maxServers: 2
    budgets: [{window: 24h, gpuHours: 2}]
  researchers:
    maxGPUs: 2
    maxGPUsPerKind: {gpu: 1}
    maxServers: 3
users:
  admin: {exempt: true, maxGPUs: 0}
`

var (
	t0  = time.Date(2026, 11, 23, 14, 20, 0, 0, time.UTC)
	day = 24 * time.Hour
)

// fakeClock is the injected clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakeSource builds the views from the fake cluster's pods, as the service does from its informers: what
// the loop wrote on a pod is what it reads back.
type fakeSource struct {
	client *fake.Clientset
	policy *quota.Policy
	groups map[string][]string
	hours  map[string]map[time.Duration]map[string]float64
	err    error
	// hideNotices plays an inventory that has not seen the notices yet.
	hideNotices bool
	// countTerminating counts terminating pods in the usage, as they still hold their GPUs.
	countTerminating bool
}

var nodes = map[string]inventory.Node{
	"h100-0": {Name: "h100-0", Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
}

type fakeNodes struct{ err error }

func (f fakeNodes) Nodes() (map[string]inventory.Node, error) { return nodes, f.err }

func (f *fakeSource) Views() ([]View, error) {
	if f.err != nil {
		return nil, f.err
	}
	list, err := f.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	by := map[string]*View{}
	var names []string
	for i := range list.Items {
		p, ok := inventory.PodFrom(&list.Items[i])
		if !ok || p.User == "" {
			continue
		}
		if f.hideNotices {
			p.Notices = nil
		}
		v := by[p.User]
		if v == nil {
			v = &View{Name: p.User, Groups: f.groups[p.User]}
			by[p.User] = v
			names = append(names, p.User)
		}
		v.Pods = append(v.Pods, p)
	}
	slices.Sort(names)
	out := make([]View, 0, len(names))
	for _, n := range names {
		v := by[n]
		v.Effective = f.policy.Effective(v.Name, v.Groups)
		servers := map[string]bool{}
		for _, p := range v.Pods {
			if p.Terminating && !f.countTerminating {
				continue
			}
			servers[p.Server] = true
			v.Usage.Held = append(v.Usage.Held, gpu.Allocations(p.Resources, gpu.Node{Labels: nodes[p.Node].Labels})...)
		}
		v.Usage.Servers = len(servers)
		v.Usage.GPUHours = f.hours[v.Name]
		out = append(out, *v)
	}
	return out, nil
}

// fakeStopper answers StopServer: by default the Hub stops the server at once (204) and the pod goes.
type fakeStopper struct {
	client *fake.Clientset
	calls  []string
	// answer, when set, decides; pending leaves the pod in place.
	answer func(call int) (hubapi.StopResult, error)
}

func (f *fakeStopper) StopServer(ctx context.Context, user, server string, remove bool) (hubapi.StopResult, error) {
	f.calls = append(f.calls, user+"/"+server)
	res := hubapi.StopResult{}
	if f.answer != nil {
		var err error
		if res, err = f.answer(len(f.calls)); err != nil {
			return res, err
		}
	}
	if !res.Pending {
		_ = f.client.CoreV1().Pods(ns).Delete(ctx, podName(user, server), metav1.DeleteOptions{})
	}
	return res, nil
}

func podName(user, server string) string {
	if server == "" {
		return "jupyter-" + user
	}
	return "jupyter-" + user + "--" + server
}

// gpuPod is a running single-user pod of user's server holding resource on node, started at started.
func gpuPod(user, server, res string, n int64, node string, started time.Time) *corev1.Pod {
	name := podName(user, server)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{inventory.AnnotationUser: user, inventory.AnnotationServer: server}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "notebook", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: started}},
	}
	return p
}

type env struct {
	t       *testing.T
	client  *fake.Clientset
	source  *fakeSource
	stopper *fakeStopper
	clock   *fakeClock
	log     *decision.Log
	reg     *prometheus.Registry
	grace   time.Duration
	nodes   fakeNodes
}

func newEnv(t *testing.T, pods ...*corev1.Pod) *env {
	t.Helper()
	var p quota.Policy
	if err := policy.Decode("test.yaml", []byte(testPolicy), &p); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	for _, pod := range pods {
		if _, err := client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clock := &fakeClock{t: t0}
	log, err := decision.NewLog(decision.Options{Service: Service, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &env{
		t: t, client: client, clock: clock, log: log, grace: p.GracePeriod(),
		source: &fakeSource{client: client, policy: &p, groups: map[string][]string{
			"bob": {"students"}, "rita": {"researchers"}, "admin": {"students"}}, hours: map[string]map[time.Duration]map[string]float64{}},
		stopper: &fakeStopper{client: client},
	}
}

// enforcer is a new Enforcer on the environment: a second one plays a restart (or a new leader).
func (e *env) enforcer() *Enforcer {
	e.t.Helper()
	e.reg = prometheus.NewRegistry()
	enf, err := New(Options{Source: e.source, Nodes: &e.nodes, Stopper: e.stopper, Client: e.client, Decisions: e.log,
		Grace: func() time.Duration { return e.grace }, Interval: 30 * time.Second, Now: e.clock.Now, Registerer: e.reg})
	if err != nil {
		e.t.Fatal(err)
	}
	return enf
}

// notices are the gpu-quota notices on the pods, by pod name.
func (e *env) notices() map[string]notice.Notice {
	e.t.Helper()
	list, err := e.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]notice.Notice{}
	for _, p := range list.Items {
		if raw, ok := p.Annotations[notice.Key(Service)]; ok {
			ns, errs := notice.Parse(map[string]string{notice.Key(Service): raw})
			if len(errs) > 0 {
				e.t.Fatal(errs)
			}
			out[p.Name] = ns[0]
		}
	}
	return out
}

// decisions are the recorded decisions, oldest first, as "action user/server reason".
func (e *env) decisions() []string {
	var out []string
	rs := e.log.List(decision.Filter{})
	for i := len(rs) - 1; i >= 0; i-- {
		out = append(out, fmt.Sprintf("%s %s/%s %s", rs[i].Action, rs[i].User, rs[i].Server, rs[i].Reason))
	}
	return out
}

// patches counts the pod patches the loop sent.
func (e *env) patches() int {
	n := 0
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

func (e *env) once(enf *Enforcer, wantErr bool) {
	e.t.Helper()
	err := enf.Once(context.Background())
	if (err != nil) != wantErr {
		e.t.Fatalf("Once: err = %v, want error: %v", err, wantErr)
	}
}

func check(t *testing.T, what string, want, got any) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// bobOver: bob, a student, has used his 2 GPU-hours of the day with one whole H100.
func bobOver(t *testing.T) *env {
	e := newEnv(t, gpuPod("bob", "", gpu.ResourceGPU, 1, "h100-0", t0.Add(-2*time.Hour)))
	e.source.hours["bob"] = map[time.Duration]map[string]float64{day: {"gpu H100-80GB-HBM3": 2}}
	return e
}

func TestNoticeBeforeStop(t *testing.T) {
	e := bobOver(t)
	enf := e.enforcer()
	e.once(enf, false)

	want := notice.Notice{Service: Service, Kind: notice.KindBudget, Reason: "budget_exhausted",
		Message:  "You are over your 24-hour GPU budget (2 of 2 GPU-hours used): your default GPU server stops at 14:30 UTC unless you stop it first.",
		Deadline: t0.Add(10 * time.Minute), CreatedAt: t0, Stops: true, StopsSince: t0}
	check(t, "notices after the first run", map[string]notice.Notice{"jupyter-bob": want}, e.notices())
	check(t, "stops before the deadline", []string(nil), e.stopper.calls)
	check(t, "decisions", []string{"notice bob/ budget_exhausted"}, e.decisions())
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP gpuhub_quota_notices_pending Users with a pending gpu-quota notice: over a budget or limit, their servers stop at its deadline.
# TYPE gpuhub_quota_notices_pending gauge
gpuhub_quota_notices_pending 1
`), "gpuhub_quota_notices_pending"); err != nil {
		t.Error(err)
	}

	// Five minutes on, more hours used: the notice stays as written (no patch for the numbers), no stop.
	e.clock.Add(5 * time.Minute)
	e.source.hours["bob"][day]["gpu H100-80GB-HBM3"] = 2.1
	before := e.patches()
	e.once(enf, false)
	check(t, "patches while nothing changes", before, e.patches())
	check(t, "stops within the grace", []string(nil), e.stopper.calls)

	// One second before the deadline: still nothing; at the deadline: stopped.
	e.clock.Add(5*time.Minute - time.Second)
	e.once(enf, false)
	check(t, "stops a second before the deadline", []string(nil), e.stopper.calls)
	e.clock.Add(time.Second)
	e.once(enf, false)
	check(t, "stops at the deadline", []string{"bob/"}, e.stopper.calls)
	check(t, "decisions", []string{"notice bob/ budget_exhausted", "stop bob/ budget_exhausted"}, e.decisions())
	stop := e.log.List(decision.Filter{Action: decision.ActionStop})[0]
	check(t, "stop numbers", map[string]float64{"budget_gpu_hours": 2, "used_gpu_hours": 2.1, "window_hours": 24}, stop.Numbers)
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP gpuhub_quota_servers_stopped_total GPU servers the enforcement loop asked the Hub to stop (204 or 202), by reason.
# TYPE gpuhub_quota_servers_stopped_total counter
gpuhub_quota_servers_stopped_total{reason="budget_exhausted"} 1
# HELP gpuhub_quota_enforce_runs_total Runs of the enforcement loop by result: ok, partial (a patch or stop failed; retried), unavailable (no trustworthy data: nothing done).
# TYPE gpuhub_quota_enforce_runs_total counter
gpuhub_quota_enforce_runs_total{result="ok"} 4
gpuhub_quota_enforce_runs_total{result="partial"} 0
gpuhub_quota_enforce_runs_total{result="unavailable"} 0
# HELP gpuhub_quota_enforce_last_run_success 1 if the enforcement loop's last run took every action it needed, else 0.
# TYPE gpuhub_quota_enforce_last_run_success gauge
gpuhub_quota_enforce_last_run_success 1
`), "gpuhub_quota_servers_stopped_total", "gpuhub_quota_enforce_runs_total", "gpuhub_quota_enforce_last_run_success"); err != nil {
		t.Error(err)
	}

	// The pod is gone: nothing more to do.
	e.clock.Add(time.Minute)
	e.once(enf, false)
	check(t, "stops once gone", []string{"bob/"}, e.stopper.calls)
}

func TestDeadlineSurvivesRestart(t *testing.T) {
	e := bobOver(t)
	e.once(e.enforcer(), false)
	// A restart (or another replica taking the lease) four minutes later: it reads the deadline off the pod.
	e.clock.Add(4 * time.Minute)
	enf := e.enforcer()
	e.once(enf, false)
	n := e.notices()["jupyter-bob"]
	check(t, "deadline after the restart", t0.Add(10*time.Minute), n.Deadline)
	check(t, "created after the restart", t0, n.CreatedAt)
	e.clock.Add(5 * time.Minute)
	e.once(enf, false)
	check(t, "stops before the first deadline", []string(nil), e.stopper.calls)
	e.clock.Add(time.Minute)
	e.once(enf, false)
	check(t, "stops at the first deadline", []string{"bob/"}, e.stopper.calls)
	check(t, "one notice decision for the two processes", []string{"notice bob/ budget_exhausted", "stop bob/ budget_exhausted"}, e.decisions())
}

func TestGraceRespected(t *testing.T) {
	t.Run("a notice the inventory does not show is not a notice given", func(t *testing.T) {
		e := bobOver(t)
		enf := e.enforcer()
		e.once(enf, false)
		e.source.hideNotices = true
		e.clock.Add(time.Hour)
		e.once(enf, false)
		check(t, "stops", []string(nil), e.stopper.calls)
	})
	t.Run("a longer grace after a reload moves the deadline later", func(t *testing.T) {
		e := bobOver(t)
		enf := e.enforcer()
		e.once(enf, false)
		e.grace = 20 * time.Minute
		e.clock.Add(10 * time.Minute)
		e.once(enf, false)
		check(t, "stops at the old deadline", []string(nil), e.stopper.calls)
		n := e.notices()["jupyter-bob"]
		check(t, "new deadline", t0.Add(20*time.Minute), n.Deadline)
		if !strings.Contains(n.Message, "14:40 UTC") {
			t.Errorf("the message does not say the new deadline: %s", n.Message)
		}
		e.clock.Add(10 * time.Minute)
		e.once(enf, false)
		check(t, "stops at the new deadline", []string{"bob/"}, e.stopper.calls)
	})
	t.Run("a shorter grace never brings a deadline forward", func(t *testing.T) {
		e := bobOver(t)
		enf := e.enforcer()
		e.once(enf, false)
		e.grace = time.Minute
		e.clock.Add(5 * time.Minute)
		e.once(enf, false)
		check(t, "stops before the announced deadline", []string(nil), e.stopper.calls)
		check(t, "deadline", t0.Add(10*time.Minute), e.notices()["jupyter-bob"].Deadline)
	})
	t.Run("a server started after the notice gets its own full grace", func(t *testing.T) {
		e := bobOver(t)
		enf := e.enforcer()
		e.once(enf, false)
		e.clock.Add(8 * time.Minute)
		if _, err := e.client.CoreV1().Pods(ns).Create(context.Background(),
			gpuPod("bob", "late", gpu.ResourceGPU, 1, "h100-0", e.clock.Now()), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.once(enf, false)
		check(t, "late server's deadline", t0.Add(18*time.Minute), e.notices()["jupyter-bob--late"].Deadline)
		e.clock.Add(2 * time.Minute)
		e.once(enf, false)
		check(t, "stops at the first deadline", []string{"bob/"}, e.stopper.calls)
		e.clock.Add(8 * time.Minute)
		e.once(enf, false)
		check(t, "stops at the late server's deadline", []string{"bob/", "bob/late"}, e.stopper.calls)
	})
}

func TestClear(t *testing.T) {
	e := bobOver(t)
	enf := e.enforcer()
	e.once(enf, false)
	// Older use left the window: back within the budget before the deadline.
	e.clock.Add(5 * time.Minute)
	e.source.hours["bob"][day]["gpu H100-80GB-HBM3"] = 1.5
	e.once(enf, false)
	check(t, "notices", map[string]notice.Notice{}, e.notices())
	check(t, "decisions", []string{"notice bob/ budget_exhausted", "clear bob/ within_limits"}, e.decisions())
	e.clock.Add(time.Hour)
	e.once(enf, false)
	check(t, "stops", []string(nil), e.stopper.calls)
	check(t, "no second clear", 2, len(e.decisions()))
}

func TestPending202(t *testing.T) {
	e := bobOver(t)
	e.stopper.answer = func(int) (hubapi.StopResult, error) { return hubapi.StopResult{Pending: true}, nil }
	enf := e.enforcer()
	e.once(enf, false)
	e.clock.Add(10 * time.Minute)
	e.once(enf, false)
	check(t, "first stop", []string{"bob/"}, e.stopper.calls)
	for range 9 { // the pod is still there while the Hub stops it: not sent again
		e.clock.Add(30 * time.Second)
		e.once(enf, false)
	}
	check(t, "stops while pending", []string{"bob/"}, e.stopper.calls)
	e.clock.Add(30 * time.Second) // five minutes: the Hub may have lost it, send again
	e.once(enf, false)
	check(t, "stop after the pending timeout", []string{"bob/", "bob/"}, e.stopper.calls)
	rec := e.log.List(decision.Filter{Action: decision.ActionStop})
	check(t, "pending recorded", 1.0, rec[0].Numbers["pending"])
}

func TestRetryAfterError(t *testing.T) {
	e := bobOver(t)
	e.stopper.answer = func(call int) (hubapi.StopResult, error) {
		if call <= 2 {
			return hubapi.StopResult{}, errors.New("hub: 503 Service Unavailable")
		}
		return hubapi.StopResult{}, nil
	}
	enf := e.enforcer()
	e.once(enf, false)
	e.clock.Add(10 * time.Minute)
	e.once(enf, true) // first failure: retried after 30s
	e.clock.Add(30 * time.Second)
	e.once(enf, true) // second failure: retried after 60s
	e.clock.Add(30 * time.Second)
	e.once(enf, false) // waiting out the backoff: not sent
	check(t, "calls during the backoff", []string{"bob/", "bob/"}, e.stopper.calls)
	e.clock.Add(30 * time.Second)
	e.once(enf, false)
	check(t, "calls", []string{"bob/", "bob/", "bob/"}, e.stopper.calls)
	check(t, "decisions", []string{"notice bob/ budget_exhausted", "stop bob/ budget_exhausted"}, e.decisions())
	if got := testutil.ToFloat64(enf.m.runs.WithLabelValues(ResultPartial)); got != 2 {
		t.Errorf("partial runs = %v, want 2", got)
	}
}

func TestUnavailableDataNoAction(t *testing.T) {
	for name, tc := range map[string]struct {
		source error
		nodes  error
	}{
		"views": {source: errors.New("inventory not synced")},
		"nodes": {nodes: errors.New("inventory not synced")},
	} {
		t.Run(name, func(t *testing.T) {
			e := bobOver(t)
			enf := e.enforcer()
			e.once(enf, false)
			e.source.err, e.nodes.err = tc.source, tc.nodes
			e.source.hours["bob"][day]["gpu H100-80GB-HBM3"] = 0 // would clear, were it trusted
			before := e.patches()
			e.clock.Add(time.Hour)
			e.once(enf, true)
			check(t, "patches", before, e.patches())
			check(t, "stops", []string(nil), e.stopper.calls)
			if got := testutil.ToFloat64(enf.m.runs.WithLabelValues(ResultUnavailable)); got != 1 {
				t.Errorf("unavailable runs = %v, want 1", got)
			}
		})
	}
	t.Run("an unreadable budget window is never over", func(t *testing.T) {
		e := bobOver(t)
		e.source.hours["bob"] = nil
		e.once(e.enforcer(), false)
		check(t, "notices", map[string]notice.Notice{}, e.notices())
	})
	t.Run("nor is a notice withdrawn while the window cannot be read", func(t *testing.T) {
		e := bobOver(t)
		enf := e.enforcer()
		e.once(enf, false)
		e.source.hours["bob"] = nil
		e.clock.Add(time.Hour)
		e.once(enf, false)
		check(t, "stops", []string(nil), e.stopper.calls)
		check(t, "notice kept", t0.Add(10*time.Minute), e.notices()["jupyter-bob"].Deadline)
		check(t, "decisions", []string{"notice bob/ budget_exhausted"}, e.decisions())
	})
}

func TestLimitsStopOnlyWhatIsNeededNewestFirst(t *testing.T) {
	// rita, a researcher, runs three H100 servers: an admin lowered researchers to one whole GPU (and 2 in
	// total). The two newest stop; the oldest is kept.
	e := newEnv(t,
		gpuPod("rita", "a", gpu.ResourceGPU, 1, "h100-0", t0.Add(-3*time.Hour)),
		gpuPod("rita", "b", gpu.ResourceGPU, 1, "h100-0", t0.Add(-2*time.Hour)),
		gpuPod("rita", "c", gpu.ResourceGPU, 1, "h100-0", t0.Add(-1*time.Hour)))
	e.source.hours["rita"] = map[time.Duration]map[string]float64{}
	enf := e.enforcer()
	e.once(enf, false)
	ns := e.notices()
	check(t, "noticed pods", 3, len(ns))
	check(t, "message", `You use 3 GPUs (three whole H100s), more than the 2 GPUs researchers may use at a time: your GPU servers "c" and "b" stop at 14:30 UTC unless you stop them or other GPU servers first.`,
		ns["jupyter-rita--a"].Message)
	check(t, "kind", notice.KindLimit, ns["jupyter-rita--a"].Kind)
	e.clock.Add(10 * time.Minute)
	e.once(enf, false)
	check(t, "stopped", []string{"rita/c", "rita/b"}, sorted(e.stopper.calls, true))
	e.clock.Add(30 * time.Second)
	e.once(enf, false)
	check(t, "the kept server's notice is withdrawn", map[string]notice.Notice{}, e.notices())
	check(t, "decisions", []string{
		"notice rita/c max_gpus", "notice rita/b max_gpus", "notice rita/a max_gpus",
		"stop rita/c max_gpus", "stop rita/b max_gpus", "clear rita/a within_limits"}, e.decisions())
}

func TestServerLimit(t *testing.T) {
	// bob runs two MIG servers; students were lowered to one server.
	e := newEnv(t,
		gpuPod("bob", "old", gpu.MIGResource("1g.5gb"), 1, "a100-0", t0.Add(-3*time.Hour)),
		gpuPod("bob", "new", gpu.MIGResource("1g.5gb"), 1, "a100-0", t0.Add(-1*time.Hour)))
	e.source.hours["bob"] = map[time.Duration]map[string]float64{day: {}}
	e.source.policy.Groups["students"] = quota.Entry{MaxServers: ptr(quota.Limit(1))}
	enf := e.enforcer()
	e.once(enf, false)
	e.clock.Add(10 * time.Minute)
	e.once(enf, false)
	check(t, "stopped", []string{"bob/new"}, e.stopper.calls)
}

func TestExemptNeverActed(t *testing.T) {
	pod := gpuPod("admin", "", gpu.ResourceGPU, 1, "h100-0", t0.Add(-time.Hour))
	// A notice from before the admin was made exempt.
	pod.Annotations[notice.Key(Service)] = `{"service":"gpu-quota","kind":"limit","reason":"max_gpus","message":"…","deadline":"2026-11-23T14:25:00Z","createdAt":"2026-11-23T14:15:00Z"}`
	e := newEnv(t, pod)
	e.source.hours["admin"] = map[time.Duration]map[string]float64{day: {"gpu H100-80GB-HBM3": 100}}
	enf := e.enforcer()
	e.clock.Add(time.Hour)
	e.once(enf, false)
	check(t, "stops", []string(nil), e.stopper.calls)
	check(t, "notices", map[string]notice.Notice{}, e.notices())
	check(t, "decisions", []string{"clear admin/ exempt"}, e.decisions())
}

func TestTerminatingPodsAreGoing(t *testing.T) {
	// Over the server limit only because a stopped server's pod is still terminating: nothing to do.
	old := gpuPod("bob", "old", gpu.MIGResource("1g.5gb"), 1, "a100-0", t0.Add(-3*time.Hour))
	old.DeletionTimestamp = &metav1.Time{Time: t0}
	old.Finalizers = []string{"test"}
	e := newEnv(t, old, gpuPod("bob", "new", gpu.MIGResource("1g.5gb"), 1, "a100-0", t0.Add(-time.Hour)))
	e.source.hours["bob"] = map[time.Duration]map[string]float64{day: {}}
	e.source.policy.Groups["students"] = quota.Entry{MaxServers: ptr(quota.Limit(1))}
	// The source counts the terminating pod (as an inventory that still holds its GPUs would).
	e.source.countTerminating = true
	enf := e.enforcer()
	e.once(enf, false)
	check(t, "notices", map[string]notice.Notice{}, e.notices())
}

func TestPatchErrorIsPartial(t *testing.T) {
	e := bobOver(t)
	e.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	enf := e.enforcer()
	e.once(enf, true)
	e.clock.Add(time.Hour)
	e.once(enf, true)
	check(t, "stops without a notice", []string(nil), e.stopper.calls)
}

func ptr[T any](v T) *T { return &v }

func sorted(s []string, desc bool) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	if desc {
		slices.Reverse(out)
	}
	return out
}

// TestEscalationGivesTheNewlyNamedServerAFullGrace: bob over the server limit hears that "new" stops; 9 minutes
// later his budget runs out too, which stops every server: "old", named only now, still gets the whole grace
// (review finding: it was stopped with "new", a minute after it was first named).
func TestEscalationGivesTheNewlyNamedServerAFullGrace(t *testing.T) {
	e := newEnv(t,
		gpuPod("bob", "old", gpu.MIGResource("1g.5gb"), 1, "a100-0", t0.Add(-3*time.Hour)),
		gpuPod("bob", "new", gpu.MIGResource("1g.5gb"), 1, "a100-0", t0.Add(-1*time.Hour)))
	e.source.hours["bob"] = map[time.Duration]map[string]float64{day: {}}
	e.source.policy.Groups["students"] = quota.Entry{MaxServers: ptr(quota.Limit(1)),
		Budgets: []quota.Budget{{Window: policy.Duration(day), GPUHours: ptr(quota.Limit(2))}}}
	enf := e.enforcer()
	e.once(enf, false)
	check(t, "old is not announced to stop", false, e.notices()["jupyter-bob--old"].Stops)
	e.clock.Add(9 * time.Minute)
	e.source.hours["bob"] = map[time.Duration]map[string]float64{day: {"mig A100-SXM4-40GB 1g.5gb": 2}}
	e.once(enf, false)
	old := e.notices()["jupyter-bob--old"]
	check(t, "old announced now", true, old.Stops)
	check(t, "old's deadline", t0.Add(19*time.Minute), old.Deadline)
	e.clock.Add(time.Minute + time.Second) // new's deadline passed
	e.once(enf, false)
	check(t, "stopped at new's deadline", []string{"bob/new"}, e.stopper.calls)
	e.clock.Add(9 * time.Minute) // old's full grace
	e.once(enf, false)
	check(t, "stopped after old's grace", []string{"bob/new", "bob/old"}, e.stopper.calls)
}
