//go:build e2e

// Package cullere2e runs gpu-culler side by side with jupyterhub-idle-culler (issue 12, "Side by side") on a local
// GPU cluster of its own: a real control plane, the emulated GPU nodes with the chart's gpu-agents (simulated
// backend, 1 s sampling), the usage API, JupyterHub 5.5 with KubeSpawner and configurable-http-proxy, two
// gpu-culler replicas under the chart's Lease and RBAC with a policy of short periods, and jupyterhub-idle-culler
// 1.4.0 (what z2jh 4.4 runs for cull.*) and the newest release, all against the same Hub. The Hub loads the chart's
// z2jh values file (gpuhubstack.LocalHubValues: gpu-culler's and the usage API's entries and roles, the user role,
// the glue); the idle-cullers are this test's own Hub services. Run with `make e2e`.
//
// # How both cullers' verdicts are observed without one acting on the other's servers
//
// Each culler talks to the Hub through a recording reverse proxy of its own (tap_test.go): every request it
// makes, and the Hub's answer, is recorded with the time. gpu-culler holds the four scopes the issue gives it and
// stops servers for real. jupyterhub-idle-culler runs unmodified, with its usual scopes minus delete:servers: its
// verdict "stop this server" is its DELETE /users/{name}/server(s/{server}) request, which its tap records and the
// Hub itself refuses (403, the Hub's own scope check). So idle-culler decides exactly as in production, on the same
// Hub state at the same moments, and only its stops are withheld, by the Hub; a server that idle-culler would stop
// and gpu-culler keeps stays up for the rest of the scenario. Nothing in either culler is patched or mocked.
//
// Activity: a browser tab open on JupyterLab reports activity to the Hub; the test does what it amounts to, a
// POST /hub/api/users/{name}/activity with the user's own token every few seconds. The "long silent cell" is a
// real ipykernel started through the single-user server's REST API and running a busy loop sent over the kernel's
// websocket, which then closes (the browser closed); the simulated agent counts the kernel's CPU time as its GPU
// use. The snooze goes through the panel in headless Chromium (e2e/browser/culler-snooze.mjs). The agent on a
// node is killed with SIGKILL through the node emulator, and again each time the emulated kubelet restarts it
// (a crash loop), so its telemetry stays stale for the whole scenario. The leader is killed with SIGKILL while
// its DELETE of a server is in flight (its tap holds the Hub's answer), which is mid-pass by construction.
//
// The policy's pass period and staleness bound are the shortest the policy format allows (10 s); the periods
// (idle 40 s, warn 20 s, snooze 30 s) keep the scenarios, which run side by side, under three minutes.
package cullere2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
	"github.com/gpuhub/gpuhub/e2e/internal/suite"
	"github.com/gpuhub/gpuhub/hubapi"
)

const (
	password  = "e2e-password"
	namespace = "jhub"
)

// The test policy and the idle-culler's timings. gpu-culler warns once the GPU has been idle idlePeriod-warn and
// stops at the deadline it showed; jupyterhub-idle-culler stops a server idleTimeout after its last Hub activity.
const (
	every       = 10 * time.Second // the shortest pass period the policy allows
	staleAfter  = 10 * time.Second // the shortest staleness bound the policy allows
	idlePeriod  = 40 * time.Second
	warn        = 20 * time.Second
	snooze      = 30 * time.Second
	idleTimeout = 20 * time.Second // jupyterhub-idle-culler --timeout
	idleEvery   = 2 * time.Second  // jupyterhub-idle-culler --cull-every
	// The Lease, shorter than gpu-culler's defaults (15 s, 10 s, 2 s): the Lease of a dead leader is taken over
	// at the first retry after it expires.
	leaseDuration = 8 * time.Second
	renewDeadline = 5 * time.Second
	leaseRetry    = time.Second
)

