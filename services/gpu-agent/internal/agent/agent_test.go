package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/attribution"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/cluster"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 5, 123e6, time.UTC)

const (
	gpu0 = "GPU-00000000-0000-0000-0000-000000000000"
	gpu1 = "GPU-00000000-0000-0000-0000-000000000001"
	migA = "MIG-00000000-0000-0000-0000-00000000000a"
	migB = "MIG-00000000-0000-0000-0000-00000000000b"
)

type fakePods map[string]cluster.Pod

func (f fakePods) Pod(uid string) (cluster.Pod, bool) { p, ok := f[uid]; return p, ok }
func (f fakePods) Pods() []cluster.Pod {
	var out []cluster.Pod
	for _, p := range f {
		out = append(out, p)
	}
	return out
}

// fakeResolver maps PIDs to pod UIDs as /proc/<pid>/cgroup would.
type fakeResolver map[int]string

func (f fakeResolver) Cgroup(pid int) (attribution.Cgroup, error) {
	uid, ok := f[pid]
	if !ok {
		return attribution.Cgroup{}, attribution.ErrNotInPod
	}
	return attribution.Cgroup{PodUID: uid}, nil
}

type fakeSampler struct {
	r   reading.Reading
	err error
}

func (f *fakeSampler) Sample(context.Context) (reading.Reading, error) { return f.r, f.err }

var pods = fakePods{
	"uid-alice": {UID: "uid-alice", Namespace: "jhub", Name: "jupyter-alice", User: "alice",
		GPUResources: map[string]int64{"nvidia.com/gpu": 1}},
	"uid-bob": {UID: "uid-bob", Namespace: "jhub", Name: "jupyter-bob--big", User: "bob", Server: "big",
		GPUResources: map[string]int64{"nvidia.com/mig-3g.20gb": 1}},
	"uid-carol": {UID: "uid-carol", Namespace: "jhub", Name: "jupyter-carol", User: "carol",
		GPUResources: map[string]int64{"nvidia.com/mig-1g.5gb": 1}},
	"uid-dave": {UID: "uid-dave", Namespace: "jhub", Name: "jupyter-dave", User: "dave",
		GPUResources: map[string]int64{"nvidia.com/gpu": 1}},
	"uid-agent": {UID: "uid-agent", Namespace: "gpuhub", Name: "gpu-agent-x"},
}

// nvmlReading is an A100 box: GPU 0 whole (alice busy, a host process),
// GPU 1 in MIG mode with bob on a 3g.20gb instance (utilization from DCGM)
// and carol on a 1g.5gb one (no DCGM number). dave holds a GPU but runs nothing.
func nvmlReading() reading.Reading {
	d0 := snapshot.Device{UUID: gpu0, Index: 0}
	dA := snapshot.Device{UUID: migA, ParentUUID: gpu1, Index: 1, Profile: "3g.20gb"}
	dB := snapshot.Device{UUID: migB, ParentUUID: gpu1, Index: 1, Profile: "1g.5gb"}
	return reading.Reading{
		Backend: snapshot.BackendNVML,
		GPUs: []snapshot.GPU{
			{UUID: gpu0, Index: 0, Product: "NVIDIA A100-SXM4-40GB", MemoryTotalBytes: 42949672960, MemoryUsedBytes: 3 << 30,
				UtilizationPercent: snapshot.Percent(37), UtilizationSource: "nvml", MIGDevices: []snapshot.MIGDevice{}},
			{UUID: gpu1, Index: 1, Product: "NVIDIA A100-SXM4-40GB", MemoryTotalBytes: 42949672960, MemoryUsedBytes: 2 << 30,
				UtilizationSource: "none", MIGMode: true, MIGDevices: []snapshot.MIGDevice{
					{UUID: migA, Profile: "3g.20gb", GPUInstanceID: 1, MemoryTotalBytes: 20937965568, MemoryUsedBytes: 1 << 30,
						UtilizationPercent: snapshot.Percent(49), UtilizationSource: "dcgm"},
					{UUID: migB, Profile: "1g.5gb", GPUInstanceID: 2, MemoryTotalBytes: 5100273664, MemoryUsedBytes: 1 << 20,
						UtilizationSource: "none"},
				}},
		},
		Processes: []reading.Process{
			{PID: 4243, Device: d0, MemoryUsedBytes: 1 << 30, SMUtilPercent: snapshot.Percent(20), UtilizationSource: "nvml"},
			{PID: 4242, Device: d0, MemoryUsedBytes: 1 << 30, SMUtilPercent: snapshot.Percent(35), UtilizationSource: "nvml"},
			{PID: 999, Device: d0, MemoryUsedBytes: 1 << 30, SMUtilPercent: snapshot.Percent(2), UtilizationSource: "nvml"},
			{PID: 5000, Device: dA, MemoryUsedBytes: 1 << 30, UtilizationSource: "none"},
			{PID: 6000, Device: dB, MemoryUsedBytes: 1 << 20, UtilizationSource: "none"},
		},
	}
}

