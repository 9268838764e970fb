package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// RunOptions configure the whole benchmark.
type RunOptions struct {
	Self           string // this binary, re-executed for the HTTP system under test
	KubeBin, Etcd  string
	Synth          benchkit.Synth
	Concurrency    int           // concurrent spawns over HTTP (z2jh's concurrentSpawnLimit: 64)
	BurstGap       time.Duration // between the starts of two bursts of Concurrency spawns
	Duration       time.Duration // per measured HTTP run
	Runs           int
	InProcess      int // decisions timed in process (ours)
	NaiveInProcess int // decisions timed in process (naive: each LISTs 10,000 pods)
	RaceRequests   int // concurrent spawns in the race
	RaceLimit      int // the racer's limit of whole GPUs (N)
	// SUTCPU pins the HTTP system under test (taskset); the load generator, kube-apiserver and etcd run on the
	// other cores (run the whole command under taskset to pin them too).
	SUTCPU string
	// SUTEnv is added to gpu-quota's and the floor's environment (GOGC=...: the chart's settings). The naive
	// enforcer runs with Go's defaults: its 64 LISTs of 10,000 pods at once hold gigabytes; with GOGC=200 there
	// too, its clients lost their connections to kube-apiserver and gpu-quota's usage polls went stale in its
	// phase (a full run of 2026-11-28, 21:16).
	SUTEnv []string
	// SUTProfile, when set, is where the system under test writes its CPU profile (pprof), for finding where
	// an HTTP admission's time goes.
	SUTProfile string
	// SUTHeapProfile, when set, is where the system under test writes its live heap (pprof) once ready.
	SUTHeapProfile string
	// TwoReplicas also measures gpu-quota as two replicas (--advertise-url: the Lease holder decides, the other
	// relays to it), the spawns alternating between them as a Service spreads them: over HTTP in the same
	// seconds as the single replica, and in a race of its own.
	TwoReplicas bool
	Out         io.Writer
	// Report, if set, also gets the final table (what Out gets after the runs' progress): the result file's.
	Report io.Writer
}

const namespace = "jhub"

// PolicyYAML is the benchmark's policy: students on MIG and shared T4s with a daily and a weekly budget,
// researchers on whole GPUs, and the racers of the race with a limit of N whole GPUs.
func PolicyYAML(raceLimit int) string {
	return fmt.Sprintf(`onUnavailable: open
default:
  maxGPUs: 1
  maxServers: 2
  budgets:
    - {window: 24h, gpuHours: 8}
  weights:
    gpu H100-80GB-HBM3: 2
groups:
  students:
    maxGPUs: 3/7
    maxServers: 1
    allowedKinds: [mig, shared]
    budgets:
      - {window: 24h, gpuHours: 2}
      - {window: 7d, gpuHours: 6}
  researchers:
    maxGPUs: 2
    maxServers: 3
    budgets:
      - {window: 24h, gpuHours: 48}
  racers:
    maxGPUs: %d
    maxServers: unlimited
    allowedKinds: [gpu]
    budgets: []
`, raceLimit)
}

func (o RunOptions) printf(format string, args ...any) { fmt.Fprintf(o.Out, format, args...) }

// Run starts a control plane, fills it, measures both enforcers in process, over HTTP, and in the race, and
// prints the results with their ratios.
func Run(ctx context.Context, o RunOptions) error {
	dir, err := os.MkdirTemp("", "quota-bench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	o.printf("==> starting a control plane (etcd, kube-apiserver, scheduler, controller-manager)\n")
	t0 := time.Now()
	cp, kc, err := benchkit.StartControlPlane(ctx, o.KubeBin, o.Etcd, dir, 5000)
	if err != nil {
		return err
	}
	defer cp.Stop()
	o.printf("    ready in %.1fs; creating %d GPU nodes and %d pods of %d users (every %dth holds a GPU)\n",
		time.Since(t0).Seconds(), o.Synth.GPUNodes, o.Synth.Pods, o.Synth.Users, o.Synth.GPUPodEvery)
	t0 = time.Now()
	if err := o.Synth.Seed(ctx, kc, namespace, 16, func(done, total int) {
		if done%2000 == 0 {
			o.printf("    %d/%d pods (%.0fs)\n", done, total, time.Since(t0).Seconds())
		}
	}, RaceNode()); err != nil {
		return err
	}
	policyPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(PolicyYAML(o.RaceLimit)), 0o600); err != nil {
		return err
	}
	var pol quota.Policy
	if err := policy.Load(policyPath, &pol); err != nil {
		return err
	}
	usageLn, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	usageSrv := &http.Server{Handler: UsageHandler(o.Synth.Users), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = usageSrv.Serve(usageLn) }()
	defer func() { _ = usageSrv.Close() }()
	usageURL := "http://" + usageLn.Addr().String() + "/services/gpu-usage/"

	// gpu-quota first, the naive enforcer last: see httpRig.ours.
	var inproc pair
	if inproc.ours, err = o.inProcessOurs(ctx, cp.Kubeconfig, policyPath, usageURL); err != nil {
		return err
	}
	rig, err := o.startHTTP(ctx, kc, cp.Kubeconfig, policyPath, usageURL)
	if err != nil {
		return err
	}
	defer rig.stop()
	httpRes := rig.ours(ctx)
	inproc.naive = o.inProcessNaive(ctx, kc, &pol)
	race := rig.naive(ctx, httpRes)
	race.relayed = rig.relayed
	o.report(inproc, httpRes, race)
	return nil
}

