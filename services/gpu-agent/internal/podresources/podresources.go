// Package podresources reads the kubelet's pod-resources API (gRPC on a unix
// socket, k8s.io/kubelet/pkg/apis/podresources/v1): which NVIDIA device IDs
// the kubelet's device manager can hand out, and which it handed to which
// container. The IDs are the device plugin's: for NVIDIA's, GPU and MIG UUIDs,
// with "::<n>" appended per replica under time-slicing or MPS (BaseID strips it).
package podresources

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/cluster"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// DefaultSocket is where the kubelet serves the API with its default --root-dir.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultTimeout bounds one call when New is given none.
const DefaultTimeout = 2 * time.Second

// maxMsgSize is what the kubelet's own client accepts: a List of a node
// packed with pods can exceed gRPC's default 4 MiB.
const maxMsgSize = 16 << 20

// ErrNoSocket means the socket file does not exist.
var ErrNoSocket = errors.New("kubelet pod-resources socket not found")

// Allocation is the devices of one NVIDIA resource the kubelet gave one container.
type Allocation struct {
	Namespace string
	Pod       string
	Container string
	Resource  string
	DeviceIDs []string
}

// Client calls the kubelet's pod-resources API. Safe for concurrent use.
type Client struct {
	socket  string
	timeout time.Duration
	conn    *grpc.ClientConn
	api     v1.PodResourcesListerClient
}

// New returns a client of the socket, each call bounded by timeout (0:
// DefaultTimeout). It fails with ErrNoSocket when the socket does not exist;
// it does not connect: every call does, so a restarted kubelet is found again.
func New(socket string, timeout time.Duration) (*Client, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %q: %w", socket, err)
	}
	c := &Client{socket: abs, timeout: timeout}
	if err := c.exists(); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("kubelet pod-resources client for %s: %w", abs, err)
	}
	c.conn, c.api = conn, v1.NewPodResourcesListerClient(conn)
	return c, nil
}

// Socket is the socket's absolute path.
func (c *Client) Socket() string { return c.socket }

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) exists() error {
	if _, err := os.Stat(c.socket); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w at %s: mount the node's /var/lib/kubelet/pod-resources into the agent (hostPath, read-only), "+
			"or point --pod-resources-socket at <kubelet --root-dir>/pod-resources/kubelet.sock", ErrNoSocket, c.socket)
	}
	return nil
}

// Allocatable returns the device IDs of each NVIDIA resource the kubelet can
// allocate, sorted.
func (c *Client) Allocatable(ctx context.Context) (map[string][]string, error) {
	var resp *v1.AllocatableResourcesResponse
	err := c.call(ctx, "GetAllocatableResources", func(ctx context.Context) (err error) {
		resp, err = c.api.GetAllocatableResources(ctx, &v1.AllocatableResourcesRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, d := range resp.GetDevices() {
		if name := d.GetResourceName(); gpu.IsNVIDIAName(name) {
			out[name] = append(out[name], d.GetDeviceIds()...)
		}
	}
	for name, ids := range out {
		slices.Sort(ids)
		out[name] = slices.Compact(ids)
	}
	return out, nil
}

// Allocations returns the NVIDIA devices the kubelet allocated to each
// container, sorted by namespace, pod, container and resource.
func (c *Client) Allocations(ctx context.Context) ([]Allocation, error) {
	var resp *v1.ListPodResourcesResponse
	err := c.call(ctx, "List", func(ctx context.Context) (err error) {
		resp, err = c.api.List(ctx, &v1.ListPodResourcesRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []Allocation
	for _, p := range resp.GetPodResources() {
		for _, ctr := range p.GetContainers() {
			for _, d := range ctr.GetDevices() {
				if !gpu.IsNVIDIAName(d.GetResourceName()) || len(d.GetDeviceIds()) == 0 {
					continue
				}
				out = append(out, Allocation{
					Namespace: p.GetNamespace(), Pod: p.GetName(), Container: ctr.GetName(),
					Resource: d.GetResourceName(), DeviceIDs: slices.Clone(d.GetDeviceIds()),
				})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Allocation) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod),
			cmp.Compare(a.Container, b.Container), cmp.Compare(a.Resource, b.Resource))
	})
	return out, nil
}

// call runs one RPC with the client's timeout and explains its failure.
func (c *Client) call(ctx context.Context, method string, f func(context.Context) error) error {
	if err := c.exists(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := f(ctx)
	if err == nil {
		return nil
	}
	var hint string
	switch s, _ := status.FromError(err); {
	case strings.Contains(s.Message(), "permission denied"):
		hint = " (the agent must run as the socket's owner, root)"
	case s.Code() == codes.Unavailable:
		hint = " (is the kubelet running?)"
	case s.Code() == codes.DeadlineExceeded:
		hint = fmt.Sprintf(" (no answer within %s)", c.timeout)
	case s.Code() == codes.Unimplemented:
		hint = " (a kubelet too old, or with the KubeletPodResources* feature gates off)"
	}
	return fmt.Errorf("kubelet pod-resources %s on %s%s: %w", method, c.socket, hint, err)
}

// BaseID is the device behind a device ID: NVIDIA's device plugin appends
// "::<replica>" to the UUID of a time-sliced or MPS-shared device.
func BaseID(id string) string {
	base, _, _ := strings.Cut(id, "::")
	return base
}

// ByPod groups allocations by the UID of the pod in pods (the node's pods).
// The kubelet names pods by namespace and name, unique at any one time; the
// allocations of pods not in pods (not in the cache yet, or gone) are left out.
func ByPod(allocs []Allocation, pods []cluster.Pod) map[string][]Allocation {
	uids := make(map[[2]string]string, len(pods))
	for _, p := range pods {
		uids[[2]string{p.Namespace, p.Name}] = p.UID
	}
	out := map[string][]Allocation{}
	for _, a := range allocs {
		if uid, ok := uids[[2]string{a.Namespace, a.Pod}]; ok {
			out[uid] = append(out[uid], a)
		}
	}
	return out
}
