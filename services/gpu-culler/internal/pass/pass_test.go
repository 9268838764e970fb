package pass

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices/noticestest"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/stops"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/telemetry"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

const policyYAML = `
every: 1m
staleAfter: 2m
gpu:
  idlePeriod: 30m
  warn: 10m
  snooze: 20m
  maxSnoozes: 1
cpu:
  idlePeriod: 1h
  warn: 10m
  action: stop-and-remove
`

var now = time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)

type fakeHub struct {
	mu      sync.Mutex
	users   []hubapi.User
	listErr error
	pending bool // StopServer answers 202
	stopped []string
	gets    []string
	lists   int
	// beforeStop, if set, runs before the nth stop (from 1) is taken.
	beforeStop func(n int)
}

func (h *fakeHub) Users(context.Context, hubapi.ListUsersOptions) iter.Seq2[hubapi.User, error] {
	h.lists++
	return func(yield func(hubapi.User, error) bool) {
		for _, u := range h.users {
			if !yield(u, nil) {
				return
			}
		}
		if h.listErr != nil {
			yield(hubapi.User{}, h.listErr)
		}
	}
}

func (h *fakeHub) GetUser(_ context.Context, name string) (*hubapi.User, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gets = append(h.gets, name)
	for _, u := range h.users {
		if u.Name == name {
			return &u, nil
		}
	}
	return nil, &hubapi.APIError{StatusCode: 404}
}

func (h *fakeHub) StopServer(_ context.Context, user, server string, remove bool) (hubapi.StopResult, error) {
	if h.beforeStop != nil {
		h.mu.Lock()
		n := len(h.stopped) + 1
		h.mu.Unlock()
		h.beforeStop(n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := user + "/" + server
	if remove {
		s += " remove"
	}
	h.stopped = append(h.stopped, s)
	return hubapi.StopResult{Pending: h.pending}, nil
}

type fakePods struct {
	pods      map[string]*corev1.Pod
	notSynced bool
}

func (p fakePods) Pod(user, server string) (*corev1.Pod, bool) {
	pod, ok := p.pods[user+"/"+server]
	return pod, ok
}
func (p fakePods) Synced(context.Context) error {
	if p.notSynced {
		return errors.New("the single-user pods are not listed yet")
	}
	return nil
}

func (p fakePods) Servers() map[[2]string]*corev1.Pod {
	out := map[[2]string]*corev1.Pod{}
	for _, pod := range p.pods {
		out[[2]string{pod.Annotations["hub.jupyter.org/username"], pod.Annotations["hub.jupyter.org/servername"]}] = pod
	}
	return out
}

type fakeTelemetry struct {
	usage   decide.Usage
	servers map[string]decide.Telemetry
	info    map[string]telemetry.Info
}

func (f fakeTelemetry) Server(user, server string, _ time.Duration) (decide.Telemetry, telemetry.Info) {
	return f.servers[user+"/"+server], f.info[user+"/"+server]
}
func (f fakeTelemetry) Info(user, server string) telemetry.Info { return f.info[user+"/"+server] }
func (f fakeTelemetry) Usage() decide.Usage                     { return f.usage }

type fakeStops struct {
	mu       sync.Mutex
	writes   int // Record calls with stops
	recorded []stops.Stop
	last     map[string]stops.Stop
	cleared  []string
	// honourCtx fails a Record whose context is done, as the Kubernetes client does.
	honourCtx bool
}

func (s *fakeStops) Last(user string) (stops.Stop, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.last[user]
	return st, ok
}
func (s *fakeStops) Record(ctx context.Context, sts ...stops.Stop) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.honourCtx && ctx.Err() != nil {
		return ctx.Err()
	}
	s.recorded = append(s.recorded, sts...)
	if len(sts) > 0 {
		s.writes++
	}
	return nil
}
func (s *fakeStops) Clear(_ context.Context, user, server string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleared = append(s.cleared, user+"/"+server)
	return nil
}

// idleFor is telemetry of a GPU at 0 % since now-d, sampled every 10 s.
func idleFor(d time.Duration) decide.Telemetry {
	t := decide.Telemetry{Present: true}
	for at := now.Add(-d); !at.After(now); at = at.Add(10 * time.Second) {
		t.Samples = append(t.Samples, decide.Sample{At: at, Utilization: 0, MemoryBytes: 1 << 30})
	}
	return t
}

func busy() decide.Telemetry {
	return decide.Telemetry{Present: true, Samples: []decide.Sample{{At: now.Add(-10 * time.Second), Utilization: 90, MemoryBytes: 8 << 30}}}
}

func pod(user, server string, gpus bool, n *decide.Notice, rule policy.Rule) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "jupyter-" + user + server, Namespace: "jhub", ResourceVersion: "1",
		Labels:      map[string]string{"component": "singleuser-server"},
		Annotations: map[string]string{"hub.jupyter.org/username": user, "hub.jupyter.org/servername": server}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook"}}}}
	if gpus {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	}
	if n != nil {
		b, _ := json.Marshal(notices.Notice(n.Reason, "your GPU is idle", n.Deadline, n.Since, n.Snoozes, rule))
		p.Annotations[notices.Key] = string(b)
	}
	return p
}