// Requests are the spawns of the measurement: random users of the synthetic cluster asking for a random profile.
func Requests(users, n int, seed uint64) []Request {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]Request, n)
	for i := range out {
		u := r.IntN(users)
		p := benchkit.Profiles[r.IntN(len(benchkit.Profiles))]
		out[i] = Request{User: benchkit.UserName(u), Groups: []string{benchkit.Group(u)}, Server: "", Profile: p.Slug,
			Resources: map[string]int64{p.Resource: 1}, NodeSelector: p.NodeSelector}
	}
	return out
}

// pair is one run of both; floor is the same run's Floor (HTTP runs only), and oursCPU and floorCPU the CPU
// time their processes used per call in it (0 where /proc could not tell). two and twoSat are gpu-quota as two
// replicas in the same run (RunOptions.TwoReplicas), twoCPU both processes' CPU per call.
type pair struct {
	ours, naive, oursSat, naiveSat, floor benchkit.Latencies
	oursCPU, floorCPU                     time.Duration
	two, twoSat                           benchkit.Latencies
	twoCPU                                time.Duration
}

// TargetP99 is B2's target for the HTTP p99 at 64 at once.
const TargetP99 = 5 * time.Millisecond

// burstSummary tells whether a run's p99 came from a few slow bursts or from all of them: the median burst's
// slowest call, and how many bursts had a call slower than the target.
func burstSummary(l benchkit.Latencies) string {
	if len(l.Bursts) == 0 {
		return "no bursts"
	}
	return fmt.Sprintf("bursts' slowest call median %s, %d of %d over %s", ms(l.Bursts[len(l.Bursts)/2]),
		l.SlowBursts(TargetP99), len(l.Bursts), ms(TargetP99))
}

// perSecond is cpu spread over d, per second (/proc counts CPU in 10 ms ticks: over 10 s, 1 ms/s steps).
func perSecond(cpu, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(float64(cpu) / d.Seconds())
}

// perCall is cpu spread over n calls.
func perCall(cpu time.Duration, n int) time.Duration {
	if n == 0 || cpu <= 0 {
		return 0
	}
	return cpu / time.Duration(n)
}

// inProcessOurs times gpu-quota's engine in a process of its own on the SUT CPU, away from the control plane.
func (o RunOptions) inProcessOurs(ctx context.Context, kubeconfig, policyPath, usageURL string) (benchkit.Latencies, error) {
	o.printf("==> in process: gpu-quota's engine (informers filled, on CPU %q)\n", o.SUTCPU)
	args := []string{o.Self, "sut", "--kubeconfig", kubeconfig, "--policy", policyPath, "--usage-url", usageURL,
		"--users", strconv.Itoa(o.Synth.Users), "--listen", "127.0.0.1:0", "--in-process", strconv.Itoa(o.InProcess)}
	args = benchkit.Pinned(o.SUTCPU, args)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return benchkit.Latencies{}, fmt.Errorf("in-process measurement: %w", err)
	}
	var ours benchkit.Latencies
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ours); err != nil {
		return benchkit.Latencies{}, fmt.Errorf("in-process measurement: %w (%q)", err, out)
	}
	return ours, nil
}

// inProcessNaive times the naive enforcer's decisions in this process, one after the other.
func (o RunOptions) inProcessNaive(ctx context.Context, kc kubernetes.Interface, pol *quota.Policy) benchkit.Latencies {
	o.printf("==> in process: the naive enforcer (LIST per decision)\n")
	naive := &Naive{Client: kc, Namespace: namespace, Policy: pol, Hours: SynthHours}
	nreqs := Requests(o.Synth.Users, o.NaiveInProcess, 2)
	return measure(ctx, kc, 1, len(nreqs), func(ctx context.Context, i int) error {
		_, _, err := naive.Admit(ctx, nreqs[i])
		return err
	})
}

// InProcess times n decisions of the engine one after the other (random users and profiles) and counts the
// API server's reads meanwhile; `quota-bench sut --in-process n` prints it.
func InProcess(ctx context.Context, kc kubernetes.Interface, eng *admit.Engine, users, n int) benchkit.Latencies {
	reqs := Requests(users, n, 1)
	runtime.GC()
	return measure(ctx, kc, 1, len(reqs), func(ctx context.Context, i int) error {
		r := reqs[i]
		_, err := eng.Admit(ctx, admit.Request{User: r.User, Groups: r.Groups, Server: r.Server, Resources: r.Resources, NodeSelector: r.NodeSelector})
		return err
	})
}

