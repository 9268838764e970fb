// Package bench measures the spawn form (benchmarks.md B7): the request the Hub glue's profile_list callable
// sends at every form render (POST api/v1/profiles, contract C1), answered by the real gpu-profiles binary from
// its informers, against a baseline that builds the same answer with the same packages from a LIST of the
// nodes and the pods per render, on one real kube-apiserver holding 1,000 nodes and 10,000 pods, in one run.
// API-server reads are the server's own counters. The synthetic cluster, the load and the counters are
// services/internal/benchkit's, shared with gpu-quota's B2.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

// Tokens of the benchmark's services (their JUPYTERHUB_API_TOKEN).
const (
	ProfilesToken = "bench-profiles-token"
	QuotaToken    = "bench-quota-token"
)

// Prefixes of the services, as the Hub gives them.
const (
	ProfilesPrefix = "/services/gpu-profiles/"
	QuotaPrefix    = "/services/gpu-quota/"
)

const namespace = "jhub"

// ConfigYAML is the administrator's overrides in the benchmark: whole GPUs (and 2, 4, 8 of them on one node)
// for researchers only, CPU and memory for MIG slices, a note. Every render filters and orders by them.
const ConfigYAML = `note: "GPUs are shared: stop your server when you are done."
kinds:
  gpu:
    groups: [researchers]
    multiGPU: [2, 4, 8]
  mig:
    cpuLimit: 4
    memLimit: 32G
`

// QuotaPolicyYAML is gpu-quota's policy in the row with quotas: students on MIG slices and T4 shares, within
// 3/7 of a GPU (a 3g.20gb slice at most); researchers up to 2 GPUs.
const QuotaPolicyYAML = `onUnavailable: open
default:
  maxGPUs: 1
  maxServers: 2
groups:
  students:
    maxGPUs: 3/7
    maxServers: 1
    allowedKinds: [mig, shared]
  researchers:
    maxGPUs: 2
    maxServers: 3
`

// RunOptions configure the whole benchmark.
type RunOptions struct {
	// Self is this binary (re-executed as the baseline); ProfilesBin and QuotaBin are the services' own
	// binaries. Without QuotaBin the row with gpu-quota is left out.
	Self, ProfilesBin, QuotaBin string
	KubeBin, Etcd               string
	Synth                       benchkit.Synth
	Concurrency                 int           // renders at once (B7: 64)
	BurstGap                    time.Duration // between the starts of two bursts
	Duration                    time.Duration // per measured run (bursts); then half as long saturated
	Runs                        int
	Compare                     int // requests whose answers are compared between gpu-profiles and the baseline
	// Churn is how often, during the measured runs, one GPU pod is deleted or created again (0: never): a hub's
	// pods change all day, and each change makes gpu-quota's next verdict pass a full one (every user assessed,
	// on the CPU the renders need), which a cluster that stands still would leave out of the numbers.
	Churn time.Duration
	// SUTCPU pins the systems under test (taskset); the load generator and the control plane run where this
	// process runs (make bench-profiles: the other CPU).
	SUTCPU string
	SUTEnv []string
	Out    io.Writer
	// Report, if set, also gets the final table (what Out gets after the runs' progress): the result file's.
	Report io.Writer
	// Log gets the services' own output (nil: discarded).
	Log io.Writer
}

// TargetP99 is B7's target: a render's p99 at 64 at once, as the chart ships gpu-profiles.
const TargetP99 = 10 * time.Millisecond

// The chart's configurations of gpu-profiles (chart/gpuhub/templates/profiles.yaml): without gpu-quota, and
// with --quota-url to it when quota.enabled. B7 is judged on both.
const (
	QuotaDisabled = "quota disabled"
	QuotaEnabled  = "quota enabled"
)

// QuotaGOGC is the chart's GOGC for gpu-quota (chart/gpuhub/templates/quota.yaml).
const QuotaGOGC = "GOGC=200"