func ready(user string, servers map[string]hubapi.Server) hubapi.User {
	return hubapi.User{Name: user, Servers: servers}
}

func server(name string, started, lastActivity time.Time) hubapi.Server {
	return hubapi.Server{Name: name, Ready: true, Started: &started, LastActivity: &lastActivity}
}

func TestPass(t *testing.T) {
	var pol policy.Policy
	if err := ipolicy.Decode("test.yaml", []byte(policyYAML), &pol); err != nil {
		t.Fatal(err)
	}
	gpuRule := pol.Rule(gpu.KindGPU, "")
	gpuInfo := telemetry.Info{Known: true, Kind: gpu.KindGPU, AllocatedGPUs: 1}
	reachable := decide.Usage{Reachable: true, At: now.Add(-5 * time.Second)}
	started := now.Add(-3 * time.Hour)
	type want struct {
		Decisions map[string]int
		Stopped   []string
		Recorded  int    // stops kept for the user
		Notice    string // the notice's reason on alice's pod after the pass, "" none
		Err       bool
		Actions   []string // decision records as action/reason
	}
	tests := []struct {
		name     string
		hub      *fakeHub
		pod      *corev1.Pod
		tel      decide.Telemetry
		info     telemetry.Info
		usage    decide.Usage
		conflict bool
		want     want
	}{
		{
			name: "GPU idle past its period: warned, the notice written",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			pod:  pod("alice", "", true, nil, gpuRule), tel: idleFor(45 * time.Minute), info: gpuInfo, usage: reachable,
			want: want{Decisions: map[string]int{"warn/idle": 1}, Notice: "idle", Actions: []string{"notice/idle"}},
		},
		{
			name: "the deadline shown has passed: stopped through the Hub and kept for the user",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			pod:  pod("alice", "", true, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute), Deadline: now.Add(-time.Minute)}, gpuRule),
			tel:  idleFor(50 * time.Minute), info: gpuInfo, usage: reachable,
			want: want{Decisions: map[string]int{"stop/idle": 1}, Stopped: []string{"alice/"}, Recorded: 1, Notice: "idle", Actions: []string{"stop/idle"}},
		},
		{
			name: "202: counted as stopped once; the Hub goes on stopping it",
			hub:  &fakeHub{pending: true, users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			pod:  pod("alice", "", true, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute), Deadline: now.Add(-time.Minute)}, gpuRule),
			tel:  idleFor(50 * time.Minute), info: gpuInfo, usage: reachable,
			want: want{Decisions: map[string]int{"stop/idle": 1}, Stopped: []string{"alice/"}, Recorded: 1, Notice: "idle", Actions: []string{"stop/idle"}},
		},
		{
			name: "stale telemetry: left alone and said so, even past the deadline",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			pod:  pod("alice", "", true, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute), Deadline: now.Add(-time.Minute)}, gpuRule),
			tel:  decide.Telemetry{Present: true, Samples: []decide.Sample{{At: now.Add(-10 * time.Minute)}}},
			info: telemetry.Info{Known: true, Kind: gpu.KindGPU, Stale: true, StaleReason: "the agent on gpu-0 has not answered for 10 min"}, usage: reachable,
			want: want{Decisions: map[string]int{"skip/telemetry_stale": 1}, Notice: "idle", Actions: []string{"skip/telemetry_stale"}},
		},
		{
			name: "usage API unreachable: left alone",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			pod:  pod("alice", "", true, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute), Deadline: now.Add(-time.Minute)}, gpuRule),
			tel:  idleFor(50 * time.Minute), info: gpuInfo, usage: decide.Usage{},
			want: want{Decisions: map[string]int{"skip/usage_unreachable": 1}, Notice: "idle", Actions: []string{"skip/usage_unreachable"}},
		},
		{
			name:  "the Hub's list fails midway: nobody is acted on (a CPU-only server: idle by the Hub's word)",
			hub:   &fakeHub{listErr: errors.New("503"), users: []hubapi.User{ready("alice", map[string]hubapi.Server{"lab": server("lab", started, now.Add(-2*time.Hour))})}},
			pod:   pod("alice", "lab", false, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute), Deadline: now.Add(-time.Minute)}, pol.Rule("", "")),
			usage: reachable,
			want:  want{Decisions: map[string]int{}, Notice: "idle", Err: true},
		},
		{
			name: "busy again: the notice is withdrawn",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			pod:  pod("alice", "", true, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-5 * time.Minute), Deadline: now.Add(5 * time.Minute)}, gpuRule),
			tel:  busy(), info: gpuInfo, usage: reachable,
			want: want{Decisions: map[string]int{"none/gpu_busy": 1}, Actions: []string{"clear/gpu_busy"}},
		},
		{
			name: "a CPU-only named server idle by Hub activity: stopped and removed after its warning",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"lab": server("lab", started, now.Add(-2*time.Hour))})}},
			pod: func() *corev1.Pod {
				p := pod("alice", "lab", false, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute), Deadline: now.Add(-time.Minute)}, pol.Rule("", ""))
				return p
			}(),
			usage: reachable,
			want:  want{Decisions: map[string]int{"stop/idle": 1}, Stopped: []string{"alice/lab remove"}, Recorded: 1, Notice: "idle", Actions: []string{"stop/idle"}},
		},
		{
			name: "no pod for the server: not a server the culler can act on, nothing asked, nothing stopped",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			tel:  idleFor(45 * time.Minute), info: gpuInfo, usage: reachable,
			want: want{Decisions: map[string]int{}},
		},
		{
			name: "snoozed: past the rule's stop but before the snoozed deadline, left alone and said so",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			pod: pod("alice", "", true, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-15 * time.Minute),
				Deadline: now.Add(15 * time.Minute), Snoozes: 1}, gpuRule),
			tel: idleFor(50 * time.Minute), info: gpuInfo, usage: reachable,
			want: want{Decisions: map[string]int{"skip/snoozed": 1}, Notice: "idle", Actions: []string{"skip/snoozed"}},
		},
		{
			name: "the snoozed deadline has passed: stopped",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			pod: pod("alice", "", true, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-35 * time.Minute),
				Deadline: now.Add(-time.Minute), Snoozes: 1}, gpuRule),
			tel: idleFor(70 * time.Minute), info: gpuInfo, usage: reachable,
			want: want{Decisions: map[string]int{"stop/idle": 1}, Stopped: []string{"alice/"}, Recorded: 1, Notice: "idle", Actions: []string{"stop/idle"}},
		},
		{
			name: "the pod changed under the pass (a snooze): no write, decided again next pass",
			hub:  &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", started, now)})}},
			pod:  pod("alice", "", true, nil, gpuRule), tel: idleFor(45 * time.Minute), info: gpuInfo, usage: reachable, conflict: true,
			want: want{Decisions: map[string]int{"warn/idle": 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			fp := fakePods{pods: map[string]*corev1.Pod{}}
			if tt.pod != nil {
				objs = append(objs, tt.pod)
				fp.pods[tt.pod.Annotations["hub.jupyter.org/username"]+"/"+tt.pod.Annotations["hub.jupyter.org/servername"]] = tt.pod
			}
			kc := fake.NewClientset(objs...)
			noticestest.Versioned(kc, "pods")
			if tt.conflict {
				kc.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, tt.pod.Name, errors.New("changed"))
				})
			}
			key := "alice/"
			if tt.pod != nil {
				key = "alice/" + tt.pod.Annotations["hub.jupyter.org/servername"]
			}
			tel := fakeTelemetry{usage: tt.usage, servers: map[string]decide.Telemetry{key: tt.tel}, info: map[string]telemetry.Info{key: tt.info}}
			st := &fakeStops{}
			log, err := decision.NewLog(decision.Options{Service: "gpu-culler", Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			m, _ := NewMetrics(nil)
			r := New(Options{Hub: tt.hub, Pods: fp, Telemetry: tel, Stops: st, Kube: kc, Policy: func() *policy.Policy { return &pol },
				Decisions: log, Metrics: m, Now: func() time.Time { return now }})
			sum, err := r.Pass(context.Background())
			got := want{Decisions: sum.Decisions, Stopped: tt.hub.stopped, Recorded: len(st.recorded), Err: err != nil}
			if tt.pod != nil {
				p, err := kc.CoreV1().Pods("jhub").Get(context.Background(), tt.pod.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if d, _, ok := notices.FromPod(p.Annotations); ok {
					got.Notice = string(d.Reason)
				}
			}
			for _, rec := range log.List(decision.Filter{}) {
				got.Actions = append(got.Actions, rec.Action+"/"+rec.Reason)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("pass (-want +got):\n%s", diff)
			}
		})
	}
}

