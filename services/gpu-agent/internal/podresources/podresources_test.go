package podresources

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/cluster"
)

// fakeKubelet serves the pod-resources API as the kubelet does.
type fakeKubelet struct {
	v1.UnimplementedPodResourcesListerServer
	list  *v1.ListPodResourcesResponse
	alloc *v1.AllocatableResourcesResponse
	err   error
	// block makes every call wait for its deadline.
	block bool
}

func (f *fakeKubelet) List(ctx context.Context, _ *v1.ListPodResourcesRequest) (*v1.ListPodResourcesResponse, error) {
	if f.block {
		<-ctx.Done() // the deadline the client sent
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return f.list, f.err
}

func (f *fakeKubelet) GetAllocatableResources(ctx context.Context, _ *v1.AllocatableResourcesRequest) (*v1.AllocatableResourcesResponse, error) {
	if f.block {
		<-ctx.Done() // the deadline the client sent
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return f.alloc, f.err
}

// serve runs srv on a unix socket in a temporary directory and returns its path.
func serve(t *testing.T, srv v1.PodResourcesListerServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	v1.RegisterPodResourcesListerServer(s, srv)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return sock
}

func client(t *testing.T, sock string, timeout time.Duration) *Client {
	t.Helper()
	c, err := New(sock, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func devs(resource string, ids ...string) *v1.ContainerDevices {
	return &v1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

func TestAllocations(t *testing.T) {
	cases := map[string]struct {
		list *v1.ListPodResourcesResponse
		want []Allocation
	}{
		"whole GPU, MIG and time-sliced replicas; others ignored": {
			list: &v1.ListPodResourcesResponse{PodResources: []*v1.PodResources{
				{Namespace: "jhub", Name: "jupyter-bob", Containers: []*v1.ContainerResources{{Name: "notebook", Devices: []*v1.ContainerDevices{
					devs("nvidia.com/mig-1g.5gb", "MIG-7f3e0000-0000-4000-8000-000000000002"),
					devs("example.com/fpga", "fpga-0"),
				}}}},
				{Namespace: "jhub", Name: "jupyter-alice", Containers: []*v1.ContainerResources{
					{Name: "notebook", Devices: []*v1.ContainerDevices{devs("nvidia.com/gpu", "GPU-2d5c9a4e-0000-4000-8000-000000000001")}},
					{Name: "sidecar", CpuIds: []int64{2, 3}},
				}},
				{Namespace: "jhub", Name: "jupyter-carol", Containers: []*v1.ContainerResources{{Name: "notebook", Devices: []*v1.ContainerDevices{
					devs("nvidia.com/gpu.shared", "GPU-aa::0", "GPU-aa::1"),
					devs("nvidia.com/gpu"), // no IDs: nothing held
				}}}},
				{Namespace: "kube-system", Name: "sriov", Containers: []*v1.ContainerResources{{Name: "c", Devices: []*v1.ContainerDevices{
					devs("intel.com/sriov", "0000:3b:00.1"),
				}}}},
			}},
			want: []Allocation{
				{Namespace: "jhub", Pod: "jupyter-alice", Container: "notebook", Resource: "nvidia.com/gpu",
					DeviceIDs: []string{"GPU-2d5c9a4e-0000-4000-8000-000000000001"}},
				{Namespace: "jhub", Pod: "jupyter-bob", Container: "notebook", Resource: "nvidia.com/mig-1g.5gb",
					DeviceIDs: []string{"MIG-7f3e0000-0000-4000-8000-000000000002"}},
				{Namespace: "jhub", Pod: "jupyter-carol", Container: "notebook", Resource: "nvidia.com/gpu.shared",
					DeviceIDs: []string{"GPU-aa::0", "GPU-aa::1"}},
			},
		},
		"no pods": {list: &v1.ListPodResourcesResponse{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := client(t, serve(t, &fakeKubelet{list: tc.list}), 0)
			got, err := c.Allocations(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Allocations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllocatable(t *testing.T) {
	alloc := &v1.AllocatableResourcesResponse{
		Devices: []*v1.ContainerDevices{
			devs("nvidia.com/gpu", "GPU-2d5c9a4e-0000-4000-8000-000000000002", "GPU-2d5c9a4e-0000-4000-8000-000000000001"),
			devs("nvidia.com/mig-1g.5gb", "MIG-7f3e0000-0000-4000-8000-000000000001"),
			devs("nvidia.com/mig-1g.5gb", "MIG-7f3e0000-0000-4000-8000-000000000002"), // one entry per device, as the kubelet sends them
			devs("example.com/fpga", "fpga-0"),
		},
		CpuIds: []int64{0, 1, 2, 3},
	}
	c := client(t, serve(t, &fakeKubelet{alloc: alloc}), 0)
	got, err := c.Allocatable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"nvidia.com/gpu":        {"GPU-2d5c9a4e-0000-4000-8000-000000000001", "GPU-2d5c9a4e-0000-4000-8000-000000000002"},
		"nvidia.com/mig-1g.5gb": {"MIG-7f3e0000-0000-4000-8000-000000000001", "MIG-7f3e0000-0000-4000-8000-000000000002"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Allocatable (-want +got):\n%s", diff)
	}
}

func TestSocketMissing(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	_, err := New(sock, 0)
	if !errors.Is(err, ErrNoSocket) || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("New without the socket: %v; want ErrNoSocket naming %s and saying what to mount", err, sock)
	}

	// The socket goes away after New (the kubelet restarts): calls say so.
	sock = serve(t, &fakeKubelet{list: &v1.ListPodResourcesResponse{}})
	c := client(t, sock, 0)
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Allocations(t.Context()); !errors.Is(err, ErrNoSocket) {
		t.Errorf("Allocations after the socket went away: %v, want ErrNoSocket", err)
	}
}

func TestCallFails(t *testing.T) {
	// A socket file nobody listens on: a kubelet that died without removing it.
	stale := filepath.Join(t.TempDir(), "kubelet.sock")
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = lis.Close()

	cases := map[string]struct {
		sock    string
		timeout time.Duration
		want    []string
	}{
		"the kubelet answers an error": {
			sock: serve(t, &fakeKubelet{err: status.Error(codes.Internal, "device manager not ready")}),
			want: []string{"kubelet pod-resources", "device manager not ready"},
		},
		"nobody listens": {sock: stale, want: []string{"is the kubelet running?"}},
		"no answer in time": {
			sock: serve(t, &fakeKubelet{block: true}), timeout: 50 * time.Millisecond,
			want: []string{"no answer within 50ms"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := client(t, tc.sock, tc.timeout)
			_, errList := c.Allocations(t.Context())
			_, errAlloc := c.Allocatable(t.Context())
			for method, err := range map[string]error{"List": errList, "GetAllocatableResources": errAlloc} {
				if err == nil {
					t.Fatalf("%s succeeded, want an error", method)
				}
				for _, w := range append([]string{method, tc.sock}, tc.want...) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s error %q does not say %q", method, err, w)
					}
				}
			}
		})
	}
}

func TestBaseID(t *testing.T) {
	cases := map[string]string{
		"GPU-2d5c9a4e-0000-4000-8000-000000000001":    "GPU-2d5c9a4e-0000-4000-8000-000000000001",
		"GPU-2d5c9a4e-0000-4000-8000-000000000001::3": "GPU-2d5c9a4e-0000-4000-8000-000000000001",
		"MIG-7f3e0000-0000-4000-8000-000000000001::0": "MIG-7f3e0000-0000-4000-8000-000000000001",
	}
	for id, want := range cases {
		if got := BaseID(id); got != want {
			t.Errorf("BaseID(%q) = %q, want %q", id, got, want)
		}
	}
}

func TestByPod(t *testing.T) {
	allocs := []Allocation{
		{Namespace: "jhub", Pod: "jupyter-alice", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-1"}},
		{Namespace: "jhub", Pod: "jupyter-alice", Container: "side", Resource: "nvidia.com/mig-1g.5gb", DeviceIDs: []string{"MIG-1"}},
		{Namespace: "other", Pod: "jupyter-alice", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-2"}},
		{Namespace: "jhub", Pod: "gone", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-3"}},
	}
	pods := []cluster.Pod{{UID: "u1", Namespace: "jhub", Name: "jupyter-alice"}, {UID: "u2", Namespace: "other", Name: "jupyter-alice"}}
	want := map[string][]Allocation{"u1": allocs[:2], "u2": allocs[2:3]}
	if diff := cmp.Diff(want, ByPod(allocs, pods)); diff != "" {
		t.Errorf("ByPod (-want +got):\n%s", diff)
	}
}
