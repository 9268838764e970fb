//go:build integration

package quota_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/hub"
	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
)

// Environment the tests need; make integration sets all of it.
const (
	envQuotaBin = "GPUHUB_QUOTA_BIN" // gpu-quota built from ./services/gpu-quota
	envKubeBin  = "GPUHUB_KUBE_BIN"  // kube-apiserver and friends (make kube-binaries)
	envHelm     = "GPUHUB_HELM"      // renders chart/gpuhub for gpu-quota's RBAC
)

const (
	chartDir = "../../../chart/gpuhub"
	password = "hubint-quota"
	// metricsService holds read:metrics, to read the glue's counters from the Hub's /hub/metrics.
	metricsService = "metrics-reader"
)

// The refusing policy: whole GPUs for nobody, time-sliced shares for everyone. onUnavailable differs per Hub.
const policyTemplate = `# e2e/hubint/quota: refuse whole GPUs, admit time-sliced shares.
onUnavailable: %s
default:
  allowedKinds: [shared]
`

// z2jhSpawnSettings is what Zero-to-JupyterHub 4.4.0's jupyterhub_config.py sets for spawns.
const z2jhSpawnSettings = `c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
c.Spawner.consecutive_failure_limit = 5
`

// jupyterhubSpawnDefaults gives the plain Hub JupyterHub's own slow_spawn_timeout (10 s) back: every local Hub runs
// z2jh's jupyterhub_config.py, which sets it to 0. consecutive_failure_limit stays 5, as there.
const jupyterhubSpawnDefaults = `c.JupyterHub.tornado_settings.pop("slow_spawn_timeout", None)
c.Spawner.consecutive_failure_limit = 5
`

var (
	cp     *cluster.ControlPlane
	admin  kubernetes.Interface
	z2jh   *hubUnderTest // slow_spawn_timeout 0, onUnavailable closed
	plain  *hubUnderTest // JupyterHub's defaults, onUnavailable open
	logger = slog.New(slog.DiscardHandler)
)

// hubUnderTest is one Hub with its gpu-quota, in a namespace of its own.
type hubUnderTest struct {
	*hubtest.Hub // Proc is the Hub
	dir          string
	quota        hubtest.Service
	quotaURL     string // base with prefix
	quotaToken   string
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(hubtest.Main(m, "hubint/quota", []string{hubproc.EnvVenv, hubproc.EnvCHP, envQuotaBin, envKubeBin, envHelm}, setup, dumpLogs, stopAll))
}

func dumpLogs() {
	for _, h := range []*hubUnderTest{z2jh, plain} {
		if h != nil && h.Proc != nil {
			fmt.Fprintf(os.Stderr, "hubint/quota: hub %q (jupyterhub %s) log tail:\n%s\n", h.Name, h.Proc.Version(), h.Proc.LogTail(80))
			fmt.Fprintf(os.Stderr, "hubint/quota: gpu-quota of %q log tail:\n%s\n", h.Name, h.quota.LogTail(40))
		}
	}
}

func setup(ctx context.Context, dir string) (string, error) {
	var err error
	// The GPU nodes are what gpu-quota classifies a request by.
	if cp, admin, err = hubtest.StartCluster(ctx, os.Getenv(envKubeBin), dir, logger); err != nil {
		return "", err
	}
	if z2jh, err = startHub(ctx, dir, "z2jh", "closed", z2jhSpawnSettings); err != nil {
		return "", err
	}
	if plain, err = startHub(ctx, dir, "plain", "open", jupyterhubSpawnDefaults); err != nil {
		return "", err
	}
	// KubeSpawner starts its pod and event watches at a Hub's first spawn: a refusal now keeps that out of
	// the timings below, and has each glue learn its gpu-quota's onUnavailable.
	for _, h := range []*hubUnderTest{z2jh, plain} {
		if err := h.warmUp(ctx); err != nil {
			return "", fmt.Errorf("hub %s: warm-up spawn: %w", h.Name, err)
		}
	}
	return fmt.Sprintf("control plane, jupyterhub %s x2 and gpu-quota x2", z2jh.Proc.Version()), nil
}

func stopAll() {
	for _, h := range []*hubUnderTest{z2jh, plain} {
		if h == nil {
			continue
		}
		h.quota.Stop()
		if h.Proc != nil {
			if err := h.Proc.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "hubint/quota: stop hub %s: %v\n", h.Name, err)
			}
		}
	}
	if cp != nil {
		cp.Stop()
	}
}

