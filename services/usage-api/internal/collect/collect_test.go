package collect

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

const agentJSON = `{
  "node": "gpu-a100-0", "backend": "simulated", "sampledAt": "2026-11-22T10:00:05.123Z", "intervalSeconds": 5,
  "gpus": [{"uuid": "GPU-1", "index": 0, "product": "NVIDIA A100-SXM4-40GB", "memoryTotalBytes": 42949672960,
    "memoryUsedBytes": 1073741824, "utilizationPercent": null, "migMode": true,
    "migDevices": [{"uuid": "MIG-1", "profile": "3g.20gb", "gpuInstanceId": 1, "computeInstanceId": 0,
      "memoryTotalBytes": 21474836480, "memoryUsedBytes": 0, "utilizationPercent": 49, "utilizationSource": "simulated"}]}],
  "pods": [{"uid": "u1", "namespace": "jhub", "name": "jupyter-alice", "user": "alice", "server": "",
    "devices": [{"uuid": "MIG-1", "parentUUID": "GPU-1", "resource": "nvidia.com/mig-3g.20gb"}],
    "processes": [{"pid": 4242, "deviceUUID": "MIG-1", "memoryUsedBytes": 1048576, "smUtilPercent": null}],
    "smUtilPercent": 55, "utilizationSource": "simulated", "memoryUsedBytes": 1048576, "somethingNew": 1}]
}`

func ptr(f float64) *float64 { return &f }

func TestPoll(t *testing.T) {
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/snapshot" || fail.Load() {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(agentJSON))
	}))
	defer srv.Close()
	host, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	now := time.Date(2026, 11, 22, 10, 0, 6, 0, time.UTC)
	c := New(Options{Port: port, Now: func() time.Time { return now }})
	agents := []Agent{{Pod: "gpuhub/agent-x", Node: "gpu-a100-0", IP: host}}

	got, err := c.Poll(context.Background(), agents)
	if err != nil {
		t.Fatal(err)
	}
	want := &snapshot.Snapshot{
		Node: "gpu-a100-0", Backend: "simulated", SampledAt: time.Date(2026, 11, 22, 10, 0, 5, 123e6, time.UTC), IntervalSeconds: 5,
		GPUs: []snapshot.GPU{{UUID: "GPU-1", Product: "NVIDIA A100-SXM4-40GB", MemoryTotalBytes: 42949672960, MemoryUsedBytes: 1 << 30, MIGMode: true,
			MIGDevices: []snapshot.MIGDevice{{UUID: "MIG-1", Profile: "3g.20gb", GPUInstanceID: 1, MemoryTotalBytes: 20 << 30, UtilizationPercent: ptr(49), UtilizationSource: "simulated"}}}},
		Pods: []snapshot.Pod{{UID: "u1", Namespace: "jhub", Name: "jupyter-alice", User: "alice",
			Devices:       []snapshot.Device{{UUID: "MIG-1", ParentUUID: "GPU-1", Resource: "nvidia.com/mig-3g.20gb"}},
			Processes:     []snapshot.Process{{PID: 4242, DeviceUUID: "MIG-1", MemoryUsedBytes: 1 << 20}},
			SMUtilPercent: ptr(55), UtilizationSource: "simulated", MemoryUsedBytes: 1 << 20}},
	}
	if diff := cmp.Diff(want, got["gpu-a100-0"].Snapshot); diff != "" {
		t.Errorf("snapshot (-want +got):\n%s", diff)
	}

	// A failing agent keeps its last snapshot (with its old FetchedAt) and reports the error.
	fail.Store(true)
	later := now.Add(time.Minute)
	c.opts.Now = func() time.Time { return later }
	got, err = c.Poll(context.Background(), agents)
	if err == nil {
		t.Fatal("want an error from a failing agent")
	}
	r := got["gpu-a100-0"]
	if r.Snapshot == nil || !r.FetchedAt.Equal(now) || r.Err == nil {
		t.Errorf("after failure: snapshot=%v fetchedAt=%v err=%v; want previous snapshot, fetchedAt %v, an error", r.Snapshot != nil, r.FetchedAt, r.Err, now)
	}

	// An agent that disappeared is dropped.
	got, err = c.Poll(context.Background(), nil)
	if err != nil || len(got) != 0 {
		t.Errorf("no agents: got %d results, err %v", len(got), err)
	}
}
