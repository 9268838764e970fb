//go:build e2e

// Package quotae2e runs gpu-quota end to end (issue 10) on its own local GPU cluster: the chart's agents and
// RBAC, the usage API and gpu-quota as processes registered with a real JupyterHub 5.5 + KubeSpawner, the
// chart's Hub glue loaded as hub.extraConfig, spawns through headless Chromium. Its own cluster, because
// gpu-quota changes what every spawn does. Run with `make e2e`.
package quotae2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
	"github.com/gpuhub/gpuhub/hubapi"
)

const (
	metricsReader = "metrics-reader" // reads the Hub's /hub/metrics (the glue's counters)
	password      = "e2e-password"
	namespace     = "jhub"
)

var (
	st         *stack.Stack
	hubAdmin   *hubapi.Client
	policyPath string // the policy gpu-quota reads; tests rewrite it (gpu-quota re-reads it within 2 s)
	quotaURL   string
	usagePort  int
)

// basePolicy lets students take one GPU of any kind (so that "no H100 is free" is what refuses bob when carol
// holds both) and one server; the tests add to it.
const basePolicy = `onUnavailable: open
grace: 20s
default:
  maxGPUs: 1
  maxServers: 1
groups:
  students:
    maxGPUs: 1
    maxServers: 1
    allowedKinds: [gpu, mig, shared]
    budgets:
      - {window: 24h, gpuHours: 50}
  researchers:
    maxGPUs: 2
    maxServers: 2
    budgets:
      - {window: 24h, gpuHours: 50}
`

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	need := map[string]string{}
	for _, k := range []string{"GPUHUB_KUBE_BIN", "GPUHUB_HUB_VENV", "GPUHUB_CHP", "GPUHUB_GPU_AGENT", "GPUHUB_USAGE_API", "GPUHUB_GPU_QUOTA", "GPUHUB_HELM", "GPUHUB_CHART"} {
		need[k] = os.Getenv(k)
		if need[k] == "" {
			fmt.Fprintf(os.Stderr, "quota e2e: %s is not set; run the suite with `make e2e`, which installs and builds what it needs\n", k)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "gpuhub-quota-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	policyPath = filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(basePolicy), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	usagePort = cluster.FreePort()
	q := gpuhubstack.QuotaOptions{Binary: need["GPUHUB_GPU_QUOTA"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken(), Policy: policyPath}
	g := gpuhubstack.Options{
		Chart:    gpuhubstack.Chart{Helm: need["GPUHUB_HELM"], Dir: need["GPUHUB_CHART"]},
		UsageAPI: need["GPUHUB_USAGE_API"], Port: usagePort, Token: gpuhubstack.NewToken(), Quota: q,
	}
	quotaURL = gpuhubstack.Quota{Port: q.Port}.URL()
	// The chart's z2jh values, as an admin installs them, with the usage API and gpu-quota (no waitlist) on loopback.
	values, err := gpuhubstack.LocalHubValues(need["GPUHUB_CHART"], gpuhubstack.LocalHub{NoWaitlist: true, Services: map[string]gpuhubstack.LocalService{
		gpuhubstack.ServiceName: {Port: g.Port, Token: g.Token}, gpuhubstack.QuotaServiceName: {Port: q.Port, Token: q.Token},
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	valuesPath := filepath.Join(dir, "hub-values.yaml")
	if err := os.WriteFile(valuesPath, values, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lvl := slog.LevelWarn
	if os.Getenv("GPUHUB_E2E_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	st, err = stack.Start(ctx, stack.Options{
		HubServices: []hubproc.Service{{Name: metricsReader, Scopes: []string{"read:metrics"}}},
		HubValues:   valuesPath,
		KubeBinDir:  need["GPUHUB_KUBE_BIN"], Venv: need["GPUHUB_HUB_VENV"], CHP: need["GPUHUB_CHP"],
		Topology: filepath.Join("..", "topology.yaml"), Password: password,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})),
		GPUAgent: need["GPUHUB_GPU_AGENT"], Components: gpuhubstack.Components(g),
		Progress: func(step string, took time.Duration) {
			fmt.Fprintf(os.Stderr, "quota e2e: %s (%.1fs)\n", step, took.Seconds())
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "quota e2e: start local cluster: %v\n", err)
		return 1
	}
	defer st.Stop()
	fmt.Fprintf(os.Stderr, "quota e2e: local cluster with gpu-quota ready in %.1fs, Hub %s\n", time.Since(start).Seconds(), st.HubURL())
	hubAdmin, err = hubapi.New(hubapi.Config{URL: st.HubURL() + "hub/api", Token: st.Hub.AdminToken()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "quota e2e: hub client: %v\n", err)
		return 1
	}
	return m.Run()
}
