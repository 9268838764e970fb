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

	// A failing agent keeps its last snapshot and times, and reports the error and since when it fails.
	fail.Store(true)
	later := now.Add(time.Minute)
	c.opts.Now = func() time.Time { return later }
	got, err = c.Poll(context.Background(), agents)
	if err == nil {
		t.Fatal("want an error from a failing agent")
	}
	r := got["gpu-a100-0"]
	if r.Snapshot == nil || !r.FetchedAt.Equal(now) || !r.SampleSeenAt.Equal(now) || r.Err == nil || !r.FailingSince.Equal(later) {
		t.Errorf("after failure: snapshot=%v fetchedAt=%v seen=%v err=%v failingSince=%v; want previous snapshot, fetchedAt and seen %v, an error, failing since %v",
			r.Snapshot != nil, r.FetchedAt, r.SampleSeenAt, r.Err, r.FailingSince, now, later)
	}
	// A second failure does not move FailingSince.
	c.opts.Now = func() time.Time { return later.Add(time.Minute) }
	got, _ = c.Poll(context.Background(), agents)
	if r := got["gpu-a100-0"]; !r.FailingSince.Equal(later) || !r.FetchedAt.Equal(now) {
		t.Errorf("second failure: failingSince=%v fetchedAt=%v; want %v and %v", r.FailingSince, r.FetchedAt, later, now)
	}

	// An agent that disappeared is dropped.
	got, err = c.Poll(context.Background(), nil)
	if err != nil || len(got) != 0 {
		t.Errorf("no agents: got %d results, err %v", len(got), err)
	}
}

// agentServer answers /api/v1/snapshot with the answer of the n-th request (0-based) it receives.
func agentServer(t *testing.T, answer func(n int64, w http.ResponseWriter)) (host string, port int) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(n.Add(1)-1, w)
	}))
	t.Cleanup(srv.Close)
	host, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ = strconv.Atoi(portStr)
	return host, port
}

func snapshotAt(t time.Time) string {
	return `{"node": "n", "backend": "simulated", "sampledAt": "` + t.Format(time.RFC3339Nano) + `", "intervalSeconds": 5, "gpus": [], "pods": []}`
}

// TestPollSampleSeenAt: a sampledAt that does not move keeps the time it was first seen; a new one moves it.
func TestPollSampleSeenAt(t *testing.T) {
	agentClock := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) // ahead of the collector's clock
	var sampled atomic.Pointer[time.Time]
	sampled.Store(&agentClock)
	host, port := agentServer(t, func(_ int64, w http.ResponseWriter) { _, _ = w.Write([]byte(snapshotAt(*sampled.Load()))) })
	clock := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	c := New(Options{Port: port, Now: func() time.Time { return clock }})
	agents := []Agent{{Pod: "gpuhub/agent-x", Node: "n", IP: host}}
	first := clock
	for range 3 {
		got, err := c.Poll(context.Background(), agents)
		if err != nil {
			t.Fatal(err)
		}
		if r := got["n"]; !r.SampleSeenAt.Equal(first) || !r.FetchedAt.Equal(clock) {
			t.Errorf("frozen sample at %v: seen %v fetched %v; want seen %v fetched %v", clock, r.SampleSeenAt, r.FetchedAt, first, clock)
		}
		clock = clock.Add(5 * time.Second)
	}
	moved := agentClock.Add(time.Second)
	sampled.Store(&moved)
	got, _ := c.Poll(context.Background(), agents)
	if r := got["n"]; !r.SampleSeenAt.Equal(clock) {
		t.Errorf("new sample: seen %v, want %v", r.SampleSeenAt, clock)
	}
}

// TestPollSeveralAgentsOnOneNode: during a rolling update two agent pods serve one node. The node's result
// must be the newest good snapshot, whichever answer comes last.
func TestPollSeveralAgentsOnOneNode(t *testing.T) {
	t1 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	t2 := t1.Add(5 * time.Second)
	cases := map[string]struct {
		slow          func(w http.ResponseWriter) // the answer that arrives last
		wantSampledAt time.Time
	}{
		"the old pod fails after the new one answered": {
			slow:          func(w http.ResponseWriter) { http.Error(w, "terminating", http.StatusServiceUnavailable) },
			wantSampledAt: t2,
		},
		"an older sample arrives last": {
			slow:          func(w http.ResponseWriter) { _, _ = w.Write([]byte(snapshotAt(t1))) },
			wantSampledAt: t2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			host, port := agentServer(t, func(n int64, w http.ResponseWriter) {
				if n == 0 {
					_, _ = w.Write([]byte(snapshotAt(t2)))
					return
				}
				time.Sleep(100 * time.Millisecond)
				tc.slow(w)
			})
			now := t2.Add(time.Second)
			c := New(Options{Port: port, Now: func() time.Time { return now }})
			got, _ := c.Poll(context.Background(), []Agent{{Pod: "gpuhub/agent-old", Node: "n", IP: host}, {Pod: "gpuhub/agent-new", Node: "n", IP: host}})
			r := got["n"]
			if r.Snapshot == nil {
				t.Fatalf("node has no snapshot (err %v)", r.Err)
			}
			if !r.Snapshot.SampledAt.Equal(tc.wantSampledAt) || r.Err != nil {
				t.Errorf("sampledAt %v err %v; want %v and no error", r.Snapshot.SampledAt, r.Err, tc.wantSampledAt)
			}
		})
	}
}
