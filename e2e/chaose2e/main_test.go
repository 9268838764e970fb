//go:build e2e

package chaose2e

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

// The quota policy: small limits and a budget students use up within a run (a MIG 3g.20gb slice in 84 s), refusals
// rather than unchecked admissions while gpu-quota or the GPU-hours cannot be reached (closed), a short grace.
const quotaPolicy = `onUnavailable: closed
grace: 20s
default: {maxGPUs: 1, maxServers: 1, allowedKinds: [gpu, mig, shared]}
groups:
  students:
    maxGPUs: 3/7
    maxServers: 1
    allowedKinds: [mig, shared]
    budgets:
      - {window: 24h, gpuHours: 0.01}
  researchers: {maxGPUs: 2, maxServers: 2, allowedKinds: [gpu, mig, shared]}
`

// policyLimits mirrors quotaPolicy for the admission invariant (the local cluster's groups: e2e/hub).
func policyLimits(user string) Limits {
	switch user {
	case "alice", "bob":
		return Limits{MaxGPUs: 3.0 / 7, MaxServers: 1, Kinds: []string{"mig", "shared"}}
	case "carol":
		return Limits{MaxGPUs: 2, MaxServers: 2, Kinds: []string{"gpu", "mig", "shared"}}
	}
	return Limits{MaxGPUs: 1, MaxServers: 1, Kinds: []string{"gpu", "mig", "shared"}}
}

// The culler's policy: the shortest periods it allows, so that idle servers are warned and stopped within a run.
const (
	cullerEvery      = 10 * time.Second
	cullerStaleAfter = 10 * time.Second
	idlePeriod       = 40 * time.Second
	// busyLag is how long the telemetry needs to see a busy cell: an agent sample (1 s), a usage-API tick (1 s),
	// the culler's sample (1 s).
	busyLag = 3 * time.Second
	// usageStaleAfter is the usage API's default staleness age: 3 agent sampling intervals of 1 s.
	usageStaleAfter = 3 * time.Second
)

var cullerPolicy = fmt.Sprintf(`every: %s
staleAfter: %s
gpu:
  idlePeriod: %s
  warn: 20s
  utilization: 5%%   # the simulated GPU use is the pod's CPU time: an idle server stays far below, a busy cell above
  snooze: 30s
  maxSnoozes: 1
`, cullerEvery, cullerStaleAfter, idlePeriod)

var (
	st        *stack.Stack
	kube      kubernetes.Interface
	hubAdmin  *hubapi.Client
	quotaURL  string // gpu-quota on loopback, with its prefix
	usageURL  string // the usage API on loopback, with its prefix
	cullerURL string
	// postgresRestart is the script that restarts the ledger's PostgreSQL (scripts/with-postgres.sh); empty: the
	// ledger is SQLite and the PostgreSQL fault is not injected.
	postgresRestart string
	stateDir        string
)

func TestMain(m *testing.M) { os.Exit(setUp(m)) }

func setUp(m *testing.M) int {
	need := map[string]string{}
	for _, k := range []string{"GPUHUB_KUBE_BIN", "GPUHUB_HUB_VENV", "GPUHUB_CHP", "GPUHUB_GPU_AGENT", "GPUHUB_USAGE_API",
		"GPUHUB_GPU_QUOTA", "GPUHUB_GPU_PROFILES", "GPUHUB_GPU_CULLER", "GPUHUB_HELM", "GPUHUB_CHART"} {
		need[k] = os.Getenv(k)
		if need[k] == "" {
			fmt.Fprintf(os.Stderr, "chaos e2e: %s is not set; run the suite with `make chaos` or `make e2e`, which install and build what it needs\n", k)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "gpuhub-chaos-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			panic(err)
		}
		return p
	}
	q := gpuhubstack.QuotaOptions{Binary: need["GPUHUB_GPU_QUOTA"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken(),
		Policy: write("quota.yaml", quotaPolicy)}
	p := gpuhubstack.ProfilesOptions{Binary: need["GPUHUB_GPU_PROFILES"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken()}
	c := gpuhubstack.CullerOptions{Binary: need["GPUHUB_GPU_CULLER"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken(),
		Policy: write("culler.yaml", cullerPolicy), SampleEvery: "1s"}
	g := gpuhubstack.Options{
		Chart:    gpuhubstack.Chart{Helm: need["GPUHUB_HELM"], Dir: need["GPUHUB_CHART"]},
		UsageAPI: need["GPUHUB_USAGE_API"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken(),
		Quota: q, Profiles: p, Culler: c,
	}
	// scripts/with-postgres.sh (make chaos) gives a throw-away PostgreSQL and a script that restarts it.
	if url := os.Getenv("GPUHUB_TEST_POSTGRES_URL"); url != "" {
		g.UsageDatabase = url
		postgresRestart = os.Getenv("GPUHUB_TEST_POSTGRES_RESTART")
		fmt.Fprintln(os.Stderr, "chaos e2e: the usage API's ledger is on PostgreSQL (GPUHUB_TEST_POSTGRES_URL)")
	} else {
		fmt.Fprintln(os.Stderr, "chaos e2e: the usage API's ledger is SQLite (no GPUHUB_TEST_POSTGRES_URL): the PostgreSQL restart is left out")
	}
	quotaURL = gpuhubstack.Quota{Port: q.Port}.URL()
	usageURL = gpuhubstack.Usage{Port: g.Port}.BaseURL()
	cullerURL = gpuhubstack.Culler{Port: c.Port}.URL()
	values, err := gpuhubstack.LocalHubValues(need["GPUHUB_CHART"], gpuhubstack.LocalHub{Services: map[string]gpuhubstack.LocalService{
		gpuhubstack.ServiceName: {Port: g.Port, Token: g.Token}, gpuhubstack.QuotaServiceName: {Port: q.Port, Token: q.Token},
		gpuhubstack.ProfilesServiceName: {Port: p.Port, Token: p.Token}, gpuhubstack.CullerServiceName: {Port: c.Port, Token: c.Token},
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lvl := slog.LevelWarn
	if os.Getenv("GPUHUB_E2E_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	stateDir = filepath.Join(dir, "state")
	st, err = stack.Start(ctx, stack.Options{
		Dir:        stateDir,
		HubValues:  write("hub-values.yaml", string(values)),
		KubeBinDir: need["GPUHUB_KUBE_BIN"], Venv: need["GPUHUB_HUB_VENV"], CHP: need["GPUHUB_CHP"],
		Topology: filepath.Join("..", "topology.yaml"), Password: password,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})),
		GPUAgent: need["GPUHUB_GPU_AGENT"], Components: gpuhubstack.Components(g),
		Progress: func(step string, took time.Duration) {
			fmt.Fprintf(os.Stderr, "chaos e2e: %s (%.1fs)\n", step, took.Seconds())
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos e2e: start local cluster: %v\n", err)
		return 1
	}
	defer st.Stop()
	kube = st.Client
	hubAdmin, err = hubapi.New(hubapi.Config{URL: st.HubURL() + "hub/api", Token: st.Hub.AdminToken()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos e2e: hub client: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "chaos e2e: local cluster with gpu-quota, gpu-profiles and gpu-culler ready in %.1fs, Hub %s\n",
		time.Since(start).Seconds(), st.HubURL())
	return m.Run()
}
