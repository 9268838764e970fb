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
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/suite"
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
	s, err := suite.Begin("waitlist e2e", "", suite.QuotaBin, suite.ProfilesBin, suite.CullerBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	g := s.Gpuhub()
	g.Quota.Policy, g.Quota.Waitlist, g.Quota.WaitlistHold = s.Write("quota.yaml", quotaPolicy), true, hold.String()
	g.Culler.Policy, g.Culler.SampleEvery = s.Write("culler.yaml", cullerPolicy), "1s"
	// Short admin view sessions: TestAdminView sees an expired cookie of a revoked login refused.
	g.SessionTTL = adminSessionTTL.String()
	quotaURL = gpuhubstack.Quota{Port: g.Quota.Port}.URL()
	usageURL = gpuhubstack.Usage{Port: g.Port}.BaseURL()
	metricsURLs = map[string]string{}
	for name, port := range map[string]int{"usage-api": g.Port, "gpu-quota": g.Quota.Port, "gpu-profiles": g.Profiles.Port, "gpu-culler": g.Culler.Port} {
		metricsURLs[name] = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	}
	cullerURL = gpuhubstack.Culler{Port: g.Culler.Port}.URL()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The chart's z2jh values, as an admin installs them, with every service on loopback.
	st, hubAdmin, err = s.Start(ctx, g, gpuhubstack.LocalHub{}, stack.Options{Password: password})
	if err != nil {
		return s.Fail(err)
	}
	defer st.Stop()
	kube = st.Client
	return m.Run()
}