var nvmlPIDs = fakeResolver{4242: "uid-alice", 4243: "uid-alice", 5000: "uid-bob", 6000: "uid-carol"}

func newTestAgent(r reading.Reading, res CgroupResolver) *Agent {
	return New(Config{Node: "gpu-a100-0", Backend: r.Backend, Interval: 5 * time.Second,
		Sampler: &fakeSampler{r: r}, Pods: pods, Resolver: res, Now: func() time.Time { return t0 }})
}

func TestAssembleNVML(t *testing.T) {
	a := newTestAgent(nvmlReading(), nvmlPIDs)
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := a.state().unattributed; got != 1 {
		t.Errorf("unattributed = %d, want 1 (the host process)", got)
	}
	type podView struct {
		Devices []string
		Util    *float64
		Source  string
		Mem     uint64
		PIDs    []int
	}
	got := map[string]podView{}
	for _, p := range a.Snapshot().Pods {
		v := podView{Util: p.SMUtilPercent, Source: p.UtilizationSource, Mem: p.MemoryUsedBytes}
		for _, d := range p.Devices {
			u := "null"
			if d.SMUtilPercent != nil {
				u = fmt.Sprint(*d.SMUtilPercent)
			}
			v.Devices = append(v.Devices, d.UUID+"="+u+"/"+d.UtilizationSource)
		}
		for _, pr := range p.Processes {
			v.PIDs = append(v.PIDs, pr.PID)
		}
		got[p.User] = v
	}
	want := map[string]podView{
		"alice": {Devices: []string{gpu0 + "=55/nvml"}, Util: snapshot.Percent(55), Source: "nvml", Mem: 2 << 30, PIDs: []int{4242, 4243}},
		"bob":   {Devices: []string{migA + "=49/dcgm"}, Util: snapshot.Percent(49), Source: "dcgm", Mem: 1 << 30, PIDs: []int{5000}},
		"carol": {Devices: []string{migB + "=null/none"}, Source: "none", Mem: 1 << 20, PIDs: []int{6000}},
		// Holds a GPU, runs nothing on any: idle, measured by NVML.
		"dave": {Util: snapshot.Percent(0), Source: "nvml"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
}

// readingWithLostGPU is nvmlReading with a third GPU that could not be read.
func readingWithLostGPU() reading.Reading {
	r := nvmlReading()
	r.GPUs = append(r.GPUs, snapshot.GPU{UUID: "GPU-lost", Index: 2, UtilizationSource: "none",
		MIGDevices: []snapshot.MIGDevice{}, Error: "gpu 2: DeviceGetComputeRunningProcesses: ERROR_GPU_IS_LOST"})
	return r
}

// With a GPU that could not be read, a pod without a seen process may be
// on that GPU: its utilization is unknown, not 0.
func TestAssembleWithFailedGPU(t *testing.T) {
	a := newTestAgent(readingWithLostGPU(), nvmlPIDs)
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range a.Snapshot().Pods {
		switch p.User {
		case "dave":
			if p.SMUtilPercent != nil || p.UtilizationSource != "none" {
				t.Errorf("dave = %v/%s, want null/none", p.SMUtilPercent, p.UtilizationSource)
			}
		case "alice":
			if p.SMUtilPercent == nil || *p.SMUtilPercent != 55 {
				t.Errorf("alice = %v, want 55 (her GPU was read)", p.SMUtilPercent)
			}
		}
	}
	if n := testutil.ToFloat64(gpuUp(collector{a: a}, "2")); n != 0 {
		t.Errorf("gpu_up for the lost GPU = %v, want 0", n)
	}
	if n := testutil.ToFloat64(gpuUp(collector{a: a}, "0")); n != 1 {
		t.Errorf("gpu_up for GPU 0 = %v, want 1", n)
	}
}

func gpuUp(c prometheus.Collector, index string) prometheus.Collector {
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		for m := range collectAll(c) {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil || !strings.Contains(m.Desc().String(), "gpu_up") {
				continue
			}
			for _, l := range pb.GetLabel() {
				if l.GetName() == "gpu" && l.GetValue() == index {
					ch <- m
				}
			}
		}
	})
}

