// Command quota-bench measures spawn admission (benchmarks.md B2): gpu-quota against a naive enforcer that
// LISTs pods and nodes per decision, on one real kube-apiserver with 10,000 pods. `make bench-quota` runs it.
//
//	quota-bench run [flags]   start a control plane, fill it, measure, print the table (and write it to --out)
//	quota-bench sut [flags]   (internal) serve both enforcers for the HTTP runs
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/bench"
	"github.com/gpuhub/gpuhub/services/internal/benchfile"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: quota-bench run|sut [flags]")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "run":
		err = runBench(ctx, args[1:])
	case "sut":
		err = runSUT(ctx, args[1:])
	default:
		err = fmt.Errorf("unknown command %q: run or sut", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "quota-bench:", err)
		return 1
	}
	return 0
}

func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	o := bench.RunOptions{Out: os.Stdout}
	fs.StringVar(&o.KubeBin, "kube-bin", os.Getenv("GPUHUB_KUBE_BIN"), "directory with kube-apiserver, kube-scheduler, kube-controller-manager")
	fs.StringVar(&o.Etcd, "etcd", os.Getenv("GPUHUB_ETCD"), "etcd executable (default: etcd on PATH)")
	fs.IntVar(&o.Synth.Users, "users", 10_000, "Hub users")
	fs.IntVar(&o.Synth.Pods, "pods", 10_000, "single-user pods")
	fs.IntVar(&o.Synth.GPUNodes, "gpu-nodes", 150, "GPU nodes (a third each H100 x8, A100 MIG, T4 shared x4)")
	fs.IntVar(&o.Synth.GPUPodEvery, "gpu-pod-every", 4, "every n-th pod holds a GPU unit")
	fs.IntVar(&o.Concurrency, "concurrency", 64, "concurrent spawns over HTTP (z2jh concurrentSpawnLimit)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "length of each measured HTTP run (bursts; then half as long saturated)")
	fs.DurationVar(&o.BurstGap, "burst-gap", 100*time.Millisecond, "time between the starts of two bursts of --concurrency spawns")
	fs.IntVar(&o.Runs, "runs", 3, "measured HTTP runs of each, interleaved")
	fs.IntVar(&o.InProcess, "in-process", 20_000, "decisions timed in process (gpu-quota)")
	fs.IntVar(&o.NaiveInProcess, "naive-in-process", 30, "decisions timed in process (naive)")
	fs.IntVar(&o.RaceRequests, "race", 1000, "concurrent spawns in the race")
	fs.IntVar(&o.RaceLimit, "race-limit", 7, "the racer's limit of whole GPUs")
	fs.BoolVar(&o.TwoReplicas, "two-replicas", true, "also measure two gpu-quota replicas (one decides, the other relays), spawns alternating between them, in turns with the single one, and race them")
	fs.StringVar(&o.SUTCPU, "sut-cpu", "0", "CPU list the HTTP system under test is pinned to (taskset; empty: not pinned)")
	fs.StringVar(&o.SUTProfile, "sut-cpu-profile", "", "write the HTTP system under test's CPU profile (pprof) to this file")
	fs.StringVar(&o.SUTHeapProfile, "sut-heap-profile", "", "write the HTTP system under test's live heap (pprof), taken once it is ready, to this file")
	sutEnv := fs.String("sut-env", "GOGC=200", "comma-separated KEY=VALUE added to gpu-quota's and the floor's environment over HTTP (default: the chart's GOGC for gpu-quota)")
	out := fs.String("out", "", "also write the table, with the date, machine, commit and flags, to this markdown file (make bench-quota: docs/benchmarks/quota.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	header := benchfile.New(ctx, "B2 spawn admission (gpu-quota)", "make bench-quota", fs)
	var table bytes.Buffer
	o.Report = &table
	if *sutEnv != "" {
		o.SUTEnv = strings.Split(*sutEnv, ",")
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

func runSUT(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sut", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "admin kubeconfig of the control plane")
	o := bench.SUTOptions{Namespace: "jhub"}
	fs.StringVar(&o.PolicyPath, "policy", "", "policy file")
	fs.StringVar(&o.UsageURL, "usage-url", "", "usage API base URL")
	fs.IntVar(&o.Users, "users", 10_000, "Hub users")
	listen := fs.String("listen", "", "gpu-quota address (empty: do not run it)")
	naiveListen := fs.String("naive-listen", "", "naive enforcer address (empty: do not run it)")
	floorListen := fs.String("floor-listen", "", "floor address: the same server answering without a decision (empty: do not run it)")
	fs.StringVar(&o.AdvertiseURL, "advertise-url", "", "run gpu-quota as one of several replicas reached at this URL (http://127.0.0.1:PORT): the Lease holder decides, the others relay to it (empty: a single replica)")
	fs.StringVar(&o.Identity, "identity", "", "this replica's Lease identity (with --advertise-url)")
	inProcess := fs.Int("in-process", 0, "time this many engine decisions once ready, print them as JSON and exit")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile (pprof) to this file until stopped")
	heapProfile := fs.String("heap-profile", "", "write the live heap (pprof) to this file once ready")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 5000, 5000
	if o.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	lc := net.ListenConfig{}
	if *listen != "" {
		if o.Listener, err = lc.Listen(ctx, "tcp", *listen); err != nil {
			return err
		}
	}
	if *naiveListen != "" {
		if o.NaiveListener, err = lc.Listen(ctx, "tcp", *naiveListen); err != nil {
			return err
		}
	}
	if *floorListen != "" {
		if o.FloorListener, err = lc.Listen(ctx, "tcp", *floorListen); err != nil {
			return err
		}
	}
	if o.Listener == nil && o.NaiveListener == nil && o.FloorListener == nil {
		return fmt.Errorf("sut: --listen (gpu-quota), --naive-listen (naive enforcer) or --floor-listen (floor), or several")
	}
	o.Ready = func(*admit.Engine) {
		if *heapProfile != "" {
			if err := writeHeapProfile(*heapProfile); err != nil {
				fmt.Fprintln(os.Stderr, "quota-bench sut:", err)
			}
		}
		fmt.Println("ready")
	}
	if *inProcess > 0 {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		kube := o.Kube
		var out []byte
		o.Ready = func(e *admit.Engine) {
			out, err = json.Marshal(bench.InProcess(sctx, kube, e, o.Users, *inProcess))
			cancel()
		}
		if serr := bench.ServeSUT(sctx, o); serr != nil && sctx.Err() == nil {
			return serr
		}
		if err != nil {
			return err
		}
		fmt.Println(string(out))
		return nil
	}
	return bench.ServeSUT(ctx, o)
}

// writeHeapProfile writes what is live after a collection: the informer caches, the index, the usage cache.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
