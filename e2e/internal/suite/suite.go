// Package suite holds the set-up the end-to-end suites (e2e/quotae2e, profilese2e, cullere2e, waitliste2e,
// chaose2e) share in their TestMain: the GPUHUB_* environment `make e2e` sets, a temp dir for the suite's files,
// gpuhub's services each on a free port with a fresh token, and the local cluster started with them. Each suite
// keeps its own policies, users, timings and assertions.
package suite

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/hubapi"
)

// Required is what every suite needs: the control plane, the Hub and its proxy, the agents, the usage API and the
// chart.
var Required = []string{"GPUHUB_KUBE_BIN", "GPUHUB_HUB_VENV", "GPUHUB_CHP", "GPUHUB_GPU_AGENT", "GPUHUB_USAGE_API",
	"GPUHUB_HELM", "GPUHUB_CHART"}

// The binaries of the services a suite may run besides the usage API; Gpuhub runs those the suite needs.
const (
	QuotaBin    = "GPUHUB_GPU_QUOTA"
	ProfilesBin = "GPUHUB_GPU_PROFILES"
	CullerBin   = "GPUHUB_GPU_CULLER"
)

// Suite is one suite's TestMain.
type Suite struct {
	Name string            // "quota e2e": what its messages start with
	Env  map[string]string // Required and the suite's own variables, all set
	Dir  string            // the suite's files; Close removes it
}

// Begin checks that Required and need are set, else says to run the suite with target (default "`make e2e`"),
// which sets them, and makes the suite's temp dir.
func Begin(name, target string, need ...string) (*Suite, error) {
	if target == "" {
		target = "`make e2e`"
	}
	env := map[string]string{}
	for _, k := range slices.Concat(Required, need) {
		if env[k] = os.Getenv(k); env[k] == "" {
			return nil, fmt.Errorf("%s: %s is not set; run the suite with %s, which installs and builds what it needs", name, k, target)
		}
	}
	dir, err := os.MkdirTemp("", "gpuhub-"+strings.ReplaceAll(name, " ", "-")+"-")
	if err != nil {
		return nil, err
	}
	return &Suite{Name: name, Env: env, Dir: dir}, nil
}

// Close removes the suite's files.
func (s *Suite) Close() { _ = os.RemoveAll(s.Dir) }

// Fail says err on stderr after the suite's name and returns TestMain's exit status, 1.
func (s *Suite) Fail(err error) int {
	fmt.Fprintf(os.Stderr, "%s: %v\n", s.Name, err)
	return 1
}

// Write writes text to name in the suite's dir and returns its path. It panics on an error: a temp dir that cannot
// be written is a broken machine, not a test result.
func (s *Suite) Write(name, text string) string {
	p := filepath.Join(s.Dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		panic(err)
	}
	return p
}

// Gpuhub is gpuhub as the environment has it: the chart and the usage API, and gpu-quota, gpu-profiles and
// gpu-culler where the suite needs their binary, each on a port of 127.0.0.1 of its own that was free a moment ago, with a fresh Hub token. The suite
// adds its policies and settings.
func (s *Suite) Gpuhub() gpuhubstack.Options {
	ports := cluster.FreePorts(4) // distinct: one each
	g := gpuhubstack.Options{
		Chart:    gpuhubstack.Chart{Helm: s.Env["GPUHUB_HELM"], Dir: s.Env["GPUHUB_CHART"]},
		UsageAPI: s.Env["GPUHUB_USAGE_API"], Port: ports[0], Token: gpuhubstack.NewToken(),
	}
	if bin := s.Env[QuotaBin]; bin != "" {
		g.Quota = gpuhubstack.QuotaOptions{Binary: bin, Port: ports[1], Token: gpuhubstack.NewToken()}
	}
	if bin := s.Env[ProfilesBin]; bin != "" {
		g.Profiles = gpuhubstack.ProfilesOptions{Binary: bin, Port: ports[2], Token: gpuhubstack.NewToken()}
	}
	if bin := s.Env[CullerBin]; bin != "" {
		g.Culler = gpuhubstack.CullerOptions{Binary: bin, Port: ports[3], Token: gpuhubstack.NewToken()}
	}
	return g
}

// Start starts the local cluster on e2e/topology.yaml with g's components, after a Hub that loads the chart's z2jh
// values with g's services on loopback (local says what else differs); opts holds the suite's own stack settings
// (Password, Dir, HubServices). The steps go to stderr, and the stack's log too, at debug level with
// GPUHUB_E2E_DEBUG set, else warnings only. It returns the stack, whose Stop also scans its logs for tokens, and a
// client of its Hub's API as the admin.
func (s *Suite) Start(ctx context.Context, g gpuhubstack.Options, local gpuhubstack.LocalHub, opts stack.Options) (*stack.Stack, *hubapi.Client, error) {
	local.Services = g.LocalServices()
	values, err := gpuhubstack.LocalHubValues(g.Chart.Dir, local)
	if err != nil {
		return nil, nil, err
	}
	lvl := slog.LevelWarn
	if os.Getenv("GPUHUB_E2E_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	opts.HubValues = s.Write("hub-values.yaml", string(values))
	opts.KubeBinDir, opts.Venv, opts.CHP = s.Env["GPUHUB_KUBE_BIN"], s.Env["GPUHUB_HUB_VENV"], s.Env["GPUHUB_CHP"]
	opts.Topology, opts.GPUAgent = filepath.Join("..", "topology.yaml"), s.Env["GPUHUB_GPU_AGENT"]
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	opts.Components = append(opts.Components, gpuhubstack.Components(g)...)
	opts.Progress = func(step string, took time.Duration) {
		fmt.Fprintf(os.Stderr, "%s: %s (%.1fs)\n", s.Name, step, took.Seconds())
	}
	start := time.Now()
	st, err := stack.Start(ctx, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("start local cluster: %w", err)
	}
	admin, err := hubapi.New(hubapi.Config{URL: st.HubURL() + "hub/api", Token: st.Hub.AdminToken()})
	if err != nil {
		st.Stop()
		return nil, nil, fmt.Errorf("hub client: %w", err)
	}
	fmt.Fprintf(os.Stderr, "%s: local cluster with %s ready in %.1fs, Hub %s\n", s.Name,
		strings.Join(slices.Sorted(maps.Keys(local.Services)), ", "), time.Since(start).Seconds(), st.HubURL())
	return st, admin, nil
}
