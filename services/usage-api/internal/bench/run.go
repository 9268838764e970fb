package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
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
}

type measured struct {
	LoadResult
	CPUPercent float64 // of one core, by the target process
}

// cpuTicks is utime+stime of pid in clock ticks (100 Hz on Linux).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + st, nil
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

func (o RunOptions) load(ctx context.Context, target string, pid int, rate float64) (measured, error) {
	args := pinned(o.LoadCPU, o.Self, "load", "--target", target, "--rate", fmt.Sprint(rate),
		"--duration", o.Duration.String(), "--warmup", o.Warmup.String(), "--users", strconv.Itoa(o.Users))
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	t0, _ := cpuTicks(pid)
	w0 := time.Now()
	out, err := cmd.Output()
	if err != nil {
		return measured{}, fmt.Errorf("load generator: %w", err)
	}
	t1, _ := cpuTicks(pid)
	var m measured
	if err := json.Unmarshal(out, &m.LoadResult); err != nil {
		return measured{}, fmt.Errorf("load generator output %q: %w", out, err)
	}
	m.CPUPercent = float64(t1-t0) / 100 / time.Since(w0).Seconds() * 100
	return m, nil
}

// Run runs B1 (usage API vs the Hub, interleaved, several runs) and B5 (history footprint) and prints a table.
func Run(ctx context.Context, o RunOptions) error {
	fmt.Fprintf(o.Out, "B1/B5 usage API benchmark: %d users, %d GPUs, %d pods; %.0f req/s open loop, %d runs x %s (+%s warm-up); SUT on CPU %s, load on CPU %s; %s\n",
		o.Users, o.GPUs, o.Pods, o.Rate, o.Runs, o.Duration, o.Warmup, o.SUTCPU, o.LoadCPU, runtime.Version())

	// The SUT.
	args := pinned(o.SUTCPU, o.Self, "sut", "--users", strconv.Itoa(o.Users), "--gpus", strconv.Itoa(o.GPUs), "--pods", strconv.Itoa(o.Pods))
	sut := exec.CommandContext(ctx, args[0], args[1:]...)
	sut.Env = append(os.Environ(), "GOMAXPROCS=1")
	sut.Stderr = os.Stderr
	stdout, err := sut.StdoutPipe()
	if err != nil {
		return err
	}
	if err := sut.Start(); err != nil {
		return err
	}
	defer func() { _ = sut.Process.Kill(); _ = sut.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fmt.Errorf("sut did not start: %w", err)
	}
	var ready struct {
		Addr         string
		HistoryUsers int
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil {
		return fmt.Errorf("sut said %q: %w", line, err)
	}
	usageTarget := "usage=http://" + ready.Addr
	fmt.Fprintf(o.Out, "usage API SUT ready at %s: RSS %s with %d users' 1 h history\n", ready.Addr, mib(rssBytes(sut.Process.Pid)), ready.HistoryUsers)

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

	var usageRuns, sinceRuns, hubRuns []measured
	for run := range o.Runs {
		m, err := o.load(ctx, usageTarget, sut.Process.Pid, o.Rate)
		if err != nil {
			return err
		}
		usageRuns = append(usageRuns, m)
		fmt.Fprintf(o.Out, "  run %d usage-api me (full hour of history): %s\n", run+1, m)
		m, err = o.load(ctx, "usage-since=http://"+ready.Addr, sut.Process.Pid, o.Rate)
		if err != nil {
			return err
		}
		sinceRuns = append(sinceRuns, m)
		fmt.Fprintf(o.Out, "  run %d usage-api me?since (panel steady state): %s\n", run+1, m)
		if hub != nil {
			m, err := o.load(ctx, "hub="+hub.APIURL+"|"+hub.Token, hub.Pid, o.Rate)
			if err != nil {
				return err
			}
			hubRuns = append(hubRuns, m)
			fmt.Fprintf(o.Out, "  run %d hub GET /users/{name}: %s\n", run+1, m)
		}
	}
	sutRSS := rssBytes(sut.Process.Pid)
	var sat []string
	for _, r := range o.SaturationRates {
		m, err := o.load(ctx, usageTarget, sut.Process.Pid, r)
		if err != nil {
			return err
		}
		sat = append(sat, fmt.Sprintf("%6.0f req/s offered: %s", r, m))
	}

	fp, err := o.footprint(ctx)
	if err != nil {
		return err
	}

	fmt.Fprintf(o.Out, "\nB1: GET api/v1/me vs the Hub's GET /hub/api/users/{name}, %.0f req/s, median [min-max] of %d runs\n", o.Rate, o.Runs)
	fmt.Fprintf(o.Out, "| metric | usage-api me (1 h history) | usage-api me?since | JupyterHub | Hub / usage-api (1 h history) | target (usage-api) |\n|---|---|---|---|---|---|\n")
	row := func(name string, get func(measured) float64, unit string, target string) {
		u := stats(usageRuns, get)
		us := stats(sinceRuns, get)
		h := "not measured"
		ratio := "-"
		if len(hubRuns) > 0 {
			hs := stats(hubRuns, get)
			h = hs.format(unit)
			if u.med > 0 {
				ratio = fmt.Sprintf("%.1fx", hs.med/u.med)
			}
		}
		fmt.Fprintf(o.Out, "| %s | %s | %s | %s | %s | %s |\n", name, u.format(unit), us.format(unit), h, ratio, target)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	row("p50 latency", func(m measured) float64 { return ms(m.P50) }, "ms", "<= 2 ms")
	row("p99 latency", func(m measured) float64 { return ms(m.P99) }, "ms", "<= 20 ms")
	row("max latency", func(m measured) float64 { return ms(m.Max) }, "ms", "")
	row("errors", func(m measured) float64 { return float64(m.Errors) }, "", "0")
	row("achieved rate", func(m measured) float64 { return m.AchievedRate }, "req/s", fmt.Sprintf("%.0f", o.Rate))
	row("server CPU", func(m measured) float64 { return m.CPUPercent }, "% of a core", "<= 50 %")
	fmt.Fprintf(o.Out, "\nusage-api saturation (one run each):\n")
	for _, s := range sat {
		fmt.Fprintf(o.Out, "  %s\n", s)
	}
	fmt.Fprintf(o.Out, "\nB5 footprint:\n")
	fmt.Fprintf(o.Out, "  history, %d users each holding 1 GPU, 1 h at 5 s: %s heap, %s RSS  => %s per 1,000 GPUs (target <= 16 MiB)\n",
		o.FootprintGPUs, mib(fp.Heap), mib(fp.RSS), mib(fp.Heap*1000/int64(o.FootprintGPUs)))
	fmt.Fprintf(o.Out, "  usage-api SUT (%d users, %d GPUs, %d pods, 1 h history of %d users, after load): RSS %s (target <= 256 MiB)\n",
		o.Users, o.GPUs, o.Pods, ready.HistoryUsers, mib(sutRSS))
	return nil
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
type Footprint struct{ Heap, RSS int64 }

func (o RunOptions) footprint(ctx context.Context) (Footprint, error) {
	cmd := exec.CommandContext(ctx, o.Self, "footprint", "--gpus", strconv.Itoa(o.FootprintGPUs))
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