var policy = fmt.Sprintf(`# gpu-culler's policy in the side-by-side test: short periods, every GPU server alike.
every: %s
staleAfter: %s
gpu:
  idlePeriod: %s
  warn: %s
  utilization: %d%%   # the simulated GPU use of a busy cell is its kernel's CPU time; an idle server stays far below
  snooze: %s
  maxSnoozes: 2
`, every, staleAfter, idlePeriod, warn, busyPercent, snooze)

// busyPercent is the policy's utilization threshold. The simulated GPU use of the busy cell is its kernel's share
// of a CPU: 60 % on a quiet machine, but once 19.6 % while make test's three lanes shared the two cores (CI,
// stop 45's first run), under the 20 % this was. The idle servers read 0-1 %.
const busyPercent = 5

var (
	st       *stack.Stack
	kube     kubernetes.Interface
	hubAdmin *hubapi.Client
	// cullerTaps[i] records replica i's Hub requests; idleCullers the idle-cullers, each with its tap.
	cullerTaps  []*tap
	idleCullers []*idleCuller
	// replicas are gpu-culler's replicas (component name, base URL).
	replicas []replica
	// usageURL is the usage API's base URL on loopback (api/v1/...).
	usageURL string
)

type replica struct {
	name string // stack component
	url  string // http://127.0.0.1:<port>/services/gpu-culler/
	port int
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	s, err := suite.Begin("culler e2e", "", suite.CullerBin, "GPUHUB_IDLE_CULLER_VENVS")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	g := s.Gpuhub()
	usageURL = gpuhubstack.Usage{Port: g.Port}.URL()

	// Two replicas, each with its own port and tap; the Hub service URL is a front that reaches whichever is up,
	// as the chart's Service does.
	const n = 2
	c := &g.Culler
	c.Policy, c.Replicas, c.SampleEvery = s.Write("culler-policy.yaml", policy), n, "1s"
	c.ExtraArgs = []string{"--lease-duration=" + leaseDuration.String(), "--renew-deadline=" + renewDeadline.String(),
		"--retry-period=" + leaseRetry.String()}
	for i := range n {
		r := replica{name: gpuhubstack.CullerComponentName(i, n), port: cluster.FreePort()}
		r.url = gpuhubstack.Culler{Port: r.port}.URL()
		replicas = append(replicas, r)
		c.ReplicaPorts = append(c.ReplicaPorts, r.port)
		t, err := newTap(context.Background(), r.name)
		if err != nil {
			return s.Fail(err)
		}
		defer t.close()
		cullerTaps = append(cullerTaps, t)
	}
	fr, err := gpuhubstack.NewFront(context.Background(), c.ReplicaPorts)
	if err != nil {
		return s.Fail(err)
	}
	defer fr.Close()
	c.Port = fr.Port
	c.HubAPIURL = func(running *stack.Stack, i int) (string, error) { return cullerTaps[i].to(running.Hub.APIURL()) }

	// The idle-cullers are this test's own Hub services; gpuhub's come from the chart's z2jh values (below).
	var services []hubproc.Service
	for _, venv := range strings.Fields(s.Env["GPUHUB_IDLE_CULLER_VENVS"]) {
		ic, err := newIdleCuller(context.Background(), venv)
		if err != nil {
			return s.Fail(err)
		}
		defer ic.tap.close()
		idleCullers = append(idleCullers, ic)
		services = append(services, ic.hubService())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The chart's z2jh values, as an admin installs them, with the usage API and gpu-culler (its front) on loopback:
	// their roles, and the user role through which the panel reaches both.
	st, hubAdmin, err = s.Start(ctx, g, gpuhubstack.LocalHub{NoWaitlist: true}, stack.Options{Password: password, HubServices: services})
	if err != nil {
		return s.Fail(err)
	}
	defer st.Stop()
	kube = st.Client
	for _, ic := range idleCullers {
		if err := ic.start(ctx, st); err != nil {
			return s.Fail(err)
		}
		defer ic.stop()
	}
	fmt.Fprintf(os.Stderr, "culler e2e: %d idle-cullers ready\n", len(idleCullers))
	return m.Run()
}
