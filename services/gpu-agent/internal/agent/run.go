package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/attribution"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/cluster"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/dcgm"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/nvidia"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/podresources"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/sim"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
)

// Options configure Run.
type Options struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Kube may be nil only with the nvml backend in --once/--bench mode
	// (no pod metadata then: pods are named by UID only).
	Kube     kubernetes.Interface
	Node     string
	Backend  snapshot.Backend
	Interval time.Duration
	// Listen is the address to serve on; Listener, when set, replaces it.
	Listen   string
	Listener net.Listener
	// Proc is the host's /proc, e.g. os.DirFS("/proc").
	Proc fs.FS
	// NVMLLibrary is the path of libnvidia-ml.so.1; empty: the dynamic
	// loader's search path.
	NVMLLibrary string
	// OpenNVML replaces nvidia.Open (tests pass go-nvml's mock servers).
	OpenNVML func(path string, s nvidia.Settings) (*nvidia.Backend, error)
	// DCGMExporterURL, when set, supplies MIG utilization.
	DCGMExporterURL string
	// DCGMExporterTimeout bounds one dcgm-exporter scrape (0:
	// dcgm.DefaultTimeout); it is lowered to half the interval so that a
	// hung exporter leaves the sample time to finish without it.
	DCGMExporterTimeout time.Duration
	HTTPClient          *http.Client
	// PodResourcesSocket is the kubelet's pod-resources socket, which says
	// which device each pod holds, idle or not. Empty, or no socket there
	// when the agent starts: not used.
	PodResourcesSocket string
	// SnapshotAuth is AuthNone or AuthTokenReview. With tokenreview a caller
	// needs a token issued for SnapshotAudience (default DefaultAudience) to
	// one of SnapshotAllowedUsers (e.g. system:serviceaccount:jhub:gpu-usage;
	// required).
	SnapshotAuth         string
	SnapshotAudience     string
	SnapshotAllowedUsers []string
	Now                  func() time.Time
	// MaxFailedSamples is how many samples in a row may fail (or not finish
	// within the interval) before /readyz fails; 0: DefaultMaxFailedSamples.
	MaxFailedSamples int
	// Bench > 0 takes that many samples, Interval apart, writes the last
	// snapshot as JSON and the per-call cost table to Out, and returns.
	Bench int
	Out   io.Writer
}

