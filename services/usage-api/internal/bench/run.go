package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

// RunOptions configure the whole benchmark.
type RunOptions struct {
	Self              string // this binary, re-executed for the SUT, the load generator and the footprint
	Users, GPUs, Pods int
	Rate              float64
	Duration, Warmup  time.Duration
	Runs              int
	SaturationRates   []float64
	SUTCPU, LoadCPU   string // taskset CPU lists
	HubVenv, CHP      string // empty HubVenv: no anchor (reported as such)
	Out               io.Writer
	FootprintGPUs     int
	// AnchorRate adds a run of both at a rate the Hub can sustain, for latency ratios; 0: none.
	AnchorRate float64
	// ProfileDir, if set, receives the SUT's CPU profile of the first measured run and its heap, mutex and block
	// profiles at the end.
	ProfileDir string
	// PostgresURL, if set, adds two replicas sharing a ledger on this PostgreSQL (one writes, one follows), the
	// load spread over both, measured in the same rounds as the single replica (SQLite, the chart's default).
	PostgresURL string
	// Report, if set, also gets the final table (what Out gets after the runs' progress): the result file's.
	Report io.Writer
}

// B1's targets for the usage API at 2,000 req/s, each judged on every run (docs/benchmarks.md).
const (
	TargetP50        = 2 * time.Millisecond
	TargetP99        = 20 * time.Millisecond
	TargetFloorRatio = 3  // p99 at most this many times the Go floor's p99 in the same run
	TargetCPUPercent = 50 // of one core
)

// b1Verdict is B1's per-run targets judged for one series of the usage API.
type b1Verdict struct {
	p50, p99, floor, errors, cpu benchkit.Verdict
}

// judgeB1 judges each of runs (one series' runs) against B1's targets; floor are the Go floor's runs, run i
// measured in the same round as runs[i].
func judgeB1(runs, floor []measured) b1Verdict {
	n := len(runs)
	return b1Verdict{
		p50: benchkit.PerRun(n, func(i int) bool { return runs[i].P50 <= TargetP50 }),
		p99: benchkit.PerRun(n, func(i int) bool { return runs[i].P99 <= TargetP99 }),
		floor: benchkit.PerRun(n, func(i int) bool {
			return i < len(floor) && floor[i].P99 > 0 && runs[i].P99 <= TargetFloorRatio*floor[i].P99
		}),
		errors: benchkit.PerRun(n, func(i int) bool { return runs[i].Errors == 0 }),
		cpu:    benchkit.PerRun(n, func(i int) bool { return runs[i].CPUPercent <= TargetCPUPercent }),
	}
}

// writeB1Verdicts writes the table of B1's per-run targets for the usage API's series.
func writeB1Verdicts(out io.Writer, rate float64, names []string, vs []b1Verdict) {
	fmt.Fprintf(out, "\nB1 targets for the usage API at 2,000 req/s (this run: %.0f req/s), judged on each run, met only if every run met them:\n", rate)
	fmt.Fprintf(out, "| series | p50 <= %s | p99 <= %s | p99 <= %dx the Go floor's, same run | 0 errors | <= %d%% of one core |\n|---|---|---|---|---|---|\n",
		benchkit.MS(TargetP50), benchkit.MS(TargetP99), TargetFloorRatio, TargetCPUPercent)
	for i, v := range vs {
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", names[i], v.p50, v.p99, v.floor, v.errors, v.cpu)
	}
}

type measured struct {
	LoadResult
	CPUPercent float64 // of one core, by the target process
}

func rssBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func pinned(cpus string, args ...string) []string {
	if cpus == "" {
		return args
	}
	return append([]string{"taskset", "-c", cpus}, args...)
}

// load runs the load generator against target and measures the CPU of pids (the processes serving it) meanwhile.
func (o RunOptions) load(ctx context.Context, target string, pids []int, rate float64) (measured, error) {
	args := pinned(o.LoadCPU, o.Self, "load", "--target", target, "--rate", fmt.Sprint(rate),
		"--duration", o.Duration.String(), "--warmup", o.Warmup.String(), "--users", strconv.Itoa(o.Users))
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	cpu := func() (t time.Duration) {
		for _, pid := range pids {
			t += benchkit.ProcessCPU(pid)
		}
		return t
	}
	t0 := cpu()
	w0 := time.Now()
	out, err := cmd.Output()
	if err != nil {
		return measured{}, fmt.Errorf("load generator: %w", err)
	}
	t1 := cpu()
	var m measured
	if err := json.Unmarshal(out, &m.LoadResult); err != nil {
		return measured{}, fmt.Errorf("load generator output %q: %w", out, err)
	}
	m.CPUPercent = (t1 - t0).Seconds() / time.Since(w0).Seconds() * 100
	return m, nil
}