func TestSnapshotGolden(t *testing.T) {
	cases := map[string]struct {
		r   reading.Reading
		res CgroupResolver
	}{
		"snapshot-nvml.json": {r: nvmlReading(), res: nvmlPIDs},
		"snapshot-simulated.json": {r: reading.Reading{
			Backend: snapshot.BackendSimulated,
			GPUs: []snapshot.GPU{{UUID: "GPU-sim-0", Index: 0, Product: "Simulated GPU", MemoryTotalBytes: 17179869184,
				MemoryUsedBytes: 1 << 20, UtilizationPercent: snapshot.Percent(60), UtilizationSource: "simulated", MIGDevices: []snapshot.MIGDevice{}}},
			Holdings: map[string][]snapshot.Device{"uid-alice": {{UUID: "GPU-sim-0", Resource: "nvidia.com/gpu"}}},
			Processes: []reading.Process{{PID: 77, PodUID: "uid-alice", Device: snapshot.Device{UUID: "GPU-sim-0", Resource: "nvidia.com/gpu"},
				MemoryUsedBytes: 1 << 20, SMUtilPercent: snapshot.Percent(60), UtilizationSource: "simulated"}},
		}, res: fakeResolver{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := newTestAgent(tc.r, tc.res)
			if err := a.SampleOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			a.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/api/v1/snapshot", nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d", rec.Code)
			}
			var out bytes.Buffer
			if err := json.Indent(&out, rec.Body.Bytes(), "", "  "); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, name, out.Bytes())
		})
	}
}

func TestMetricsGolden(t *testing.T) {
	a := newTestAgent(nvmlReading(), nvmlPIDs)
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{a: a})
	problems, err := testutil.CollectAndLint(collector{a: a})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
	// sample_duration_seconds is 0 with the fixed clock, so the output is stable.
	got, err := testutil.GatherAndCount(reg)
	if err != nil || got == 0 {
		t.Fatalf("gathered %d metrics, err %v", got, err)
	}
	var buf bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if err := writeText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	golden.Check(t, "metrics.golden", buf.Bytes())
	f, err := os.Open(filepath.Join("testdata", "metrics.golden"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f); err != nil {
		t.Error(err)
	}
}

// A pod that goes away must leave no series behind.
func TestMetricsNoStaleSeries(t *testing.T) {
	fs := &fakeSampler{r: nvmlReading()}
	a := New(Config{Node: "n", Backend: "nvml", Interval: time.Second, Sampler: fs, Pods: fakePods{}, Resolver: nvmlPIDs,
		Now: func() time.Time { return t0 }})
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := collector{a: a}
	if n := testutil.CollectAndCount(c, "gpuhub_agent_pod_memory_used_bytes"); n != 3 {
		t.Fatalf("pod series = %d, want 3", n)
	}
	fs.r.Processes = nil
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "gpuhub_agent_pod_memory_used_bytes"); n != 0 {
		t.Errorf("pod series after the pods left = %d, want 0", n)
	}
}

func TestSampleFailureKeepsLastSnapshot(t *testing.T) {
	fs := &fakeSampler{r: nvmlReading()}
	a := New(Config{Node: "n", Backend: "nvml", Interval: time.Second, Sampler: fs, Resolver: nvmlPIDs})
	if err := a.Ready(context.Background()); err == nil {
		t.Error("ready before any sample")
	}
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/api/v1/snapshot", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("snapshot before any sample: status %d, want 503", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("snapshot before any sample: Retry-After %q, want the interval, 1", got)
	}
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(context.Background()); err != nil {
		t.Errorf("not ready after a sample: %v", err)
	}
	fs.err = errors.New("nvml: ERROR_GPU_IS_LOST")
	if err := a.SampleOnce(context.Background()); err == nil {
		t.Fatal("want the sampler's error")
	}
	// One failure is a blip: the last snapshot stays and so does readiness
	// (TestReadyAfterConsecutiveFailures: it fails after three in a row).
	if a.Snapshot() == nil || a.Ready(context.Background()) != nil {
		t.Error("after one failure: want the last snapshot kept and still ready")
	}
	if n := testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		for m := range collectAll(collector{a: a}) {
			if strings.Contains(m.Desc().String(), "last_sample_success") {
				ch <- m
			}
		}
	})); n != 0 {
		t.Errorf("last_sample_success = %v, want 0", n)
	}
}

func collectAll(c prometheus.Collector) chan prometheus.Metric {
	ch := make(chan prometheus.Metric, 1000)
	c.Collect(ch)
	close(ch)
	return ch
}

func writeText(w io.Writer, mf *dto.MetricFamily) error {
	_, err := expfmt.MetricFamilyToText(w, mf)
	return err
}
