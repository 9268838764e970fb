//go:build e2e

// Package quotae2e runs gpu-quota end to end (issue 10) on its own local GPU cluster: the chart's agents and
// RBAC, the usage API and gpu-quota as processes registered with a real JupyterHub 5.5 + KubeSpawner, the
// chart's Hub glue loaded as hub.extraConfig, spawns through headless Chromium. Its own cluster, because
// gpu-quota changes what every spawn does. Run with `make e2e`.
package quotae2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
	"github.com/gpuhub/gpuhub/e2e/internal/suite"
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
	s, err := suite.Begin("quota e2e", "", suite.QuotaBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	policyPath = s.Write("policy.yaml", basePolicy)
	g := s.Gpuhub()
	g.Quota.Policy = policyPath
	usagePort = g.Port
	quotaURL = gpuhubstack.Quota{Port: g.Quota.Port}.URL()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The chart's z2jh values, as an admin installs them, with the usage API and gpu-quota (no waitlist) on loopback.
	st, hubAdmin, err = s.Start(ctx, g, gpuhubstack.LocalHub{NoWaitlist: true}, stack.Options{
		Password: password, HubServices: []hubproc.Service{{Name: metricsReader, Scopes: []string{"read:metrics"}}},
	})
	if err != nil {
		return s.Fail(err)
	}
	defer st.Stop()
	return m.Run()
}
