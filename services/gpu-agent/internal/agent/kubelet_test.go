package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/podresources"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

type fakeKubelet struct {
	allocs []podresources.Allocation
	err    error
	calls  int
}

func (f *fakeKubelet) Allocations(context.Context) ([]podresources.Allocation, error) {
	f.calls++
	return f.allocs, f.err
}

func held(pod, resource string, ids ...string) podresources.Allocation {
	return podresources.Allocation{Namespace: "jhub", Pod: pod, Container: "notebook", Resource: resource, DeviceIDs: ids}
}

// idleCarol is nvmlReading with carol's process gone: she holds her MIG
// instance and runs nothing on it.
func idleCarol() reading.Reading {
	r := nvmlReading()
	r.Processes = r.Processes[:len(r.Processes)-1]
	return r
}

// TestKubeletHolders: with the kubelet's pod-resources API, a pod that holds a
// device but runs nothing on it is listed with that device, idle.
func TestKubeletHolders(t *testing.T) {
	allHeld := []podresources.Allocation{
		held("jupyter-alice", "nvidia.com/gpu", gpu0+"::1"), // a time-sliced replica of GPU 0
		held("jupyter-bob--big", "nvidia.com/mig-3g.20gb", migA),
		held("jupyter-carol", "nvidia.com/mig-1g.5gb", migB),
		held("jupyter-gone", "nvidia.com/gpu", gpu0), // not in the pod cache
	}
	cases := map[string]struct {
		reading reading.Reading
		kubelet fakeKubelet
		want    map[string][]string // user -> devices "uuid resource util/source"
	}{
		"idle holder listed with its device": {
			reading: idleCarol(),
			kubelet: fakeKubelet{allocs: allHeld},
			want: map[string][]string{
				"alice": {gpu0 + " nvidia.com/gpu 55/nvml"},
				"bob":   {migA + " nvidia.com/mig-3g.20gb 49/dcgm"},
				"carol": {migB + " nvidia.com/mig-1g.5gb 0/nvml"},
				"dave":  nil, // asks for a GPU; the kubelet names none
			},
		},
		"device IDs of no device read are left out": {
			reading: idleCarol(),
			kubelet: fakeKubelet{allocs: []podresources.Allocation{held("jupyter-dave", "nvidia.com/gpu", "0")}}, // index strategy
			want: map[string][]string{
				"alice": {gpu0 + " nvidia.com/gpu 55/nvml"}, "bob": {migA + " nvidia.com/mig-3g.20gb 49/dcgm"}, "carol": nil, "dave": nil,
			},
		},
		"the kubelet cannot be asked: processes alone, as without it": {
			reading: idleCarol(),
			kubelet: fakeKubelet{err: errors.New("kubelet pod-resources List on /x.sock (is the kubelet running?): refused")},
			want: map[string][]string{
				"alice": {gpu0 + " nvidia.com/gpu 55/nvml"}, "bob": {migA + " nvidia.com/mig-3g.20gb 49/dcgm"}, "carol": nil, "dave": nil,
			},
		},
		"held on a GPU that could not be read: unknown, not idle": {
			reading: readingWithLostGPU(),
			kubelet: fakeKubelet{allocs: []podresources.Allocation{held("jupyter-dave", "nvidia.com/gpu", "GPU-lost")}},
			want: map[string][]string{
				"alice": {gpu0 + " nvidia.com/gpu 55/nvml"}, "bob": {migA + " nvidia.com/mig-3g.20gb 49/dcgm"},
				"carol": {migB + " nvidia.com/mig-1g.5gb null/none"}, "dave": {"GPU-lost nvidia.com/gpu null/none"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &kubeletHolders{Sampler: &fakeSampler{r: tc.reading}, kubelet: &tc.kubelet, pods: pods, logger: slog.New(slog.DiscardHandler)}
			a := New(Config{Node: "gpu-a100-0", Backend: snapshot.BackendNVML, Interval: 5 * time.Second,
				Sampler: s, Pods: pods, Resolver: nvmlPIDs, Now: func() time.Time { return t0 }})
			if err := a.SampleOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, p := range a.Snapshot().Pods {
				if p.User == "" {
					continue
				}
				got[p.User] = nil
				for _, d := range p.Devices {
					u := "null"
					if d.SMUtilPercent != nil {
						u = fmt.Sprint(*d.SMUtilPercent)
					}
					got[p.User] = append(got[p.User], d.UUID+" "+d.Resource+" "+u+"/"+d.UtilizationSource)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pods' devices (-want +got):\n%s", diff)
			}
		})
	}
}

// A backend that knows the holdings itself (simulated) is not second-guessed;
// an outage is logged once, and so is the recovery.
func TestKubeletHoldersCalls(t *testing.T) {
	var logs bytes.Buffer
	fs := &fakeSampler{r: reading.Reading{Backend: snapshot.BackendSimulated, Holdings: map[string][]snapshot.Device{}}}
	k := &fakeKubelet{}
	s := &kubeletHolders{Sampler: fs, kubelet: k, pods: pods, logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if _, err := s.Sample(context.Background()); err != nil || k.calls != 0 {
		t.Errorf("backend with holdings: err %v, %d kubelet calls; want none", err, k.calls)
	}

	fs.r = idleCarol()
	k.err = errors.New("refused")
	for range 3 {
		if _, err := s.Sample(context.Background()); err != nil {
			t.Fatalf("a kubelet outage fails the sample: %v", err)
		}
	}
	k.err = nil
	for range 2 {
		if _, err := s.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "cannot ask the kubelet"); n != 1 {
		t.Errorf("outage logged %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "the kubelet answers again"); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, logs.String())
	}
}

// podResourcesServer is a kubelet's pod-resources API with fixed answers.
type podResourcesServer struct {
	v1.UnimplementedPodResourcesListerServer
	alloc *v1.AllocatableResourcesResponse
	list  *v1.ListPodResourcesResponse
}

func (s *podResourcesServer) List(context.Context, *v1.ListPodResourcesRequest) (*v1.ListPodResourcesResponse, error) {
	return s.list, nil
}

func (s *podResourcesServer) GetAllocatableResources(context.Context, *v1.AllocatableResourcesRequest) (*v1.AllocatableResourcesResponse, error) {
	return s.alloc, nil
}

// TestRunSimulatedKubelet runs the agent with --pod-resources-socket: the
// simulated devices are named as the kubelet names them and alice holds the
// instance it gave her; a missing socket leaves the simulator as it was.
func TestRunSimulatedKubelet(t *testing.T) {
	const mig1, mig2 = "MIG-7f3e0000-0000-4000-8000-000000000001", "MIG-7f3e0000-0000-4000-8000-000000000002"
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	v1.RegisterPodResourcesListerServer(srv, &podResourcesServer{
		alloc: &v1.AllocatableResourcesResponse{Devices: []*v1.ContainerDevices{
			{ResourceName: "nvidia.com/mig-3g.20gb", DeviceIds: []string{mig2, mig1}}}},
		list: &v1.ListPodResourcesResponse{PodResources: []*v1.PodResources{{Namespace: "jhub", Name: "jupyter-alice",
			Containers: []*v1.ContainerResources{{Name: "notebook", Devices: []*v1.ContainerDevices{
				{ResourceName: "nvidia.com/mig-3g.20gb", DeviceIds: []string{mig2}}}}}}}},
	})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	cases := map[string]struct {
		socket    string
		wantMIGs  []string
		wantAlice []string
	}{
		"kubelet":        {socket: sock, wantMIGs: []string{mig1, mig2}, wantAlice: []string{mig2}},
		"socket missing": {socket: filepath.Join(t.TempDir(), "none.sock"), wantMIGs: []string{"MIG-sim-", "MIG-sim-"}, wantAlice: []string{"MIG-sim-"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, Options{
					Kube: simCluster(), Node: "gpu-a100-0", Backend: snapshot.BackendSimulated, Interval: 20 * time.Millisecond,
					Listener: ln, Proc: fstest.MapFS{}, Registry: prometheus.NewRegistry(), SnapshotAuth: AuthNone,
					PodResourcesSocket: tc.socket,
				})
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			var snap snapshot.Snapshot
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				code, body := get(t, "http://"+ln.Addr().String()+"/api/v1/snapshot", "")
				if code == http.StatusOK {
					if err := json.Unmarshal(body, &snap); err != nil {
						t.Fatal(err)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no snapshot: %d %s", code, body)
				}
			}
			trim := func(uuid string) string {
				if strings.HasPrefix(uuid, "MIG-sim-") {
					return "MIG-sim-"
				}
				return uuid
			}
			var migs, alice []string
			for _, g := range snap.GPUs {
				for _, m := range g.MIGDevices {
					migs = append(migs, trim(m.UUID))
				}
			}
			for _, p := range snap.Pods {
				for _, d := range p.Devices {
					if p.User == "alice" {
						alice = append(alice, trim(d.UUID))
					}
				}
			}
			if diff := cmp.Diff(tc.wantMIGs, migs); diff != "" {
				t.Errorf("MIG devices (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAlice, alice); diff != "" {
				t.Errorf("held devices (-want +got):\n%s", diff)
			}
		})
	}
}
