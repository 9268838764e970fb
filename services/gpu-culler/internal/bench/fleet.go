// Package bench is benchmark B3 (docs/benchmarks.md): one pass of gpu-culler over a real JupyterHub with 10,000
// users and 2,000 running servers, telemetry for all of them and their pods in a real kube-apiserver, against
// jupyterhub-idle-culler on the same Hub in the same run. It holds the fixtures (the fleet of servers and their
// pods, the usage API's servers endpoint, the Hub with a spawner that runs no process), the instruments (a
// counting reverse proxy in front of the Hub, open-loop Hub probes, the culler's metrics) and the run itself.
package bench

import (
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// State is what a server's telemetry says.
type State string

// The states of the fleet's servers.
const (
	// Busy: SM utilization well above any threshold. Must never be stopped.
	Busy State = "busy"
	// Idle: no SM use, constant memory, and a culler notice whose deadline has passed: due for a stop.
	Idle State = "idle"
	// Stale: idle numbers, but the telemetry is marked stale. Must never be stopped.
	Stale State = "stale"
)

// Namespace holds the single-user pods.
const Namespace = "jhub"

// Server is one running single-user server of the fleet.
type Server struct {
	User    string
	Pod     string
	Node    string
	Profile benchkit.Profile
	State   State
}

// Fleet is the benchmark's population: Users Hub users, Servers of them with a running default server, their pods
// bound to GPU nodes, and their telemetry.
type Fleet struct {
	Users, Servers int
	// IdleEvery, StaleEvery: server j is idle when j%IdleEvery == 1, stale when j%StaleEvery == 3 (0: none).
	IdleEvery, StaleEvery int
}

// DefaultFleet is B3's: 10,000 users, 2,000 servers, 1 % idle (due for a stop), 0.5 % with stale telemetry.
var DefaultFleet = Fleet{Users: 10_000, Servers: 2_000, IdleEvery: 100, StaleEvery: 200}

// UserName is user i, as the Hub knows them.
func UserName(i int) string { return benchkit.UserName(i) }

// synth is the node set: a third each H100 x8, A100 MIG, T4 shared x4, enough for every server of each profile.
func (f Fleet) synth() benchkit.Synth {
	perKind := (f.Servers + len(benchkit.Profiles) - 1) / len(benchkit.Profiles)
	// One node of each kind holds 8 H100s, 8 x 3g.20gb + 32 x 1g.5gb, 32 T4 shares: H100s bound the count.
	return benchkit.Synth{GPUNodes: 3 * max(1, (perKind+7)/8)}
}

// Nodes are the GPU nodes the pods are bound to.
func (f Fleet) Nodes() []*corev1.Node { return f.synth().Nodes() }

// List is the fleet's servers, spread over the users (server j belongs to user j*Users/Servers), each bound to
// a node with a free unit of its profile.
func (f Fleet) List() []Server {
	free := map[string][]string{} // resource -> node names, one entry per unit
	for _, n := range f.Nodes() {
		for res, q := range n.Status.Allocatable {
			r := string(res)
			if len(r) <= 11 || r[:11] != "nvidia.com/" {
				continue
			}
			for range q.Value() {
				free[r] = append(free[r], n.Name)
			}
		}
	}
	out := make([]Server, f.Servers)
	for j := range out {
		user := UserName(j * f.Users / f.Servers)
		p := benchkit.Profiles[j%len(benchkit.Profiles)]
		s := Server{User: user, Pod: "jupyter-" + user, Profile: p, State: Busy}
		if units := free[p.Resource]; len(units) > 0 {
			s.Node, free[p.Resource] = units[0], units[1:]
		}
		switch {
		case f.IdleEvery > 0 && j%f.IdleEvery == 1:
			s.State = Idle
		case f.StaleEvery > 0 && j%f.StaleEvery == 3:
			s.State = Stale
		}
		out[j] = s
	}
	return out
}

// Notice is the pre-written culler notice of an idle server: the stop was announced at `at` and is due then, so
// the culler may stop the server as soon as its own samples show the idle period.
func Notice(at time.Time) notice.Notice {
	return notice.Notice{Service: "gpu-culler", Kind: notice.KindIdle, Reason: "idle",
		Message:  "B3 benchmark: this server's stop was announced before the culler started.",
		Deadline: at, CreatedAt: at, Stops: true, StopsSince: at}
}

// NoticeAnnotation is Notice(at) as the pod annotation's value.
func NoticeAnnotation(at time.Time) string {
	b, _ := json.Marshal(Notice(at))
	return string(b)
}

// PodObject is the single-user pod KubeSpawner would create for s: its labels and annotations, the GPU limit of its
// profile, bound to its node; status Running (there is no kubelet; the harness writes the status). An idle
// server's pod carries the notice of NoticeAnnotation(now).
func (s Server) PodObject(now time.Time) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: s.Pod,
			Labels: map[string]string{"app": "jupyterhub", "component": "singleuser-server",
				"hub.jupyter.org/username": s.User, "hub.jupyter.org/servername": ""},
			Annotations: map[string]string{"hub.jupyter.org/username": s.User, "hub.jupyter.org/servername": ""}},
		Spec: corev1.PodSpec{NodeName: s.Node, NodeSelector: s.Profile.NodeSelector,
			Containers: []corev1.Container{{Name: "notebook", Image: "quay.io/jupyterhub/k8s-singleuser-sample:4.3.2",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(s.Profile.Resource): resource.MustParse("1")}}}}},
	}
	if s.State == Idle {
		p.Annotations[notice.Key("gpu-culler")] = NoticeAnnotation(now)
	}
	return p
}