func (o RunOptions) printf(format string, args ...any) { _, _ = fmt.Fprintf(o.Out, format, args...) }

// reporting is o with Out also writing to Report, where set: for the final table.
func (o RunOptions) reporting() RunOptions {
	if o.Report != nil {
		o.Out = io.MultiWriter(o.Out, o.Report)
	}
	return o
}

type system struct {
	name, url string
	// chart is the chart's configuration this system runs as (QuotaDisabled, QuotaEnabled; "" for the baseline).
	chart string
	// metrics is the service's /metrics ("" for the baseline, which has none); quotaMetrics is gpu-quota's, for
	// the system that asks it.
	metrics, quotaMetrics string
	bursts                []benchkit.Latencies
	saturated             []benchkit.Latencies
}

// Run starts a control plane, fills it, starts the systems under test, checks that they give the same answers,
// measures them interleaved and prints the table.
func Run(ctx context.Context, o RunOptions) error {
	dir, err := os.MkdirTemp("", "profiles-bench-")
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
	s := o.Synth
	o.printf("    ready in %.1fs; creating %d nodes (%d with GPUs, every %dth cordoned) and %d pods of %d users (every %dth holds a GPU)\n",
		time.Since(t0).Seconds(), s.GPUNodes+s.CPUNodes, s.GPUNodes, s.CordonEvery, s.Pods, s.Users, s.GPUPodEvery)
	t0 = time.Now()
	if err := s.Seed(ctx, kc, namespace, 16, func(done, total int) {
		if done%2000 == 0 {
			o.printf("    %d/%d pods (%.0fs)\n", done, total, time.Since(t0).Seconds())
		}
	}); err != nil {
		return err
	}

	files := map[string]string{"config.yaml": ConfigYAML, "policy.yaml": QuotaPolicyYAML}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			return err
		}
	}
	hubLn, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hub := &http.Server{Handler: Hub{Users: s.Users, Tokens: map[string]string{ProfilesToken: "gpu-profiles", QuotaToken: "gpu-quota"}}.Handler(),
		ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hub.Serve(hubLn) }()
	defer func() { _ = hub.Close() }()
	hubURL := "http://" + hubLn.Addr().String() + "/hub/api"
	usageLn, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	usage := &http.Server{Handler: Advice(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = usage.Serve(usageLn) }()
	defer func() { _ = usage.Close() }()
	usageURL := "http://" + usageLn.Addr().String() + UsagePrefix

	systems, stop, err := o.start(ctx, cp.Kubeconfig, dir, hubURL, usageURL)
	defer stop()
	if err != nil {
		return err
	}
	reqs := requests(s.Users, 50_000, 3)
	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		bodies[i], _ = json.Marshal(r)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * o.Concurrency, MaxConnsPerHost: 2 * o.Concurrency}, Timeout: 5 * time.Minute}

	same, first := compare(ctx, client, systems[0].url, systems[1].url, bodies[:min(o.Compare, len(bodies))])
	o.printf("==> same answers, gpu-profiles vs baseline: %d of %d\n", same, o.Compare)
	if first != "" {
		o.printf("    first difference (-gpu-profiles +baseline):\n%s\n", first)
	}

	post := func(url string) func(context.Context, int) error {
		return func(ctx context.Context, i int) error { return render(ctx, client, url, bodies[i%len(bodies)], nil) }
	}
	o.printf("==> %d renders at once every %s, %s per run, %d runs, interleaved; systems under test on CPU %q\n",
		o.Concurrency, o.BurstGap, o.Duration, o.Runs, o.SUTCPU)
	for _, sys := range systems { // warm-up: connections, caches, the Go runtime
		benchkit.Closed(ctx, o.Concurrency, time.Second, o.Concurrency, post(sys.url))
	}
	stopChurn := func() {}
	if o.Churn > 0 {
		cctx, cancel := context.WithCancel(ctx)
		churned := make(chan churnCount, 1)
		go func() { churned <- churn(cctx, kc, s, o.Churn) }()
		stopChurn = func() {
			cancel()
			n := <-churned
			o.printf("    pod changes during the runs: %d (one every %s), %d failed\n", n.done, o.Churn, n.failed)
		}
		defer func() { stopChurn() }()
	}
	for r := range o.Runs {
		line := fmt.Sprintf("    run %d:", r+1)
		for _, sys := range systems {
			b := benchkit.Measured(ctx, kc, func() benchkit.Latencies {
				return benchkit.Bursts(ctx, o.Concurrency, o.BurstGap, o.Duration, post(sys.url))
			})
			// The baseline's bursts already run back to back (each takes longer than the gap): they are its
			// saturated throughput, and a closed loop of 64 LISTs per worker would only repeat them.
			sat := b
			if sys.metrics != "" {
				sat = benchkit.Closed(ctx, o.Concurrency, o.Duration/2, 0, post(sys.url))
			}
			sys.bursts, sys.saturated = append(sys.bursts, b), append(sys.saturated, sat)
			line += fmt.Sprintf(" %s p99 %s (%d, %d errors), %.0f/s;", sys.name, benchkit.MS(b.P99), b.N, b.Errors, sat.Throughput)
		}
		o.printf("%s\n", strings.TrimSuffix(line, ";"))
	}
	stopChurn()
	stopChurn = func() {}
	o = o.reporting()
	o.report(systems, same)
	if len(systems) > 2 {
		o.printf("gpu-quota's part of the renders with gpu-quota (gpuhub_profiles_quota_assess_total): %s\n",
			labelled(ctx, client, systems[2].metrics, `gpuhub_profiles_quota_assess_total{result="`))
		// Passes over every user for the watch share the systems' CPU: a full one only when something changed.
		o.printf("gpu-quota's passes for gpu-profiles' watch of verdicts over the whole run (gpuhub_quota_verdict_passes_total): %s\n",
			labelled(ctx, client, systems[2].quotaMetrics, `gpuhub_quota_verdict_passes_total{pass="`))
	}
	return nil
}

