package pending

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/golden"
)

// The scheduler's words for the cases below (kube-scheduler 1.36), read only to classify.
const (
	schedGPU      = "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
	schedMemory   = "0/4 nodes are available: 1 Insufficient memory, 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod."
	schedCPUMem   = "0/4 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 2 node(s) didn't match Pod's node affinity/selector."
	schedAffinity = "0/4 nodes are available: 1 node(s) had volume node affinity conflict, 3 node(s) didn't match Pod's node affinity/selector."
	schedCordoned = "0/4 nodes are available: 1 node(s) were unschedulable, 3 node(s) didn't match Pod's node affinity/selector."
)

// Kinds of the local cluster, as a catalog would report them.
var (
	h100     = avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 2, 0, 1, 2)
	mig1g    = avail("mig-a100-sxm4-40gb-1g-5gb", resMIG1g, a100Labels, 8, 6, 1, 8)
	mig3g    = avail("mig-a100-sxm4-40gb-3g-20gb", resMIG3g, a100Labels, 2, 0, 1, 2)
	t4       = avail("shared-t4", resShared, t4Labels, 4, 3, 1, 4)
	freeKind = []Availability{h100, mig1g, mig3g, t4}
)

func TestExplain(t *testing.T) {
	later := t0.Add(30 * time.Second)
	cfg := explainConfig{endAfter: time.Minute, canEnd: true, prepareGrace: 10 * time.Second, unplacedGrace: 10 * time.Second, maxFree: 4}
	cases := map[string]struct {
		pod      *podBuilder
		capacity *fakeCapacity
		cfg      func(*explainConfig)
		now      time.Time
		want     string // reason; "" for no explanation
		wantType string
		hopeless bool
	}{
		"none free: the only H100s in use, MIG slices and T4 shares free": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, h100),
			want:     ReasonNoneFree, wantType: corev1.EventTypeNormal,
		},
		"none free: nothing else free either": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0),
			capacity: newCapacity().with(resGPU, h100Labels, h100),
			want:     ReasonNoneFree, wantType: corev1.EventTypeNormal,
		},
		"none free: a MIG slice": {
			pod:      newPod("bob", "").wants(resMIG3g, 1, a100Labels).unschedulable(schedGPU, t0),
			capacity: newCapacity(freeKind...).with(resMIG3g, a100Labels, mig3g),
			want:     ReasonNoneFree, wantType: corev1.EventTypeNormal,
		},
		"none free: a time-sliced T4 share": {
			pod:      newPod("bob", "").wants(resShared, 1, t4Labels).unschedulable(schedGPU, t0),
			capacity: newCapacity(freeKind...).with(resShared, t4Labels, avail("shared-t4", resShared, t4Labels, 4, 0, 1, 4)),
			want:     ReasonNoneFree, wantType: corev1.EventTypeNormal,
		},
		"none free: two H100s asked, one free": {
			pod:      newPod("bob", "").wants(resGPU, 2, h100Labels).unschedulable(schedGPU, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 4, 1, 2, 2)),
			want:     ReasonNoneFree, wantType: corev1.EventTypeNormal,
		},
		"fragmented: two free H100s on two nodes": {
			pod:      newPod("bob", "").wants(resGPU, 2, h100Labels).unschedulable(schedGPU, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 4, 2, 2, 2)),
			want:     ReasonFragmented, wantType: corev1.EventTypeNormal,
		},
		"cpu and memory: the GPU is free, memory on its node is not": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedMemory, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 2, 1, 1, 2)),
			want:     ReasonCPUMemory, wantType: corev1.EventTypeNormal,
		},
		"cpu and memory: both short": {
			pod:      newPod("bob", "").wants(resMIG1g, 2, a100Labels).unschedulable(schedCPUMem, t0),
			capacity: newCapacity(freeKind...).with(resMIG1g, a100Labels, mig1g),
			want:     ReasonCPUMemory, wantType: corev1.EventTypeNormal,
		},
		"not placed: free, and the scheduler names nothing GPU, CPU or memory": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedAffinity, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 2, 1, 1, 2)),
			want:     ReasonNotPlaced, wantType: corev1.EventTypeNormal,
		},
		"provisionable: no H100 node yet, one is being added": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedAffinity, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 0, 0, 0, 0).provisionable()),
			want:     ReasonProvisioning, wantType: corev1.EventTypeNormal,
		},
		"provisionable: all in use": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, h100.provisionable()),
			want:     ReasonProvisioning, wantType: corev1.EventTypeNormal,
		},
		"blocked: the only H100 node is cordoned": {
			pod: newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels,
				avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 0, 0, 0, 0).blocked(map[string]string{"gpu-h100-0": "cordoned"})),
			want: ReasonBlocked, wantType: corev1.EventTypeWarning, hopeless: true,
		},
		"blocked: every H100 node out of service, more than three, one only by a taint (the pod may tolerate it: never ended)": {
			pod: newPod("bob", "lab").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels,
				avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 0, 0, 0, 0).blocked(map[string]string{
					"gpu-h100-3": "tainted (maintenance=true:NoSchedule)", "gpu-h100-0": "cordoned", "gpu-h100-1": "not ready", "gpu-h100-2": "cordoned"})),
			want: ReasonBlocked, wantType: corev1.EventTypeWarning, hopeless: false,
		},
		"blocked, but the catalog only guessed the kind (the pod's selector does not name it): never ended": {
			pod: newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0),
			capacity: uncertain(newCapacity(freeKind...).with(resGPU, h100Labels,
				avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 0, 0, 0, 0).blocked(map[string]string{"gpu-h100-0": "cordoned"}))),
			want: ReasonBlocked, wantType: corev1.EventTypeWarning, hopeless: false,
		},
		"too big, but the pod has required node affinity the counts know nothing of: never ended": {
			pod:      newPod("bob", "").wants(resGPU, 4, h100Labels).unschedulable(schedGPU, t0).affinity(),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 4, 4, 2, 2)),
			want:     ReasonTooBig, wantType: corev1.EventTypeWarning, hopeless: false,
		},
		"no nodes, but a provisionable pool is configured that the pod may belong to: never ended": {
			pod:      newPod("bob", "").wants(resGPU, 1, b200Labels).unschedulable(schedAffinity, t0),
			capacity: uncertain(newCapacity(freeKind...)),
			want:     ReasonNoNodes, wantType: corev1.EventTypeWarning, hopeless: false,
		},
		"blocked, never ended (EndAfter 0)": {
			pod: newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels,
				avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 0, 0, 0, 0).blocked(map[string]string{"gpu-h100-0": "not ready"})),
			cfg:  func(c *explainConfig) { c.endAfter = 0 },
			want: ReasonBlocked, wantType: corev1.EventTypeWarning, hopeless: true,
		},
		"blocked, no Hub client to end it": {
			pod: newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedCordoned, t0),
			capacity: newCapacity().with(resGPU, h100Labels,
				avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 0, 0, 0, 0).blocked(map[string]string{"gpu-h100-0": "cordoned"})),
			cfg:  func(c *explainConfig) { c.canEnd = false },
			want: ReasonBlocked, wantType: corev1.EventTypeWarning, hopeless: true,
		},
		"no nodes: a B200 nobody has": {
			pod:      newPod("bob", "").wants(resGPU, 1, b200Labels).unschedulable(schedAffinity, t0),
			capacity: newCapacity(freeKind...),
			want:     ReasonNoNodes, wantType: corev1.EventTypeWarning, hopeless: true,
		},
		"too big: four H100s, nodes of two": {
			pod:      newPod("bob", "").wants(resGPU, 4, h100Labels).unschedulable(schedGPU, t0),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, avail("gpu-h100-80gb-hbm3", resGPU, h100Labels, 4, 4, 2, 2)),
			want:     ReasonTooBig, wantType: corev1.EventTypeWarning, hopeless: true,
		},
		"more free kinds than are named": {
			pod: newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0),
			capacity: newCapacity(append(slices.Clone(freeKind),
				avail("gpu-b200", resGPU, b200Labels, 8, 8, 1, 8),
				avail("mig-a100-sxm4-40gb-3g-20gb", resMIG3g, a100Labels, 2, 1, 1, 2),
				avail("shared-t4-b", resShared, t4Labels, 4, 1, 1, 4))...).with(resGPU, h100Labels, h100),
			want: ReasonNoneFree, wantType: corev1.EventTypeNormal,
		},
		"scheduler has not looked yet": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, h100),
			now:      t0.Add(5 * time.Second),
		},
		"no scheduler verdict for long: explained from the inventory": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, h100),
			now:      t0.Add(10 * time.Second),
			want:     ReasonNoneFree, wantType: corev1.EventTypeNormal,
		},
		"bound, starting within the grace: nothing extra": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).bound("gpu-h100-0", t0, "ContainerCreating"),
			capacity: newCapacity(freeKind...),
			now:      t0.Add(9 * time.Second),
		},
		"bound, preparing after the grace": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).bound("gpu-h100-0", t0, "ContainerCreating"),
			capacity: newCapacity(freeKind...),
			now:      t0.Add(10 * time.Second),
			want:     ReasonPreparing, wantType: corev1.EventTypeNormal,
		},
		"bound, the image cannot be pulled": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).bound("gpu-h100-0", t0, "ImagePullBackOff"),
			capacity: newCapacity(freeKind...),
			now:      t0.Add(time.Second),
			want:     ReasonImagePull, wantType: corev1.EventTypeWarning,
		},
		"bound, the container cannot be created": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).bound("gpu-h100-0", t0, "CreateContainerConfigError"),
			capacity: newCapacity(freeKind...),
			now:      t0.Add(time.Second),
			want:     ReasonContainer, wantType: corev1.EventTypeWarning,
		},
		"not a Hub user's pod": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).unschedulable(schedGPU, t0).noUser(),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, h100),
		},
		"running": {
			pod:      newPod("bob", "").wants(resGPU, 1, h100Labels).bound("gpu-h100-0", t0).phase(corev1.PodRunning),
			capacity: newCapacity(freeKind...).with(resGPU, h100Labels, h100),
		},
	}
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	slices.Sort(names)
	var out strings.Builder
	for _, name := range names {
		tc := cases[name]
		t.Run(name, func(t *testing.T) {
			c := cfg
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			now := tc.now
			if now.IsZero() {
				now = later
			}
			x, ok := explain(tc.pod.inv(t), tc.capacity, now, t0.Add(time.Second), c)
			if got := map[bool]string{true: x.Reason}[ok]; got != tc.want {
				t.Fatalf("reason = %q (ok %v), want %q", got, ok, tc.want)
			}
			if !ok {
				return
			}
			if got := eventType(x.Warning); got != tc.wantType {
				t.Errorf("type = %s, want %s", got, tc.wantType)
			}
			if x.Hopeless != tc.hopeless {
				t.Errorf("hopeless = %v, want %v", x.Hopeless, tc.hopeless)
			}
			for _, raw := range []string{"node(s)", "Insufficient", "preemption", "raw kubelet text", "nvidia.com/"} {
				if strings.Contains(x.Message(), raw) {
					t.Errorf("message shows raw text %q: %s", raw, x.Message())
				}
			}
			fmt.Fprintf(&out, "== %s\n%s %s hopeless=%v\n%s\n", name, x.Reason, eventType(x.Warning), x.Hopeless, x.Message())
			if x.Hopeless {
				fmt.Fprintf(&out, "ended: %s\n", endMessage(x))
			}
			out.WriteString("\n")
		})
	}
	golden.Check(t, "messages.golden", out.String())
}

