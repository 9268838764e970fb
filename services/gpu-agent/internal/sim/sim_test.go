package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/cluster"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/podresources"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

func node(labels map[string]string, capacity map[string]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-a100-0", Labels: labels},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{}}}
	for k, v := range capacity {
		n.Status.Capacity[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return n
}

// layout renders an inventory compactly: per GPU "index:product:memMiB[mig]"
// then its devices "resource(profile)xreplicas".
func layout(inv *inventory) []string {
	var out []string
	for _, g := range inv.gpus {
		s := fmt.Sprintf("%d:%s:%d", g.index, g.product, g.memTotal>>20)
		if g.mig {
			s += "[mig]"
		}
		for _, d := range g.devices {
			s += fmt.Sprintf(" %s", d.dev.Resource)
			if d.dev.Profile != "" {
				s += fmt.Sprintf("(%s,gi%d,%dMiB)", d.dev.Profile, d.gi, d.memTotal>>20)
			}
			if d.replicas > 1 {
				s += fmt.Sprintf("x%d", d.replicas)
			}
		}
		out = append(out, s)
	}
	return out
}

func TestInventory(t *testing.T) {
	cases := map[string]struct {
		labels   map[string]string
		capacity map[string]string
		want     []string
	}{
		"whole GPUs": {
			labels:   map[string]string{gpu.LabelProduct: "NVIDIA A100-SXM4-40GB", gpu.LabelMemoryMiB: "40960", gpu.LabelCount: "2"},
			capacity: map[string]string{gpu.ResourceGPU: "2", "cpu": "8"},
			want:     []string{"0:NVIDIA A100-SXM4-40GB:40960 nvidia.com/gpu", "1:NVIDIA A100-SXM4-40GB:40960 nvidia.com/gpu"},
		},
		"time-slicing renamed to gpu.shared": {
			labels:   map[string]string{gpu.LabelProduct: "Tesla-T4-SHARED", gpu.LabelMemoryMiB: "15360", gpu.LabelCount: "1", gpu.LabelReplicas: "4"},
			capacity: map[string]string{gpu.ResourceGPUShared: "4"},
			want:     []string{"0:Tesla-T4:15360 nvidia.com/gpu.sharedx4"},
		},
		"time-slicing without rename": {
			labels:   map[string]string{gpu.LabelProduct: "Tesla-T4-SHARED", gpu.LabelMemoryMiB: "15360", gpu.LabelCount: "2", gpu.LabelReplicas: "2"},
			capacity: map[string]string{gpu.ResourceGPU: "4"},
			want:     []string{"0:Tesla-T4:15360 nvidia.com/gpux2", "1:Tesla-T4:15360 nvidia.com/gpux2"},
		},
		"MIG mixed packs biggest first": {
			labels: map[string]string{gpu.LabelProduct: "NVIDIA A100-SXM4-40GB", gpu.LabelMemoryMiB: "40960", gpu.LabelCount: "2",
				gpu.LabelMIGStrategy: "mixed", "nvidia.com/mig-1g.5gb.memory": "4864"},
			capacity: map[string]string{"nvidia.com/mig-3g.20gb": "2", "nvidia.com/mig-1g.5gb": "3", "nvidia.com/mig-2g.10gb": "1"},
			want: []string{
				"0:NVIDIA A100-SXM4-40GB:40960[mig] nvidia.com/mig-3g.20gb(3g.20gb,gi1,20480MiB) nvidia.com/mig-3g.20gb(3g.20gb,gi2,20480MiB) nvidia.com/mig-1g.5gb(1g.5gb,gi3,4864MiB)",
				"1:NVIDIA A100-SXM4-40GB:40960[mig] nvidia.com/mig-2g.10gb(2g.10gb,gi1,10240MiB) nvidia.com/mig-1g.5gb(1g.5gb,gi2,4864MiB) nvidia.com/mig-1g.5gb(1g.5gb,gi3,4864MiB)",
			},
		},
		"MIG mixed with whole GPUs": {
			labels:   map[string]string{gpu.LabelProduct: "NVIDIA A100-SXM4-40GB", gpu.LabelMemoryMiB: "40960", gpu.LabelMIGStrategy: "mixed"},
			capacity: map[string]string{gpu.ResourceGPU: "1", "nvidia.com/mig-7g.40gb": "1"},
			want: []string{
				"0:NVIDIA A100-SXM4-40GB:40960 nvidia.com/gpu",
				"1:NVIDIA A100-SXM4-40GB:40960[mig] nvidia.com/mig-7g.40gb(7g.40gb,gi1,40960MiB)",
			},
		},
		"MIG single: GFD labels the instances as nvidia.com/gpu.*": {
			labels: map[string]string{gpu.LabelProduct: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", gpu.LabelMemoryMiB: "4864",
				gpu.LabelMIGStrategy: "single", gpu.LabelCount: "2", "nvidia.com/gpu.slices.gi": "1"},
			capacity: map[string]string{gpu.ResourceGPU: "2"},
			want:     []string{"0:NVIDIA-A100-SXM4-40GB:4864[mig] nvidia.com/gpu(1g.5gb,gi1,4864MiB) nvidia.com/gpu(1g.5gb,gi2,4864MiB)"},
		},
		"single strategy with MIG disabled: whole GPUs": {
			labels: map[string]string{gpu.LabelProduct: "NVIDIA-H100-80GB-HBM3", gpu.LabelMemoryMiB: "81559",
				gpu.LabelMIGStrategy: "single", gpu.LabelReplicas: "1", gpu.LabelSharingStrategy: "none"},
			capacity: map[string]string{gpu.ResourceGPU: "2"},
			want:     []string{"0:NVIDIA-H100-80GB-HBM3:81559 nvidia.com/gpu", "1:NVIDIA-H100-80GB-HBM3:81559 nvidia.com/gpu"},
		},
		"MPS renamed to gpu.shared": {
			labels: map[string]string{gpu.LabelProduct: "NVIDIA-A100-SXM4-40GB", gpu.LabelMemoryMiB: "40960",
				gpu.LabelSharingStrategy: "mps", gpu.LabelReplicas: "2"},
			capacity: map[string]string{gpu.ResourceGPUShared: "4"},
			want: []string{"0:NVIDIA-A100-SXM4-40GB:40960 nvidia.com/gpu.sharedx2",
				"1:NVIDIA-A100-SXM4-40GB:40960 nvidia.com/gpu.sharedx2"},
		},
		"time-sliced MIG, mixed, renamed: one instance per replicas": {
			labels: map[string]string{gpu.LabelProduct: "NVIDIA-A100-SXM4-40GB", gpu.LabelMemoryMiB: "40960", gpu.LabelMIGStrategy: "mixed",
				"nvidia.com/mig-1g.5gb.replicas": "2", "nvidia.com/mig-1g.5gb.sharing-strategy": "time-slicing",
				"nvidia.com/mig-1g.5gb.memory": "4864", "nvidia.com/mig-1g.5gb.slices.gi": "1"},
			capacity: map[string]string{"nvidia.com/mig-1g.5gb.shared": "4", "nvidia.com/mig-3g.20gb": "1"},
			want: []string{"0:NVIDIA-A100-SXM4-40GB:40960[mig] nvidia.com/mig-3g.20gb(3g.20gb,gi1,20480MiB) " +
				"nvidia.com/mig-1g.5gb.shared(1g.5gb,gi2,4864MiB)x2 nvidia.com/mig-1g.5gb.shared(1g.5gb,gi3,4864MiB)x2"},
		},
		"time-sliced MIG, single strategy, without rename": {
			labels: map[string]string{gpu.LabelProduct: "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb-SHARED", gpu.LabelMemoryMiB: "20096",
				gpu.LabelMIGStrategy: "single", gpu.LabelReplicas: "3", gpu.LabelSharingStrategy: "time-slicing",
				"nvidia.com/gpu.slices.gi": "3"},
			capacity: map[string]string{gpu.ResourceGPU: "6"},
			want:     []string{"0:NVIDIA-A100-SXM4-40GB:20096[mig] nvidia.com/gpu(3g.20gb,gi1,20096MiB)x3 nvidia.com/gpu(3g.20gb,gi2,20096MiB)x3"},
		},
		"no labels": {
			capacity: map[string]string{gpu.ResourceGPU: "1"},
			want:     []string{"0:Simulated GPU:16384 nvidia.com/gpu"},
		},
		"no GPUs": {capacity: map[string]string{"cpu": "4"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			inv := newInventory(node(tc.labels, tc.capacity))
			if diff := cmp.Diff(tc.want, layout(inv)); diff != "" {
				t.Errorf("inventory (-want +got):\n%s", diff)
			}
			if again := newInventory(node(tc.labels, tc.capacity)); again.key != inv.key ||
				(len(inv.gpus) > 0 && again.gpus[0].uuid != inv.gpus[0].uuid) {
				t.Error("inventory is not deterministic")
			}
		})
	}
}

func TestUUIDsLookSimulated(t *testing.T) {
	inv := newInventory(node(nil, map[string]string{gpu.ResourceGPU: "1", "nvidia.com/mig-1g.5gb": "1"}))
	g, m := inv.gpus[0].uuid, inv.gpus[1].devices[0].dev.UUID
	if !strings.HasPrefix(g, "GPU-sim-") || len(g) != len("GPU-sim-")+36 || !strings.HasPrefix(m, "MIG-sim-") {
		t.Errorf("UUIDs %q, %q: want GPU-sim-<uuid> and MIG-sim-<uuid>", g, m)
	}
}

type fakeCluster struct {
	node *corev1.Node
	pods []cluster.Pod
}

func (f *fakeCluster) Node() (*corev1.Node, bool) { return f.node, f.node != nil }
func (f *fakeCluster) Pods() []cluster.Pod        { return f.pods }

func gpuPod(uid string, res map[string]int64) cluster.Pod {
	return cluster.Pod{UID: uid, Namespace: "jhub", Name: "jupyter-" + uid, GPUResources: res}
}

func holdings(r reading.Reading) map[string][]string {
	out := map[string][]string{}
	for uid, devs := range r.Holdings {
		for _, d := range devs {
			out[uid] = append(out[uid], d.UUID)
		}
	}
	return out
}

func TestAssignment(t *testing.T) {
	fc := &fakeCluster{
		node: node(map[string]string{gpu.LabelReplicas: "2"}, map[string]string{gpu.ResourceGPUShared: "4", "nvidia.com/mig-3g.20gb": "2"}),
		pods: []cluster.Pod{
			gpuPod("a", map[string]int64{gpu.ResourceGPUShared: 1}),
			gpuPod("b", map[string]int64{gpu.ResourceGPUShared: 1}),
			gpuPod("c", map[string]int64{gpu.ResourceGPUShared: 1}),
			gpuPod("d", map[string]int64{"nvidia.com/mig-3g.20gb": 1}),
			gpuPod("e", nil), // no GPU: not listed
		},
	}
	b := New(Options{Node: "gpu-a100-0", Cluster: fc, Proc: fstest.MapFS{}})
	r, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inv := b.inv
	shared0, shared1 := inv.gpus[0].uuid, inv.gpus[1].uuid
	mig0 := inv.gpus[2].devices[0].dev.UUID
	mig1 := inv.gpus[2].devices[1].dev.UUID
	want := map[string][]string{"a": {shared0}, "b": {shared0}, "c": {shared1}, "d": {mig0}}
	if diff := cmp.Diff(want, holdings(r)); diff != "" {
		t.Errorf("first assignment (-want +got):\n%s", diff)
	}

	// "a" leaves and "0" (sorting first) arrives; running pods keep their devices.
	fc.pods = append([]cluster.Pod{
		gpuPod("0", map[string]int64{gpu.ResourceGPUShared: 1}),
		gpuPod("1", map[string]int64{"nvidia.com/mig-3g.20gb": 2}),
	}, fc.pods[1:]...)
	r, err = b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want = map[string][]string{"0": {shared0}, "1": {mig1}, "b": {shared0}, "c": {shared1}, "d": {mig0}}
	if diff := cmp.Diff(want, holdings(r)); diff != "" {
		t.Errorf("sticky assignment, replicas never exceeded (-want +got):\n%s", diff)
	}
}

func procFS(procs map[int]string, ticks map[int]uint64) fstest.MapFS {
	m := fstest.MapFS{"self": {Data: []byte{}}}
	for pid, env := range procs {
		p := fmt.Sprint(pid)
		m[p+"/environ"] = &fstest.MapFile{Data: []byte(env)}
		// comm with spaces and a ')' to exercise the parser.
		m[p+"/stat"] = &fstest.MapFile{Data: []byte(fmt.Sprintf(
			"%d (ipykernel ) x) S 1 1 1 0 -1 4194560 100 0 0 0 %d 0 0 0 20 0 3 0 100 1000 10 18446744073709551615\n", pid, ticks[pid]))}
		m[p+"/statm"] = &fstest.MapFile{Data: []byte("1000 256 100 1 0 200 0\n")}
	}
	return m
}

func TestUtilizationFromCPU(t *testing.T) {
	env := func(node, uid string) string {
		return "PATH=/usr/bin\x00" + EnvNode + "=" + node + "\x00" + EnvPodUID + "=" + uid + "\x00HOME=/home/jovyan\x00"
	}
	procs := map[int]string{
		100: env("gpu-a100-0", "busy"),  // a busy cell
		101: env("gpu-a100-0", "busy"),  // its second process
		200: env("gpu-a100-0", "idle"),  // an idle notebook
		300: env("other-node", "busy"),  // another emulated node's process
		400: "PATH=/usr/bin\x00",        // not an emulated pod
		500: env("gpu-a100-0", "nogpu"), // a pod without GPU (the agent itself)
	}
	fc := &fakeCluster{
		node: node(map[string]string{gpu.LabelMemoryMiB: "40960"}, map[string]string{gpu.ResourceGPU: "2"}),
		pods: []cluster.Pod{gpuPod("busy", map[string]int64{gpu.ResourceGPU: 1}), gpuPod("idle", map[string]int64{gpu.ResourceGPU: 1}), {UID: "nogpu"}},
	}
	clock := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	opts := Options{Node: "gpu-a100-0", Cluster: fc, Now: func() time.Time { return clock }}

	opts.Proc = procFS(procs, map[int]uint64{100: 1000, 101: 50, 200: 7})
	b := New(opts)
	r, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Processes {
		if *p.SMUtilPercent != 0 {
			t.Errorf("first sample: pid %d util %v, want 0 (no interval yet)", p.PID, *p.SMUtilPercent)
		}
	}

	// 5 s later: pid 100 used 3 s of CPU (60 %), pid 101 1.5 s (30 %), pid 200 nothing.
	clock = clock.Add(5 * time.Second)
	b.opts.Proc = procFS(procs, map[int]uint64{100: 1300, 101: 200, 200: 7})
	r, err = b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]float64{}
	for _, p := range r.Processes {
		if p.UtilizationSource != "simulated" {
			t.Errorf("pid %d source %q, want simulated", p.PID, p.UtilizationSource)
		}
		got[p.PID] = *p.SMUtilPercent
	}
	if diff := cmp.Diff(map[int]float64{100: 60, 101: 30, 200: 0}, got); diff != "" {
		t.Errorf("process utilization (-want +got):\n%s", diff)
	}
	wantGPU := []float64{90, 0}
	for i, g := range r.GPUs {
		if *g.UtilizationPercent != wantGPU[i] || g.UtilizationSource != "simulated" {
			t.Errorf("GPU %d util %v (%s), want %v simulated", i, *g.UtilizationPercent, g.UtilizationSource, wantGPU[i])
		}
	}
	if r.GPUs[0].MemoryUsedBytes != 2*256*4096 {
		t.Errorf("GPU 0 memory %d, want the RSS of its two processes", r.GPUs[0].MemoryUsedBytes)
	}

	// Over 100 % of one core (two busy threads) is capped.
	clock = clock.Add(time.Second)
	b.opts.Proc = procFS(procs, map[int]uint64{100: 1600, 101: 200, 200: 7})
	r, err = b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Backend != "simulated" || *r.GPUs[0].UtilizationPercent != 100 {
		t.Errorf("backend %q GPU 0 util %v, want simulated and capped at 100", r.Backend, *r.GPUs[0].UtilizationPercent)
	}
}

func TestSampleNeedsNode(t *testing.T) {
	_, err := New(Options{Node: "x", Cluster: &fakeCluster{}, Proc: fstest.MapFS{}}).Sample(context.Background())
	if err == nil {
		t.Error("Sample without the Node object: want an error")
	}
}

func TestParseStat(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    uint64
		wantErr bool
	}{
		"plain":       {in: "42 (python3) R 1 42 42 0 -1 0 0 0 0 0 250 30 0 0 20 0 1 0 1 1 1", want: 280},
		"odd comm":    {in: "42 (a) b (c)) R 1 42 42 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 1 1 1", want: 3},
		"truncated":   {in: "42 (python3) R 1 42", wantErr: true},
		"no comm":     {in: "garbage", wantErr: true},
		"bad numbers": {in: "42 (p) R 1 42 42 0 -1 0 0 0 0 0 x 2 0", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseStat(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseStat = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

type fakeKubelet struct {
	ids    map[string][]string
	allocs []podresources.Allocation
	err    error
}

func (f *fakeKubelet) Allocatable(context.Context) (map[string][]string, error) { return f.ids, f.err }
func (f *fakeKubelet) Allocations(context.Context) ([]podresources.Allocation, error) {
	return f.allocs, f.err
}

func alloc(pod, resource string, ids ...string) podresources.Allocation {
	return podresources.Allocation{Namespace: "jhub", Pod: "jupyter-" + pod, Container: "notebook", Resource: resource, DeviceIDs: ids}
}

// TestKubeletDevices: with the kubelet's pod-resources API the emulated
// devices carry the kubelet's device IDs and pods hold what it allocated.
func TestKubeletDevices(t *testing.T) {
	const (
		gpu1 = "GPU-2d5c9a4e-0000-4000-8000-000000000001"
		gpu2 = "GPU-2d5c9a4e-0000-4000-8000-000000000002"
		mig1 = "MIG-7f3e0000-0000-4000-8000-000000000001"
		mig2 = "MIG-7f3e0000-0000-4000-8000-000000000002"
		mig3 = "MIG-7f3e0000-0000-4000-8000-000000000003"
		mig4 = "MIG-7f3e0000-0000-4000-8000-000000000004"
	)
	type want struct {
		GPUs, MIGs []string
		Holdings   map[string][]string
	}
	cases := map[string]struct {
		capacity map[string]string
		labels   map[string]string
		pods     []cluster.Pod
		kubelet  fakeKubelet
		want     want
		wantErr  string
	}{
		"whole GPUs and MIG devices named and held as the kubelet says": {
			capacity: map[string]string{gpu.ResourceGPU: "2", "nvidia.com/mig-1g.5gb": "4"},
			pods: []cluster.Pod{
				gpuPod("a", map[string]int64{gpu.ResourceGPU: 1}),
				gpuPod("b", map[string]int64{"nvidia.com/mig-1g.5gb": 2}),
				gpuPod("c", map[string]int64{gpu.ResourceGPU: 1}), // asks, but the kubelet gave it nothing (yet)
			},
			kubelet: fakeKubelet{
				ids: map[string][]string{gpu.ResourceGPU: {gpu1, gpu2}, "nvidia.com/mig-1g.5gb": {mig1, mig2, mig3, mig4}},
				allocs: []podresources.Allocation{
					alloc("a", gpu.ResourceGPU, gpu2),
					alloc("b", "nvidia.com/mig-1g.5gb", mig3, mig1),
					alloc("gone", gpu.ResourceGPU, gpu1), // not in the pod cache
				},
			},
			want: want{
				GPUs:     []string{gpu1, gpu2, "GPU-sim-"},
				MIGs:     []string{mig1, mig2, mig3, mig4},
				Holdings: map[string][]string{"a": {gpu2}, "b": {mig3, mig1}},
			},
		},
		"time-sliced replicas name one GPU each": {
			labels:   map[string]string{gpu.LabelReplicas: "2"},
			capacity: map[string]string{gpu.ResourceGPUShared: "4"},
			pods: []cluster.Pod{
				gpuPod("a", map[string]int64{gpu.ResourceGPUShared: 1}),
				gpuPod("b", map[string]int64{gpu.ResourceGPUShared: 1}),
			},
			kubelet: fakeKubelet{
				ids:    map[string][]string{gpu.ResourceGPUShared: {gpu2 + "::0", gpu2 + "::1", gpu1 + "::0", gpu1 + "::1"}},
				allocs: []podresources.Allocation{alloc("a", gpu.ResourceGPUShared, gpu2+"::1"), alloc("b", gpu.ResourceGPUShared, gpu2+"::0")},
			},
			want: want{GPUs: []string{gpu1, gpu2}, Holdings: map[string][]string{"a": {gpu2}, "b": {gpu2}}},
		},
		"more kubelet devices than the node advertises": {
			capacity: map[string]string{gpu.ResourceGPU: "1"},
			pods:     []cluster.Pod{gpuPod("a", map[string]int64{gpu.ResourceGPU: 1})},
			kubelet: fakeKubelet{
				ids:    map[string][]string{gpu.ResourceGPU: {gpu1, gpu2}},
				allocs: []podresources.Allocation{alloc("a", gpu.ResourceGPU, gpu2)},
			},
			want: want{GPUs: []string{gpu1}, Holdings: map[string][]string{}},
		},
		"the kubelet cannot be asked": {
			capacity: map[string]string{gpu.ResourceGPU: "1"},
			kubelet:  fakeKubelet{err: errors.New("kubelet pod-resources List on /x.sock: boom")},
			wantErr:  "boom",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fc := &fakeCluster{node: node(tc.labels, tc.capacity), pods: tc.pods}
			b := New(Options{Node: "gpu-a100-0", Cluster: fc, Kubelet: &tc.kubelet, Proc: fstest.MapFS{}})
			r, err := b.Sample(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Sample error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{Holdings: holdings(r)}
			for _, g := range r.GPUs {
				uuid := g.UUID
				if strings.HasPrefix(uuid, "GPU-sim-") {
					uuid = "GPU-sim-" // a MIG card's parent: the kubelet does not name it
				}
				got.GPUs = append(got.GPUs, uuid)
				for _, m := range g.MIGDevices {
					got.MIGs = append(got.MIGs, m.UUID)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

// On a real kubelet a container's processes carry no emulator environment (and another user's environ may not be
// readable): they are the pod's by their cgroup, counted only for pods that hold a device.
func TestUtilizationFromContainerCgroups(t *testing.T) {
	const (
		busy  = "8b5f0c1e-1111-4222-8333-444455556666"
		nogpu = "0d6e5a11-aaaa-4bbb-8ccc-dddddddddddd"
	)
	cgroup := func(uid string) string {
		// cgroup v1, cgroupfs driver, containerd (as on the real node): the pod's directory and the container's.
		dir := "/kubepods/besteffort/pod" + uid + "/3f1e0c6d2b9a8e7f6d5c4b3a29181716f5e4d3c2b1a09f8e7d6c5b4a39281706"
		return "12:pids:" + dir + "\n11:cpu,cpuacct:" + dir + "\n0::/\n"
	}
	proc := func(ticks map[int]uint64) fstest.MapFS {
		m := procFS(map[int]string{100: "", 200: "", 300: ""}, ticks)
		delete(m, "100/environ") // not ours to read
		m["100/cgroup"] = &fstest.MapFile{Data: []byte(cgroup(busy))}
		m["200/cgroup"] = &fstest.MapFile{Data: []byte(cgroup(nogpu))}
		m["300/cgroup"] = &fstest.MapFile{Data: []byte("0::/system.slice/containerd.service\n")}
		return m
	}
	fc := &fakeCluster{
		node: node(map[string]string{gpu.LabelMemoryMiB: "40960"}, map[string]string{gpu.ResourceGPU: "1"}),
		pods: []cluster.Pod{gpuPod(busy, map[string]int64{gpu.ResourceGPU: 1}), {UID: nogpu}},
	}
	clock := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	b := New(Options{Node: "real-node-0", Cluster: fc, Now: func() time.Time { return clock }, Proc: proc(map[int]uint64{100: 100, 200: 100, 300: 100})})
	if _, err := b.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Second)
	b.opts.Proc = proc(map[int]uint64{100: 200, 200: 300, 300: 300})
	r, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	for _, p := range r.Processes {
		got[p.PID] = fmt.Sprintf("%s %v", p.PodUID, *p.SMUtilPercent)
	}
	if diff := cmp.Diff(map[int]string{100: busy + " 50"}, got); diff != "" {
		t.Errorf("processes by cgroup (-want +got):\n%s", diff)
	}
	if *r.GPUs[0].UtilizationPercent != 50 {
		t.Errorf("GPU util %v, want 50 (the busy pod's container)", *r.GPUs[0].UtilizationPercent)
	}
}
