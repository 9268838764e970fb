package replay

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/config"
)

// Options are the command's flags.
type Options struct {
	Trace, ConfigDir, Markdown, SVG string
	Fraction                        float64
	Sensitivity                     bool
}

// Main is bench-replay: flags (with environment fallbacks), the replay, the table, the files.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench-replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	fs.StringVar(&o.Trace, "trace", "../shared/data/pai-gpu-2023", "folder of the Alibaba PAI GPU trace 2023 CSV files")
	fs.StringVar(&o.ConfigDir, "config", "services/internal/replay/config", "folder of replay.yaml and the gpuhub runs' policies")
	fs.Float64Var(&o.Fraction, "fraction", 0, "replay this share of the trace's pods (0: replay.yaml's trace.fraction)")
	fs.StringVar(&o.Markdown, "markdown", "", "write the results as markdown to this file")
	fs.StringVar(&o.SVG, "svg", "", "write the plot of idle-but-held GPUs to this SVG file")
	fs.BoolVar(&o.Sensitivity, "sensitivity", true, "also replay the idleness model's variations (sensitivity table)")
	err := config.Parse(fs, args, map[string]string{"trace": "GPUHUB_REPLAY_TRACE", "config": "GPUHUB_REPLAY_CONFIG"}, nil)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench-replay:", err)
		return 2
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
	// Capacity is how the main capacity was chosen (nil: capacity.gpus named it).
	Capacity        *CapacityRule
	CapacitySeconds float64 // the rule's anchor runs
	Seconds         float64 // the main replay's wall time: trace read, capacity rule, the four runs
	Total           float64 // everything
}

// Bench loads the inputs, replays them and writes the report.
func Bench(o Options, stdout io.Writer) error {
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
	start := time.Now()
	nodes, pods, err := ReadTrace(o.Trace)
	if err != nil {
		return err
	}
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
	rep, err := Replay(cfg, pol, nodes, pods)
	if err != nil {
		return err
	}
	rep.Capacity, rep.CapacitySeconds = rule, ruled.Seconds()
	rep.Seconds = time.Since(start).Seconds()
	if o.Sensitivity {
		if rep.Sensitivity, err = Sensitivity(cfg, pol, nodes, pods); err != nil {
			return err
		}
	}
	rep.Total = time.Since(start).Seconds()
	WriteReport(stdout, rep)
	if o.Markdown != "" {
		if err := writeFile(o.Markdown, func(w io.Writer) { WriteReport(w, rep) }); err != nil {
			return err
		}
	}
	if o.SVG != "" {
		if err := writeFile(o.SVG, func(w io.Writer) { Plot(w, rep.Results) }); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer)) error {
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

// Replay builds the workload and runs every mode on it, side by side (each run in its own goroutine; every run
// owns its state, so the numbers do not depend on the interleaving).
func Replay(cfg *Config, pol Policies, nodes []TraceNode, pods []TracePod) (*Report, error) {
	w, err := BuildWorkload(cfg, nodes, pods)
	if err != nil {
		return nil, err
	}
	env, err := NewEnv(cfg, w, pol)
	if err != nil {
		return nil, err
	}
	rs, err := runAll(env, Modes)
	if err != nil {
		return nil, err
	}
	return &Report{Cfg: cfg, W: w, Results: rs}, nil
}

func runAll(env *Env, modes []Mode) ([]*Result, error) {
	rs := make([]*Result, len(modes))
	errs := make([]error, len(modes))
	var wg sync.WaitGroup
	for i, m := range modes {
		wg.Go(func() { rs[i], errs[i] = Run(env, m) })
	}
	wg.Wait()
	return rs, errors.Join(errs...)
}
