// Command usage-bench runs the usage API benchmarks (docs benchmarks.md B1, B5): `usage-bench run` prints the
// table (and writes it to --out); the other subcommands are the pieces it re-executes on pinned CPUs.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/benchfile"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/bench"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: usage-bench run|sut|floor|load|footprint [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1], os.Args[2:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	users := fs.Int("users", 10000, "synthetic Hub users")
	gpus := fs.Int("gpus", 1000, "synthetic GPUs")
	pods := fs.Int("pods", 10000, "synthetic GPU pods")
	rate := fs.Float64("rate", 2000, "requests per second (open loop)")
	duration := fs.Duration("duration", 10*time.Second, "measured time per run")
	warmup := fs.Duration("warmup", 3*time.Second, "warm-up per run")
	runs := fs.Int("runs", 3, "runs per target")
	saturation := fs.String("saturation", "4000,8000", "extra rates to offer the usage API once each")
	target := fs.String("target", "", "load: usage=<base URL>[,<base URL>...] (in turns) or hub=<API URL>|<token>")
	sutCPU := fs.String("sut-cpu", "0", "CPU list for the servers (taskset); empty: no pinning")
	loadCPU := fs.String("load-cpu", "1", "CPU list for the load generator")
	hubVenv := fs.String("hub-venv", "", "JupyterHub virtualenv for the anchor; empty: no anchor")
	chp := fs.String("chp", "", "configurable-http-proxy for the anchor Hub")
	fpGPUs := fs.Int("footprint-gpus", 1000, "GPUs of history for the footprint measurement")
	floorBytes := fs.Int("floor-bytes", 4096, "floor: size of the fixed answer")
	profileDir := fs.String("profile-dir", "", "run: write the SUT's CPU profile (during the first run) and heap profile here")
	anchorRate := fs.Float64("anchor-rate", 200, "also compare with the Hub at this rate, which it can sustain (0: no)")
	postgresURL := fs.String("postgres-url", "", "run: also measure two usage-API replicas sharing a ledger on this PostgreSQL (postgres://...; make bench-usage starts one), the load spread over both; empty: one replica only")
	ledgerDSN := fs.String("ledger", "", "sut: the ledger's postgres:// URL (empty: SQLite in a temporary directory)")
	follow := fs.Bool("follow", false, "sut: follow the ledger's writer instead of writing it (a replica without the Lease)")
	out := fs.String("out", "", "run: also write the table, with the date, machine, commit and flags, to this markdown file (make bench-usage: docs/benchmarks/usage.md)")
	_ = fs.Parse(args)

	switch cmd {
	case "run":
		header := benchfile.New(ctx, "B1/B5 usage API (usage-api)", "make bench-usage", fs)
		self, err := os.Executable()
		if err != nil {
			return err
		}
		var sat []float64
		for s := range strings.SplitSeq(*saturation, ",") {
			if v, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
				sat = append(sat, v)
			}
		}
		var table bytes.Buffer
		if err := bench.Run(ctx, bench.RunOptions{Self: self, Users: *users, GPUs: *gpus, Pods: *pods, Rate: *rate,
			Duration: *duration, Warmup: *warmup, Runs: *runs, SaturationRates: sat, SUTCPU: *sutCPU, LoadCPU: *loadCPU,
			HubVenv: *hubVenv, CHP: *chp, Out: os.Stdout, FootprintGPUs: *fpGPUs, AnchorRate: *anchorRate,
			ProfileDir: *profileDir, PostgresURL: *postgresURL, Report: &table}); err != nil {
			return err
		}
		return benchfile.WriteTable(os.Stdout, *out, header, table.String())
	case "sut":
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		dir, err := os.MkdirTemp("", "usage-bench-sut")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		dln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		return bench.ServeSUT(ctx, bench.SUTOptions{Users: *users, GPUs: *gpus, Pods: *pods, Replicas: 10, Interval: 5 * time.Second,
			Dir: dir, Ledger: *ledgerDSN, Follow: *follow, Listener: ln, Probe: &bench.Probe{}, DebugListener: dln, Ready: func(n int) {
				b, _ := json.Marshal(map[string]any{"addr": ln.Addr().String(), "debugAddr": dln.Addr().String(), "historyUsers": n})
				fmt.Println(string(b))
			}})
	case "floor":
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		fmt.Println(ln.Addr().String())
		return bench.ServeFloor(ctx, ln, *floorBytes)
	case "load":
		kind, url, _ := strings.Cut(*target, "=")
		var build func(ctx context.Context, i int) (*http.Request, error)
		switch kind {
		case "usage", "usage-since":
			// Several base URLs (replicas), comma-separated, are asked in turns, as a Service spreads a panel's
			// polls over them.
			bases := strings.Split(url, ",")
			build = func(ctx context.Context, i int) (*http.Request, error) {
				u := bases[i%len(bases)] + "/services/gpu-usage/api/v1/me"
				if kind == "usage-since" {
					// A panel that already holds the history asks only for what is new since its last poll.
					u += "?since=" + time.Now().Add(-5*time.Second).UTC().Format(time.RFC3339)
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				if err == nil {
					req.Header.Set("Authorization", "token tok-"+bench.UserName(i%*users))
				}
				return req, err
			}
		case "hub":
			api, token, _ := strings.Cut(url, "|")
			build = func(ctx context.Context, i int) (*http.Request, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/users/"+bench.UserName(i%*users), nil)
				if err == nil {
					req.Header.Set("Authorization", "token "+token)
				}
				return req, err
			}
		default:
			return fmt.Errorf("--target must be usage=<url>, usage-since=<url> or hub=<url>|<token>")
		}
		res := bench.Load(ctx, bench.LoadOptions{Rate: *rate, Duration: *duration, Warmup: *warmup, Timeout: 10 * time.Second, Request: build})
		return json.NewEncoder(os.Stdout).Encode(res)
	case "footprint":
		return json.NewEncoder(os.Stdout).Encode(bench.MeasureFootprint(*fpGPUs))
	default:
		return fmt.Errorf("unknown subcommand %q", cmd)
	}
}
