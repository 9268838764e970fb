package replay

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// WriteReport writes the report as markdown, after the results file's header (benchfile): the scenario, the
// capacity rule, the setups side by side, what each gpuhub part adds, the targets, the waits by request size,
// the sensitivity table and the wall times. docs/benchmarks/replay.md is this, as `make bench-replay` wrote it.
func WriteReport(out io.Writer, rep *Report) {
	fmt.Fprintln(out, "The model, the setups and the metrics: services/replay/README.md.")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Trace: Alibaba PAI GPU cluster trace 2023. Cite: %s.\n\n", Citation)
	writeScenario(out, rep)
	if rep.Capacity != nil {
		WriteCapacityRule(out, rep)
	}
	fmt.Fprintln(out, "## The setups, on the same cluster")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Every setup replays the same sessions on the same nodes with the same time-slicing. The anchors:")
	fmt.Fprintln(out, "**Kubernetes** (pods queue in the scheduler, no culling) and **Kubernetes + idle-culler**")
	fmt.Fprintln(out, "(jupyterhub-idle-culler: no Hub activity for the timeout). **gpuhub**: every part (gpu-quota's")
	fmt.Fprintln(out, "admission with gpu-profiles' spawn form, gpu-culler, the waitlist). Then gpuhub with one part off:")
	fmt.Fprintln(out, "**− culling** (no gpu-culler); **− quotas/packing** (no gpu-quota admission and no gpu-profiles form:")
	fmt.Fprintln(out, "pods queue in the scheduler as in Kubernetes, and the waitlist, which is gpu-quota's, goes with them;")
	fmt.Fprintln(out, "gpu-culler alone is left); **− waitlist** (gpu-quota's default, as the chart ships it).")
	fmt.Fprintln(out)
	Table(out, rep.Results)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "## What each gpuhub part adds")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "gpuhub with the part off → gpuhub with every part, the rest unchanged (the columns above).")
	fmt.Fprintln(out)
	WriteAblation(out, rep.Results)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "## Targets")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "gpuhub, with every part and as the chart ships it (− waitlist), against Kubernetes + idle-culler on the")
	fmt.Fprintln(out, "same cluster (`../shared/docs/benchmarks.md` row B4):")
	fmt.Fprintln(out)
	seconds, timing := rep.Total, "the command (trace read, capacity rule, every run, sensitivity included; without the build)"
	if rep.Whole > 0 {
		seconds, timing = rep.Whole, "the whole `make bench-replay` (build, trace read, capacity rule, every run, sensitivity included)"
	}
	WriteVerdicts(out, Verdicts(rep.Results, seconds, timing))
	fmt.Fprintln(out)
	fmt.Fprintln(out, "## Who waits: requests by what they asked for")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Requests that waited of all requests of that size (a request back after a cull is a new one), the mean")
	fmt.Fprintln(out, "wait of those that waited, and how many were never served before their session or the window ended.")
	fmt.Fprintln(out)
	WriteWaitsBySize(out, rep.Results, rep.Cfg.Capacity.Replicas)
	if len(rep.Sensitivity) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "## Sensitivity")
		fmt.Fprintln(out)
		fmt.Fprintln(out, "One parameter changed at a time; Kubernetes + idle-culler (anchor) against gpuhub (every part), both on")
		fmt.Fprintln(out, "the variation's cluster.")
		fmt.Fprintln(out)
		WriteSensitivity(out, rep)
		fmt.Fprintln(out)
		fmt.Fprintln(out, "### False culls against idle GPU-hours: gpu-culler's idle period")
		fmt.Fprintln(out)
		WriteIdleFrontier(out, rep)
	}
	if len(rep.RightSize) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "## Right-size advice followed: sensitivity")
		fmt.Fprintln(out)
		fmt.Fprintln(out, "gpuhub (every part) against gpuhub where a share of the users follow the right-size advice (the model:")
		fmt.Fprintln(out, "services/replay/README.md, \"Right-size advice\"), on the main cluster; one share changed at a time.")
		fmt.Fprintln(out)
		WriteRightSize(out, rep)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "## Wall time")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Trace read %.1f s; capacity rule %.1f s; %d runs (main and sensitivity) in a pool of %d at once %.1f s; "+
		"the command %.1f s", rep.TraceSeconds, rep.CapacitySeconds, rep.Runs, rep.Workers, rep.RunsSeconds, rep.Total)
	if rep.Whole > 0 {
		fmt.Fprintf(out, "; the whole `make bench-replay`, from before the build, %.1f s", rep.Whole)
	}
	fmt.Fprint(out, ". The simulation is deterministic: another run gives the same tables, and only these times differ")
	if rep.Load != "" {
		fmt.Fprintf(out, "; they depend on what else the machine runs (load average %s when the command started)", rep.Load)
	}
	fmt.Fprintln(out, ".")
}

