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
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
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
  utilization: 20%%   # the simulated GPU use of a busy cell is its kernel's CPU time; an idle server stays far below
  snooze: %s
  maxSnoozes: 2
`, every, staleAfter, idlePeriod, warn, snooze)

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
	need := map[string]string{}
	for _, k := range []string{"GPUHUB_KUBE_BIN", "GPUHUB_HUB_VENV", "GPUHUB_CHP", "GPUHUB_GPU_AGENT", "GPUHUB_USAGE_API",
		"GPUHUB_GPU_CULLER", "GPUHUB_HELM", "GPUHUB_CHART", "GPUHUB_IDLE_CULLER_VENVS"} {
		need[k] = os.Getenv(k)
		if need[k] == "" {
			fmt.Fprintf(os.Stderr, "culler e2e: %s is not set; run the suite with `make e2e`, which installs and builds what it needs\n", k)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "gpuhub-culler-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	policyPath := filepath.Join(dir, "culler-policy.yaml")
	if err := os.WriteFile(policyPath, []byte(policy), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	// Two replicas, each with its own port and tap; the Hub service URL is a front that reaches whichever is up,
	// as the chart's Service does.
	const n = 2
	c := gpuhubstack.CullerOptions{Binary: need["GPUHUB_GPU_CULLER"], Token: gpuhubstack.NewToken(), Policy: policyPath,
		Replicas: n, SampleEvery: "1s",
		ExtraArgs: []string{"--lease-duration=" + leaseDuration.String(), "--renew-deadline=" + renewDeadline.String(),
			"--retry-period=" + leaseRetry.String()}}
	for i := range n {
		r := replica{name: gpuhubstack.CullerComponentName(i, n), port: cluster.FreePort()}
		r.url = gpuhubstack.Culler{Port: r.port}.URL()
		replicas = append(replicas, r)
		c.ReplicaPorts = append(c.ReplicaPorts, r.port)
		t, err := newTap(context.Background(), r.name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer t.close()
		cullerTaps = append(cullerTaps, t)
	}
	fr, err := newFront(context.Background(), c.ReplicaPorts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer fr.close()
	c.Port = fr.port
	c.HubAPIURL = func(s *stack.Stack, i int) (string, error) { return cullerTaps[i].to(s.Hub.APIURL()) }

	// The idle-cullers are this test's own Hub services; gpuhub's come from the chart's z2jh values (below).
	var services []hubproc.Service
	for _, venv := range strings.Fields(need["GPUHUB_IDLE_CULLER_VENVS"]) {
		ic, err := newIdleCuller(context.Background(), venv)
		if err != nil {
			fmt.Fprintf(os.Stderr, "culler e2e: %v\n", err)
			return 1
		}
		defer ic.tap.close()
		idleCullers = append(idleCullers, ic)
		services = append(services, ic.hubService())
	}

	g := gpuhubstack.Options{
		Chart:    gpuhubstack.Chart{Helm: need["GPUHUB_HELM"], Dir: need["GPUHUB_CHART"]},
		UsageAPI: need["GPUHUB_USAGE_API"], Port: cluster.FreePort(), Token: gpuhubstack.NewToken(), Culler: c,
	}
	usageURL = gpuhubstack.Usage{Port: g.Port}.URL()
	// The chart's z2jh values, as an admin installs them, with the usage API and gpu-culler (its front) on loopback:
	// their roles, and the user role through which the panel reaches both.
	values, err := gpuhubstack.LocalHubValues(need["GPUHUB_CHART"], gpuhubstack.LocalHub{NoWaitlist: true, Services: map[string]gpuhubstack.LocalService{
		gpuhubstack.ServiceName: {Port: g.Port, Token: g.Token}, gpuhubstack.CullerServiceName: {Port: c.Port, Token: c.Token},
	}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "culler e2e: %v\n", err)
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
		HubServices: services,
		HubValues:   valuesPath,
		KubeBinDir:  need["GPUHUB_KUBE_BIN"], Venv: need["GPUHUB_HUB_VENV"], CHP: need["GPUHUB_CHP"],
		Topology: filepath.Join("..", "topology.yaml"), Password: password,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})),
		GPUAgent: need["GPUHUB_GPU_AGENT"], Components: gpuhubstack.Components(g),
		Progress: func(step string, took time.Duration) {
			fmt.Fprintf(os.Stderr, "culler e2e: %s (%.1fs)\n", step, took.Seconds())
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "culler e2e: start local cluster: %v\n", err)
		return 1
	}
	defer st.Stop()
	kube = st.Client
	hubAdmin, err = hubapi.New(hubapi.Config{URL: st.HubURL() + "hub/api", Token: st.Hub.AdminToken()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "culler e2e: hub client: %v\n", err)
		return 1
	}
	for _, ic := range idleCullers {
		if err := ic.start(ctx, st); err != nil {
			fmt.Fprintf(os.Stderr, "culler e2e: %v\n", err)
			return 1
		}
		defer ic.stop()
	}
	fmt.Fprintf(os.Stderr, "culler e2e: local cluster with 2 gpu-culler replicas and %d idle-cullers ready in %.1fs, Hub %s\n",
		len(idleCullers), time.Since(start).Seconds(), st.HubURL())
	return m.Run()
}