// measure runs fn n times with the given concurrency and counts the API server's reads meanwhile.
func measure(ctx context.Context, kc kubernetes.Interface, concurrency, n int, fn func(context.Context, int) error) benchkit.Latencies {
	return benchkit.Measured(ctx, kc, func() benchkit.Latencies { return benchkit.Closed(ctx, concurrency, 0, n, fn) })
}

type raceResult struct {
	oursAdmitted, naiveAdmitted, requests, limit int
	// two says the two replicas were measured: twoAdmitted is the same race over them, relayed what their standby
	// relayed in the HTTP runs.
	two         bool
	twoAdmitted int
	relayed     relayed
}

// relayed is what the standby of the two replicas relayed to the decider over the measured runs (warm-up and
// race left out): ok, unavailable (no decider within 1.5 s), of calls sent to both.
type relayed struct{ ok, unavailable, calls int }

// httpRig is the HTTP phase's three systems under test (gpu-quota, the naive enforcer, the floor), each in a
// process of its own on the SUT CPU, and the load generator's client.
type httpRig struct {
	o  RunOptions
	kc kubernetes.Interface
	// The load generator's connections to each system: prepared requests written and answers read with a
	// minimal parser (benchkit.RawPool), so that its own CPU, on the core it shares with the control plane,
	// delays the answers as little as it can.
	oursConns, naiveConns, floorConns *benchkit.RawPool
	// twoConns reach the two replicas (TwoReplicas), twoAddrs their addresses.
	twoConns []*benchkit.RawPool
	twoAddrs []string
	requests [][]byte
	// procs are the processes: gpu-quota, the naive enforcer, the floor, then the two replicas (TwoReplicas).
	procs   []*benchkit.Proc
	relayed relayed
	// twoAdmitted is the two replicas' race, run before anything of the naive enforcer's.
	twoAdmitted int
}

func (o RunOptions) startHTTP(ctx context.Context, kc kubernetes.Interface, kubeconfig, policyPath, usageURL string) (*httpRig, error) {
	o.printf("==> over HTTP: %d concurrent spawns, %s per run, %d runs; gpu-quota, the naive enforcer and the floor in a process each on CPU %q\n",
		o.Concurrency, o.Duration, o.Runs, o.SUTCPU)
	rig := &httpRig{o: o, kc: kc}
	ports := benchkit.FreePorts(5)
	// One process each, all pinned to the SUT CPU; only one is measured at a time (gpu-quota and the floor in
	// turns), the others idle.
	for i, listen := range []string{"--listen", "--naive-listen", "--floor-listen"} {
		args := []string{o.Self, "sut", "--kubeconfig", kubeconfig, "--policy", policyPath, "--usage-url", usageURL,
			"--users", strconv.Itoa(o.Synth.Users), listen, "127.0.0.1:" + strconv.Itoa(ports[i])}
		if o.SUTProfile != "" && i == 0 {
			args = append(args, "--cpu-profile", o.SUTProfile)
		}
		if o.SUTHeapProfile != "" && i == 0 {
			args = append(args, "--heap-profile", o.SUTHeapProfile)
		}
		env := o.SUTEnv
		if listen == "--naive-listen" {
			env = nil
		}
		proc, err := benchkit.StartProc(ctx, benchkit.Pinned(o.SUTCPU, args), env)
		if err != nil {
			rig.stop()
			return nil, err
		}
		rig.procs = append(rig.procs, proc)
	}
	if o.TwoReplicas {
		if err := rig.startTwo(ctx, kubeconfig, policyPath, usageURL, ports[3:5]); err != nil {
			rig.stop()
			return nil, err
		}
	}
	// At most twice the bursts' size in flight: the race's 1,000 at once wait for a connection, as they did
	// with net/http's client (MaxConnsPerHost), instead of opening 1,000 LISTs of 10,000 pods at the naive.
	pool := func(i int) *benchkit.RawPool {
		return &benchkit.RawPool{Addr: "127.0.0.1:" + strconv.Itoa(ports[i]), MaxConns: 2 * o.Concurrency}
	}
	rig.oursConns, rig.naiveConns, rig.floorConns = pool(0), pool(1), pool(2)
	if o.TwoReplicas {
		rig.twoConns = []*benchkit.RawPool{pool(3), pool(4)}
	}
	// Requests are prepared before the runs: the load generator's own work must not be what is measured.
	reqs := Requests(o.Synth.Users, 50_000, 3)
	rig.requests = make([][]byte, len(reqs))
	for i, r := range reqs {
		rig.requests[i] = rawAdmit(r)
	}
	return rig, nil
}