// labelled reads the series of one counter at metricsURL whose name and first label start with prefix
// (`name{label="`): "ok 1234, cached 56, unavailable_open 0".
func labelled(ctx context.Context, c *http.Client, metricsURL, prefix string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	var out []string
	for line := range strings.Lines(string(raw)) {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		result, value, _ := strings.Cut(rest, `"} `)
		out = append(out, result+" "+strings.TrimSpace(value))
	}
	return strings.Join(out, ", ")
}

// start starts gpu-profiles (pure render), the baseline and, with QuotaBin, gpu-quota and a second gpu-profiles
// that asks it: each its own process, pinned to the SUT CPU.
func (o RunOptions) start(ctx context.Context, kubeconfig, dir, hubURL, usageURL string) ([]*system, func(), error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	ports := benchkit.FreePorts(4)
	url := func(i int, prefix string) string { return "http://127.0.0.1:" + strconv.Itoa(ports[i]) + prefix }
	// As the chart starts them: JSON logs at info (its logFormat and logLevel), to o.Log.
	profilesArgs := func(port int, extra ...string) []string {
		return benchkit.Pinned(o.SUTCPU, append([]string{o.ProfilesBin, "--listen", "127.0.0.1:" + strconv.Itoa(port),
			"--prefix", ProfilesPrefix, "--kubeconfig", kubeconfig, "--config", filepath.Join(dir, "config.yaml"),
			"--log-format", "json", "--log-level", "info"}, extra...))
	}
	profilesEnv := append([]string{"JUPYTERHUB_API_TOKEN=" + ProfilesToken, "JUPYTERHUB_API_URL=" + hubURL}, o.SUTEnv...)

	o.printf("==> starting gpu-profiles (%s, no --quota-url: the chart with %s) and the baseline (LIST per render)\n", o.ProfilesBin, QuotaDisabled)
	stop, err := benchkit.StartServer(ctx, profilesArgs(ports[0]), profilesEnv, url(0, "/readyz"), o.Log)
	if err != nil {
		return nil, stopAll, err
	}
	stops = append(stops, stop)
	systems := []*system{{name: "gpu-profiles", chart: QuotaDisabled, url: url(0, ProfilesPrefix+"api/v1/profiles"), metrics: url(0, "/metrics")}}

	stop, err = benchkit.Start(ctx, benchkit.Pinned(o.SUTCPU, []string{o.Self, "baseline", "--kubeconfig", kubeconfig,
		"--listen", "127.0.0.1:" + strconv.Itoa(ports[1]), "--config", filepath.Join(dir, "config.yaml")}), o.SUTEnv)
	if err != nil {
		return nil, stopAll, err
	}
	stops = append(stops, stop)
	systems = append(systems, &system{name: "baseline", url: url(1, ProfilesPrefix+"api/v1/profiles")})

	if o.QuotaBin == "" {
		return systems, stopAll, nil
	}
	o.printf("==> starting gpu-quota (%s, %s as the chart sets it) and a gpu-profiles with --quota-url to it and --usage-url to a fake usage API's right-size advice: the chart with %s\n",
		o.QuotaBin, QuotaGOGC, QuotaEnabled)
	// The chart's GOGC first: --sut-env, added after it, may override it.
	quotaEnv := append([]string{"JUPYTERHUB_API_TOKEN=" + QuotaToken, "JUPYTERHUB_API_URL=" + hubURL, QuotaGOGC}, o.SUTEnv...)
	stop, err = benchkit.StartServer(ctx, benchkit.Pinned(o.SUTCPU, []string{o.QuotaBin, "--listen", "127.0.0.1:" + strconv.Itoa(ports[2]),
		"--prefix", QuotaPrefix, "--kubeconfig", kubeconfig, "--policy", filepath.Join(dir, "policy.yaml"), "--namespace", namespace,
		"--enforce-interval", "1h", "--log-format", "json", "--log-level", "info"}), quotaEnv, url(2, "/readyz"), o.Log)
	if err != nil {
		return nil, stopAll, err
	}
	stops = append(stops, stop)
	// The chart sets --usage-url too when usage.enabled: the form's right-size mark, fetched off the render path.
	stop, err = benchkit.StartServer(ctx, profilesArgs(ports[3], "--quota-url", url(2, QuotaPrefix), "--usage-url", usageURL), profilesEnv, url(3, "/readyz"), o.Log)
	if err != nil {
		return nil, stopAll, err
	}
	stops = append(stops, stop)
	// As shipped, gpu-profiles watches gpu-quota's verdicts (every user of the Hub directory, Hub.Users) and
	// answers forms from memory: measured once its table is in sync, not while it is sent.
	t0 := time.Now()
	if err := waitWatching(ctx, url(3, "/metrics"), time.Minute); err != nil {
		return nil, stopAll, err
	}
	o.printf("    gpu-profiles holds gpu-quota's verdicts of %d users after %.1fs (gpuhub_profiles_quota_watch_in_sync 1)\n",
		o.Synth.Users, time.Since(t0).Seconds())
	systems = append(systems, &system{name: "with gpu-quota", chart: QuotaEnabled, url: url(3, ProfilesPrefix+"api/v1/profiles"), metrics: url(3, "/metrics"),
		quotaMetrics: url(2, "/metrics")})
	return systems, stopAll, nil
}

