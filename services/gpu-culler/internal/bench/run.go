package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// RunOptions configure the whole benchmark.
type RunOptions struct {
	Fleet         Fleet
	KubeBin, Etcd string
	HubVenv       string
	// CullerBin is the gpu-culler binary; empty measures the anchor alone (said so in the table).
	CullerBin  string
	CullerArgs []string // added to the culler's flags
	// IdleCuller is the Python with jupyterhub_idle_culler (default: HubVenv's python; hub55 pins 1.4.0).
	IdleCuller string
	Runs       int
	// Passes are the measured passes of each culler per run, after one warm-up pass.
	Passes int
	// Every is the culler policy's `every` (10 s at least); IdleCullEvery idle-culler's --cull-every.
	Every, IdleCullEvery time.Duration
	// IdleWindow is the phase of each run without a culler: the Hub's own CPU and the probes' baseline.
	IdleWindow time.Duration
	ProbeRate  float64
	// Gap is the quiet time that ends a burst of Hub requests (a pass).
	Gap time.Duration
	// HubCPU pins the Hub (taskset); everything else runs where this process runs (make pins it elsewhere).
	HubCPU string
	// LogDir keeps the culler's and idle-culler's logs (default: a temporary directory, removed).
	LogDir string
	Out    io.Writer
	// Report, if set, also gets the final table (what Out gets after the runs' progress): the result file's.
	Report io.Writer
}

func (o RunOptions) printf(format string, args ...any) { _, _ = fmt.Fprintf(o.Out, format, args...) }

// PolicyYAML is the culler's policy: passes every o.Every, a GPU server stops after 5 s idle with a 1 s warning
// (the idle servers' notices were written before, so their stop is due at the first pass that sees 5 s idle).
func PolicyYAML(every time.Duration) string {
	return fmt.Sprintf(`# B3 benchmark: passes back to back (every is at least 10s), quick stops of the idle servers.
every: %ds
concurrency: 10
staleAfter: 30s
gpu:
  idlePeriod: 5s
  warn: 1s
  utilization: 5%%
  memoryTolerance: 256MiB
  maxSnoozes: 0
`, int(every.Seconds()))
}

// env is the benchmark's running pieces.
type env struct {
	o        RunOptions
	dir      string
	kube     kubernetes.Interface
	kubecfg  string
	hub      *Hub
	counter  *Counter
	proxyURL string // the counting proxy, in front of the Hub: http://127.0.0.1:<port>
	usageURL string
	prober   *Prober
	servers  []Server
	policy   string
	closers  []func()
}

// PhaseResult is one culler's measurement in one run.
type PhaseResult struct {
	Name          string
	Passes        int
	PassTimes     []time.Duration // the culler's own (its pass_duration metric); none for idle-culler
	HubPassTimes  []time.Duration // first Hub request to last answer, per burst
	Requests      int
	Ops           map[string]int
	HubCPUWindow  time.Duration // the Hub's CPU over the window less its idle CPU for as long, over all passes
	HubCPUBursts  time.Duration // the Hub's CPU inside the bursts, over all passes
	ProbeP99      time.Duration // probes due during the passes
	ProbeN        int
	ProbeFailed   int
	Stopped       int // DELETE requests for servers
	Window        time.Duration
	CullerMetrics Metrics
}

// PerPass divides a total by the passes.
func (p PhaseResult) PerPass(total time.Duration) time.Duration {
	if p.Passes == 0 {
		return 0
	}
	return total / time.Duration(p.Passes)
}

// RunResult is one run: the idle baseline and each culler.
type RunResult struct {
	IdleCPURate  float64 // Hub CPU seconds per second with no culler (probes only)
	IdleProbeP99 time.Duration
	IdleProbeN   int
	Ours, Theirs PhaseResult
}