// writeScenario describes the sessions, their demand and activity, and the cluster every setup gets.
func writeScenario(out io.Writer, rep *Report) {
	cfg, w := rep.Cfg, rep.W
	models := map[string]int64{}
	for _, n := range w.Nodes {
		models[n.Model] += n.GPUs
	}
	var ms []string
	for _, m := range slices.Sorted(maps.Keys(models)) {
		ms = append(ms, fmt.Sprintf("%s %d", m, models[m]))
	}
	d := demandOf(w)
	cl := rep.Results[0].Cluster
	shares := 0
	for _, s := range w.Sessions {
		if cl.SharedNodes > 0 && s.Fractional() && s.Milli <= cfg.Requests.SharedUpToMilli {
			shares++
		}
	}
	fmt.Fprintf(out, "Sessions: %d GPU pods of the trace as notebook servers (%d GPU pods left out: gone before trace "+
		"second %d or outside the %.0f %% sample) of %d users over %.1f days. The GPUs they ask for, counting a share as "+
		"a whole GPU: %.1f on average over the window, %d at peak. The idleness model keeps a server's GPU busy %.1f %% "+
		"of the session-minutes.\n\n",
		len(w.Sessions), w.Skipped, cfg.Trace.From, 100*cfg.Trace.Fraction, len(w.Users), float64(w.Minutes)/60/24,
		d.mean, d.peak, 100*d.busy)
	fmt.Fprintf(out, "Cluster, the same in every setup: %d GPUs on %d nodes (%s), seed %d", cl.GPUs, cl.Nodes, strings.Join(ms, ", "), cfg.Seed)
	if rep.TraceNodes > 0 {
		fmt.Fprintf(out, ", of the trace's %d GPU nodes (%d GPUs)", rep.TraceNodes, rep.TraceGPUs)
	}
	fmt.Fprint(out, ". ")
	if cl.SharedNodes > 0 {
		fmt.Fprintf(out, "The admin time-slices %d of the nodes (%d GPUs, each into %d shares: capacity.sharedFraction %g); "+
			"%d sessions ask for <= %d milli-GPU and take a 1/%d share in every setup. ", cl.SharedNodes, cl.SharedGPUs,
			cl.Replicas, cfg.Capacity.SharedFraction, shares, cfg.Requests.SharedUpToMilli, cl.Replicas)
	} else {
		fmt.Fprint(out, "No node is time-sliced: every session takes whole GPUs. ")
	}
	fmt.Fprintln(out, "One step is one minute.")
	fmt.Fprintln(out)
}

// demand is what the sessions ask for over the window, whatever any setup gives them.
type demand struct {
	mean float64 // GPUs asked by the sessions alive, averaged over the window's minutes
	peak int64
	busy float64 // busy session-minutes / session-minutes
}

func demandOf(w *Workload) demand {
	delta := make([]int64, w.Minutes+1)
	var busy, total int
	for _, s := range w.Sessions {
		delta[s.Start] += s.GPUs
		delta[s.End] -= s.GPUs
		for t := s.Start; t < s.End; t++ {
			if s.Busy(t) {
				busy++
			}
		}
		total += s.End - s.Start
	}
	var d demand
	var cur, sum int64
	for t := range w.Minutes {
		cur += delta[t]
		sum += cur
		d.peak = max(d.peak, cur)
	}
	if w.Minutes > 0 {
		d.mean = float64(sum) / float64(w.Minutes)
	}
	if total > 0 {
		d.busy = float64(busy) / float64(total)
	}
	return d
}