func TestParseScheduler(t *testing.T) {
	cases := map[string]struct {
		msg  string
		want schedulerVerdict
	}{
		"gpu":          {msg: schedGPU, want: schedulerVerdict{gpu: true}},
		"memory":       {msg: schedMemory, want: schedulerVerdict{memory: true}},
		"cpu, memory":  {msg: schedCPUMem, want: schedulerVerdict{cpu: true, memory: true}},
		"mig, at end":  {msg: "0/1 nodes are available: 1 Insufficient nvidia.com/mig-1g.5gb.", want: schedulerVerdict{gpu: true}},
		"shared":       {msg: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.shared, 1 Insufficient cpu.", want: schedulerVerdict{gpu: true, cpu: true}},
		"preemption":   {msg: "0/1 nodes are available: 1 node(s) were unschedulable. preemption: 1 Insufficient memory.", want: schedulerVerdict{}},
		"other name":   {msg: "0/1 nodes are available: 1 Insufficient example.com/foo.", want: schedulerVerdict{}},
		"cut short":    {msg: "Insufficient ", want: schedulerVerdict{}},
		"empty":        {msg: "", want: schedulerVerdict{}},
		"no node seen": {msg: "0/0 nodes are available: ", want: schedulerVerdict{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, parseScheduler(tc.msg), cmp.AllowUnexported(schedulerVerdict{})); diff != "" {
				t.Errorf("parseScheduler (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseScheduler(f *testing.F) {
	for _, s := range []string{schedGPU, schedMemory, schedCPUMem, schedAffinity, "Insufficient", "Insufficient cpu."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_ = parseScheduler(s) // must not panic or loop
	})
}

func TestTruncate(t *testing.T) {
	s := strings.Repeat("é", 600) // 1200 bytes
	got := truncate(s, maxMessage)
	if len(got) > maxMessage+len("…") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "é") {
		t.Errorf("truncate: %d bytes, %q...", len(got), got[:10])
	}
	if strings.ContainsRune(got, '\uFFFD') {
		t.Error("truncate cut a character in half")
	}
}