// Run sets everything up, measures o.Runs interleaved runs and prints the table.
func Run(ctx context.Context, o RunOptions) error {
	if o.IdleCuller == "" {
		o.IdleCuller = filepath.Join(o.HubVenv, "bin", "python")
	}
	if o.IdleCullEvery == 0 {
		o.IdleCullEvery = o.Every
	}
	dir, err := os.MkdirTemp("", "culler-bench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if o.LogDir == "" {
		o.LogDir = dir
	}
	e := &env{o: o, dir: dir, servers: o.Fleet.List()}
	defer e.close()
	if err := e.setup(ctx); err != nil {
		return err
	}
	var runs []RunResult
	for r := range o.Runs {
		res, err := e.run(ctx, r)
		if err != nil {
			return err
		}
		runs = append(runs, res)
	}
	busyStopped, err := e.busyStopped(ctx)
	if err != nil {
		return err
	}
	Report(o, runs, busyStopped)
	if busyStopped > 0 {
		return fmt.Errorf("%d servers with busy or stale telemetry were stopped: a culler acted on what it must not", busyStopped)
	}
	return idleStopped(runs, e.idleServers())
}

// idleStopped fails a run in which gpu-culler was measured but stopped fewer servers than the fleet has idle
// ones with a due notice: each run restores them before its measured passes, whose first stops them all. A
// culler that stops nothing must not pass for one that stops only the right servers.
func idleStopped(runs []RunResult, idle int) error {
	for i, r := range runs {
		if r.Ours.Passes == 0 {
			continue // gpu-culler not measured (no binary)
		}
		if r.Ours.Stopped < idle {
			return fmt.Errorf("run %d: gpu-culler stopped %d servers, but %d are idle with a due notice: it left idle GPUs running", i+1, r.Ours.Stopped, idle)
		}
	}
	return nil
}

