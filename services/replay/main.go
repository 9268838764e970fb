package replay

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/benchfile"
	"github.com/gpuhub/gpuhub/services/internal/config"
)

// Options are the command's flags.
type Options struct {
	Trace, ConfigDir, Markdown, SVG string
	Fraction                        float64
	Sensitivity                     bool
	// Started is when `make bench-replay` began (before the build): the time target counts from it. Zero: from
	// the command's own start.
	Started time.Time
	// Header is the results file's: the date, the machine, the commit and the flags.
	Header benchfile.Header
}

// Main is bench-replay: flags (with environment fallbacks), the replay, the table, the files.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench-replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	var started int64
	fs.StringVar(&o.Trace, "trace", "../shared/data/pai-gpu-2023", "folder of the Alibaba PAI GPU trace 2023 CSV files")
	fs.StringVar(&o.ConfigDir, "config", "services/replay/config", "folder of replay.yaml and the gpuhub runs' policies")
	fs.Float64Var(&o.Fraction, "fraction", 0, "replay this share of the trace's pods (0: replay.yaml's trace.fraction)")
	fs.StringVar(&o.Markdown, "markdown", "", "write the results as markdown to this file")
	fs.StringVar(&o.SVG, "svg", "", "write the plot of idle-but-held GPUs to this SVG file")
	fs.BoolVar(&o.Sensitivity, "sensitivity", true, "also replay the idleness model's variations (sensitivity table)")
	fs.Int64Var(&started, "started", 0, "Unix time in nanoseconds when the whole benchmark began (make bench-replay passes the time before its build); the time target counts from it (0: from this command's start)")
	err := config.Parse(fs, args, map[string]string{"trace": "GPUHUB_REPLAY_TRACE", "config": "GPUHUB_REPLAY_CONFIG"}, nil)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench-replay:", err)
		return 2
	}
	o.Header = benchfile.New(context.Background(), "B4 trace replay", "make bench-replay", fs)
	if started > 0 {
		o.Started = time.Unix(0, started)
		o.Header.Date = o.Started
	}
	// The runs allocate much and keep little: collecting less often saves CPU for a few hundred MiB more.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if err := Bench(o, stdout); err != nil {
		fmt.Fprintln(stderr, "bench-replay:", err)
		return 1
	}
	return 0
}

// Report is everything one invocation measured.
type Report struct {
	Cfg         *Config
	W           *Workload
	Results     []*Result
	Sensitivity []Variation
	// RightSize are the right-size advice setup under other follow and fit shares (rightSizeVariations).
	RightSize []Variation
	// Capacity is how the main capacity was chosen (nil: capacity.gpus named it).
	Capacity *CapacityRule
	// Wall times, in seconds: the trace read, the capacity rule's anchor runs, every other run (main and
	// sensitivity, in one pool of Workers), the command, and the whole benchmark from Options.Started (0:
	// not given).
	TraceSeconds, CapacitySeconds, RunsSeconds, Total, Whole float64
	Runs, Workers                                            int
	// TraceNodes and TraceGPUs are the trace's GPU nodes and their GPUs, all of them.
	TraceNodes int
	TraceGPUs  int64
	// MainIdlePeriods are gpu-culler's GPU idle periods in the main policy, as its file writes them.
	MainIdlePeriods string
	// Load is the machine's load average (1, 5, 15 min) when the command started; empty where unknown.
	Load string
}