// A skip is recorded when it starts, not again on every pass; a server that went away is forgotten.
func TestPassRecordsChanges(t *testing.T) {
	var pol policy.Policy
	if err := ipolicy.Decode("test.yaml", []byte(policyYAML), &pol); err != nil {
		t.Fatal(err)
	}
	hub := &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", now.Add(-time.Hour), now)})}}
	p := pod("alice", "", true, nil, pol.Rule(gpu.KindGPU, ""))
	kc := fake.NewClientset(p)
	log, _ := decision.NewLog(decision.Options{Service: "gpu-culler", Now: func() time.Time { return now }})
	m, _ := NewMetrics(nil)
	fp := fakePods{pods: map[string]*corev1.Pod{"alice/": p}}
	r := New(Options{Hub: hub, Pods: fp, Telemetry: fakeTelemetry{}, Stops: &fakeStops{},
		Kube: kc, Policy: func() *policy.Policy { return &pol }, Decisions: log, Metrics: m, Now: func() time.Time { return now }})
	for range 3 {
		if _, err := r.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(log.List(decision.Filter{})); n != 1 {
		t.Errorf("3 passes with the usage API unreachable recorded %d decisions, want 1", n)
	}
	hub.users = nil
	delete(fp.pods, "alice/")
	if _, err := r.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(r.last) != 0 {
		t.Errorf("a server that stopped is still remembered: %v", r.last)
	}
}

// The GPU-hours saved run from the stop until the server runs again.
func TestSaved(t *testing.T) {
	m, _ := NewMetrics(nil)
	clock := now
	r := New(Options{Metrics: m, Now: func() time.Time { return clock }})
	r.saved[serverKey{"alice", ""}] = &savedGPU{at: now, gpus: 0.5, kind: "gpu"}
	clock = now.Add(2 * time.Hour)
	r.countSaved(nil)
	clock = now.Add(3 * time.Hour)
	r.countSaved(map[serverKey]time.Time{{"alice", ""}: now.Add(150 * time.Minute)})
	if got := testutil.ToFloat64(m.saved.WithLabelValues("gpu")); got != 0.5*2.5*3600 {
		t.Errorf("saved %v GPU-seconds, want %v", got, 0.5*2.5*3600)
	}
	if len(r.saved) != 0 {
		t.Error("a server running again is still counted")
	}
}

// No pass acts before the single-user pods are listed: it fails without asking the Hub.
func TestPassWaitsForPods(t *testing.T) {
	var pol policy.Policy
	if err := ipolicy.Decode("test.yaml", []byte(policyYAML), &pol); err != nil {
		t.Fatal(err)
	}
	hub := &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", now.Add(-time.Hour), now)})}}
	m, _ := NewMetrics(nil)
	r := New(Options{Hub: hub, Pods: fakePods{notSynced: true}, Telemetry: fakeTelemetry{}, Stops: &fakeStops{},
		Policy: func() *policy.Policy { return &pol }, Metrics: m, Now: func() time.Time { return now }})
	if _, err := r.Pass(context.Background()); err == nil {
		t.Error("a pass before the pods are listed: no error")
	}
	if got := testutil.ToFloat64(m.passes.WithLabelValues("error")); got != 1 {
		t.Errorf("passes_total{result=error} = %v, want 1", got)
	}
}

// The user's last stop is withdrawn once the same server has run again for ShownAfterStart, not before, and
// not for another server nor for a server started before the stop.
func TestClearOldStop(t *testing.T) {
	stoppedAt := now.Add(-2 * time.Hour)
	tests := []struct {
		name    string
		server  string
		started time.Time
		want    []string
	}{
		{"running again for an hour", "", now.Add(-time.Hour), []string{"alice/"}},
		{"just started again", "", now.Add(-time.Minute), nil},
		{"started before the stop (the Hub's list lags)", "", stoppedAt.Add(-time.Minute), nil},
		{"another server", "lab", now.Add(-time.Hour), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeStops{last: map[string]stops.Stop{"alice": {User: "alice", Server: "", At: stoppedAt, Reason: "idle"}}}
			r := New(Options{Stops: st, Now: func() time.Time { return now }})
			r.clearOldStop(context.Background(), "alice", tt.server, tt.started)
			if diff := cmp.Diff(tt.want, st.cleared); diff != "" {
				t.Errorf("cleared (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHubOp(t *testing.T) {
	tests := []struct{ method, path, want string }{
		{"GET", "/hub/api/users", "users_list"},
		{"GET", "/hub/api/users/", "users_list"},
		{"DELETE", "/hub/api/users/alice/server", "server_stop"},
		{"DELETE", "/hub/api/users/alice/servers/lab", "server_stop"},
		{"GET", "/hub/api/users/alice", "user_get"},
		{"GET", "/hub/api/users/alice/tokens", "other"},
		{"GET", "/hub/api/user", "other"},
		{"POST", "/hub/api/users/alice/server", "other"},
	}
	for _, tt := range tests {
		if got := hubOp(tt.method, tt.path); got != tt.want {
			t.Errorf("hubOp(%s %s) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
}

// The Hub is asked only about servers that may need an action: busy GPUs cost no request; a few candidates are
// read one user at a time once a full list has counted the pages, many with the full list.
func TestHubRequests(t *testing.T) {
	var pol policy.Policy
	// Exempting a group needs the Hub's word on each server that may be warned or stopped.
	if err := ipolicy.Decode("test.yaml", []byte(policyYAML+"exempt:\n  groups: [staff]\n"), &pol); err != nil {
		t.Fatal(err)
	}
	rule := pol.Rule(gpu.KindGPU, "")
	hub := &fakeHub{}
	fp := fakePods{pods: map[string]*corev1.Pod{}}
	tel := fakeTelemetry{usage: decide.Usage{Reachable: true, At: now}, servers: map[string]decide.Telemetry{}, info: map[string]telemetry.Info{}}
	var objs []runtime.Object
	for i := range 10 {
		name := "u" + string(rune('a'+i))
		hub.users = append(hub.users, ready(name, map[string]hubapi.Server{"": server("", now.Add(-3*time.Hour), now)}))
		p := pod(name, "", true, nil, rule)
		p.Name = "jupyter-" + name
		fp.pods[name+"/"] = p
		objs = append(objs, p)
		tel.servers[name+"/"] = busy()
		tel.info[name+"/"] = telemetry.Info{Known: true, Kind: gpu.KindGPU, AllocatedGPUs: 1}
	}
	kc := fake.NewClientset(objs...)
	m, _ := NewMetrics(nil)
	r := New(Options{Hub: hub, Pods: fp, Telemetry: tel, Stops: &fakeStops{}, Kube: kc, Policy: func() *policy.Policy { return &pol },
		Metrics: m, Now: func() time.Time { return now }})
	pass := func() {
		t.Helper()
		if _, err := r.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	if hub.lists != 0 || len(hub.gets) != 0 {
		t.Fatalf("all GPUs busy: %d lists, %d gets, want none", hub.lists, len(hub.gets))
	}
	tel.servers["ua/"] = idleFor(45 * time.Minute)
	pass()
	if hub.lists != 1 || len(hub.gets) != 0 {
		t.Fatalf("first candidate: %d lists, %d gets, want the full list once", hub.lists, len(hub.gets))
	}
	r.pages = 3 // as if the last full list had 3 pages
	tel.servers["ub/"] = idleFor(45 * time.Minute)
	pass()
	if diff := cmp.Diff([]string{"ua", "ub"}, sorted(hub.gets)); hub.lists != 1 || diff != "" {
		t.Fatalf("two candidates under 3 pages: %d lists, gets (-want +got):\n%s", hub.lists, diff)
	}
	for _, n := range []string{"uc/", "ud/", "ue/"} {
		tel.servers[n] = idleFor(45 * time.Minute)
	}
	pass()
	if hub.lists != 2 {
		t.Fatalf("five candidates over 3 pages: %d lists, want a second full list", hub.lists)
	}
}

func sorted(ss []string) []string {
	out := append([]string(nil), ss...)
	slices.Sort(out)
	return out
}

// A GPU server idle by its own telemetry under a rule that ignores Hub activity, with no exemption only the Hub
// knows, is warned and stopped without reading the Hub: one DELETE, no page; a 400 (not running) changes nothing.
func TestHubBlind(t *testing.T) {
	var pol policy.Policy
	if err := ipolicy.Decode("test.yaml", []byte(policyYAML), &pol); err != nil {
		t.Fatal(err)
	}
	rule := pol.Rule(gpu.KindGPU, "")
	hub := &fakeHub{users: []hubapi.User{ready("alice", map[string]hubapi.Server{"": server("", now.Add(-3*time.Hour), now)})}}
	due := pod("alice", "", true, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute), Deadline: now.Add(-time.Minute)}, rule)
	fresh := pod("bob", "", true, nil, rule)
	fp := fakePods{pods: map[string]*corev1.Pod{"alice/": due, "bob/": fresh}}
	tel := fakeTelemetry{usage: decide.Usage{Reachable: true, At: now},
		servers: map[string]decide.Telemetry{"alice/": idleFor(50 * time.Minute), "bob/": idleFor(45 * time.Minute)},
		info:    map[string]telemetry.Info{"alice/": {Known: true, Kind: gpu.KindGPU, AllocatedGPUs: 1}, "bob/": {Known: true, Kind: gpu.KindGPU, AllocatedGPUs: 1}}}
	kc := fake.NewClientset(due, fresh)
	m, _ := NewMetrics(nil)
	r := New(Options{Hub: hub, Pods: fp, Telemetry: tel, Stops: &fakeStops{}, Kube: kc, Policy: func() *policy.Policy { return &pol },
		Metrics: m, Now: func() time.Time { return now }})
	sum, err := r.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"stop/idle": 1, "warn/idle": 1}, sum.Decisions); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	if hub.lists != 0 || len(hub.gets) != 0 || len(hub.stopped) != 1 {
		t.Errorf("%d lists, %d gets, stops %v: want only alice's stop", hub.lists, len(hub.gets), hub.stopped)
	}
	// Stopped: not asked about again while its pod goes away.
	if _, err := r.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(hub.stopped) != 1 {
		t.Errorf("stopped twice: %v", hub.stopped)
	}
}

// While someone waits for a GPU class, that class's idle servers are judged under idleWhenContended, and only
// they: an H100 waitlist does not shorten the idle period of A100 servers.
func TestPassContended(t *testing.T) {
	const contendedYAML = `
every: 1m
staleAfter: 2m
gpu:
  idlePeriod: 30m
  idleWhenContended: 15m
  warn: 10m
  snooze: 20m
  maxSnoozes: 1
`
	var pol policy.Policy
	if err := ipolicy.Decode("test.yaml", []byte(contendedYAML), &pol); err != nil {
		t.Fatal(err)
	}
	const h100, a100 = "gpu H100-80GB-HBM3", "gpu A100-SXM4-40GB"
	rule := pol.Rule(gpu.KindGPU, "")
	started := now.Add(-3 * time.Hour)
	type server struct {
		class string
		idle  time.Duration
		// notice: warned 11 min ago, with a deadline a minute ago.
		notice bool
	}
	servers := map[string]server{
		"alice": {class: h100, idle: 18 * time.Minute},
		"bob":   {class: a100, idle: 18 * time.Minute},
		"carol": {class: h100, idle: 25 * time.Minute, notice: true},
	}
	type want struct {
		Decisions      map[string]int
		Stopped        []string
		Contended      float64
		ContendedStops float64
		// Reclaimed: GPU-seconds handed over earlier than the idle period (30 min) would have: 1 GPU x 15 min.
		Reclaimed float64
		// Records: each decision recorded, as user action/reason contended idle_period_seconds.
		Records []string
	}
	tests := map[string]struct {
		waiting []string
		want    want
	}{
		"nobody waits: the idle period": {
			want: want{Decisions: map[string]int{"none/idle": 2, "warn/idle": 1},
				Records: []string{"carol notice/idle 0 1800"}},
		},
		"someone waits for an H100: the H100 servers under idleWhenContended, the A100 not": {
			waiting: []string{h100},
			want: want{Decisions: map[string]int{"warn/idle": 1, "none/idle": 1, "stop/idle": 1}, Stopped: []string{"carol/"},
				Contended: 2, ContendedStops: 1, Reclaimed: 900,
				Records: []string{"alice notice/idle 1 900", "carol stop/idle 1 900"}},
		},
		"someone waits for an A100: only the A100 server": {
			waiting: []string{a100},
			want: want{Decisions: map[string]int{"warn/idle": 2, "none/idle": 1}, Contended: 1,
				Records: []string{"bob notice/idle 1 900", "carol notice/idle 0 1800"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			hub := &fakeHub{}
			fp := fakePods{pods: map[string]*corev1.Pod{}}
			tel := fakeTelemetry{usage: decide.Usage{Reachable: true, At: now}, servers: map[string]decide.Telemetry{}, info: map[string]telemetry.Info{}}
			var objs []runtime.Object
			for user, s := range servers {
				hub.users = append(hub.users, ready(user, map[string]hubapi.Server{"": {Name: "", Ready: true, Started: &started, LastActivity: &now}}))
				var n *decide.Notice
				if s.notice {
					n = &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute), Deadline: now.Add(-time.Minute)}
				}
				p := pod(user, "", true, n, rule)
				fp.pods[user+"/"] = p
				objs = append(objs, p)
				tel.servers[user+"/"] = idleFor(s.idle)
				tel.info[user+"/"] = telemetry.Info{Known: true, Kind: gpu.KindGPU, Class: s.class, AllocatedGPUs: 1}
			}
			kc := fake.NewClientset(objs...)
			log, err := decision.NewLog(decision.Options{Service: "gpu-culler", Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			m, _ := NewMetrics(nil)
			r := New(Options{Hub: hub, Pods: fp, Telemetry: tel, Stops: &fakeStops{}, Kube: kc, Policy: func() *policy.Policy { return &pol },
				Decisions: log, Metrics: m, Now: func() time.Time { return now },
				Contended: func(class string) bool { return slices.Contains(tc.waiting, class) }})
			sum, err := r.Pass(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := want{Decisions: sum.Decisions, Stopped: hub.stopped, Contended: testutil.ToFloat64(m.contended),
				ContendedStops: testutil.ToFloat64(m.contendedStops.WithLabelValues("gpu")), Reclaimed: testutil.ToFloat64(m.reclaimed.WithLabelValues("gpu"))}
			for _, rec := range log.List(decision.Filter{}) {
				got.Records = append(got.Records, fmt.Sprintf("%s %s/%s %v %v", rec.User, rec.Action, rec.Reason,
					rec.Numbers["contended"], rec.Numbers["idle_period_seconds"]))
				waiting := strings.Contains(rec.Message, "someone was waiting") || strings.Contains(rec.Message, "Someone is waiting")
				if contended := rec.Numbers["contended"] == 1; waiting != contended {
					t.Errorf("%s's %s: contended %v, message %q", rec.User, rec.Action, contended, rec.Message)
				}
			}
			slices.Sort(got.Records)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pass (-want +got):\n%s", diff)
			}
		})
	}
}

// The stops of one pass are kept for the users as they are made, not at the pass's end: when the Hub gets a
// stop, the ones before it are kept (a leader killed mid-pass lost them all). Stops made during a write share
// the next one, so there are never more writes than stops.
func TestStopsKeptAsTheyAreMade(t *testing.T) {
	users := []string{"alice", "bob", "carol", "dave"}
	hub, st := &fakeHub{}, &fakeStops{}
	r := dueForStop(t, hub, st, users)
	hub.beforeStop = func(n int) {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			st.mu.Lock()
			kept := len(st.recorded)
			st.mu.Unlock()
			if kept >= n-1 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("stop %d reached the Hub with %d of the %d stops before it kept", n, kept, n-1)
				return
			}
		}
	}
	sum, err := r.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, s := range st.recorded {
		kept = append(kept, s.User)
	}
	slices.Sort(kept)
	if sum.Stopped != len(users) || st.writes < 1 || st.writes > len(users) || !slices.Equal(kept, users) {
		t.Errorf("stopped %d, %d writes keeping %v; want %d stops kept in 1 to %d writes", sum.Stopped, st.writes, kept, len(users), len(users))
	}
}

// TestStopsKeptWhenThePassIsCancelled: a leader that loses its Lease mid-pass (the pass's context cancelled) still
// keeps the reasons of the stops it already made; they were lost when the write used the pass's context.
func TestStopsKeptWhenThePassIsCancelled(t *testing.T) {
	hub, st := &fakeHub{}, &fakeStops{honourCtx: true}
	r := dueForStop(t, hub, st, []string{"alice", "bob", "carol"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub.beforeStop = func(int) { cancel() } // the Lease is lost while the Hub stops the first server
	_, _ = r.Pass(ctx)
	hub.mu.Lock()
	stopped := slices.Clone(hub.stopped)
	hub.mu.Unlock()
	var kept []string
	for _, s := range st.recorded {
		kept = append(kept, s.User+"/"+s.Server)
	}
	slices.Sort(stopped)
	slices.Sort(kept)
	if len(stopped) == 0 {
		t.Fatal("no server stopped: the test needs at least one stop made before the cancel is seen")
	}
	if diff := cmp.Diff(stopped, kept); diff != "" {
		t.Errorf("stops made vs reasons kept (-made +kept):\n%s", diff)
	}
}

// dueForStop is a runner whose next pass stops each user's default server: idle for 50 minutes, its notice's
// deadline passed a minute ago.
func dueForStop(t *testing.T, hub *fakeHub, st *fakeStops, users []string) *Runner {
	t.Helper()
	var pol policy.Policy
	if err := ipolicy.Decode("test.yaml", []byte(policyYAML), &pol); err != nil {
		t.Fatal(err)
	}
	rule := pol.Rule(gpu.KindGPU, "")
	started := now.Add(-3 * time.Hour)
	fp := fakePods{pods: map[string]*corev1.Pod{}}
	tel := fakeTelemetry{usage: decide.Usage{Reachable: true, At: now}, servers: map[string]decide.Telemetry{}, info: map[string]telemetry.Info{}}
	var objs []runtime.Object
	for _, user := range users {
		hub.users = append(hub.users, ready(user, map[string]hubapi.Server{"": {Name: "", Ready: true, Started: &started, LastActivity: &now}}))
		p := pod(user, "", true, &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute), Deadline: now.Add(-time.Minute)}, rule)
		fp.pods[user+"/"] = p
		objs = append(objs, p)
		tel.servers[user+"/"] = idleFor(50 * time.Minute)
		tel.info[user+"/"] = telemetry.Info{Known: true, Kind: gpu.KindGPU, AllocatedGPUs: 1}
	}
	log, err := decision.NewLog(decision.Options{Service: "gpu-culler", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := NewMetrics(nil)
	return New(Options{Hub: hub, Pods: fp, Telemetry: tel, Stops: st, Kube: fake.NewClientset(objs...), Policy: func() *policy.Policy { return &pol },
		Decisions: log, Metrics: m, Now: func() time.Time { return now }})
}
