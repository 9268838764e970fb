package replay

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"
)

// WriteReport writes the whole report as markdown: the scenario, the table, the targets, the sensitivity table.
func WriteReport(out io.Writer, rep *Report) {
	cfg, w := rep.Cfg, rep.W
	fmt.Fprintf(out, "# B4 trace replay (`make bench-replay`), %s, %d CPUs (GOMAXPROCS %d)\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "Trace: Alibaba PAI GPU cluster trace 2023. Cite: %s.\n\n", Citation)
	models := map[string]int64{}
	for _, n := range w.Nodes {
		models[n.Model] += n.GPUs
	}
	var ms []string
	for _, m := range slices.Sorted(maps.Keys(models)) {
		ms = append(ms, fmt.Sprintf("%s %d", m, models[m]))
	}
	frac := 0
	for _, s := range w.Sessions {
		if s.Fractional() && s.Milli <= cfg.Requests.SharedUpToMilli {
			frac++
		}
	}
	fmt.Fprintf(out, "Scenario: %d GPU pods of the trace as notebook sessions (%d left out: before trace second %d or "+
		"outside the %.0f %% sample) of %d users over %.1f days; capacity %d GPUs on %d nodes (%s), seed %d; "+
		"%d sessions ask for <= %d milli-GPU and take a time-sliced 1/%d share in the gpuhub runs (%.0f %% of "+
		"the nodes time-sliced there). One step is one minute.\n\n",
		len(w.Sessions), w.Skipped, cfg.Trace.From, 100*cfg.Trace.Fraction, len(w.Users), float64(w.Minutes)/60/24,
		rep.Results[0].GPUs, len(w.Nodes), strings.Join(ms, ", "), cfg.Seed, frac, cfg.Requests.SharedUpToMilli,
		cfg.Capacity.Replicas, 100*cfg.Capacity.SharedFraction)
	if rep.Capacity != nil {
		WriteCapacityRule(out, rep)
	}
	Table(out, rep.Results)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Targets (gpuhub against Kubernetes + idle-culler, docs/benchmarks.md B4):")
	fmt.Fprintln(out)
	WriteVerdicts(out, Verdicts(rep.Results, rep.Seconds))
	if len(rep.Sensitivity) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "Sensitivity: one parameter changed at a time; Kubernetes + idle-culler (anchor) against gpuhub + waitlist.")
		fmt.Fprintln(out)
		WriteSensitivity(out, rep)
	}
	fmt.Fprintf(out, "\nWall time: the replay %.1f s (trace read, the capacity rule's anchor runs (%.1f s) and the four runs); "+
		"with the sensitivity table %.1f s.\n", rep.Seconds, rep.CapacitySeconds, rep.Total)
}

// WriteCapacityRule writes how the main capacity was chosen: the anchor alone at each capacity of the grid.
func WriteCapacityRule(out io.Writer, rep *Report) {
	ch := rep.Cfg.Capacity.Choose
	fmt.Fprintf(out, "Capacity rule (capacity.choose): the largest capacity from %d to %d GPUs (step %d) at which "+
		"Kubernetes + idle-culler alone makes at least %.0f %% of its requests wait; gpuhub's runs play no part. "+
		"Chosen: %d GPUs asked.\n\n", ch.From, ch.To, ch.Step, 100*ch.WaitedShare, rep.Capacity.Chosen)
	fmt.Fprintln(out, "| GPUs asked | GPUs (whole nodes) | anchor: requests that waited | anchor: time-to-GPU p99 |")
	fmt.Fprintln(out, "|---:|---:|---:|---:|")
	for _, r := range rep.Capacity.Rows {
		mark := ""
		if r.Want == rep.Capacity.Chosen {
			mark = " **(chosen)**"
		}
		fmt.Fprintf(out, "| %d%s | %d | %s | %s |\n", r.Want, mark, r.GPUs, pct(r.WaitedShare), minutes(r.WaitP99))
	}
	fmt.Fprintln(out)
}

// WriteSensitivity writes one row per variation (the main setting first).
func WriteSensitivity(out io.Writer, rep *Report) {
	fmt.Fprintln(out, "| setting | idle GPU-h anchor → gpuhub | fewer | waited anchor → gpuhub | p99 anchor → gpuhub | false culls anchor / gpuhub | Jain (contended) anchor / gpuhub |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|")
	row := func(name string, a, g *Result) {
		red := 0.0
		if a.IdleHeldGPUHours > 0 {
			red = 1 - g.IdleHeldGPUHours/a.IdleHeldGPUHours
		}
		fmt.Fprintf(out, "| %s | %.0f → %.0f | %.0f %% | %s → %s | %s → %s | %s / %s | %s / %s |\n", name, a.IdleHeldGPUHours,
			g.IdleHeldGPUHours, 100*red, pct(a.WaitedShare), pct(g.WaitedShare), minutes(a.WaitP99), minutes(g.WaitP99),
			pct(a.FalseCullRate), pct(g.FalseCullRate), jainShort(a.JainContendedMin), jainShort(g.JainContendedMin))
	}
	by := map[Mode]*Result{}
	for _, r := range rep.Results {
		by[r.Mode] = r
	}
	main := by[HubCuller]
	row(fmt.Sprintf("main (config/replay.yaml, %d GPUs)", main.GPUs), main, by[GPUHubWaitlist])
	for _, v := range rep.Sensitivity {
		rs := slices.SortedFunc(slices.Values(v.Results), func(a, b *Result) int { return cmp.Compare(a.Mode, b.Mode) })
		name := v.Name
		if rs[0].GPUs != main.GPUs {
			name = fmt.Sprintf("%s, %d GPUs", name, rs[0].GPUs)
		}
		row(name, rs[0], rs[1])
	}
}