// Run runs the agent until ctx is done.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Interval <= 0 {
		return fmt.Errorf("interval must be positive, got %s", o.Interval)
	}
	if o.MaxFailedSamples < 0 {
		return fmt.Errorf("max failed samples must be at least 1, got %d", o.MaxFailedSamples)
	}
	if o.Kube == nil && (o.Bench == 0 || o.Backend == snapshot.BackendSimulated) {
		return errors.New("a Kubernetes client is required (only --once/--bench with --backend=nvml can run without one)")
	}
	switch o.SnapshotAuth {
	case AuthNone, AuthTokenReview:
	default:
		return fmt.Errorf("unknown --snapshot-auth %q (want %s or %s)", o.SnapshotAuth, AuthNone, AuthTokenReview)
	}
	if o.SnapshotAudience == "" {
		o.SnapshotAudience = DefaultAudience
	}
	if o.SnapshotAuth == AuthTokenReview && o.Bench == 0 {
		if err := checkTokenReviewConfig(o.SnapshotAudience, o.SnapshotAllowedUsers); err != nil {
			return err
		}
	}

	var watcher *cluster.Watcher
	var pods PodSource = noPods{}
	if o.Kube != nil {
		w, err := cluster.NewWatcher(o.Kube, o.Node, 0)
		if err != nil {
			return err
		}
		watcher, pods = w, w
		watcher.Start(ctx)
	}

	var kubelet *podresources.Client
	if o.PodResourcesSocket != "" {
		// A quarter of the interval per call: a sample must finish within the
		// interval, with NVML and a dcgm-exporter scrape (up to half), and the
		// simulated backend makes two calls.
		c, err := podresources.New(o.PodResourcesSocket, min(podresources.DefaultTimeout, o.Interval/4))
		switch {
		case errors.Is(err, podresources.ErrNoSocket):
			// A node without a kubelet there (the demo's emulated nodes, a bare
			// --once) loses nothing it had without the socket.
			o.Logger.Info("no kubelet pod-resources socket: which device a pod holds comes from its GPU processes (simulated backend: from the simulator)",
				"socket", o.PodResourcesSocket)
		case err != nil:
			return err
		default:
			defer func() { _ = c.Close() }()
			kubelet = c
			o.Logger.Info("which device each pod holds comes from the kubelet", "socket", c.Socket())
		}
	}

	calls := newCallHistogram()
	rec := &callRecorder{}
	var sampler Sampler
	switch o.Backend {
	case snapshot.BackendNVML:
		var mig nvidia.MIGUtilizationSource
		if o.DCGMExporterURL != "" {
			timeout := o.DCGMExporterTimeout
			if timeout <= 0 {
				timeout = dcgm.DefaultTimeout
			}
			mig = dcgm.New(o.DCGMExporterURL, dcgm.Options{HTTPClient: o.HTTPClient, Timeout: min(timeout, o.Interval/2), Now: o.Now})
		}
		open := o.OpenNVML
		if open == nil {
			open = nvidia.Open
		}
		b, err := open(o.NVMLLibrary, nvidia.Settings{
			Now: o.Now, Interval: o.Interval, MIG: mig, Logger: o.Logger,
			Observe: func(call string, d time.Duration) {
				calls.WithLabelValues(call).Observe(d.Seconds())
				if o.Bench > 0 {
					rec.add(call, d)
				}
			},
		})
		if err != nil {
			return err
		}
		defer func() {
			if err := b.Shutdown(); err != nil {
				o.Logger.Warn("nvml shutdown", "err", err)
			}
		}()
		sampler = b
		if kubelet != nil {
			sampler = &kubeletHolders{Sampler: b, kubelet: kubelet, pods: pods, logger: o.Logger}
		}
	case snapshot.BackendSimulated:
		so := sim.Options{Node: o.Node, Cluster: watcher, Proc: o.Proc, Now: o.Now, Logger: o.Logger}
		if kubelet != nil { // not a nil *Client in the interface
			so.Kubelet = kubelet
		}
		sampler = sim.New(so)
	default:
		return fmt.Errorf("unknown backend %q (want %s or %s)", o.Backend, snapshot.BackendNVML, snapshot.BackendSimulated)
	}

	// A sample that takes longer than the interval has failed: the agent
	// cannot keep up, or the driver is wedged. --bench measures cost, often
	// at tiny intervals, so it only guards against a hang.
	timeout := o.Interval
	if o.Bench > 0 {
		timeout = max(o.Interval, 30*time.Second)
	}
	a := New(Config{
		Node: o.Node, Backend: o.Backend, Interval: o.Interval, Sampler: sampler, Pods: pods,
		Resolver: attribution.NewResolver(o.Proc), Now: o.Now, Logger: o.Logger,
		MaxFailedSamples: o.MaxFailedSamples, SampleTimeout: timeout,
	})
	if err := o.Registry.Register(collector{a: a}); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if err := o.Registry.Register(calls); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}

	synced := func(ctx context.Context) error {
		if watcher != nil && !watcher.HasSynced() {
			return errors.New("pod and node caches not synced")
		}
		return nil
	}
	waitSync := func(ctx context.Context) error {
		if watcher != nil && !watcher.WaitForSync(ctx) {
			return fmt.Errorf("pod and node caches did not sync: %w", context.Cause(ctx))
		}
		return nil
	}

	if o.Bench > 0 {
		if err := waitSync(ctx); err != nil {
			return err
		}
		return bench(ctx, a, o, rec)
	}

	handler := a.Handler()
	if o.SnapshotAuth == AuthTokenReview {
		handler = newTokenReviewer(o.Kube, o.SnapshotAudience, o.SnapshotAllowedUsers, o.Now, o.Logger).wrap(handler)
	} else {
		o.Logger.Warn("snapshot served without authentication: restrict port access with a NetworkPolicy",
			"flag", "--snapshot-auth")
	}
	srv, err := server.New(server.Options{
		Addr: o.Listen, Listener: o.Listener, Handler: handler, Registry: o.Registry,
		Namespace: namespace, Subsystem: subsystem, Logger: o.Logger,
		ReadyChecks: []server.Check{{Name: "informers", Fn: synced}, {Name: "sample", Fn: a.Ready}},
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := waitSync(ctx); err != nil {
			return // ctx done
		}
		o.Logger.Info("sampling", "node", o.Node, "backend", o.Backend, "interval", o.Interval)
		a.Loop(ctx)
	})
	err = srv.Run(ctx)
	wg.Wait()
	return err
}