// waitWatching waits until the gpu-profiles whose /metrics is metricsURL holds gpu-quota's pushed verdicts in sync.
func waitWatching(ctx context.Context, metricsURL string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		m, err := benchkit.Metrics(ctx, nil, metricsURL)
		if err == nil && m["gpuhub_profiles_quota_watch_in_sync"] == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("gpu-profiles did not hold gpu-quota's verdicts within %s: reading its metrics: %w", timeout, err)
			}
			return fmt.Errorf("gpu-profiles did not hold gpu-quota's verdicts within %s (gpuhub_profiles_quota_watch_in_sync %v): see --log",
				timeout, m["gpuhub_profiles_quota_watch_in_sync"])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// requests are form renders of random users of the synthetic cluster, with their groups, as the callable sends.
func requests(users, n int, seed uint64) []profiles.Request {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]profiles.Request, n)
	for i := range out {
		u := r.IntN(users)
		out[i] = profiles.Request{User: benchkit.UserName(u), Groups: []string{benchkit.Group(u)}}
	}
	return out
}

// render posts one body; into, if set, gets the answer.
func render(ctx context.Context, c *http.Client, url string, body []byte, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "token "+ProfilesToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("profiles: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if into == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// compare asks both systems the same requests and counts the identical answers (generatedAt aside); first is
// the first difference.
func compare(ctx context.Context, c *http.Client, oursURL, baseURL string, bodies [][]byte) (same int, first string) {
	for _, body := range bodies {
		var ours, base map[string]any
		errO, errB := render(ctx, c, oursURL, body, &ours), render(ctx, c, baseURL, body, &base)
		if errO != nil || errB != nil {
			if first == "" {
				first = fmt.Sprintf("errors: gpu-profiles %v, baseline %v", errO, errB)
			}
			continue
		}
		delete(ours, "generatedAt")
		delete(base, "generatedAt")
		if d := cmp.Diff(ours, base); d != "" {
			if first == "" {
				first = string(body) + "\n" + d
			}
			continue
		}
		same++
	}
	return same, first
}

func (o RunOptions) report(systems []*system, same int) {
	s := o.Synth
	o.printf("\nB7 spawn form (POST api/v1/profiles, the profile_list callable's request): %d nodes (%d with GPUs), %d pods, real kube-apiserver\n",
		s.GPUNodes+s.CPUNodes, s.GPUNodes, s.Pods)
	o.printf("anchor: the same answer from the same packages, LISTing nodes and pods per render; %d of %d answers identical\n", same, o.Compare)
	head := fmt.Sprintf("%-36s", "")
	for _, sys := range systems {
		head += fmt.Sprintf(" %16s", sys.name)
	}
	o.printf("%s %10s %s\n", head, "ratio", "target")
	type stat func(benchkit.Latencies) float64
	// ratio: 1 for the baseline's multiple of gpu-profiles' value (latencies), -1 for the inverse (throughput).
	row := func(label string, from func(*system) []benchkit.Latencies, f stat, format func(float64) string, ratio int, target string) {
		line := fmt.Sprintf("%-36s", label)
		var vals []float64
		for _, sys := range systems {
			var xs []float64
			for _, l := range from(sys) {
				xs = append(xs, f(l))
			}
			v := benchkit.Median(xs)
			vals = append(vals, v)
			line += fmt.Sprintf(" %16s", format(v))
		}
		r := ""
		switch ratio {
		case 1:
			r = benchkit.Ratio(vals[0], vals[1])
		case -1:
			r = benchkit.Ratio(vals[1], vals[0])
		}
		o.printf("%s %10s %s\n", line, r, target)
	}
	bursts := func(s *system) []benchkit.Latencies { return s.bursts }
	sat := func(s *system) []benchkit.Latencies { return s.saturated }
	dms := func(x float64) string { return benchkit.MS(time.Duration(x)) }
	num := func(format string) func(float64) string {
		return func(x float64) string { return fmt.Sprintf(format, x) }
	}
	c := o.Concurrency
	row(fmt.Sprintf("p50, %d at once (median of runs)", c), bursts, func(l benchkit.Latencies) float64 { return float64(l.P50) }, dms, 1, "")
	row(fmt.Sprintf("p99, %d at once (median of runs)", c), bursts, func(l benchkit.Latencies) float64 { return float64(l.P99) }, dms, 1,
		"<= "+benchkit.MS(TargetP99)+" in every run: below")
	rng := fmt.Sprintf("%-36s", "  p99 min–max over runs")
	for _, sys := range systems {
		var xs []float64
		for _, l := range sys.bursts {
			xs = append(xs, float64(l.P99))
		}
		lo, hi := benchkit.MinMax(xs)
		rng += fmt.Sprintf(" %16s", fmt.Sprintf("%.1f–%.1f ms", lo/1e6, hi/1e6))
	}
	o.printf("%s\n", rng)
	row("renders per run (median)", bursts, func(l benchkit.Latencies) float64 { return float64(l.N) }, num("%.0f"), 0, "")
	row("  errors per run (median)", bursts, func(l benchkit.Latencies) float64 { return float64(l.Errors) }, num("%.0f"), 0, "0")
	row(fmt.Sprintf("saturated renders/s (%d at once)", c), sat, func(l benchkit.Latencies) float64 { return l.Throughput }, num("%.1f"), -1, "")
	row("API-server reads per render", bursts, func(l benchkit.Latencies) float64 { return l.ReadsPerCall }, num("%.3f"), 0, "0 in every run: below")
	row("machine's CPUs busy in a run, %", bursts, func(l benchkit.Latencies) float64 { return 100 * l.MachineBusy }, num("%.0f"), 0,
		"(median; all CPUs, whoever used them)")
	o.printf("\n")
	o.writeVerdicts(judge(systems))
}

// verdict is B7's targets judged on each run of one of the chart's configurations.
type verdict struct {
	chart, name string
	p99s        []float64 // each run's p99, ns
	p99, reads  benchkit.Verdict
}

// judge judges B7's targets on each run of each of the chart's configurations measured (the systems with a
// chart), in the chart's order: quota disabled, then enabled.
func judge(systems []*system) []verdict {
	var out []verdict
	for _, chart := range []string{QuotaDisabled, QuotaEnabled} {
		v := verdict{chart: chart}
		for _, sys := range systems {
			if sys.chart != chart {
				continue
			}
			v.name = sys.name
			for _, l := range sys.bursts {
				v.p99s = append(v.p99s, float64(l.P99))
			}
			v.p99 = benchkit.AtMost(v.p99s, float64(TargetP99))
			v.reads = benchkit.PerRun(len(sys.bursts), func(i int) bool { return sys.bursts[i].ReadsPerCall == 0 })
		}
		out = append(out, v)
	}
	return out
}

// met is B7's verdict: every configuration of the chart measured and each target met in every run.
func met(vs []verdict) bool {
	for _, v := range vs {
		if !v.p99.OK() || !v.reads.OK() {
			return false
		}
	}
	return len(vs) > 0
}

func (o RunOptions) writeVerdicts(vs []verdict) {
	o.printf("B7 targets as the chart ships gpu-profiles (%s: without gpu-quota; %s: with --quota-url to gpu-quota), judged on each run, met only if every run met them:\n",
		QuotaDisabled, QuotaEnabled)
	for _, v := range vs {
		if v.name == "" {
			o.printf("  %-15s not measured (profiles-bench --quota-bin: the gpu-quota binary)\n", v.chart+":")
			continue
		}
		var each []string
		for _, p := range v.p99s {
			each = append(each, fmt.Sprintf("%.2f", p/1e6))
		}
		o.printf("  %-15s p99 <= %s: %s, each run's p99 %s ms; 0 API-server reads per render: %s (%s)\n", v.chart+":",
			benchkit.MS(TargetP99), v.p99, strings.Join(each, " / "), v.reads, v.name)
	}
	overall := "NOT met"
	if met(vs) {
		overall = "met"
	}
	o.printf("B7: %s\n", overall)
}
