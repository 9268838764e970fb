package benchkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// ControlPlaneEnv names the controlplane command (e2e/cmd/controlplane) that make builds for the benchmarks.
// They run the local control plane as a process, as they run the systems they measure: a benchmark ships with
// the services' tools, and nothing that ships imports the e2e harness.
const ControlPlaneEnv = "GPUHUB_CONTROLPLANE"

// ControlPlane is a running control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager).
type ControlPlane struct {
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string

	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{}
	once  sync.Once
}

// controlPlaneLine is what the controlplane command prints once the API server answers.
type controlPlaneLine struct {
	Kubeconfig string `json:"kubeconfig"`
	Ports      []int  `json:"ports"`
}

func controlPlaneCommand() (string, error) {
	path := os.Getenv(ControlPlaneEnv)
	if path == "" {
		return "", fmt.Errorf("%s is not set: run the benchmark through make (make bench-quota, bench-profiles, bench-culler), which builds e2e/cmd/controlplane and sets it", ControlPlaneEnv)
	}
	return path, nil
}

// StartControlPlane starts the control plane from binDir and etcd, with its state under dir/cluster, and returns
// a client of it that may send qps requests a second: seeding thousands of objects must not wait on client-go's
// default limit of 5. The caller stops the control plane; so does this process's exit (the command stops when
// its standard input closes).
func StartControlPlane(ctx context.Context, binDir, etcd, dir string, qps int) (*ControlPlane, *kubernetes.Clientset, error) {
	args := []string{"-kube-bin", binDir, "-dir", filepath.Join(dir, "cluster")}
	if etcd != "" {
		args = append(args, "-etcd", etcd)
	}
	var ready controlPlaneLine
	cp, err := runControlPlane(ctx, args, &ready)
	if err != nil {
		return nil, nil, err
	}
	cp.Kubeconfig = ready.Kubeconfig
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		cp.Stop()
		return nil, nil, fmt.Errorf("control plane kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(qps), qps
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		cp.Stop()
		return nil, nil, fmt.Errorf("control plane client: %w", err)
	}
	return cp, kc, nil
}

// runControlPlane starts the command with args and reads its ready line into ready.
func runControlPlane(ctx context.Context, args []string, ready *controlPlaneLine) (*ControlPlane, error) {
	path, err := controlPlaneCommand()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...) //nolint:gosec,noctx // the path is make's build of e2e/cmd/controlplane; Stop ends it, not ctx
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	cp := &ControlPlane{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	lines := make(chan []byte, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Bytes()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		close(cp.done)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			cp.Stop()
			return nil, fmt.Errorf("%s exited before the control plane was ready (its errors are above)", path)
		}
		if err := json.Unmarshal(line, ready); err != nil {
			cp.Stop()
			return nil, fmt.Errorf("%s printed %q, want its ready line: %w", path, line, err)
		}
		return cp, nil
	case <-ctx.Done():
		cp.Stop()
		return nil, ctx.Err()
	}
}

// Stop stops the control plane and waits for it (its processes and, for a temporary state directory, its files).
func (cp *ControlPlane) Stop() {
	cp.once.Do(func() {
		_ = cp.stdin.Close()
		select {
		case <-cp.done:
		case <-time.After(time.Minute):
			_ = cp.cmd.Process.Kill()
			<-cp.done
		}
	})
}

var (
	portsMu sync.Mutex
	given   = map[int]bool{}
)

// FreePorts returns n distinct loopback ports that were free a moment ago, for the processes a benchmark starts,
// none of them returned before in this process. They come from the e2e harness's picker (its range, below
// Linux's ephemeral ports), run as `controlplane -ports-only`; it panics when none are left.
func FreePorts(n int) []int {
	portsMu.Lock()
	defer portsMu.Unlock()
	var out []int
	for tries := 0; len(out) < n && tries < 10; tries++ {
		var ready controlPlaneLine
		cp, err := runControlPlane(context.Background(), []string{"-ports-only", "-spare-ports", strconv.Itoa(n - len(out))}, &ready)
		if err != nil {
			panic(err)
		}
		cp.Stop()
		for _, p := range ready.Ports {
			if !given[p] {
				given[p] = true
				out = append(out, p)
			}
		}
	}
	if len(out) < n {
		panic(errors.New("benchkit: no free loopback ports left"))
	}
	return out
}
