package admit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/usagecache"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// testPolicy: students get one MIG slice or T4 share at a time and 2 GPU-hours a day; researchers up to two
// whole GPUs; racers exist for the concurrency tests.
const testPolicy = `
default:
  maxGPUs: 1
  maxServers: 2
groups:
  students:
    maxGPUs: 3/7
    maxServers: 1
    allowedKinds: [mig, shared]
    budgets: [{window: 24h, gpuHours: 2}]
  researchers:
    maxGPUs: 2
    maxServers: 3
    allowedKinds: [gpu, mig]
  racers:
    maxGPUs: unlimited
    maxServers: 5
  crowd:
    maxGPUs: unlimited
    maxServers: unlimited
users:
  admin: {exempt: true}
`

func mustPolicy(t testing.TB, text string) *quota.Policy {
	t.Helper()
	var p quota.Policy
	if err := policy.Decode("test.yaml", []byte(text), &p); err != nil {
		t.Fatalf("policy:\n%v", err)
	}
	return &p
}

// Node and pod builders.

var (
	h100Labels = map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2"}
	a100Labels = map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed"}
	t4Labels   = map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.sharing-strategy": "time-slicing",
		"nvidia.com/gpu.replicas": "4"}
)

func node(name string, labels map[string]string, res map[string]int64) *corev1.Node {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	for k, v := range res {
		alloc[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Status: corev1.NodeStatus{Allocatable: alloc,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// Ways a node stops taking new single-user pods (and one it still takes them with).
func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }

func taint(key, value string, effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

// clusterWith is cluster() with the H100 node changed by change.
func clusterWith(change func(*corev1.Node)) []runtime.Object {
	objs := cluster()
	if change != nil {
		change(objs[0].(*corev1.Node))
	}
	return objs
}

// cluster: two H100s, an A100 in MIG (two 3g.20gb, three 1g.5gb), a T4 in four time-sliced shares.
func cluster() []runtime.Object {
	return []runtime.Object{
		node("gpu-h100", h100Labels, map[string]int64{"nvidia.com/gpu": 2}),
		node("gpu-a100", a100Labels, map[string]int64{"nvidia.com/mig-3g.20gb": 2, "nvidia.com/mig-1g.5gb": 3}),
		node("gpu-t4", t4Labels, map[string]int64{"nvidia.com/gpu.shared": 4}),
		node("cpu-0", nil, nil),
	}
}

type podOpt func(*corev1.Pod)

func pod(name, user, server, nodeName, res string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{inventory.AnnotationUser: user, inventory.AnnotationServer: server}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "notebook",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(1, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if nodeName == "" {
		p.Status.Phase = corev1.PodPending
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func selector(sel map[string]string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeSelector = sel } }

func started(t time.Time) podOpt {
	return func(p *corev1.Pod) { p.Status.StartTime = &metav1.Time{Time: t} }
}

func annotate(k, v string) podOpt { return func(p *corev1.Pod) { p.Annotations[k] = v } }

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// fakeHours answers GPU-hours from a table (user -> window -> class -> hours); unavailable drops every window.
type fakeHours struct {
	mu          sync.Mutex
	hours       map[string]map[time.Duration]map[string]float64
	unavailable bool
}

func (f *fakeHours) GPUHours(user string, windows []time.Duration, _ []usagecache.Held, _ time.Time) map[time.Duration]map[string]float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unavailable {
		return nil
	}
	out := map[time.Duration]map[string]float64{}
	for _, w := range windows {
		out[w] = map[string]float64{}
		for c, h := range f.hours[user][w] {
			out[w][c] = h
		}
	}
	return out
}

// rig is an engine on a fake clientset's informers, as the service wires it.
type rig struct {
	kc      *fake.Clientset
	inv     *inventory.Inventory
	eng     *Engine
	log     *decision.Log
	clock   *clock
	hours   *fakeHours
	dir     atomic.Pointer[map[string][]string]
	dirAt   atomic.Pointer[time.Time]
	pol     atomic.Pointer[quota.Policy]
	apiRead atomic.Int64 // API-server requests after sync (reads and watches)
}

func newRig(t testing.TB, objs ...runtime.Object) *rig {
	t.Helper()
	return newRigWith(t, nil, objs...)
}

// newRigWith is newRig with the engine's options changed by mod (nil: none).
func newRigWith(t testing.TB, mod func(*Options), objs ...runtime.Object) *rig {
	t.Helper()
	r := &rig{kc: fake.NewClientset(objs...), clock: &clock{now: t0}, hours: &fakeHours{}}
	r.kc.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		r.apiRead.Add(1)
		return false, nil, nil
	})
	r.kc.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		r.apiRead.Add(1)
		return false, nil, nil
	})
	r.pol.Store(mustPolicy(t, testPolicy))
	dir := map[string][]string{"bob": {"students"}, "carol": {"researchers"}, "dave": {"researchers"}, "erin": {"students"}}
	r.dir.Store(&dir)
	readAt := t0.Add(-time.Minute)
	r.dirAt.Store(&readAt)
	r.inv = inventory.New(inventory.Options{Client: r.kc, Namespace: "jhub", MetricsSubsystem: "quota", NoAgents: true})
	var err error
	r.log, err = decision.NewLog(decision.Options{Service: Service, Size: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	var handlersSynced func() bool
	o := Options{
		Policy: r.pol.Load, Hours: r.hours, Log: r.log, Now: r.clock.Now, ReservationTTL: 5 * time.Minute,
		Directory:       func() (map[string][]string, error) { return *r.dir.Load(), nil },
		DirectoryReadAt: func() time.Time { return *r.dirAt.Load() }, DirectoryMaxAge: 6 * time.Minute,
		Synced: func() error {
			if err := r.inv.Synced(context.Background()); err != nil {
				return err
			}
			if handlersSynced == nil || !handlersSynced() {
				return errNotSynced
			}
			return nil
		},
		Healthy: func() error { return r.inv.Healthy(context.Background()) },
	}
	if mod != nil {
		mod(&o)
	}
	r.eng, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	handlersSynced, err = r.inv.AddHandlers(r.eng.PodHandler(), r.eng.NodeHandler())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.inv.Start(ctx)
	eventually(t, func() bool { return r.eng.o.Synced() == nil })
	r.apiRead.Store(0)
	return r
}

var errNotSynced = errorString("engine handlers not synced")

type errorString string

func (e errorString) Error() string { return string(e) }

func eventually(t testing.TB, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (r *rig) create(t testing.TB, p *corev1.Pod) {
	t.Helper()
	if _, err := r.kc.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := p.Namespace + "/" + p.Name
	eventually(t, func() bool {
		r.eng.mu.Lock()
		defer r.eng.mu.Unlock()
		_, ok := r.eng.ix.pods[key]
		return ok
	})
}

func (r *rig) admit(t testing.TB, req Request) Result {
	t.Helper()
	res, err := r.eng.Admit(context.Background(), req)
	if err != nil {
		t.Fatalf("Admit(%+v): %v", req, err)
	}
	return res
}

func (r *rig) reservations() int {
	r.eng.mu.Lock()
	defer r.eng.mu.Unlock()
	return r.eng.res.live
}

// Requests as the Hub glue sends them for the e2e profiles.
func h100(user, server string, n int64) Request {
	return Request{User: user, Server: server, Resources: map[string]int64{"nvidia.com/gpu": n},
		NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
}

func mig(user, server, profile string) Request {
	return Request{User: user, Server: server, Resources: map[string]int64{"nvidia.com/mig-" + profile: 1},
		NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed"}}
}

func t4(user, server string) Request {
	return Request{User: user, Server: server, Resources: map[string]int64{"nvidia.com/gpu.shared": 1},
		NodeSelector: map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED"}}
}