// Run runs B1 (usage API vs the Hub, interleaved, several runs) and B5 (history footprint) and prints a table.
func Run(ctx context.Context, o RunOptions) error {
	fmt.Fprintf(o.Out, "B1/B5 usage API benchmark: %d users, %d GPUs, %d pods; %.0f req/s open loop, %d runs x %s (+%s warm-up); SUT on CPU %s, load on CPU %s; %s\n",
		o.Users, o.GPUs, o.Pods, o.Rate, o.Runs, o.Duration, o.Warmup, o.SUTCPU, o.LoadCPU, runtime.Version())

	// The SUT.
	sut, ready, err := o.startSUT(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = sut.Process.Kill(); _ = sut.Wait() }()
	usageTarget := "usage=http://" + ready.Addr
	fmt.Fprintf(o.Out, "usage API SUT ready at %s: RSS %s with %d users' 1 h history\n", ready.Addr, mib(rssBytes(sut.Process.Pid)), ready.HistoryUsers)

	// The floor: a trivial Go handler with an answer of the same size, on the same CPU, measured while the SUT is
	// stopped (SIGSTOP), so the two differ only in what the usage API does.
	floorAddr, stopFloor, err := o.startFloor(ctx, "http://"+ready.Addr)
	if err != nil {
		return err
	}
	defer stopFloor()

	// Two replicas on one PostgreSQL ledger: the writer first (it creates the schema), then the follower.
	var two []*sutReplica
	if o.PostgresURL != "" {
		for _, role := range []string{"writer", "follower"} {
			extra := []string{"--ledger", o.PostgresURL}
			if role == "follower" {
				extra = append(extra, "--follow")
			}
			cmd, r, err := o.startSUT(ctx, extra...)
			if err != nil {
				return fmt.Errorf("replica (%s): %w", role, err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			two = append(two, &sutReplica{cmd: cmd, ready: r, role: role})
			fmt.Fprintf(o.Out, "usage API replica (%s, PostgreSQL ledger) ready at %s: RSS %s\n", role, r.Addr, mib(rssBytes(cmd.Process.Pid)))
		}
	}

	var hub *Hub
	if o.HubVenv != "" {
		fmt.Fprintf(o.Out, "starting JupyterHub from %s with %d users (anchor)...\n", o.HubVenv, o.Users)
		h, err := StartHub(ctx, o.HubVenv, o.CHP, o.SUTCPU, o.Users)
		if err != nil {
			fmt.Fprintf(o.Out, "anchor not measured: %v\n", err)
		} else {
			hub = h
			defer hub.Stop()
		}
	}

	type series struct {
		name, target string
		pids         []int
		rate         float64
		hub          bool
		// stopped are the usage-API processes paused (SIGSTOP) while this series runs: those not measured, so
		// that their ticks do not land on it.
		stopped []*os.Process
		runs    []measured
	}
	var twoProcs []*os.Process
	var twoPids []int
	var twoBases []string
	for _, r := range two {
		twoProcs, twoPids = append(twoProcs, r.cmd.Process), append(twoPids, r.cmd.Process.Pid)
		twoBases = append(twoBases, "http://"+r.ready.Addr)
	}
	one := []int{sut.Process.Pid}
	all := []*series{
		{name: "usage-api me (1 h history)", target: usageTarget, pids: one, rate: o.Rate, stopped: twoProcs},
		{name: "usage-api me?since", target: "usage-since=http://" + ready.Addr, pids: one, rate: o.Rate, stopped: twoProcs},
		// The floor is measured while the SUT is paused too, so the two differ only in what the usage API does.
		{name: "Go floor (trivial handler, same size)", target: "usage=http://" + floorAddr.addr, pids: []int{floorAddr.pid}, rate: o.Rate,
			stopped: append([]*os.Process{sut.Process}, twoProcs...)},
	}
	if hub != nil {
		all = append(all, &series{name: "JupyterHub GET /users/{name}", target: "hub=" + hub.APIURL + "|" + hub.Token, pids: []int{hub.Pid}, rate: o.Rate, hub: true, stopped: twoProcs})
	}
	if o.AnchorRate > 0 && hub != nil {
		all = append(all,
			&series{name: fmt.Sprintf("usage-api me (1 h history) @%.0f/s", o.AnchorRate), target: usageTarget, pids: one, rate: o.AnchorRate, stopped: twoProcs},
			&series{name: fmt.Sprintf("JupyterHub GET /users/{name} @%.0f/s", o.AnchorRate), target: "hub=" + hub.APIURL + "|" + hub.Token, pids: []int{hub.Pid}, rate: o.AnchorRate, hub: true, stopped: twoProcs})
	}
	// The two replicas' series come last, so the single replica's rows keep their places; the single replica is
	// paused meanwhile, as they are during its series.
	twoAt := len(all)
	if len(two) > 0 {
		bases := strings.Join(twoBases, ",")
		all = append(all,
			&series{name: "usage-api me (1 h history), 2 replicas (PostgreSQL)", target: "usage=" + bases, pids: twoPids, rate: o.Rate, stopped: []*os.Process{sut.Process}},
			&series{name: "usage-api me?since, 2 replicas (PostgreSQL)", target: "usage-since=" + bases, pids: twoPids, rate: o.Rate, stopped: []*os.Process{sut.Process}})
	}
	pause := func(ps []*os.Process, sig syscall.Signal) {
		for _, p := range ps {
			_ = p.Signal(sig)
		}
	}
	for run := range o.Runs {
		for _, s := range all {
			pause(s.stopped, syscall.SIGSTOP)
			var prof chan error
			if run == 0 && s == all[0] && o.ProfileDir != "" {
				prof = make(chan error, 1)
				go func() {
					prof <- fetchTo(ctx, "http://"+ready.DebugAddr+"/debug/pprof/profile?seconds="+strconv.Itoa(int((o.Warmup+o.Duration).Seconds())), filepath.Join(o.ProfileDir, "sut-cpu.pprof"))
				}()
			}
			m, err := o.load(ctx, s.target, s.pids, s.rate)
			pause(s.stopped, syscall.SIGCONT)
			if prof != nil {
				if perr := <-prof; perr != nil {
					fmt.Fprintf(o.Out, "  cpu profile: %v\n", perr)
				}
			}
			if err != nil {
				return err
			}
			s.runs = append(s.runs, m)
			fmt.Fprintf(o.Out, "  run %d %s @%.0f/s: %s\n", run+1, s.name, s.rate, m)
			if s.hub {
				// The Hub keeps working through requests its clients gave up on; let it finish before the next
				// measurement shares its CPU.
				drain(ctx, s.pids[0], 2*time.Minute)
			}
		}
	}
	sutRSS := rssBytes(sut.Process.Pid)
	var sutStats Stats
	if err := getJSON(ctx, "http://"+ready.DebugAddr+"/debug/stats", &sutStats); err != nil {
		fmt.Fprintf(o.Out, "SUT stats: %v\n", err)
	}
	if o.ProfileDir != "" {
		for _, name := range []string{"heap", "mutex", "block"} {
			if err := fetchTo(ctx, "http://"+ready.DebugAddr+"/debug/pprof/"+name, filepath.Join(o.ProfileDir, "sut-"+name+".pprof")); err != nil {
				fmt.Fprintf(o.Out, "%s profile: %v\n", name, err)
			}
		}
	}
	var sat, twoSat []string
	pause(twoProcs, syscall.SIGSTOP)
	for _, r := range o.SaturationRates {
		m, err := o.load(ctx, usageTarget, one, r)
		if err != nil {
			return err
		}
		sat = append(sat, fmt.Sprintf("%6.0f req/s offered (1 h history): %s", r, m))
		if m, err = o.load(ctx, "usage-since=http://"+ready.Addr, one, r); err != nil {
			return err
		}
		sat = append(sat, fmt.Sprintf("%6.0f req/s offered (since):       %s", r, m))
	}
	pause(twoProcs, syscall.SIGCONT)
	if len(two) > 0 {
		pause([]*os.Process{sut.Process}, syscall.SIGSTOP)
		for _, r := range o.SaturationRates {
			m, err := o.load(ctx, all[twoAt].target, twoPids, r)
			if err != nil {
				return err
			}
			twoSat = append(twoSat, fmt.Sprintf("%6.0f req/s offered (1 h history): %s", r, m))
			if m, err = o.load(ctx, all[twoAt+1].target, twoPids, r); err != nil {
				return err
			}
			twoSat = append(twoSat, fmt.Sprintf("%6.0f req/s offered (since):       %s", r, m))
		}
		pause([]*os.Process{sut.Process}, syscall.SIGCONT)
	}
	twoStats := make([]Stats, len(two))
	twoRSS := make([]int64, len(two))
	for i, r := range two {
		twoRSS[i] = rssBytes(r.cmd.Process.Pid)
		if err := getJSON(ctx, "http://"+r.ready.DebugAddr+"/debug/stats", &twoStats[i]); err != nil {
			fmt.Fprintf(o.Out, "replica (%s) stats: %v\n", r.role, err)
		}
	}

	fp, err := o.footprint(ctx)
	if err != nil {
		return err
	}

	if o.Report != nil {
		o.Out = io.MultiWriter(o.Out, o.Report)
	}
	fmt.Fprintf(o.Out, "\nB1: median [min-max] of %d runs, open loop, latency from the scheduled send time\n", o.Runs)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	metrics := []struct {
		name string
		get  func(measured) float64
		unit string
	}{
		{"p50 ms", func(m measured) float64 { return ms(m.P50) }, ""},
		{"p99 ms", func(m measured) float64 { return ms(m.P99) }, ""},
		{"errors", func(m measured) float64 { return float64(m.Errors) }, ""},
		{"achieved req/s", func(m measured) float64 { return m.AchievedRate }, ""},
		{"server CPU % of a core", func(m measured) float64 { return m.CPUPercent }, ""},
	}
	fmt.Fprintf(o.Out, "| series | offered req/s |")
	for _, mt := range metrics {
		fmt.Fprintf(o.Out, " %s |", mt.name)
	}
	fmt.Fprintf(o.Out, "\n|---|---|%s\n", strings.Repeat("---|", len(metrics)))
	for _, s := range all {
		fmt.Fprintf(o.Out, "| %s | %.0f |", s.name, s.rate)
		for _, mt := range metrics {
			fmt.Fprintf(o.Out, " %s |", stats(s.runs, mt.get).format(mt.unit))
		}
		fmt.Fprintln(o.Out)
	}
	if hub != nil {
		hubAt := 3
		ratio := func(a, b *series, get func(measured) float64) string {
			x, y := stats(a.runs, get).med, stats(b.runs, get).med
			if x == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1fx", y/x)
		}
		p99 := func(m measured) float64 { return ms(m.P99) }
		p50 := func(m measured) float64 { return ms(m.P50) }
		fmt.Fprintf(o.Out, "\nratios Hub / usage-api (medians): at %.0f/s p50 %s, p99 %s (vs me?since: p50 %s, p99 %s)\n",
			o.Rate, ratio(all[0], all[hubAt], p50), ratio(all[0], all[hubAt], p99), ratio(all[1], all[hubAt], p50), ratio(all[1], all[hubAt], p99))
		if len(all) > hubAt+1 {
			fmt.Fprintf(o.Out, "                                      at %.0f/s p50 %s, p99 %s\n", o.AnchorRate, ratio(all[hubAt+1], all[hubAt+2], p50), ratio(all[hubAt+1], all[hubAt+2], p99))
		}
	}
	{
		p99 := func(m measured) float64 { return ms(m.P99) }
		p50 := func(m measured) float64 { return ms(m.P50) }
		f99, f50 := stats(all[2].runs, p99).med, stats(all[2].runs, p50).med
		if f99 > 0 && f50 > 0 {
			fmt.Fprintf(o.Out, "\nratios usage-api / Go floor (medians, same rate, same CPU): me p50 %.1fx p99 %.1fx; me?since p50 %.1fx p99 %.1fx\n",
				stats(all[0].runs, p50).med/f50, stats(all[0].runs, p99).med/f99, stats(all[1].runs, p50).med/f50, stats(all[1].runs, p99).med/f99)
		}
		fmt.Fprintf(o.Out, "SUT over the whole benchmark: %s\n", sutStats)
		if len(two) > 0 {
			// The replicas against the single one, series for series, measured in the same rounds.
			cpu := func(m measured) float64 { return m.CPUPercent }
			r := func(a, b *series, get func(measured) float64) float64 {
				x := stats(b.runs, get).med
				if x == 0 {
					return 0
				}
				return stats(a.runs, get).med / x
			}
			fmt.Fprintf(o.Out, "\nratios 2 replicas (PostgreSQL) / 1 replica (SQLite) (medians, same rounds, same CPU): me p50 %.2fx p99 %.2fx CPU %.2fx; me?since p50 %.2fx p99 %.2fx CPU %.2fx\n",
				r(all[twoAt], all[0], p50), r(all[twoAt], all[0], p99), r(all[twoAt], all[0], cpu),
				r(all[twoAt+1], all[1], p50), r(all[twoAt+1], all[1], p99), r(all[twoAt+1], all[1], cpu))
			fmt.Fprintf(o.Out, "2 replicas: the load alternates between them (%.0f req/s each at %.0f/s); both on CPU %s, each ticking (sampling) every 5 s; the writer records the ledger, the follower follows it at each tick (no Lease: B1 has no API server); PostgreSQL (with-postgres.sh, fsync off) is not pinned and its CPU is not in the column\n",
				o.Rate/2, o.Rate, o.SUTCPU)
			for i, r := range two {
				fmt.Fprintf(o.Out, "replica (%s) over the whole benchmark: %s\n", r.role, twoStats[i])
			}
		}
	}
	names := []string{all[0].name, all[1].name}
	verdicts := []b1Verdict{judgeB1(all[0].runs, all[2].runs), judgeB1(all[1].runs, all[2].runs)}
	if len(two) > 0 {
		names = append(names, all[twoAt].name, all[twoAt+1].name)
		verdicts = append(verdicts, judgeB1(all[twoAt].runs, all[2].runs), judgeB1(all[twoAt+1].runs, all[2].runs))
	}
	writeB1Verdicts(o.Out, o.Rate, names, verdicts)
	fmt.Fprintf(o.Out, "saturation target: >= 8,000 req/s (below, one run each)\n")
	fmt.Fprintf(o.Out, "\nusage-api saturation (one run each):\n")
	for _, s := range sat {
		fmt.Fprintf(o.Out, "  %s\n", s)
	}
	if len(twoSat) > 0 {
		fmt.Fprintf(o.Out, "usage-api saturation, 2 replicas (PostgreSQL), the load spread over both (one run each):\n")
		for _, s := range twoSat {
			fmt.Fprintf(o.Out, "  %s\n", s)
		}
	}
	fmt.Fprintf(o.Out, "\nB5 footprint:\n")
	fmt.Fprintf(o.Out, "  history, %d users each holding 1 GPU, 1 h at 5 s: %s heap + %s mapped outside it, %s RSS  => %s per 1,000 GPUs (target <= 16 MiB)\n",
		o.FootprintGPUs, mib(fp.Heap), mib(fp.Mapped), mib(fp.RSS), mib((fp.Heap+fp.Mapped)*1000/int64(o.FootprintGPUs)))
	target := B5TargetMiB(o.Users)
	fmt.Fprintf(o.Out, "  usage-api SUT (%d users, %d GPUs, %d pods, 1 h history of %d users, after load): RSS %s (target <= %d MiB: %s)\n",
		o.Users, o.GPUs, o.Pods, ready.HistoryUsers, mib(sutRSS), target, benchkit.AtMost([]float64{float64(sutRSS)}, float64(target)*(1<<20)))
	for i, r := range two {
		fmt.Fprintf(o.Out, "  2 replicas (PostgreSQL), the %s, after load: RSS %s\n", r.role, mib(twoRSS[i]))
	}
	return nil
}

// B5TargetMiB is B5's RSS target for the whole usage API at this many users (../shared/docs/benchmarks.md):
// 256 MiB at 10,000 users, 384 MiB at 20,000; between and beyond, the nearer row's (20,000's above 15,000).
func B5TargetMiB(users int) int {
	if users > 15000 {
		return 384
	}
	return 256
}

// sutReady is what a usage-API SUT says once it serves.
type sutReady struct {
	Addr         string
	DebugAddr    string
	HistoryUsers int
}

// sutReplica is one of the two replicas on PostgreSQL.
type sutReplica struct {
	cmd   *exec.Cmd
	ready sutReady
	role  string // writer or follower
}

// startSUT starts a usage-API SUT pinned to the SUT CPU with extra flags, and waits until it serves.
func (o RunOptions) startSUT(ctx context.Context, extra ...string) (*exec.Cmd, sutReady, error) {
	args := pinned(o.SUTCPU, append([]string{o.Self, "sut", "--users", strconv.Itoa(o.Users), "--gpus", strconv.Itoa(o.GPUs), "--pods", strconv.Itoa(o.Pods)}, extra...)...)
	sut := exec.CommandContext(ctx, args[0], args[1:]...)
	sut.Env = append(os.Environ(), "GOMAXPROCS=1")
	if o.ProfileDir != "" {
		sut.Env = append(sut.Env, profileLocksEnv+"=1")
	}
	sut.Stderr = os.Stderr
	stdout, err := sut.StdoutPipe()
	if err != nil {
		return nil, sutReady{}, err
	}
	if err := sut.Start(); err != nil {
		return nil, sutReady{}, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = sut.Process.Kill()
		_ = sut.Wait()
		return nil, sutReady{}, fmt.Errorf("sut did not start: %w", err)
	}
	var ready sutReady
	if err := json.Unmarshal([]byte(line), &ready); err != nil {
		_ = sut.Process.Kill()
		_ = sut.Wait()
		return nil, sutReady{}, fmt.Errorf("sut said %q: %w", line, err)
	}
	return sut, ready, nil
}

// drain waits until pid stops using CPU (under 5% over a second) or max passes.
func drain(ctx context.Context, pid int, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		t0 := benchkit.ProcessCPU(pid) // 0 once the process is gone: then it returns after the second
		time.Sleep(time.Second)
		if benchkit.ProcessCPU(pid)-t0 < 50*time.Millisecond {
			return
		}
	}
}

func (m measured) String() string {
	return fmt.Sprintf("sent %d ok %d err %d rate %.0f/s p50 %.2fms p90 %.2fms p99 %.2fms max %.1fms cpu %.0f%%",
		m.Sent, m.OK, m.Errors, m.AchievedRate, float64(m.P50)/1e6, float64(m.P90)/1e6, float64(m.P99)/1e6, float64(m.Max)/1e6, m.CPUPercent)
}

type stat struct{ med, lo, hi float64 }

func stats(ms []measured, get func(measured) float64) stat {
	v := make([]float64, len(ms))
	for i, m := range ms {
		v[i] = get(m)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return stat{}
	}
	return stat{med: v[len(v)/2], lo: v[0], hi: v[len(v)-1]}
}

func (s stat) format(unit string) string {
	return fmt.Sprintf("%.2f [%.2f-%.2f] %s", s.med, s.lo, s.hi, unit)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Footprint is the memory a history of n GPUs takes.
// Footprint is what an hour of history adds: to the Go heap, to memory mapped outside it (full rings), to RSS.
type Footprint struct{ Heap, Mapped, RSS int64 }

func (o RunOptions) footprint(ctx context.Context) (Footprint, error) {
	cmd := exec.CommandContext(ctx, o.Self, "footprint", "--footprint-gpus", strconv.Itoa(o.FootprintGPUs))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return Footprint{}, fmt.Errorf("footprint: %w", err)
	}
	var fp Footprint
	if err := json.Unmarshal(out, &fp); err != nil {
		return Footprint{}, fmt.Errorf("footprint output %q: %w", out, err)
	}
	return fp, nil
}

type floorProc struct {
	addr string
	pid  int
}

// startFloor starts the floor server pinned like the SUT, with an answer as large as the SUT's answer to one me.
func (o RunOptions) startFloor(ctx context.Context, sutURL string) (floorProc, func(), error) {
	size := 4096
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sutURL+"/services/gpu-usage/api/v1/me", nil)
	if err == nil {
		req.Header.Set("Authorization", "token tok-"+UserName(0))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			size = len(b)
		}
	}
	args := pinned(o.SUTCPU, o.Self, "floor", "--floor-bytes", strconv.Itoa(size))
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return floorProc{}, nil, err
	}
	if err := cmd.Start(); err != nil {
		return floorProc{}, nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return floorProc{}, nil, fmt.Errorf("floor did not start: %w", err)
	}
	fmt.Fprintf(o.Out, "Go floor ready at %s: a fixed %d-byte answer (the size of one me answer)\n", strings.TrimSpace(line), size)
	return floorProc{addr: strings.TrimSpace(line), pid: cmd.Process.Pid}, stop, nil
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	return json.NewDecoder(resp.Body).Decode(v)
}

func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
