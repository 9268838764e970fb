//go:build e2e

// Package waitliste2e runs issue 13's story on a local GPU cluster of its own: a real control plane, the emulated
// GPU nodes with the chart's gpu-agents (simulated backend), the usage API (the queue is kept in its ledger
// database), gpu-quota with its waitlist, gpu-profiles (the spawn form), gpu-culler with a contention-aware policy,
// and JupyterHub 5.5 with KubeSpawner, configurable-http-proxy and the chart's Hub glue (GPUHUB_WAITLIST on), all
// as `make demo` runs them. Run with `make e2e`.
//
// The story (TestWaitlistStory): carol holds both H100s, one of them idle; alice used an H100 a while ago; bob,
// with a CPU server open in JupyterLab, joins the waitlist for an H100 from the spawn form in Chromium with
// "start my server automatically", alice joins after him; bob is first (he used less recently). The queue makes
// the H100 class contended, so gpu-culler warns carol and stops her idle server after the shorter
// idleWhenContended; gpu-quota holds the freed H100 for bob and starts his server through the Hub; bob's panel
// says so; alice becomes first.
package waitliste2e

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
	// exemptAnnotation marks carol's long job: gpu-culler's policy exempts pods with it.
	exemptAnnotation = "gpuhub.io/long-job"
	h100             = "gpu-h100-80gb-hbm3" // gpu-profiles' slug of a whole H100
)

// The quota policy: students may take a whole GPU too (the story's bob and alice wait for H100s).
const quotaPolicy = `onUnavailable: open
default: {maxGPUs: 1, maxServers: 2}
groups:
  students: {maxGPUs: 1, maxServers: 2, allowedKinds: [gpu, mig, shared]}
  researchers: {maxGPUs: 2, maxServers: 3, allowedKinds: [gpu, mig, shared]}
`

// The culler policy: an idle GPU server is left alone for half an hour, unless someone waits for its kind.
var cullerPolicy = fmt.Sprintf(`every: 10s
staleAfter: 10s
gpu:
  idlePeriod: 30m
  idleWhenContended: %s
  warn: %s
  utilization: 20%%
  snooze: 30s
  maxSnoozes: 1
exempt:
  annotations: {%q: "*"}
`, idleWhenContended, warn, exemptAnnotation)

const (
	idleWhenContended = 90 * time.Second
	warn              = 60 * time.Second // long enough for bob to see his place in the panel before his turn
	hold              = 3 * time.Minute
	adminSessionTTL   = 20 * time.Second
)

var (
	st       *stack.Stack
	kube     kubernetes.Interface
	hubAdmin *hubapi.Client
	quotaURL string // gpu-quota on loopback, with its prefix
	usageURL string // the usage API on loopback, with its prefix
	// metricsURLs are every service's /metrics on loopback, by name.
	metricsURLs map[string]string
	cullerURL   string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	need := map[string]string{}
	for _, k := range []string{"GPUHUB_KUBE_BIN", "GPUHUB_HUB_VENV", "GPUHUB_CHP", "GPUHUB_GPU_AGENT", "GPUHUB_USAGE_API",
		"GPUHUB_GPU_QUOTA", "GPUHUB_GPU_PROFILES", "GPUHUB_GPU_CULLER", "GPUHUB_HELM", "GPUHUB_CHART"} {
		need[k] = os.Getenv(k)
		if need[k] == "" {
			fmt.Fprintf(os.Stderr, "waitlist e2e: %s is not set; run the suite with `make e2e`, which installs and builds what it needs\n", k)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "gpuhub-waitlist-e2e-")
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
		Policy: write("quota.yaml", quotaPolicy), Waitlist: true, WaitlistHold: hold.String()}
	p := gpuhubstack.ProfilesOptions{Binary: need["GPUHUB_GPU_PROFILES"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken()}
	c := gpuhubstack.CullerOptions{Binary: need["GPUHUB_GPU_CULLER"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken(),
		Policy: write("culler.yaml", cullerPolicy), SampleEvery: "1s"}
	g := gpuhubstack.Options{
		Chart:    gpuhubstack.Chart{Helm: need["GPUHUB_HELM"], Dir: need["GPUHUB_CHART"]},
		UsageAPI: need["GPUHUB_USAGE_API"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken(),
		// Short admin view sessions: TestAdminView sees an expired cookie of a revoked login refused.
		SessionTTL: adminSessionTTL.String(),
		Quota:      q, Profiles: p, Culler: c,
	}
	quotaURL = gpuhubstack.Quota{Port: q.Port}.URL()
	usageURL = gpuhubstack.Usage{Port: g.Port}.BaseURL()
	metricsURLs = map[string]string{}
	for name, port := range map[string]int{"usage-api": g.Port, "gpu-quota": q.Port, "gpu-profiles": p.Port, "gpu-culler": c.Port} {
		metricsURLs[name] = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	}
	cullerURL = gpuhubstack.Culler{Port: c.Port}.URL()
	// The chart's z2jh values, as an admin installs them, with every service on loopback.
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
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	st, err = stack.Start(ctx, stack.Options{
		HubValues:  write("hub-values.yaml", string(values)),
		KubeBinDir: need["GPUHUB_KUBE_BIN"], Venv: need["GPUHUB_HUB_VENV"], CHP: need["GPUHUB_CHP"],
		Topology: filepath.Join("..", "topology.yaml"), Password: password,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})),
		GPUAgent: need["GPUHUB_GPU_AGENT"], Components: gpuhubstack.Components(g),
		Progress: func(step string, took time.Duration) {
			fmt.Fprintf(os.Stderr, "waitlist e2e: %s (%.1fs)\n", step, took.Seconds())
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "waitlist e2e: start local cluster: %v\n", err)
		return 1
	}
	defer st.Stop()
	kube = st.Client
	hubAdmin, err = hubapi.New(hubapi.Config{URL: st.HubURL() + "hub/api", Token: st.Hub.AdminToken()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "waitlist e2e: hub client: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "waitlist e2e: local cluster with gpu-quota's waitlist, gpu-profiles and gpu-culler ready in %.1fs, Hub %s\n",
		time.Since(start).Seconds(), st.HubURL())
	return m.Run()
}