// WriteCapacityRule writes how the main capacity was chosen: the anchor alone at each capacity of the grid.
func WriteCapacityRule(out io.Writer, rep *Report) {
	ch := rep.Cfg.Capacity.Choose
	fmt.Fprintln(out, "## Capacity")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Rule (capacity.choose): the largest capacity from %d to %d GPUs (step %d) at which "+
		"Kubernetes + idle-culler alone, on the cluster every setup gets (time-slicing included), makes at least "+
		"%.0f %% of its requests wait; gpuhub's runs play no part. Chosen: %d GPUs asked.\n\n",
		ch.From, ch.To, ch.Step, 100*ch.WaitedShare, rep.Capacity.Chosen)
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

// WriteSensitivity writes one row per variation (the main setting first), then how many rows meet each target.
func WriteSensitivity(out io.Writer, rep *Report) {
	fmt.Fprintln(out, "| setting | idle GPU-h anchor → gpuhub | fewer | waited anchor → gpuhub | p99 anchor → gpuhub | false culls anchor / gpuhub | Jain (contended) anchor / gpuhub |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|")
	var fewer, fewer30, p99, n int
	row := func(name string, a, g *Result) {
		red := 0.0
		if a.IdleHeldGPUHours > 0 {
			red = 1 - g.IdleHeldGPUHours/a.IdleHeldGPUHours
		}
		n++
		if red > 0 {
			fewer++
		}
		if red >= TargetIdleReduction {
			fewer30++
		}
		if ratioOf(a.WaitP99, g.WaitP99) >= TargetP99Ratio {
			p99++
		}
		fmt.Fprintf(out, "| %s | %.0f → %.0f | %.0f %% | %s → %s | %s → %s | %s / %s | %s / %s |\n", name, a.IdleHeldGPUHours,
			g.IdleHeldGPUHours, 100*red, pct(a.WaitedShare), pct(g.WaitedShare), minutes(a.WaitP99), minutes(g.WaitP99),
			pct(a.FalseCullRate), pct(g.FalseCullRate), jainShort(a.JainContendedMin), jainShort(g.JainContendedMin))
	}
	by := byMode(rep.Results)
	main := by[HubCuller]
	row(fmt.Sprintf("main (config/replay.yaml, %d GPUs)", main.GPUs), main, by[GPUHub])
	for _, v := range rep.Sensitivity {
		rs := slices.SortedFunc(slices.Values(v.Results), func(a, b *Result) int { return cmp.Compare(a.Mode, b.Mode) })
		name := v.Name
		if rs[0].GPUs != main.GPUs {
			name = fmt.Sprintf("%s, %d GPUs", name, rs[0].GPUs)
		}
		row(name, rs[0], rs[1])
	}
	fmt.Fprintf(out, "\nOf the %d rows, gpuhub holds fewer allocated-but-idle GPU-hours than the anchor in %d, at least %.0f %% "+
		"fewer in %d; its time-to-GPU p99 is at least %.0fx lower in %d (a p99 of 0 against the anchor's 0 counts as not lower).\n",
		n, fewer, 100*TargetIdleReduction, fewer30, TargetP99Ratio, p99)
}