// RunningStatus is the status a kubelet would report for a started pod.
func RunningStatus(started time.Time) corev1.PodStatus {
	t := metav1.NewTime(started)
	return corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t, PodIP: "127.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "notebook", Ready: true, Started: new(true),
			Image: "quay.io/jupyterhub/k8s-singleuser-sample:4.3.2", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}}}}
}

// kindClass are each profile's kind, class and GPU-equivalents, as the usage API names them.
var kindClass = map[string]struct {
	kind  gpu.Kind
	class string
	gpus  float64
}{
	"h100":    {gpu.KindGPU, "H100-80GB-HBM3", 1},
	"a100-1g": {gpu.KindMIG, "A100-SXM4-40GB 1g.5gb", 1.0 / 7},
	"a100-3g": {gpu.KindMIG, "A100-SXM4-40GB 3g.20gb", 3.0 / 7},
	"t4":      {gpu.KindShared, "shared T4", 0.25},
}

// Telemetry is s's entry: a busy server at 85 % SM and a memory figure that moves with seq (a busy server's
// memory changes); an idle or stale one at 0 % and constant memory; a stale one marked so.
func (s Server) Telemetry(seq int) contract.Telemetry {
	kc := kindClass[s.Profile.Slug]
	t := contract.Telemetry{User: s.User, Pod: s.Pod, Namespace: Namespace, Node: s.Node, Kind: kc.kind, Class: kc.class,
		AllocatedGPUs: kc.gpus, MemoryUsedBytes: 2 << 30, Simulated: true}
	util := 0.0
	switch s.State {
	case Busy:
		util = 85
		t.MemoryUsedBytes += uint64(seq%7) << 28
	case Stale:
		t.Stale, t.StaleReason = true, "the node's gpu-agent has not reported for 3 min"
	}
	t.SMUtilPercent = &util
	return t
}

// Page is the usage API's servers answer at now (the seq-th request), sorted by user as the usage API sorts it.
func Page(servers []Server, now time.Time, seq int) contract.ServersResponse {
	p := contract.ServersResponse{SampledAt: now.UTC(), Servers: make([]contract.Telemetry, len(servers))}
	for i, s := range servers {
		p.Servers[i] = s.Telemetry(seq)
	}
	return p
}