// idleServers counts the fleet's idle servers (stopped by gpu-culler on its first measured pass).
func (e *env) idleServers() int {
	n := 0
	for _, s := range e.servers {
		if s.State == Idle {
			n++
		}
	}
	return n
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

func (e *env) setup(ctx context.Context) error {
	o := e.o
	o.printf("==> control plane (etcd, kube-apiserver, scheduler, controller-manager)\n")
	t0 := time.Now()
	cp, kc, err := benchkit.StartControlPlane(ctx, o.KubeBin, o.Etcd, e.dir, 2000)
	if err != nil {
		return err
	}
	e.closers = append(e.closers, cp.Stop)
	e.kubecfg, e.kube = cp.Kubeconfig, kc
	nodes := o.Fleet.Nodes()
	o.printf("    ready in %.0fs; %d GPU nodes and %d pods (KubeSpawner's labels, GPU limits, status Running)\n",
		time.Since(t0).Seconds(), len(nodes), len(e.servers))
	t0 = time.Now()
	now := time.Now()
	pods := make([]*corev1.Pod, len(e.servers))
	for i, s := range e.servers {
		pods[i] = s.PodObject(now)
	}
	if err := benchkit.Create(ctx, e.kube, Namespace, nodes, pods, 16, nil); err != nil {
		return err
	}
	if err := parallel(ctx, e.servers, 16, func(s Server) error {
		p, err := e.kube.CoreV1().Pods(Namespace).Get(ctx, s.Pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status = RunningStatus(now)
		_, err = e.kube.CoreV1().Pods(Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("pod status: %w", err)
	}
	o.printf("    pods created in %.0fs\n", time.Since(t0).Seconds())

	stubURL, err := e.serve(ctx, Stub())
	if err != nil {
		return err
	}
	o.printf("==> JupyterHub from %s on CPU %q: %d users, %d running servers (database filled; a spawner without processes)\n",
		o.HubVenv, o.HubCPU, o.Fleet.Users, len(e.servers))
	t0 = time.Now()
	users := make([]string, len(e.servers))
	for i, s := range e.servers {
		users[i] = s.User
	}
	if e.hub, err = StartHub(ctx, HubOptions{Venv: o.HubVenv, CPUs: o.HubCPU, StubURL: stubURL, Users: o.Fleet.Users, Running: users}); err != nil {
		return err
	}
	e.closers = append(e.closers, e.hub.Stop)
	ready, err := e.hub.ReadyUsers(ctx)
	if err != nil {
		return err
	}
	if len(ready) != len(users) {
		return fmt.Errorf("the Hub has %d ready servers, want %d; its log ends:\n%s", len(ready), len(users), e.hub.LogTail())
	}
	o.printf("    ready in %.0fs\n", time.Since(t0).Seconds())

	if e.usageURL, err = e.serve(ctx, &Usage{Servers: e.servers, Token: e.hub.CullerToken}); err != nil {
		return err
	}
	e.usageURL += "/services/gpu-usage/"
	if e.counter, err = NewCounter(e.hub.URL, e.hub.Pid, o.Gap); err != nil {
		return err
	}
	if e.proxyURL, err = e.serve(ctx, e.counter); err != nil {
		return err
	}
	e.policy = filepath.Join(e.dir, "policy.yaml")
	if err := os.WriteFile(e.policy, []byte(PolicyYAML(o.Every)), 0o600); err != nil {
		return err
	}
	e.prober = &Prober{URL: e.hub.URL + "/hub/api/", Rate: o.ProbeRate,
		Client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	pctx, stopProbes := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { e.prober.Run(pctx); close(done) }()
	e.closers = append(e.closers, func() { stopProbes(); <-done })
	return nil
}

// serve serves h on a loopback port until the benchmark ends and returns its http://127.0.0.1:<port>.
func (e *env) serve(ctx context.Context, h http.Handler) (string, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	e.closers = append(e.closers, func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), nil
}

// parallel calls fn on every item from n workers and returns the first error.
func parallel[T any](ctx context.Context, items []T, n int, fn func(T) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	work := make(chan T)
	for range n {
		wg.Go(func() {
			for it := range work {
				if err := fn(it); err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		work <- it
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// restore brings the idle servers back (a culler stopped them in an earlier phase) and writes their notice anew
// (the stop is due from now on), so every phase starts from the same fleet.
func (e *env) restore(ctx context.Context) error {
	ready, err := e.hub.ReadyUsers(ctx)
	if err != nil {
		return err
	}
	var idle []Server
	var stopped []string
	for _, s := range e.servers {
		if s.State == Idle {
			idle = append(idle, s)
			if !ready[s.User] {
				stopped = append(stopped, s.User)
			}
		}
	}
	if err := e.hub.StartServers(ctx, stopped, 8, nil); err != nil {
		return err
	}
	now := time.Now()
	return parallel(ctx, idle, 8, func(s Server) error {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			notice.Key("gpu-culler"): NoticeAnnotation(now)}}})
		_, err := e.kube.CoreV1().Pods(Namespace).Patch(ctx, s.Pod, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
}

func (e *env) run(ctx context.Context, r int) (RunResult, error) {
	o := e.o
	var res RunResult
	if err := e.restore(ctx); err != nil {
		return res, err
	}
	t0, cpu0 := time.Now(), benchkit.ProcessCPU(e.hub.Pid)
	if err := sleep(ctx, o.IdleWindow); err != nil {
		return res, err
	}
	t1, cpu1 := time.Now(), benchkit.ProcessCPU(e.hub.Pid)
	res.IdleCPURate = (cpu1 - cpu0).Seconds() / t1.Sub(t0).Seconds()
	idle := e.prober.Between(t0, t1)
	res.IdleProbeP99, _ = P99(idle)
	res.IdleProbeN = len(idle)
	o.printf("==> run %d/%d: idle Hub %.1f%% of a core, probe p99 %s (%d probes)\n", r+1, o.Runs, 100*res.IdleCPURate, ms(res.IdleProbeP99), len(idle))
	phases := []func() error{
		func() (err error) { res.Ours, err = e.ours(ctx, r, res.IdleCPURate); return err },
		func() (err error) { res.Theirs, err = e.theirs(ctx, r, res.IdleCPURate); return err },
	}
	if r%2 == 1 {
		phases[0], phases[1] = phases[1], phases[0]
	}
	for _, p := range phases {
		if err := p(); err != nil {
			return res, err
		}
	}
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// waitFor polls cond every 100 ms until it holds, for up to limit.
func waitFor(ctx context.Context, limit time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, limit)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// window measures from now until `passes` more passes ended (passesDone counts them), after the Hub requests
// so far were set aside: requests, the Hub's CPU less its idle CPU, the bursts and the probes in them.
func (e *env) window(ctx context.Context, name string, idleRate float64, passesDone func() (int, error), logTail func() string) (PhaseResult, error) {
	o := e.o
	res := PhaseResult{Name: name, Passes: o.Passes}
	_, _ = e.counter.Take()
	start, cpu0 := time.Now(), benchkit.ProcessCPU(e.hub.Pid)
	limit := time.Duration(o.Passes+2)*max(o.Every, o.IdleCullEvery) + time.Minute
	err := waitFor(ctx, limit, name+": "+strconv.Itoa(o.Passes)+" passes", func() (bool, error) {
		n, err := passesDone()
		return n >= o.Passes, err
	})
	if err != nil {
		return res, fmt.Errorf("%w; its log ends:\n%s", err, logTail())
	}
	end, cpu1 := time.Now(), benchkit.ProcessCPU(e.hub.Pid)
	ops, bursts := e.counter.Take()
	res.Window = end.Sub(start)
	res.Ops = ops
	for _, n := range ops {
		res.Requests += n
	}
	res.Stopped = ops["DELETE /users/{name}/server"] + ops["DELETE /users/{name}/servers/{server}"]
	res.HubCPUWindow = max(0, cpu1-cpu0-time.Duration(idleRate*float64(res.Window)))
	for _, b := range bursts {
		res.HubCPUBursts += b.HubCPU
		res.HubPassTimes = append(res.HubPassTimes, b.End.Sub(b.Start))
	}
	probes := e.prober.During(bursts)
	res.ProbeP99, res.ProbeFailed = P99(probes)
	res.ProbeN = len(probes)
	return res, nil
}

// ours measures gpu-culler: a process of its own, started for this phase, acting alone (no Lease).
func (e *env) ours(ctx context.Context, r int, idleRate float64) (PhaseResult, error) {
	o := e.o
	if o.CullerBin == "" {
		o.printf("    gpu-culler: not measured (no binary given)\n")
		return PhaseResult{Name: "gpu-culler"}, nil
	}
	port := benchkit.FreePorts(1)[0]
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(o.LogDir, fmt.Sprintf("gpu-culler-run%d.log", r+1))
	logf, err := os.Create(logPath)
	if err != nil {
		return PhaseResult{}, err
	}
	defer func() { _ = logf.Close() }()
	args := append([]string{o.CullerBin, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--policy", e.policy,
		"--usage-url", e.usageURL, "--sample-every", "1s", "--namespace", Namespace, "--lease-namespace", Namespace,
		"--leader-elect=false"}, o.CullerArgs...)
	envv := []string{"JUPYTERHUB_API_URL=" + e.proxyURL + "/hub/api", "JUPYTERHUB_API_TOKEN=" + e.hub.CullerToken,
		"JUPYTERHUB_SERVICE_PREFIX=/services/gpu-culler/", "KUBECONFIG=" + e.kubecfg, "POD_NAMESPACE=" + Namespace}
	stop, err := benchkit.StartServer(ctx, args, envv, base+"/readyz", logf)
	if err != nil {
		return PhaseResult{}, fmt.Errorf("%w; its log ends:\n%s", err, tail(logPath))
	}
	defer stop()
	w := &PassWatcher{URL: base + "/metrics", Client: &http.Client{Timeout: 5 * time.Second}, Every: 100 * time.Millisecond}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.Run(wctx)
	logTail := func() string { return tail(logPath) }
	// One warm-up pass (caches, connections, the first samples), then the idle servers come back.
	if err := waitFor(ctx, 2*o.Every+time.Minute, "gpu-culler's first pass", func() (bool, error) {
		ps, _, _ := w.Passes()
		return len(ps) >= 1, nil
	}); err != nil {
		return PhaseResult{}, fmt.Errorf("%w; its log ends:\n%s", err, logTail())
	}
	if err := e.restore(ctx); err != nil {
		return PhaseResult{}, err
	}
	from := time.Now()
	res, err := e.window(ctx, "gpu-culler", idleRate, func() (int, error) {
		ps, _, _ := w.Passes()
		n := 0
		for _, p := range ps {
			if p.Ended.After(from) {
				n++
			}
		}
		return n, nil
	}, logTail)
	if err != nil {
		return res, err
	}
	ps, m, merr := w.Passes()
	for _, p := range ps {
		if p.Ended.After(from) {
			res.PassTimes = append(res.PassTimes, p.Duration)
		}
	}
	if merr != nil {
		o.printf("    (gpu-culler metrics: %v)\n", merr)
	}
	res.CullerMetrics = m
	e.printPhase(res)
	return res, nil
}

// theirs measures jupyterhub-idle-culler as z2jh runs it (concurrency 10, the Hub's page size) with a timeout
// that stops nothing: its passes are what it costs the Hub to look. Each pass starts with GET /hub/api/.
func (e *env) theirs(ctx context.Context, r int, idleRate float64) (PhaseResult, error) {
	o := e.o
	logPath := filepath.Join(o.LogDir, fmt.Sprintf("idle-culler-run%d.log", r+1))
	logf, err := os.Create(logPath)
	if err != nil {
		return PhaseResult{}, err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.CommandContext(ctx, o.IdleCuller, "-m", "jupyterhub_idle_culler", "--url="+e.proxyURL+"/hub/api",
		"--cull-every="+strconv.Itoa(int(o.IdleCullEvery.Seconds())), "--timeout=31536000", "--concurrency=10")
	cmd.Env = append(os.Environ(), "JUPYTERHUB_API_TOKEN="+e.hub.IdleCullerToken)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return PhaseResult{}, fmt.Errorf("start jupyterhub-idle-culler with %s (make venv-hub55): %w", o.IdleCuller, err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	logTail := func() string { return tail(logPath) }
	if err := waitFor(ctx, 2*o.IdleCullEvery+time.Minute, "idle-culler's first pass", func() (bool, error) {
		return e.counter.Completed() >= 1, nil
	}); err != nil {
		return PhaseResult{}, fmt.Errorf("%w; its log ends:\n%s", err, logTail())
	}
	if err := e.restore(ctx); err != nil {
		return PhaseResult{}, err
	}
	res, err := e.window(ctx, "idle-culler", idleRate, func() (int, error) { return e.counter.Completed(), nil }, logTail)
	if err != nil {
		return res, err
	}
	e.printPhase(res)
	return res, nil
}

func (e *env) printPhase(p PhaseResult) {
	pass := "-"
	if len(p.PassTimes) > 0 {
		pass = ms(median(p.PassTimes))
	}
	e.o.printf("    %-12s %d passes in %.0fs: pass %s (at the Hub %s), %d Hub requests %v, Hub CPU/pass %s (in bursts %s), probe p99 in passes %s (%d probes, %d failed)\n",
		p.Name, p.Passes, p.Window.Seconds(), pass, ms(median(p.HubPassTimes)), p.Requests, p.Ops,
		ms(p.PerPass(p.HubCPUWindow)), ms(p.PerPass(p.HubCPUBursts)), ms(p.ProbeP99), p.ProbeN, p.ProbeFailed)
	if len(p.CullerMetrics.Decisions) > 0 {
		e.o.printf("                 its decisions so far (action/reason): %v; its Hub requests: %v\n", p.CullerMetrics.Decisions, p.CullerMetrics.HubRequests)
	}
}

// busyStopped counts the busy and stale servers that no longer run.
func (e *env) busyStopped(ctx context.Context) (int, error) {
	ready, err := e.hub.ReadyUsers(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range e.servers {
		if s.State != Idle && !ready[s.User] {
			n++
		}
	}
	return n, nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	return string(b[max(0, len(b)-3000):])
}