// startHub starts a Hub with KubeSpawner in namespace hubint-<name> and the glue (plus extraConfig) in its
// values, then gpu-quota with the chart's RBAC for that namespace, registered as the Hub's service gpu-quota.
func startHub(ctx context.Context, dir, name, onUnavailable, extraConfig string) (*hubUnderTest, error) {
	h := &hubUnderTest{dir: filepath.Join(dir, name), Hub: &hubtest.Hub{
		Name: name, Password: password, MetricsService: metricsService, TokenNote: "hubint/quota", Kube: admin, Namespace: "hubint-" + name,
	}}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return nil, err
	}
	version, err := gpuhubstack.ServerVersion(admin)
	if err != nil {
		return nil, err
	}
	// A release per Hub: the chart's cluster-scoped names (ClusterRoles) carry the release name.
	objs, err := gpuhubstack.Chart{Helm: os.Getenv(envHelm), Dir: chartDir, Release: "gpuhub-" + name, Namespace: h.Namespace, KubeVersion: version}.Render(ctx)
	if err != nil {
		return nil, err
	}
	in, err := gpuhubstack.InstallRBAC(ctx, admin, h.Namespace, objs)
	if err != nil {
		return nil, err
	}
	quotaKC := filepath.Join(h.dir, "gpu-quota.kubeconfig")
	if err := in.WriteKubeconfig(ctx, admin, in.QuotaServiceAccount, cp.URL, cp.CAData(), quotaKC); err != nil {
		return nil, err
	}
	hubUser := "gpuhub:hub-" + name
	if err := hubtest.HubRBAC(ctx, admin, h.Namespace, hubUser); err != nil {
		return nil, err
	}
	hubKC, err := cp.WriteKubeconfig("hub-"+name, hubUser, nil)
	if err != nil {
		return nil, err
	}
	values, err := gpuhubstack.HubValues(chartDir, map[string]string{"00-z2jh": extraConfig})
	if err != nil {
		return nil, err
	}
	valuesFile := filepath.Join(h.dir, "values.yaml")
	policyFile := filepath.Join(h.dir, "policy.yaml")
	if err := os.WriteFile(valuesFile, values, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(policyFile, fmt.Appendf(nil, policyTemplate, onUnavailable), 0o644); err != nil {
		return nil, err
	}
	ports := cluster.FreePorts(2)
	quotaPort, hubPort := ports[0], ports[1]
	h.quotaToken = gpuhubstack.NewToken()
	q := gpuhubstack.Quota{
		Binary: os.Getenv(envQuotaBin), Port: quotaPort, Kubeconfig: quotaKC, Policy: policyFile, Namespace: h.Namespace,
		LeaseNamespace: h.Namespace, LeaseArgs: in.QuotaArgs, HubAPIURL: fmt.Sprintf("http://127.0.0.1:%d/hub/api", hubPort),
		Token: h.quotaToken,
	}
	h.quotaURL = q.URL()
	h.quota = hubtest.Service{Spec: q.Spec(), Logger: logger}
	h.quota.Spec.LogFile = filepath.Join(h.dir, "gpu-quota.log")
	if err := h.quota.Start(ctx, false); err != nil {
		return h, err
	}
	h.Proc, err = hub.Start(ctx, hub.Options{
		Venv: os.Getenv(hubproc.EnvVenv), CHP: os.Getenv(hubproc.EnvCHP), Kubeconfig: hubKC, Namespace: h.Namespace,
		Dir: filepath.Join(h.dir, "hub"), Password: password, Values: valuesFile, HubPort: hubPort,
		Services: []hubproc.Service{
			gpuhubstack.QuotaHubService(quotaPort, h.quotaToken),
			{Name: metricsService, Scopes: []string{"read:metrics"}},
		},
	})
	if err != nil {
		return h, err
	}
	if err := hubtest.CreateUsers(ctx, h.Proc, extraUsers); err != nil {
		return h, err
	}
	return h, h.quota.WaitReady(ctx)
}

// extraUsers are created besides e2e/hub's alice, bob (students) and carol (researchers); none is in a group.
var extraUsers = []string{"dave", "erin", "user-00", "user-01", "user-02", "user-03", "user-04", "user-05", "user-06", "user-07", "user-08", "user-09"}

// warmUp runs one refused spawn through the REST API and waits until the Hub has finished with it.
func (h *hubUnderTest) warmUp(ctx context.Context) error {
	code, _, err := h.StartServer(ctx, h.Proc.AdminToken(), "bob", "", "h100")
	if err != nil {
		return err
	}
	if code != 202 && code != 403 {
		return fmt.Errorf("POST bob's server: status %d", code)
	}
	return h.WaitStopped(ctx, "bob", "")
}