// startTwo starts the two replicas on the SUT CPU, beside the single one (only one system is measured at a
// time), and waits until one decides and the other holds a copy of its reservations.
func (h *httpRig) startTwo(ctx context.Context, kubeconfig, policyPath, usageURL string, ports []int) error {
	o := h.o
	for i, port := range ports {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		args := []string{o.Self, "sut", "--kubeconfig", kubeconfig, "--policy", policyPath, "--usage-url", usageURL,
			"--users", strconv.Itoa(o.Synth.Users), "--listen", addr, "--advertise-url", "http://" + addr,
			"--identity", fmt.Sprintf("quota-bench-%d", i)}
		proc, err := benchkit.StartProc(ctx, benchkit.Pinned(o.SUTCPU, args), o.SUTEnv)
		if err != nil {
			return err
		}
		h.procs = append(h.procs, proc)
		h.twoAddrs = append(h.twoAddrs, addr)
	}
	// A replica without a copy campaigns once nobody has held the Lease for twice its duration (a cold start:
	// about 30 s with the chart's 15 s).
	t0 := time.Now()
	for {
		decider, err := h.twoState(ctx)
		if err == nil {
			o.printf("    two replicas: %s decides, the other is in sync (%.0fs)\n", decider, time.Since(t0).Seconds())
			return nil
		}
		if time.Since(t0) > 2*time.Minute || ctx.Err() != nil {
			return fmt.Errorf("two replicas: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// twoState is the deciding replica's address once exactly one of the two decides and the other is in sync.
func (h *httpRig) twoState(ctx context.Context) (string, error) {
	decider, inSync := "", 0
	for _, addr := range h.twoAddrs {
		m, err := benchkit.Metrics(ctx, nil, "http://"+addr+"/metrics")
		if err != nil {
			return "", err
		}
		switch {
		case m["gpuhub_quota_deciding"] == 1 && decider != "":
			return "", errors.New("both replicas decide")
		case m["gpuhub_quota_deciding"] == 1:
			decider = addr
		case m["gpuhub_quota_replica_in_sync"] == 1:
			inSync++
		}
	}
	if decider == "" || inSync != 1 {
		return "", fmt.Errorf("no decider with a standby in sync yet (decider %q)", decider)
	}
	return decider, nil
}

// forwarded is what the two replicas have relayed to the decider so far, by result.
func (h *httpRig) forwarded(ctx context.Context) (ok, unavailable float64) {
	for _, addr := range h.twoAddrs {
		m, err := benchkit.Metrics(ctx, nil, "http://"+addr+"/metrics")
		if err != nil {
			h.o.printf("    %s: %v\n", addr, err)
			continue
		}
		ok += m[`gpuhub_quota_forwarded_total{result="ok"}`]
		unavailable += m[`gpuhub_quota_forwarded_total{result="unavailable"}`]
	}
	return ok, unavailable
}

// postTwo sends spawn i to one of the two replicas, in turns: a Service spreads the Hub's connections over
// both.
func (h *httpRig) postTwo() func(context.Context, int) error {
	return func(ctx context.Context, i int) error {
		_, err := sendAdmit(ctx, h.twoConns[i%len(h.twoConns)], h.requests[i%len(h.requests)])
		return err
	}
}

func (h *httpRig) stop() {
	for _, p := range append([]*benchkit.RawPool{h.oursConns, h.naiveConns, h.floorConns}, h.twoConns...) {
		if p != nil {
			p.Close()
		}
	}
	for _, p := range h.procs {
		p.Stop()
	}
}

// post sends spawn i to the system behind p; an answer other than 200 is an error (the answer itself is not
// decoded: that is the load generator's CPU).
func (h *httpRig) post(p *benchkit.RawPool) func(context.Context, int) error {
	return func(ctx context.Context, i int) error {
		_, err := sendAdmit(ctx, p, h.requests[i%len(h.requests)])
		return err
	}
}

// ours measures gpu-quota and the floor, in turns, then gpu-quota saturated, run after run. It comes before
// anything of the naive enforcer's: its LISTs of 10,000 pods, 64 at once, grow the API server by gigabytes,
// and the machine's reclaiming of that memory would land on these runs.
func (h *httpRig) ours(ctx context.Context) []pair {
	o := h.o
	// Warm-up (connections, caches), not measured.
	benchkit.Closed(ctx, o.Concurrency, 2*time.Second, 0, h.post(h.oursConns))
	benchkit.Closed(ctx, o.Concurrency, 2*time.Second, 0, h.post(h.floorConns))
	fns := []func(context.Context, int) error{h.post(h.oursConns), h.post(h.floorConns)}
	var relayedOK0, relayedUnavailable0 float64
	if o.TwoReplicas {
		benchkit.Closed(ctx, o.Concurrency, 2*time.Second, 0, h.postTwo())
		fns = append(fns, h.postTwo())
		relayedOK0, relayedUnavailable0 = h.forwarded(ctx)
	}
	twoCPU := func() time.Duration {
		if !o.TwoReplicas {
			return 0
		}
		return h.procs[3].CPU() + h.procs[4].CPU()
	}
	runs := make([]pair, o.Runs)
	for r := range runs {
		p := &runs[r]
		// gpu-quota and the floor (and the two replicas) in turns, in the same seconds: the machine's slow
		// moments land on all of them. Each process's CPU over the run, per call: a burst of 64 on one core is
		// served one request after the other, so its last answer comes after about 64 times this.
		var oursCPU, floorCPU, bothCPU time.Duration
		all := benchkit.MeasuredAll(ctx, h.kc, func() []benchkit.Latencies {
			oursCPU, floorCPU, bothCPU = h.procs[0].CPU(), h.procs[2].CPU(), twoCPU()
			return benchkit.Interleaved(ctx, o.Concurrency, o.BurstGap, o.Duration, fns...)
		})
		p.ours, p.floor = all[0], all[1]
		p.oursCPU, p.floorCPU = perCall(h.procs[0].CPU()-oursCPU, p.ours.N), perCall(h.procs[2].CPU()-floorCPU, p.floor.N)
		if o.TwoReplicas {
			p.two, p.twoCPU = all[2], perCall(twoCPU()-bothCPU, all[2].N)
		}
		benchkit.Settle(ctx)
		p.oursSat = benchkit.Closed(ctx, o.Concurrency, o.Duration/2, 0, h.post(h.oursConns))
		o.printf("    run %d: bursts of %d, in turns: ours p99 %s (%d decisions, %s CPU each; %s), floor p99 %s (%s CPU each; %s; machine %.0f%% busy); saturated: ours %.0f/s\n",
			r+1, o.Concurrency, ms(p.ours.P99), p.ours.N, us(p.oursCPU), burstSummary(p.ours), ms(p.floor.P99), us(p.floorCPU), burstSummary(p.floor),
			100*p.ours.MachineBusy, p.oursSat.Throughput)
		if o.TwoReplicas {
			benchkit.Settle(ctx)
			p.twoSat = benchkit.Closed(ctx, o.Concurrency, o.Duration/2, 0, h.postTwo())
			o.printf("           two replicas: p99 %s (%d decisions, %d errors, %s CPU each, both; %s); saturated: %.0f/s\n",
				ms(p.two.P99), p.two.N, p.two.Errors, us(p.twoCPU), burstSummary(p.two), p.twoSat.Throughput)
			h.relayed.calls += p.two.N + p.twoSat.N
		}
	}
	if o.TwoReplicas {
		okN, unavailable := h.forwarded(ctx)
		h.relayed.ok, h.relayed.unavailable = int(okN-relayedOK0), int(unavailable-relayedUnavailable0)
	}
	// What each process spends while no call comes (informers, the usage cache's refresh, the enforcer's
	// pass, the runtime): it lands on the calls of a run as well. Measured after the runs, not between the
	// warm-up and the first: on this machine a core left idle for seconds runs slower for a while when work
	// comes back (a short probe on CPU 0 took up to twice as long for ~2 s after 8 s idle), and the first run
	// then began colder than the others.
	benchkit.Settle(ctx)
	oursIdle, floorIdle := h.procs[0].CPU(), h.procs[2].CPU()
	idleStart := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(o.Duration):
	}
	idle := time.Since(idleStart)
	o.printf("    idle for %s: ours %s CPU per second, floor %s\n", idle.Round(time.Millisecond),
		ms(perSecond(h.procs[0].CPU()-oursIdle, idle)), ms(perSecond(h.procs[2].CPU()-floorIdle, idle)))
	if o.TwoReplicas {
		// The two replicas race here, before the naive enforcer's phase: after its race (2026-11-30, 04:50),
		// the naive process still worked through its 1,000 LISTs on the SUT CPU and the overloaded API server
		// failed the Lease's renewals, and none of the replicas' racers got an answer within a minute.
		// Alternating between the replicas: half of the racers reach the standby and are relayed.
		benchkit.Settle(ctx)
		h.twoAdmitted = o.race(ctx, func(i int) *benchkit.RawPool { return h.twoConns[i%2] }, "racer-two")
	}
	return runs
}

// naive measures the naive enforcer into runs, run after run, then the race of both.
func (h *httpRig) naive(ctx context.Context, runs []pair) raceResult {
	o := h.o
	o.printf("==> over HTTP: the naive enforcer\n")
	benchkit.Closed(ctx, o.Concurrency, 2*time.Second, 0, h.post(h.naiveConns))
	for r := range runs {
		p := &runs[r]
		p.naive = benchkit.Measured(ctx, h.kc, func() benchkit.Latencies {
			return benchkit.Bursts(ctx, o.Concurrency, o.BurstGap, o.Duration, h.post(h.naiveConns))
		})
		benchkit.Settle(ctx)
		p.naiveSat = benchkit.Closed(ctx, o.Concurrency, o.Duration/2, 0, h.post(h.naiveConns))
		o.printf("    run %d: bursts of %d: naive p99 %s (%d decisions); saturated: naive %.1f/s\n",
			r+1, o.Concurrency, ms(p.naive.P99), p.naive.N, p.naiveSat.Throughput)
	}
	race := raceResult{requests: o.RaceRequests, limit: o.RaceLimit, two: o.TwoReplicas}
	race.oursAdmitted = o.race(ctx, one(h.oursConns), "racer-ours")
	race.naiveAdmitted = o.race(ctx, one(h.naiveConns), "racer-naive")
	race.twoAdmitted = h.twoAdmitted
	return race
}

// race sends RaceRequests spawns of one user at once, each for one H200 on its own server; the racers'
// limit is RaceLimit whole GPUs, so exactly that many may be admitted.
func (o RunOptions) race(ctx context.Context, pick func(i int) *benchkit.RawPool, user string) int {
	start := make(chan struct{})
	results := make(chan admitResult, o.RaceRequests)
	for i := range o.RaceRequests {
		go func() {
			<-start
			res, err := postAdmit(ctx, pick(i), rawAdmit(Request{User: user, Groups: []string{"racers"}, Server: "s" + strconv.Itoa(i),
				Resources: map[string]int64{"nvidia.com/gpu": 1}, NodeSelector: RaceSelector}))
			if err != nil {
				// Counted by kind: each connection's own address would make every error one of its own.
				res.Reason = "error: " + addrs.ReplaceAllString(err.Error(), "ADDR")
			}
			results <- res
		}()
	}
	close(start)
	n := 0
	reasons := map[string]int{}
	for range o.RaceRequests {
		r := <-results
		reasons[r.Reason]++
		if r.Allow {
			n++
		}
	}
	o.printf("    race %s: %v\n", user, reasons)
	return n
}

// one is every racer's pool p.
func one(p *benchkit.RawPool) func(int) *benchkit.RawPool {
	return func(int) *benchkit.RawPool { return p }
}

// addrs are the host:port addresses in an error's text.
var addrs = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)

type admitResult struct {
	Allow  bool   `json:"allow"`
	Reason string `json:"reason"`
}

// AdmitPath is the admission route of gpu-quota (and of the naive enforcer and the floor in the benchmark).
const AdmitPath = "/services/gpu-quota/api/v1/admit"

// rawAdmit is the admission request for r as the Hub glue sends it, on the wire.
func rawAdmit(r Request) []byte {
	body := r.Wire()
	return benchkit.RawRequest(http.MethodPost, "gpu-quota", AdmitPath,
		[][2]string{{"Authorization", "token " + Token}, {"Content-Type", "application/json"}}, body)
}

// sendAdmit sends req to the system behind p and returns the answer's body; an answer other than 200 is an
// error.
func sendAdmit(ctx context.Context, p *benchkit.RawPool, req []byte) ([]byte, error) {
	status, body, err := p.Do(ctx, req)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("admit: %d %s: %s", status, http.StatusText(status), bytes.TrimSpace(body))
	}
	return body, err
}

// postAdmit is sendAdmit with the answer decoded.
func postAdmit(ctx context.Context, p *benchkit.RawPool, req []byte) (admitResult, error) {
	body, err := sendAdmit(ctx, p, req)
	if err != nil {
		return admitResult{}, err
	}
	var res admitResult
	return res, json.Unmarshal(body, &res)
}

var (
	ratio = benchkit.Ratio
	us    = benchkit.US
	ms    = benchkit.MS
)

// TargetInProcessP99 is B2's target for the in-process p99.
const TargetInProcessP99 = 100 * time.Microsecond

// verdicts are B2's targets judged: each on every run that measured it (the HTTP runs; the in-process
// measurement and the race are one run each).
type verdicts struct {
	inProcessP99, inProcessReads, httpP99, httpReads, race benchkit.Verdict
	// The same for two replicas (zero when they were not measured).
	twoHTTPP99, twoHTTPReads, twoRace benchkit.Verdict
}

func judge(in pair, runs []pair, race raceResult) verdicts {
	one := func(ok bool) benchkit.Verdict { return benchkit.PerRun(1, func(int) bool { return ok }) }
	v := verdicts{
		inProcessP99:   one(in.ours.P99 <= TargetInProcessP99),
		inProcessReads: one(in.ours.ReadsPerCall == 0),
		httpP99:        benchkit.PerRun(len(runs), func(i int) bool { return runs[i].ours.P99 <= TargetP99 }),
		httpReads:      benchkit.PerRun(len(runs), func(i int) bool { return runs[i].ours.ReadsPerCall == 0 }),
		race:           one(race.oursAdmitted == race.limit),
	}
	if race.two {
		// Errors count against the two replicas: a relay that found no decider answers 503, fast.
		v.twoHTTPP99 = benchkit.PerRun(len(runs), func(i int) bool { return runs[i].two.P99 <= TargetP99 && runs[i].two.Errors == 0 })
		v.twoHTTPReads = benchkit.PerRun(len(runs), func(i int) bool { return runs[i].two.ReadsPerCall == 0 })
		v.twoRace = one(race.twoAdmitted == race.limit)
	}
	return v
}

func (o RunOptions) report(in pair, runs []pair, race raceResult) {
	if o.Report != nil {
		o.Out = io.MultiWriter(o.Out, o.Report)
	}
	v := judge(in, runs, race)
	o.printf("\nB2 spawn admission: %d users, %d pods (%d GPU nodes), real kube-apiserver; anchor: naive enforcer (LIST pods + nodes per decision)\n",
		o.Synth.Users, o.Synth.Pods, o.Synth.GPUNodes)
	o.printf("%-34s %14s %14s %10s %s\n", "", "gpu-quota", "naive", "ratio", "target")
	o.printf("%-34s %14s %14s %10s %s\n", "in-process p50", us(in.ours.P50), us(in.naive.P50), ratio(float64(in.ours.P50), float64(in.naive.P50)), "")
	o.printf("%-34s %14s %14s %10s %s\n", "in-process p99", us(in.ours.P99), us(in.naive.P99), ratio(float64(in.ours.P99), float64(in.naive.P99)),
		"<= "+us(TargetInProcessP99)+": "+v.inProcessP99.String())
	o.printf("%-34s %14.3f %14.3f %10s %s\n", "API-server reads per decision", in.ours.ReadsPerCall, in.naive.ReadsPerCall, "", "0: "+v.inProcessReads.String())
	var p99o, p99n, p99f, over, p50o, p50n, thro, thrn, rdo, rdn, cpuo, cpuf, slowo, slowf []float64
	for _, r := range runs {
		cpuo, cpuf = append(cpuo, float64(r.oursCPU)), append(cpuf, float64(r.floorCPU))
		slowo, slowf = append(slowo, float64(r.ours.SlowBursts(TargetP99))), append(slowf, float64(r.floor.SlowBursts(TargetP99)))
		p99o, p99n, p99f = append(p99o, float64(r.ours.P99)), append(p99n, float64(r.naive.P99)), append(p99f, float64(r.floor.P99))
		over = append(over, float64(r.ours.P99-r.floor.P99))
		p50o, p50n = append(p50o, float64(r.ours.P50)), append(p50n, float64(r.naive.P50))
		thro, thrn = append(thro, r.oursSat.Throughput), append(thrn, r.naiveSat.Throughput)
		rdo, rdn = append(rdo, r.ours.ReadsPerCall), append(rdn, r.naive.ReadsPerCall)
	}
	med := benchkit.Median
	rng := func(xs []float64, f func(float64) string) string {
		lo, hi := benchkit.MinMax(xs)
		return f(lo) + "–" + f(hi)
	}
	dms := func(x float64) string { return ms(time.Duration(x)) }
	o.printf("%-34s %14s %14s %10s %s\n", fmt.Sprintf("HTTP p50, %d at once (median)", o.Concurrency), dms(med(p50o)), dms(med(p50n)), ratio(med(p50o), med(p50n)), "")
	o.printf("%-34s %14s %14s %10s %s\n", fmt.Sprintf("HTTP p99, %d at once (median)", o.Concurrency), dms(med(p99o)), dms(med(p99n)), ratio(med(p99o), med(p99n)),
		"<= "+ms(TargetP99)+" in every run: "+v.httpP99.String())
	o.printf("%-34s %14s %14s\n", "  p99 min–max over runs", rng(p99o, dms), rng(p99n, dms))
	o.printf("%-34s %s\n", "  gpu-quota's p99 in each run", perRun(p99o, dms))
	o.printf("%-34s %14s %14s %10s %s\n", "  floor p99 (median; min–max)", dms(med(p99f)), rng(p99f, dms), "", "same server, no decision, same seconds")
	o.printf("%-34s %14s %14s\n", "  gpu-quota minus floor (median)", dms(med(over)), rng(over, dms))
	var busy []float64
	for _, r := range runs {
		busy = append(busy, 100*r.ours.MachineBusy)
	}
	o.printf("%-34s %s\n", "  machine's CPUs busy in each run", perRun(busy, func(x float64) string { return fmt.Sprintf("%.0f %%", x) }))
	dus := func(x float64) string { return us(time.Duration(x)) }
	o.printf("%-34s %14s %14s %10s %s\n", "  CPU per call, gpu-quota; floor", dus(med(cpuo)), dus(med(cpuf)), "", "median; the process's, bursts included")
	o.printf("%-34s %14.0f %14.0f %10s %s\n", "  bursts over 5 ms, gpu-quota; floor", med(slowo), med(slowf), "", fmt.Sprintf("median over runs, of %d bursts per run", len(runs[0].ours.Bursts)))
	o.printf("%-34s %14.0f %14.1f %10s\n", "HTTP saturated decisions/s", med(thro), med(thrn), ratio(med(thrn), med(thro)))
	o.printf("%-34s %14.3f %14.3f %10s %s\n", "HTTP API-server reads per decision", med(rdo), med(rdn), "", "0 in every run: "+v.httpReads.String())
	o.printf("%-34s %14s %14s %10s %s\n", fmt.Sprintf("race: %d at once, limit %d", race.requests, race.limit),
		fmt.Sprintf("%d admitted", race.oursAdmitted), fmt.Sprintf("%d admitted", race.naiveAdmitted), "", fmt.Sprintf("exactly %d: %s", race.limit, v.race))
	o.printf("(the naive enforcer admits every racer it answers: it has no reservations; the rest of its race timed out)\n")
	if race.two {
		o.reportTwo(runs, race, v)
	}
	o.printf("Targets are judged on each run (the in-process timing and the race are one run each) and met only if every run met them.\n")
}

// reportTwo is the two replicas' part of the table, beside the single replica's numbers of the same runs.
func (o RunOptions) reportTwo(runs []pair, race raceResult, v verdicts) {
	o.printf("\ngpu-quota as 2 replicas (one holds the Lease and decides, the other relays to it), spawns alternating\n")
	o.printf("between them; in turns with the single replica above, in the same runs; both replicas on CPU %q\n", o.SUTCPU)
	o.printf("%-34s %14s %14s %10s %s\n", "", "2 replicas", "1 replica", "2 / 1", "target")
	var p50t, p50o, p99t, p99o, cput, cpuo, satt, sato, rdt, errs []float64
	for _, r := range runs {
		p50t, p50o = append(p50t, float64(r.two.P50)), append(p50o, float64(r.ours.P50))
		p99t, p99o = append(p99t, float64(r.two.P99)), append(p99o, float64(r.ours.P99))
		cput, cpuo = append(cput, float64(r.twoCPU)), append(cpuo, float64(r.oursCPU))
		satt, sato = append(satt, r.twoSat.Throughput), append(sato, r.oursSat.Throughput)
		rdt, errs = append(rdt, r.two.ReadsPerCall), append(errs, float64(r.two.Errors))
	}
	med := benchkit.Median
	dms := func(x float64) string { return ms(time.Duration(x)) }
	times := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	o.printf("%-34s %14s %14s %10s %s\n", fmt.Sprintf("HTTP p50, %d at once (median)", o.Concurrency), dms(med(p50t)), dms(med(p50o)), times(med(p50t), med(p50o)), "")
	o.printf("%-34s %14s %14s %10s %s\n", fmt.Sprintf("HTTP p99, %d at once (median)", o.Concurrency), dms(med(p99t)), dms(med(p99o)), times(med(p99t), med(p99o)),
		"<= "+ms(TargetP99)+", no errors, in every run: "+v.twoHTTPP99.String())
	o.printf("%-34s %s\n", "  2 replicas' p99 in each run", perRun(p99t, dms))
	o.printf("%-34s %s\n", "  errors in each run", perRun(errs, func(x float64) string { return fmt.Sprintf("%.0f", x) }))
	dus := func(x float64) string { return us(time.Duration(x)) }
	o.printf("%-34s %14s %14s %10s %s\n", "  CPU per call (median)", dus(med(cput)), dus(med(cpuo)), times(med(cput), med(cpuo)), "2 replicas: both processes'")
	o.printf("%-34s %14.0f %14.0f %10s\n", "HTTP saturated decisions/s", med(satt), med(sato), times(med(satt), med(sato)))
	o.printf("%-34s %14.3f %14s %10s %s\n", "HTTP API-server reads per decision", med(rdt), "", "", "0 in every run: "+v.twoHTTPReads.String())
	rl := race.relayed
	share := 0.0
	if rl.calls > 0 {
		share = 100 * float64(rl.ok+rl.unavailable) / float64(rl.calls)
	}
	o.printf("%-34s %14s %14s %10s %s\n", "relayed by the standby", fmt.Sprintf("%.1f %%", share), "", "",
		fmt.Sprintf("%d of %d measured calls; %d found no decider (503)", rl.ok+rl.unavailable, rl.calls, rl.unavailable))
	o.printf("%-34s %14s %14s %10s %s\n", fmt.Sprintf("race: %d at once, limit %d", race.requests, race.limit),
		fmt.Sprintf("%d admitted", race.twoAdmitted), fmt.Sprintf("%d admitted", race.oursAdmitted), "", fmt.Sprintf("exactly %d: %s", race.limit, v.twoRace))
}

// perRun is each run's value, in run order: "3.26 / 4.88 / 4.94 ms" (the unit once, from f's text).
func perRun(xs []float64, f func(float64) string) string {
	if len(xs) == 0 {
		return "-"
	}
	parts := make([]string, len(xs))
	unit := ""
	for i, x := range xs {
		text := f(x)
		if n, u, ok := strings.Cut(text, " "); ok {
			text, unit = n, " "+u
		}
		parts[i] = text
	}
	return strings.Join(parts, " / ") + unit
}
