//go:build e2e

// Package e2etest runs end-to-end tests on the local GPU cluster: a real control plane and
// scheduler, emulated GPU nodes, JupyterHub with KubeSpawner, configured with the chart's z2jh values
// (gpuhubstack.LocalHubValues) with the usage API as the one gpuhub service. Run with `make e2e`, which
// installs and builds what the tests need and sets GPUHUB_KUBE_BIN, GPUHUB_HUB_VENV, GPUHUB_CHP,
// GPUHUB_CHART, GPUHUB_BROWSER_MODULES and GPUHUB_CHROMIUM.
package e2etest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/hubapi"
)

const password = "e2e-password"

var (
	st       *stack.Stack
	hubAdmin *hubapi.Client
	// usagePort is where TestUsageAPI runs the usage API; the Hub knows it as service gpu-usage, with
	// usageToken as its api_token.
	usagePort  int
	usageToken string
	// timings of the harness, reported at the end.
	controlPlaneReady time.Duration
	stackReady        time.Duration
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	need := map[string]string{}
	for _, k := range []string{"GPUHUB_KUBE_BIN", "GPUHUB_HUB_VENV", "GPUHUB_CHP"} {
		need[k] = os.Getenv(k)
		if need[k] == "" {
			fmt.Fprintf(os.Stderr, "e2e: %s is not set; run the suite with `make e2e`, which installs what it needs\n", k)
			return 1
		}
	}
	lvl := slog.LevelWarn
	if os.Getenv("GPUHUB_E2E_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	// The chart's z2jh values, as an admin installs them, with only the usage API, on loopback.
	chartDir := os.Getenv("GPUHUB_CHART")
	if chartDir == "" {
		chartDir = filepath.Join("..", "..", "chart", "gpuhub")
	}
	usagePort, usageToken = cluster.FreePort(), gpuhubstack.NewToken()
	values, err := gpuhubstack.LocalHubValues(chartDir, gpuhubstack.LocalHub{NoWaitlist: true, Services: map[string]gpuhubstack.LocalService{
		gpuhubstack.ServiceName: {Port: usagePort, Token: usageToken},
	}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "gpuhub-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	valuesPath := filepath.Join(dir, "hub-values.yaml")
	if err := os.WriteFile(valuesPath, values, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	st, err = stack.Start(ctx, stack.Options{
		HubValues:  valuesPath,
		KubeBinDir: need["GPUHUB_KUBE_BIN"], Venv: need["GPUHUB_HUB_VENV"], CHP: need["GPUHUB_CHP"],
		Topology: filepath.Join("..", "topology.yaml"), Password: password, Logger: logger,
		GPUAgent: os.Getenv("GPUHUB_GPU_AGENT"),
		Progress: func(step string, took time.Duration) {
			fmt.Fprintf(os.Stderr, "e2e: %s (%.1fs)\n", step, took.Seconds())
			if controlPlaneReady == 0 {
				controlPlaneReady = took
			}
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: start local cluster: %v\n", err)
		return 1
	}
	stackReady = time.Since(start)
	fmt.Fprintf(os.Stderr, "e2e: local cluster ready in %.1fs (control plane %.1fs), Hub %s\n",
		stackReady.Seconds(), controlPlaneReady.Seconds(), st.HubURL())
	hubAdmin, err = hubapi.New(hubapi.Config{URL: st.HubURL() + "hub/api", Token: st.Hub.AdminToken()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: hub client: %v\n", err)
		st.Stop()
		return 1
	}

	code := m.Run()

	// Clean shutdown: no process of the harness may survive and its ports must be free.
	pids := st.ControlPlane.Pids()
	for k, v := range st.Emulator.Processes() {
		for _, pid := range v {
			pids["pod "+k] = pid
		}
	}
	apiHost := st.ControlPlane.URL[len("https://"):]
	t0 := time.Now()
	st.Stop()
	fmt.Fprintf(os.Stderr, "e2e: stopped in %.1fs\n", time.Since(t0).Seconds())
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			fmt.Fprintf(os.Stderr, "e2e: FAIL: %s (pid %d) still running after Stop\n", name, pid)
			code = 1
		}
	}
	d := net.Dialer{Timeout: time.Second}
	if c, err := d.DialContext(context.Background(), "tcp", apiHost); err == nil {
		c.Close()
		fmt.Fprintf(os.Stderr, "e2e: FAIL: API server port %s still open after Stop\n", apiHost)
		code = 1
	}
	return code
}
