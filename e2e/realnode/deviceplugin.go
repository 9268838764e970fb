package realnode

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// GPUResource is one extended resource of emulated GPUs: whole GPUs (nvidia.com/gpu), MIG slices
// (nvidia.com/mig-1g.5gb) or time-sliced replicas, each device named by the UUID NVIDIA's device plugin
// would give it (GPU-… for a GPU, MIG-… for a slice).
type GPUResource struct {
	Name    string
	Devices []string
}

// DevicePlugins serve the kubelet's device-plugin API (v1beta1) for emulated GPUs, as NVIDIA's device
// plugin does for real ones: each resource registers with the kubelet, lists its devices as healthy, and on
// allocation hands the container NVIDIA_VISIBLE_DEVICES with the allocated UUIDs (what the NVIDIA container
// runtime reads to mount the devices; here no runtime hook acts on it and no device is mounted). The kubelet
// does the accounting: the node's allocatable, the scheduler's fit, and which container holds which device.
type DevicePlugins struct {
	dir       string // the kubelet's device-plugins directory
	resources []GPUResource
	logger    *slog.Logger

	mu      sync.Mutex
	servers []*grpc.Server
	stop    chan struct{}
}

// StartDevicePlugins serves resources for the kubelet whose device-plugins directory is dir (its root dir's
// device-plugins) and registers each of them.
func StartDevicePlugins(ctx context.Context, dir string, resources []GPUResource, logger *slog.Logger) (*DevicePlugins, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &DevicePlugins{dir: dir, resources: resources, logger: logger, stop: make(chan struct{})}
	for i, r := range resources {
		// Short names: a unix socket path has at most 107 bytes.
		endpoint := fmt.Sprintf("gpuhub-%d.sock", i)
		if err := d.serve(ctx, r, endpoint); err != nil {
			d.Stop()
			return nil, fmt.Errorf("device plugin %s: %w", r.Name, err)
		}
	}
	return d, nil
}

func (d *DevicePlugins) serve(ctx context.Context, r GPUResource, endpoint string) error {
	sock := filepath.Join(d.dir, endpoint)
	_ = os.Remove(sock)
	lis, err := (&net.ListenConfig{}).Listen(ctx, "unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &gpuPlugin{res: r, stop: d.stop, logger: d.logger})
	go func() { _ = srv.Serve(lis) }()
	d.mu.Lock()
	d.servers = append(d.servers, srv)
	d.mu.Unlock()

	conn, err := grpc.NewClient("unix://"+filepath.Join(d.dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The kubelet's registration socket appears once its device manager runs: retry until then.
	for {
		_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: endpoint, ResourceName: r.Name,
			Options: &pluginapi.DevicePluginOptions{},
		})
		if err == nil || rctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops every plugin: the kubelet then marks their devices unhealthy.
func (d *DevicePlugins) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	for _, s := range d.servers {
		s.Stop()
	}
	d.servers = nil
	for i := range d.resources {
		_ = os.Remove(filepath.Join(d.dir, fmt.Sprintf("gpuhub-%d.sock", i)))
	}
}

type gpuPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	res    GPUResource
	stop   chan struct{}
	logger *slog.Logger
}

func (p *gpuPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *gpuPlugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devs := make([]*pluginapi.Device, 0, len(p.res.Devices))
	for _, id := range p.res.Devices {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-stream.Context().Done():
	}
	return nil
}

func (p *gpuPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		for _, id := range c.DevicesIds {
			if !containsString(p.res.Devices, id) {
				return nil, fmt.Errorf("%s: unknown device %q", p.res.Name, id)
			}
		}
		p.logger.Info("allocate", "resource", p.res.Name, "devices", c.DevicesIds)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ",")},
		})
	}
	return resp, nil
}

func (p *gpuPlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *gpuPlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