// Bench loads the inputs, replays them and writes the report.
func Bench(o Options, stdout io.Writer) error {
	start := time.Now()
	cfg, err := LoadConfig(filepath.Join(o.ConfigDir, "replay.yaml"))
	if err != nil {
		return err
	}
	if o.Fraction > 0 {
		cfg.Trace.Fraction = o.Fraction
	}
	pol, err := LoadPolicies(o.ConfigDir)
	if err != nil {
		return err
	}
	load := loadAverage()
	nodes, pods, err := ReadTrace(o.Trace)
	if err != nil {
		return err
	}
	traced := time.Since(start)
	var rule *CapacityRule
	ruleStart := time.Now()
	if cfg.Capacity.GPUs == 0 {
		r, err := ChooseCapacity(cfg, pol, nodes, pods)
		if err != nil {
			return err
		}
		rule, cfg.Capacity.GPUs = &r, r.Chosen
	}
	ruled := time.Since(ruleStart)
	runsStart := time.Now()
	rep, err := replay(cfg, pol, nodes, pods, o.Sensitivity)
	if err != nil {
		return err
	}
	rep.Capacity, rep.Load = rule, load
	rep.TraceNodes = len(nodes)
	for _, n := range nodes {
		rep.TraceGPUs += n.GPUs
	}
	rep.TraceSeconds, rep.CapacitySeconds, rep.RunsSeconds = traced.Seconds(), ruled.Seconds(), time.Since(runsStart).Seconds()
	// The SVG first: the time target counts everything up to the report itself.
	if o.SVG != "" {
		if err := writeFile(o.SVG, func(w io.Writer) { Plot(w, rep.Results) }); err != nil {
			return err
		}
	}
	rep.Total = time.Since(start).Seconds()
	if !o.Started.IsZero() {
		rep.Whole = time.Since(o.Started).Seconds()
	}
	var body strings.Builder
	WriteReport(&body, rep)
	if _, err := o.Header.WriteTo(stdout); err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, body.String()); err != nil {
		return err
	}
	if o.Markdown != "" {
		if err := benchfile.Write(o.Markdown, o.Header, body.String()); err != nil {
			return fmt.Errorf("write %s: %w", o.Markdown, err)
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer)) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	write(f)
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Replay builds the workload and runs every setup on it, side by side on the same cluster.
func Replay(cfg *Config, pol Policies, nodes []TraceNode, pods []TracePod) (*Report, error) {
	return replay(cfg, pol, nodes, pods, false)
}

// scenario is one configuration replayed: the main one or a sensitivity variation.
type scenario struct {
	name    string
	advice  bool // a right-size variation (Report.RightSize)
	cfg     Config
	pol     Policies
	modes   []Mode
	env     *Env
	results []*Result
}

// replay runs the main scenario's setups and, with sensitivity, every variation's, all in one pool (at most
// GOMAXPROCS runs at once; every run owns its state, so the numbers do not depend on the interleaving).
func replay(cfg *Config, pol Policies, nodes []TraceNode, pods []TracePod, sensitivity bool) (*Report, error) {
	scs := []*scenario{{cfg: *cfg, pol: pol, modes: Modes}}
	if sensitivity {
		for _, v := range variations(cfg) {
			sc := &scenario{name: v.name, cfg: *cfg, pol: pol, modes: sensitivityModes}
			v.change(&sc.cfg)
			if v.policy != nil {
				if err := v.policy(&sc.pol); err != nil {
					return nil, fmt.Errorf("%s: %w", v.name, err)
				}
			}
			scs = append(scs, sc)
		}
		for _, v := range rightSizeVariations(cfg) {
			sc := &scenario{name: v.name, advice: true, cfg: *cfg, pol: pol, modes: []Mode{GPUHubRightSize}}
			v.change(&sc.cfg)
			scs = append(scs, sc)
		}
	}
	err := parallel(len(scs), func(i int) error {
		sc := scs[i]
		w, err := BuildWorkload(&sc.cfg, nodes, pods)
		if err != nil {
			return err
		}
		sc.env, err = NewEnv(&sc.cfg, w, sc.pol)
		return err
	})
	if err != nil {
		return nil, err
	}
	type job struct {
		sc *scenario
		i  int
	}
	var jobs []job
	for _, sc := range scs {
		sc.results = make([]*Result, len(sc.modes))
		for i := range sc.modes {
			jobs = append(jobs, job{sc, i})
		}
	}
	// The longest runs first, so the pool does not end on one of them alone.
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(b.sc.modes[b.i].cost(), a.sc.modes[a.i].cost()) })
	err = parallel(len(jobs), func(k int) error {
		j := jobs[k]
		r, err := Run(j.sc.env, j.sc.modes[j.i])
		j.sc.results[j.i] = r
		return err
	})
	if err != nil {
		return nil, err
	}
	rep := &Report{Cfg: cfg, W: scs[0].env.W, Results: scs[0].results, Runs: len(jobs), Workers: runtime.GOMAXPROCS(0),
		MainIdlePeriods: cullerIdlePeriods(pol)}
	for _, sc := range scs[1:] {
		if sc.advice {
			rep.RightSize = append(rep.RightSize, Variation{Name: sc.name, Results: sc.results})
			continue
		}
		rep.Sensitivity = append(rep.Sensitivity, Variation{Name: sc.name, Results: sc.results})
	}
	return rep, nil
}

// parallel calls f(0), ..., f(n-1), at most GOMAXPROCS at once, started in order; it returns their errors.
func parallel(n int, f func(i int) error) error {
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
