// Command profiles-bench measures the spawn form (benchmarks.md B7): the real gpu-profiles binary against a
// baseline that LISTs nodes and pods per render, on one real kube-apiserver with 1,000 nodes and 10,000 pods.
// `make bench-profiles` runs it.
//
//	profiles-bench run [flags]        start a control plane, fill it, measure, print the table (and write it to --out)
//	profiles-bench baseline [flags]   (internal) serve the baseline
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/bench"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/benchfile"
	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: profiles-bench run|baseline [flags]")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "run":
		err = runBench(ctx, args[1:])
	case "baseline":
		err = runBaseline(ctx, args[1:])
	default:
		err = fmt.Errorf("unknown command %q: run or baseline", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "profiles-bench:", err)
		return 1
	}
	return 0
}

func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	o := bench.RunOptions{Out: os.Stdout}
	fs.StringVar(&o.ProfilesBin, "profiles-bin", "", "the gpu-profiles binary (required)")
	fs.StringVar(&o.QuotaBin, "quota-bin", "", "the gpu-quota binary: measures the chart's configuration with quota enabled, gpu-profiles with --quota-url to a real gpu-quota (empty: not measured, and B7 not met)")
	fs.StringVar(&o.KubeBin, "kube-bin", os.Getenv("GPUHUB_KUBE_BIN"), "directory with kube-apiserver, kube-scheduler, kube-controller-manager")
	fs.StringVar(&o.Etcd, "etcd", os.Getenv("GPUHUB_ETCD"), "etcd executable (default: etcd on PATH)")
	fs.IntVar(&o.Synth.Users, "users", 10_000, "Hub users")
	fs.IntVar(&o.Synth.Pods, "pods", 10_000, "single-user pods")
	fs.IntVar(&o.Synth.GPUNodes, "gpu-nodes", 600, "GPU nodes (a third each H100 x8, A100 MIG, T4 shared x4)")
	fs.IntVar(&o.Synth.CPUNodes, "cpu-nodes", 400, "CPU-only nodes")
	fs.IntVar(&o.Synth.CordonEvery, "cordon-every", 50, "every n-th GPU node is cordoned (0: none)")
	fs.IntVar(&o.Synth.GPUPodEvery, "gpu-pod-every", 4, "every n-th pod holds a GPU unit")
	fs.IntVar(&o.Concurrency, "concurrency", 64, "renders at once (64: z2jh's concurrentSpawnLimit)")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "length of each measured run of bursts (then half as long saturated)")
	fs.DurationVar(&o.BurstGap, "burst-gap", 100*time.Millisecond, "time between the starts of two bursts")
	fs.IntVar(&o.Runs, "runs", 3, "measured runs of each system, interleaved")
	fs.IntVar(&o.Compare, "compare", 20, "requests whose answers are compared between gpu-profiles and the baseline")
	fs.DurationVar(&o.Churn, "churn", time.Second, "during the measured runs, delete or create again one GPU pod this often, as a hub's pods change all day (each change makes gpu-quota's next verdict pass a full one); 0: the cluster stands still")
	fs.StringVar(&o.SUTCPU, "sut-cpu", "0", "CPU list the systems under test are pinned to (taskset; empty: not pinned)")
	sutEnv := fs.String("sut-env", "", "comma-separated KEY=VALUE added to the systems' environment (e.g. GOGC=200)")
	verbose := fs.Bool("v", false, "show the services' own logs")
	out := fs.String("out", "", "also write the table, with the date, machine, commit and flags, to this markdown file (make bench-profiles: docs/benchmarks/profiles.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	header := benchfile.New(ctx, "B7 spawn form (gpu-profiles)", "make bench-profiles", fs)
	var table bytes.Buffer
	o.Report = &table
	if o.ProfilesBin == "" {
		return fmt.Errorf("--profiles-bin is required: build it with go build -o BIN ./services/gpu-profiles (make bench-profiles does)")
	}
	if *sutEnv != "" {
		o.SUTEnv = strings.Split(*sutEnv, ",")
	}
	if *verbose {
		o.Log = os.Stderr
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	o.Self = self
	if err := bench.Run(ctx, o); err != nil {
		return err
	}
	return benchfile.WriteTable(os.Stdout, *out, header, table.String())
}

func runBaseline(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "admin kubeconfig of the control plane")
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	configPath := fs.String("config", "", "gpu-profiles overrides file (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	// Protobuf (gpu-profiles' informers use JSON): the anchor at its fastest.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = 5000, 5000
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	b := &bench.Baseline{Client: kc}
	if *configPath != "" {
		b.Config = &profiles.Config{}
		if err := policy.Load(*configPath, b.Config); err != nil {
			return err
		}
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: b.Handler(bench.ProfilesPrefix), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Println(benchkit.Ready)
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
