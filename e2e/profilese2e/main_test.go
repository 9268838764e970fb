//go:build e2e

// Package profilese2e runs gpu-profiles end to end (issue 11) on its own local GPU cluster: the chart's agents
// and RBAC, the usage API, gpu-quota and gpu-profiles as processes registered with a real JupyterHub 5.5 +
// KubeSpawner, the chart's Hub glue loaded as hub.extraConfig (the generated spawn form, its fallback, the
// refusal of an exhausted choice), spawns and forms through headless Chromium, Pending pods explained on the
// progress page, and a second topology joining the cluster while it runs. Run with `make e2e`.
package profilese2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/hubapi"
)

const (
	password  = "e2e-password"
	namespace = "jhub"
)

var (
	st          *stack.Stack
	kube        kubernetes.Interface
	hubAdmin    *hubapi.Client
	profilesURL string
	configPath  string // gpu-profiles' overrides; tests may rewrite it (re-read within 2 s)
	// readerToken is the usage API's Hub token: one of gpu-profiles' --reader-services (reads the inventory).
	readerToken string
	// profilesToken is gpu-profiles' own Hub token: what the glue presents at api/v1/profiles.
	profilesToken string
)

// policy lets researchers (carol) take both H100s and students (alice, bob) one GPU of any kind, so that what
// the form disables for bob is what is free, not his quota.
const policy = `onUnavailable: open
default:
  maxGPUs: 1
  maxServers: 2
groups:
  students:
    maxGPUs: 1
    maxServers: 2
  researchers:
    maxGPUs: 2
    maxServers: 2
`

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	need := map[string]string{}
	for _, k := range []string{"GPUHUB_KUBE_BIN", "GPUHUB_HUB_VENV", "GPUHUB_CHP", "GPUHUB_GPU_AGENT", "GPUHUB_USAGE_API",
		"GPUHUB_GPU_QUOTA", "GPUHUB_GPU_PROFILES", "GPUHUB_HELM", "GPUHUB_CHART"} {
		need[k] = os.Getenv(k)
		if need[k] == "" {
			fmt.Fprintf(os.Stderr, "profiles e2e: %s is not set; run the suite with `make e2e`, which installs and builds what it needs\n", k)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "gpuhub-profiles-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	policyPath := filepath.Join(dir, "policy.yaml")
	configPath = filepath.Join(dir, "profiles.yaml")
	for path, text := range map[string]string{policyPath: policy, configPath: baseConfig} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	q := gpuhubstack.QuotaOptions{Binary: need["GPUHUB_GPU_QUOTA"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken(), Policy: policyPath}
	p := gpuhubstack.ProfilesOptions{Binary: need["GPUHUB_GPU_PROFILES"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken(),
		Config: configPath, PendingEndAfter: pendingEndAfter.String()}
	readerToken = gpuhubstack.NewToken()
	profilesToken = p.Token
	g := gpuhubstack.Options{
		Chart:    gpuhubstack.Chart{Helm: need["GPUHUB_HELM"], Dir: need["GPUHUB_CHART"]},
		UsageAPI: need["GPUHUB_USAGE_API"], Port: cluster.FreePort(), Token: readerToken, Quota: q, Profiles: p,
	}
	profilesURL = gpuhubstack.Profiles{Port: p.Port}.URL()
	// The chart's z2jh values, as an admin installs them, with the usage API, gpu-quota (no waitlist) and
	// gpu-profiles on loopback.
	values, err := gpuhubstack.LocalHubValues(need["GPUHUB_CHART"], gpuhubstack.LocalHub{NoWaitlist: true, Services: map[string]gpuhubstack.LocalService{
		gpuhubstack.ServiceName: {Port: g.Port, Token: g.Token}, gpuhubstack.QuotaServiceName: {Port: q.Port, Token: q.Token},
		gpuhubstack.ProfilesServiceName: {Port: p.Port, Token: p.Token},
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
		HubValues:  valuesPath,
		KubeBinDir: need["GPUHUB_KUBE_BIN"], Venv: need["GPUHUB_HUB_VENV"], CHP: need["GPUHUB_CHP"],
		Topology: filepath.Join("..", "topology.yaml"), Password: password,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})),
		GPUAgent: need["GPUHUB_GPU_AGENT"], Components: gpuhubstack.Components(g),
		Progress: func(step string, took time.Duration) {
			fmt.Fprintf(os.Stderr, "profiles e2e: %s (%.1fs)\n", step, took.Seconds())
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "profiles e2e: start local cluster: %v\n", err)
		return 1
	}
	defer st.Stop()
	fmt.Fprintf(os.Stderr, "profiles e2e: local cluster with gpu-quota and gpu-profiles ready in %.1fs, Hub %s\n",
		time.Since(start).Seconds(), st.HubURL())
	kube = st.Client
	hubAdmin, err = hubapi.New(hubapi.Config{URL: st.HubURL() + "hub/api", Token: st.Hub.AdminToken()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "profiles e2e: hub client: %v\n", err)
		return 1
	}
	return m.Run()
}
