//go:build e2e

package chaose2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/suite"
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
	st       *stack.Stack
	kube     kubernetes.Interface
	hubAdmin *hubapi.Client
	quotaURL string // gpu-quota on loopback, with its prefix
	usageURL string // the usage API on loopback, with its prefix
	// postgresRestart is the script that restarts the ledger's PostgreSQL (scripts/with-postgres.sh); empty: the
	// ledger is SQLite and the PostgreSQL fault is not injected.
	postgresRestart string
	stateDir        string
	// replicaPorts are each service's replicas' ports (its process names: gpuhubstack.ReplicaName), behind the
	// front its URL above names, as the chart's Service is in front of its pods.
	replicaPorts = map[string][]int{}
)

// replicas is how many of each gpuhub service run (the usage API's only on PostgreSQL: SQLite has one writer).
const replicas = 2

func TestMain(m *testing.M) { os.Exit(setUp(m)) }

func setUp(m *testing.M) int {
	s, err := suite.Begin("chaos e2e", "`make chaos` (or `make e2e`)", suite.QuotaBin, suite.ProfilesBin, suite.CullerBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	g := s.Gpuhub()
	g.Quota.Policy = s.Write("quota.yaml", quotaPolicy)
	g.Culler.Policy, g.Culler.SampleEvery = s.Write("culler.yaml", cullerPolicy), "1s"
	// scripts/with-postgres.sh (make chaos) gives a throw-away PostgreSQL and a script that restarts it.
	if url := os.Getenv("GPUHUB_TEST_POSTGRES_URL"); url != "" {
		g.UsageDatabase = url
		postgresRestart = os.Getenv("GPUHUB_TEST_POSTGRES_RESTART")
		fmt.Fprintln(os.Stderr, "chaos e2e: the usage API's ledger is on PostgreSQL (GPUHUB_TEST_POSTGRES_URL)")
	} else {
		fmt.Fprintln(os.Stderr, "chaos e2e: the usage API's ledger is SQLite (no GPUHUB_TEST_POSTGRES_URL): the PostgreSQL restart is left out")
	}
	// Two replicas of each service, each on its own port, behind a front that stands for the chart's Service and
	// spreads requests over them: the standbys relay (gpu-quota) and answer (the others) as much as the holders.
	ports := cluster.FreePorts(4 * replicas)
	usageReplicas := 1
	if g.UsageDatabase != "" {
		usageReplicas = replicas
	}
	for i, sv := range []struct {
		service string
		n       int
		port    *int
		set     func(n int, ports []int)
	}{
		{gpuhubstack.ServiceName, usageReplicas, &g.Port, func(n int, p []int) { g.UsageReplicas, g.UsageReplicaPorts = n, p }},
		{gpuhubstack.QuotaServiceName, replicas, &g.Quota.Port, func(n int, p []int) { g.Quota.Replicas, g.Quota.ReplicaPorts = n, p }},
		{gpuhubstack.ProfilesServiceName, replicas, &g.Profiles.Port, func(n int, p []int) { g.Profiles.Replicas, g.Profiles.ReplicaPorts = n, p }},
		{gpuhubstack.CullerServiceName, replicas, &g.Culler.Port, func(n int, p []int) { g.Culler.Replicas, g.Culler.ReplicaPorts = n, p }},
	} {
		own := ports[i*replicas : i*replicas+sv.n]
		if sv.n == 1 {
			replicaPorts[sv.service] = []int{*sv.port}
			continue
		}
		front, err := gpuhubstack.NewBalancedFront(context.Background(), own)
		if err != nil {
			return s.Fail(err)
		}
		defer front.Close()
		*sv.port = front.Port
		sv.set(sv.n, own)
		replicaPorts[sv.service] = own
	}
	fmt.Fprintf(os.Stderr, "chaos e2e: %d usage API, %d gpu-quota, %d gpu-profiles and %d gpu-culler replicas\n",
		usageReplicas, replicas, replicas, replicas)
	quotaURL = gpuhubstack.Quota{Port: g.Quota.Port}.URL()
	usageURL = gpuhubstack.Usage{Port: g.Port}.BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stateDir = filepath.Join(s.Dir, "state")
	st, hubAdmin, err = s.Start(ctx, g, gpuhubstack.LocalHub{}, stack.Options{Password: password, Dir: stateDir})
	if err != nil {
		return s.Fail(err)
	}
	defer st.Stop()
	kube = st.Client
	return m.Run()
}