// WriteIdleFrontier writes gpuhub's rows of the sensitivity table that change only gpu-culler's gpu.idlePeriod
// (the main policy first), against the main anchor, and says which of them meets both the false-cull and the
// idle GPU-hours target; under heavy-tailed absences it also says from which idle time on a user's return
// within the false-cull window is rarer than the target (the model's floor, no culler's).
func WriteIdleFrontier(out io.Writer, rep *Report) {
	by := byMode(rep.Results)
	anchor, main := by[HubCuller], by[GPUHub]
	if anchor == nil || main == nil {
		return
	}
	type point struct {
		name string
		g    *Result
	}
	points := []point{{"x1: " + rep.MainIdlePeriods + " (the main policy)", main}}
	for _, f := range IdleFrontier {
		for _, v := range rep.Sensitivity {
			if v.Name == idleVariationName(f) {
				for _, r := range v.Results {
					if r.Mode == GPUHub {
						points = append(points, point{fmt.Sprintf("x%d", f), r})
					}
				}
			}
		}
	}
	fmt.Fprintf(out, "gpuhub (every part) with every GPU idle period of gpu-culler's policy multiplied (`gpu.idlePeriod` and each kind's; "+
		"not `idleWhenContended`), the rest of the policy and the model as in the main "+
		"run; the anchor (Kubernetes + idle-culler) holds %.0f idle GPU-hours with %s false culls.\n\n", anchor.IdleHeldGPUHours, pct(anchor.FalseCullRate))
	fmt.Fprintln(out, "| idle periods | allocated-but-idle GPU-hours | fewer than the anchor | false culls | time-to-GPU p99 | both targets |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---|")
	both := 0
	for _, p := range points {
		red := 0.0
		if anchor.IdleHeldGPUHours > 0 {
			red = 1 - p.g.IdleHeldGPUHours/anchor.IdleHeldGPUHours
		}
		ok := red >= TargetIdleReduction && p.g.FalseCullRate <= TargetFalseCulls
		if ok {
			both++
		}
		fmt.Fprintf(out, "| %s | %.0f | %.0f %% | %s | %s | %s |\n", p.name, p.g.IdleHeldGPUHours, 100*red, pct(p.g.FalseCullRate), minutes(p.g.WaitP99), map[bool]string{true: "met", false: "no"}[ok])
	}
	fmt.Fprintf(out, "\n%d of the %d settings meet both >= %.0f %% fewer idle GPU-hours and <= %.0f %% false culls.", both, len(points), 100*TargetIdleReduction, 100*TargetFalseCulls)
	if t, ok := rep.Cfg.returnFloor(TargetFalseCulls); ok {
		fmt.Fprintf(out, " Under this model a user away for t returns within the false-cull window (%s) with probability "+
			"1 - ((s + t) / (s + t + window))^a (Lomax, s = awayMean (a - 1)): below %.0f %% only once t exceeds %s, so a stop "+
			"decided by idle time alone is a false cull more often than the target at any shorter idle period.",
			minutes(rep.Cfg.Behaviour.FalseCullWindow.Std().Minutes()), 100*TargetFalseCulls, minutes(t))
	}
	fmt.Fprintln(out)
}

// WriteRightSize writes gpuhub against gpuhub with the right-size advice followed: the main setting first, then
// each variation of the follow and fit shares.
func WriteRightSize(out io.Writer, rep *Report) {
	by := byMode(rep.Results)
	base, main := by[GPUHub], by[GPUHubRightSize]
	if base == nil || main == nil {
		return
	}
	fmt.Fprintln(out, "| setting | allocated-but-idle GPU-h gpuhub → + advice | change | requests that waited | time-to-GPU p99 | advice given: smaller / keep / not enough data | sessions on a share by the advice |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|")
	row := func(name string, a *Result) {
		change := "–"
		if base.IdleHeldGPUHours > 0 {
			change = fmt.Sprintf("%+.1f %%", 100*(a.IdleHeldGPUHours/base.IdleHeldGPUHours-1))
		}
		fmt.Fprintf(out, "| %s | %.0f → %.0f | %s | %s → %s | %s → %s | %s | %d |\n", name, base.IdleHeldGPUHours, a.IdleHeldGPUHours,
			change, pct(base.WaitedShare), pct(a.WaitedShare), minutes(base.WaitP99), minutes(a.WaitP99), adviceText(a), a.rightSized)
	}
	row(fmt.Sprintf("main (config/replay.yaml: rightSize.follow %g, fit %g)", rep.Cfg.RightSize.Follow, rep.Cfg.RightSize.Fit), main)
	for _, v := range rep.RightSize {
		row(v.Name, v.Results[0])
	}
}

// adviceText is the advice given in a run, by verdict.
func adviceText(r *Result) string {
	return fmt.Sprintf("%d / %d / %d", r.advice[contract.VerdictSmaller], r.advice[contract.VerdictKeep], r.advice[contract.VerdictNotEnoughData])
}
