// Command controlplane runs e2e/cluster's control plane (etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager) for the benchmarks, which start it as a process instead of importing the e2e harness
// (services/internal/benchkit). Once the API server answers it writes one JSON line to stdout: the admin
// kubeconfig's path and -spare-ports free loopback ports for the caller's own processes, picked by the e2e
// harness's picker. It stops everything when its standard input closes (the caller exited or stopped it) or on
// SIGINT/SIGTERM. With -ports-only it starts nothing: it prints the ports and waits for its input to close (the
// benchmarks' FreePorts).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuhub/gpuhub/e2e/cluster"
)

// Ready is the line written to stdout once the control plane is up.
type Ready struct {
	Kubeconfig string `json:"kubeconfig"`
	Ports      []int  `json:"ports"`
}

func main() { os.Exit(realMain()) }

func realMain() int {
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	binDir := fs.String("kube-bin", os.Getenv("GPUHUB_KUBE_BIN"), "directory with kube-apiserver, kube-scheduler and kube-controller-manager (env GPUHUB_KUBE_BIN)")
	etcd := fs.String("etcd", "", "etcd executable (default: etcd on PATH)")
	dir := fs.String("dir", "", "state directory (default: a temporary one, removed at the end)")
	spare := fs.Int("spare-ports", 0, "free loopback ports to pick for the caller")
	portsOnly := fs.Bool("ports-only", false, "start no control plane: only pick -spare-ports ports")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *binDir == "" && !*portsOnly {
		fmt.Fprintln(os.Stderr, "controlplane: -kube-bin (or GPUHUB_KUBE_BIN) is required: the directory `make kube-binaries` fills")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// The caller holds our stdin: when it exits, even by kill -9, the pipe closes and we stop.
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	start := func(ctx context.Context) (string, func(), error) {
		cp, err := cluster.Start(ctx, cluster.Options{BinDir: *binDir, Etcd: *etcd, Dir: *dir})
		if err != nil {
			return "", nil, err
		}
		return cp.Kubeconfig, cp.Stop, nil
	}
	if *portsOnly {
		start = func(context.Context) (string, func(), error) { return "", func() {}, nil }
	}
	if err := run(ctx, start, *spare, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		return 1
	}
	return 0
}

// run starts what start starts, prints the ready line and waits for ctx.
func run(ctx context.Context, start func(context.Context) (kubeconfig string, stop func(), err error), spare int, out io.Writer) error {
	kubeconfig, stop, err := start(ctx)
	if err != nil {
		return err
	}
	defer stop()
	ready := Ready{Kubeconfig: kubeconfig, Ports: []int{}}
	if spare > 0 {
		ready.Ports = cluster.FreePorts(spare)
	}
	if err := json.NewEncoder(out).Encode(ready); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
