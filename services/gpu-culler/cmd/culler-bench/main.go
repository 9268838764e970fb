// Command culler-bench measures a gpu-culler pass (benchmarks.md B3) against jupyterhub-idle-culler on the same
// real JupyterHub (10,000 users, 2,000 running servers) with the servers' pods in a real kube-apiserver and
// telemetry for all of them, and prints a table (and writes it to --out). `make bench-culler` runs it; `-short`
// is a quick smoke run of the harness (small fleet, one run), not a measurement.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/bench"
	"github.com/gpuhub/gpuhub/services/internal/benchfile"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("culler-bench", flag.ContinueOnError)
	o := bench.RunOptions{Out: os.Stdout, Fleet: bench.DefaultFleet}
	fs.StringVar(&o.KubeBin, "kube-bin", os.Getenv("GPUHUB_KUBE_BIN"), "directory with kube-apiserver, kube-scheduler, kube-controller-manager (env GPUHUB_KUBE_BIN)")
	fs.StringVar(&o.Etcd, "etcd", os.Getenv("GPUHUB_ETCD"), "etcd executable (env GPUHUB_ETCD; default: etcd on PATH)")
	fs.StringVar(&o.HubVenv, "hub-venv", os.Getenv("GPUHUB_HUB_VENV"), "JupyterHub 5.5 venv with jupyterhub-idle-culler 1.4.0 (env GPUHUB_HUB_VENV; make venv-hub55)")
	fs.StringVar(&o.CullerBin, "culler", os.Getenv("GPUHUB_CULLER_BIN"), "gpu-culler binary (env GPUHUB_CULLER_BIN; empty: measure the anchor alone)")
	cullerArgs := fs.String("culler-args", "", "extra gpu-culler flags, space-separated (e.g. --log-level=debug)")
	fs.StringVar(&o.IdleCuller, "idle-culler-python", "", "Python with jupyterhub_idle_culler (default: the Hub venv's)")
	fs.IntVar(&o.Fleet.Users, "users", o.Fleet.Users, "Hub users")
	fs.IntVar(&o.Fleet.Servers, "servers", o.Fleet.Servers, "running servers (each a pod and a telemetry entry)")
	fs.IntVar(&o.Fleet.IdleEvery, "idle-every", o.Fleet.IdleEvery, "every n-th server is idle with a due notice (stopped by gpu-culler)")
	fs.IntVar(&o.Fleet.StaleEvery, "stale-every", o.Fleet.StaleEvery, "every n-th server has stale telemetry (never stopped)")
	fs.IntVar(&o.Runs, "runs", 3, "runs; each measures both cullers, interleaved")
	// 6 passes of 10 s and an idle phase of 60 s each span whole periods of the Hub's own 30 s spawner poll, so
	// that "Hub CPU less idle" subtracts that background exactly rather than by chance.
	fs.IntVar(&o.Passes, "passes", 6, "measured passes of each culler per run (after one warm-up pass)")
	fs.DurationVar(&o.Every, "every", 10*time.Second, "gpu-culler's policy every (10s at least)")
	fs.DurationVar(&o.IdleCullEvery, "idle-cull-every", 10*time.Second, "jupyterhub-idle-culler --cull-every")
	fs.DurationVar(&o.IdleWindow, "idle-window", 60*time.Second, "per run, the phase without a culler (the Hub's idle CPU and probe baseline); whole periods of the Hub's 30 s spawner poll")
	fs.Float64Var(&o.ProbeRate, "probe-rate", 50, "GET /hub/api/ probes per second, open loop")
	fs.DurationVar(&o.Gap, "gap", time.Second, "quiet time that ends a pass's burst of Hub requests")
	fs.StringVar(&o.HubCPU, "hub-cpu", "0", "CPU list the Hub is pinned to (taskset; empty: not pinned); run this command on the others")
	fs.StringVar(&o.LogDir, "log-dir", "", "keep the cullers' logs here (default: removed at the end)")
	short := fs.Bool("short", false, "smoke run of the harness: 300 users, 40 servers, one run of one pass each (no timed assertions)")
	out := fs.String("out", "", "also write the table, with the date, machine, commit and flags, to this markdown file (make bench-culler: docs/benchmarks/culler.md)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	header := benchfile.New(ctx, "B3 culler pass (gpu-culler)", "make bench-culler", fs)
	var table bytes.Buffer
	o.Report = &table
	if *short {
		// Through the flags, so that the result file's flags say what ran.
		for name, value := range map[string]string{"users": "300", "servers": "40", "idle-every": "10", "stale-every": "20",
			"runs": "1", "passes": "1", "idle-window": "3s", "idle-cull-every": "3s"} {
			if err := fs.Set(name, value); err != nil {
				fmt.Fprintln(os.Stderr, "culler-bench:", err)
				return 2
			}
		}
		_, header.All = benchfile.Flags(fs)
	}
	if *cullerArgs != "" {
		o.CullerArgs = strings.Fields(*cullerArgs)
	}
	if o.HubVenv == "" || o.KubeBin == "" {
		fmt.Fprintln(os.Stderr, "culler-bench: --hub-venv and --kube-bin are required (make bench-culler sets them)")
		return 2
	}
	if o.Every < 10*time.Second {
		fmt.Fprintln(os.Stderr, "culler-bench: --every must be 10s or more (the policy's minimum)")
		return 2
	}
	err := bench.Run(ctx, o)
	// A run that printed its table and then failed a check (a busy server stopped) is a result too: its table
	// says so.
	if table.Len() > 0 {
		if werr := benchfile.WriteTable(os.Stdout, *out, header, table.String()); werr != nil {
			fmt.Fprintln(os.Stderr, "culler-bench:", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "culler-bench:", err)
		return 1
	}
	return 0
}
