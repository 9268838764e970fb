// Command gpu-agent is the gpuhub node agent (a DaemonSet on GPU nodes): it
// samples the node's GPUs through NVML, or emulates them with
// --backend=simulated, attributes GPU processes to pods and JupyterHub users,
// and serves a JSON snapshot and Prometheus metrics. See README.md.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/agent"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/dcgm"
	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/podresources"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/snapshot"
	"github.com/gpuhub/gpuhub/services/internal/start"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	cmd := start.NewCommand("gpu-agent", stderr)
	fs := cmd.Flags
	var (
		node         = fs.String("node-name", "", "name of this node (downward API spec.nodeName)")
		backend      = fs.String("backend", "nvml", "GPU backend: nvml, or simulated (emulated GPUs for machines without any)")
		interval     = fs.Duration("interval", 5*time.Second, "sampling interval")
		listen       = fs.String("listen", ":9400", "address to serve the snapshot, probes and metrics on")
		procRoot     = fs.String("proc-root", "/proc", "the host's /proc (GPU PIDs are host PIDs: use hostPID or mount the host's /proc here)")
		nvmlLib      = fs.String("nvml-library", "", "path of libnvidia-ml.so.1 (empty: the dynamic loader's search path)")
		dcgmURL      = fs.String("dcgm-exporter-url", "", "the node's dcgm-exporter metrics URL for MIG utilization, e.g. http://$(HOST_IP):9400/metrics in the chart (not 127.0.0.1: in a pod that is the agent itself; empty: MIG utilization is reported as unknown)")
		dcgmTimeout  = fs.Duration("dcgm-exporter-timeout", dcgm.DefaultTimeout, "bound on one dcgm-exporter scrape, lowered to half of --interval; past it MIG utilization is unknown for that sample")
		snapAuth     = fs.String("snapshot-auth", agent.AuthNone, "who may read /api/v1/snapshot (it holds user names): tokenreview (Kubernetes bearer token checked with a TokenReview) or none (restrict with a NetworkPolicy)")
		audience     = fs.String("snapshot-audience", agent.DefaultAudience, "with tokenreview: the audience the caller's token must be issued for (a projected service-account token; the API server's own audience is refused)")
		allowedUsers = fs.String("snapshot-allowed-users", "", "with tokenreview (required): comma-separated identities allowed, e.g. system:serviceaccount:jhub:gpuhub-usage")
		// On by default at the kubelet's standard path: on a GPU node the agent then knows which GPU an idle
		// notebook holds without being told, and where no socket is there (the demo's emulated nodes, a
		// bare --once) it logs one line and works as without it.
		podResources = fs.String("pod-resources-socket", podresources.DefaultSocket, "the kubelet's pod-resources socket, which says which device each pod holds, idle or not (the simulated backend also takes the device IDs from it); empty, or no socket there at start: not used")
		maxFailed    = fs.Int("max-failed-samples", agent.DefaultMaxFailedSamples, "readiness fails after this many samples in a row fail or do not finish within --interval (the snapshot keeps the last good sample; its health says sampling fails)")
		once         = fs.Bool("once", false, "take one sample, print the snapshot and the per-call NVML cost, and exit")
		benchN       = fs.Int("bench", 0, "take this many samples --interval apart, print the last snapshot and per-call cost statistics, and exit")
	)
	if code, ok := cmd.Parse(args, map[string]string{
		"node-name": "NODE_NAME", "backend": "GPUHUB_AGENT_BACKEND", "interval": "GPUHUB_AGENT_INTERVAL",
		"listen": "GPUHUB_AGENT_LISTEN", "proc-root": "GPUHUB_AGENT_PROC_ROOT",
		"nvml-library": "GPUHUB_AGENT_NVML_LIBRARY", "dcgm-exporter-url": "GPUHUB_AGENT_DCGM_EXPORTER_URL",
		"dcgm-exporter-timeout": "GPUHUB_AGENT_DCGM_EXPORTER_TIMEOUT",
		"snapshot-auth":         "GPUHUB_AGENT_SNAPSHOT_AUTH", "snapshot-allowed-users": "GPUHUB_AGENT_SNAPSHOT_ALLOWED_USERS",
		"snapshot-audience": "GPUHUB_AGENT_SNAPSHOT_AUDIENCE", "max-failed-samples": "GPUHUB_AGENT_MAX_FAILED_SAMPLES",
		"pod-resources-socket": "GPUHUB_AGENT_POD_RESOURCES_SOCKET",
	}); !ok {
		return code
	}
	if *maxFailed < 1 {
		_, _ = fmt.Fprintf(stderr, "--max-failed-samples must be at least 1, got %d\n", *maxFailed)
		return 2
	}
	if *once && *benchN == 0 {
		*benchN = 1
	}

	// The agent is no Hub service: no Hub client, no Hub-token auth.
	cl, err := start.NewClients(start.Options{Service: "gpu-agent", Kubeconfig: cmd.Kubeconfig(), Logger: cmd.Logger, WithoutHub: true})
	if err != nil {
		if *benchN == 0 || *backend != "nvml" {
			cmd.Logger.Error("cannot start", "err", err)
			return 2
		}
		// A bare GPU machine can still measure NVML cost; pods are then unnamed.
		cmd.Logger.Warn("no Kubernetes client: pods will be named by UID only", "err", err)
		cl.Registry = prometheus.NewRegistry()
	}
	allowed := config.List(*allowedUsers)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = agent.Run(ctx, agent.Options{
		Logger: cmd.Logger, Registry: cl.Registry, Kube: cl.Kube, Node: *node, Backend: snapshot.Backend(*backend),
		Interval: *interval, Listen: *listen, Proc: os.DirFS(*procRoot), NVMLLibrary: *nvmlLib, DCGMExporterURL: *dcgmURL, DCGMExporterTimeout: *dcgmTimeout,
		SnapshotAuth: *snapAuth, SnapshotAudience: *audience, SnapshotAllowedUsers: allowed, MaxFailedSamples: *maxFailed, Bench: *benchN, Out: os.Stdout,
		PodResourcesSocket: *podResources,
	})
	return cmd.Exit(err)
}
