package replay

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// Targets are ../shared/docs/benchmarks.md row B4's.
const (
	TargetIdleReduction = 0.30 // fewer allocated-but-idle GPU-hours than Kubernetes + idle-culler
	TargetP99Ratio      = 2.0  // time-to-GPU p99 at least this much lower
	TargetFalseCulls    = 0.02
	TargetJain          = 0.9
	TargetSeconds       = 60.0
)

// Table writes the runs as a markdown table, one column per run.
func Table(out io.Writer, rs []*Result) {
	head := []string{"metric"}
	sep := []string{"---"}
	for _, r := range rs {
		head = append(head, r.Name())
		sep = append(sep, "---:")
	}
	row := func(name string, f func(*Result) string) {
		cells := []string{name}
		for _, r := range rs {
			cells = append(cells, f(r))
		}
		fmt.Fprintln(out, "| "+strings.Join(cells, " | ")+" |")
	}
	fmt.Fprintln(out, "| "+strings.Join(head, " | ")+" |")
	fmt.Fprintln(out, "|"+strings.Join(sep, "|")+"|")
	row("GPU allocation rate", func(r *Result) string { return pct(r.AllocationRate) })
	row("busy utilization", func(r *Result) string { return pct(r.BusyUtilization) })
	row("allocated-but-idle GPU-hours", func(r *Result) string { return fmt.Sprintf("%.0f", r.IdleHeldGPUHours) })
	row("requests that waited (time-to-GPU > 0)", func(r *Result) string { return pct(r.WaitedShare) })
	row("time-to-GPU p50", func(r *Result) string { return minutes(r.WaitP50) })
	row("time-to-GPU p99", func(r *Result) string { return minutes(r.WaitP99) })
	row("time-to-GPU mean (of those who waited)", func(r *Result) string {
		if r.WaitedShare == 0 {
			return minutesFine(r.WaitMean)
		}
		return fmt.Sprintf("%s (%s)", minutesFine(r.WaitMean), minutesFine(r.WaitMean/r.WaitedShare))
	})
	row("minutes with someone waiting", func(r *Result) string { return pct(r.ContendedShare) })
	row("Jain's index, contended minutes (lowest group)", jainContendedText)
	row("Jain's index, all minutes (lowest group)", jainText)
	row("culls (false)", func(r *Result) string {
		c := r.Counts()
		if c.Culls == 0 {
			return "0"
		}
		return fmt.Sprintf("%d (%d, %s)", c.Culls, c.FalseCulls, pct(r.FalseCullRate))
	})
	row("GPU-hours returned", func(r *Result) string { return fmt.Sprintf("%.0f", r.Counts().ReturnedGPUHours) })
	row("requests (back after a cull)", func(r *Result) string {
		c := r.Counts()
		return fmt.Sprintf("%d (%d)", c.Requests, c.Comebacks)
	})
	row("never served (window or session ended)", func(r *Result) string { return fmt.Sprint(r.Counts().Censored) })
	row("gpu-culler warnings / snoozes", func(r *Result) string {
		c := r.Counts()
		if !r.Mode.gpuCuller() {
			return "–"
		}
		return fmt.Sprintf("%d / %d", c.Warnings, c.Snoozes)
	})
	row("right-size advice: smaller / keep / not enough data (sessions on a share by it)", func(r *Result) string {
		if !r.Mode.rightSize() {
			return "–"
		}
		return fmt.Sprintf("%s (%d)", adviceText(r), r.rightSized)
	})
	row("quota refusals / waitlist joins", func(r *Result) string {
		c := r.Counts()
		switch {
		case !r.Mode.admission():
			return "–"
		case !r.Mode.waitlist():
			return fmt.Sprintf("%d / –", c.QuotaRefusals)
		}
		return fmt.Sprintf("%d / %d", c.QuotaRefusals, c.Joins)
	})
}

// parts are the ablation's gpuhub parts: the setup with the part off, and what the part is.
var parts = []struct {
	off  Mode
	what string
}{
	{GPUHubNoCulling, "culling (gpu-culler)"},
	{GPUHubNoAdmission, "quotas/packing (gpu-quota's admission and gpu-profiles' form; the waitlist goes with them)"},
	{GPUHubNoWaitlist, "the waitlist"},
}

// WriteAblation writes what each gpuhub part adds: gpuhub with every part against gpuhub with that part off,
// on the same cluster.
func WriteAblation(out io.Writer, rs []*Result) {
	by := byMode(rs)
	all := by[GPUHub]
	if all == nil {
		return
	}
	fmt.Fprintln(out, "| part (off → on, the others on) | allocated-but-idle GPU-hours | requests that waited | time-to-GPU p99 | mean wait of those who waited | false culls | Jain, contended (lowest group) |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|")
	for _, p := range parts {
		off := by[p.off]
		if off == nil {
			continue
		}
		idle := fmt.Sprintf("%.0f → %.0f", off.IdleHeldGPUHours, all.IdleHeldGPUHours)
		if off.IdleHeldGPUHours > 0 {
			idle += fmt.Sprintf(" (%+.0f %%)", 100*(all.IdleHeldGPUHours/off.IdleHeldGPUHours-1))
		}
		fmt.Fprintf(out, "| %s | %s | %s → %s | %s → %s | %s → %s | %s → %s | %s → %s |\n", p.what, idle,
			pct(off.WaitedShare), pct(all.WaitedShare), minutes(off.WaitP99), minutes(all.WaitP99),
			waitedMean(off), waitedMean(all), pct(off.FalseCullRate), pct(all.FalseCullRate),
			jainShort(off.JainContendedMin), jainShort(all.JainContendedMin))
	}
}

// WriteWaitsBySize writes, for each setup, the requests of each size that waited and how long.
func WriteWaitsBySize(out io.Writer, rs []*Result, replicas int64) {
	sizes := map[int64]bool{}
	for _, r := range rs {
		for _, sw := range r.WaitsBySize() {
			sizes[sw.Size] = true
		}
	}
	head, sep := []string{"asked for"}, []string{"---"}
	for _, r := range rs {
		head, sep = append(head, r.Name()), append(sep, "---:")
	}
	fmt.Fprintln(out, "| "+strings.Join(head, " | ")+" |")
	fmt.Fprintln(out, "|"+strings.Join(sep, "|")+"|")
	for _, size := range slices.Sorted(maps.Keys(sizes)) {
		name := fmt.Sprintf("%d GPUs", size)
		switch size {
		case 0:
			name = fmt.Sprintf("1/%d GPU (time-sliced share)", replicas)
		case 1:
			name = "1 GPU"
		}
		cells := []string{name}
		for _, r := range rs {
			cell := "–"
			for _, sw := range r.WaitsBySize() {
				if sw.Size != size {
					continue
				}
				cell = fmt.Sprintf("%d of %d", sw.Waited, sw.Requests)
				if sw.Waited > 0 {
					cell += ", " + minutesFine(sw.WaitedMean)
				}
				if sw.Censored > 0 {
					cell += fmt.Sprintf(" (%d never)", sw.Censored)
				}
			}
			cells = append(cells, cell)
		}
		fmt.Fprintln(out, "| "+strings.Join(cells, " | ")+" |")
	}
}

func waitedMean(r *Result) string {
	if r.WaitedShare == 0 {
		return "–"
	}
	return minutesFine(r.WaitMean / r.WaitedShare)
}

func byMode(rs []*Result) map[Mode]*Result {
	by := map[Mode]*Result{}
	for _, r := range rs {
		by[r.Mode] = r
	}
	return by
}

func jainText(r *Result) string { return jainGroups(r.Jain, r.JainMin) }

func jainContendedText(r *Result) string { return jainGroups(r.JainContended, r.JainContendedMin) }

func jainGroups(byGroup map[string]float64, lowest float64) string {
	if math.IsNaN(lowest) {
		return "– (no one waited)"
	}
	var parts []string
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		parts = append(parts, fmt.Sprintf("%s %.3f", g, byGroup[g]))
	}
	return fmt.Sprintf("%.3f (%s)", lowest, strings.Join(parts, ", "))
}

// jainShort is the lowest group's index, or a dash when no one waited.
func jainShort(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.3f", x)
}

func pct(x float64) string { return fmt.Sprintf("%.1f %%", 100*x) }

func minutes(m float64) string {
	switch {
	case m < 60:
		return fmt.Sprintf("%.0f min", m)
	case m < 48*60:
		return fmt.Sprintf("%.1f h", m/60)
	}
	return fmt.Sprintf("%.1f d", m/60/24)
}

// minutesFine is minutes with one decimal below an hour (a mean is not a whole number of steps).
func minutesFine(m float64) string {
	if m < 60 {
		return fmt.Sprintf("%.1f min", m)
	}
	return minutes(m)
}

// Verdict is one target, met or not, with its numbers.
type Verdict struct {
	Target string
	Met    bool
	Detail string
}

// Verdicts judge gpuhub (with every part, and without the waitlist as the chart ships it) against Kubernetes +
// idle-culler, on the same cluster; timing is what the time target counts.
func Verdicts(rs []*Result, seconds float64, timing string) []Verdict {
	by := byMode(rs)
	anchor := by[HubCuller]
	var out []Verdict
	for _, m := range []Mode{GPUHub, GPUHubNoWaitlist} {
		g := by[m]
		if g == nil || anchor == nil {
			continue
		}
		red := 0.0
		if anchor.IdleHeldGPUHours > 0 {
			red = 1 - g.IdleHeldGPUHours/anchor.IdleHeldGPUHours
		}
		out = append(out, Verdict{m.String() + ": >= 30 % fewer allocated-but-idle GPU-hours", red >= TargetIdleReduction,
			fmt.Sprintf("%.0f vs %.0f GPU-hours: %.0f %% fewer", g.IdleHeldGPUHours, anchor.IdleHeldGPUHours, 100*red)})
		ratio := ratioOf(anchor.WaitP99, g.WaitP99)
		out = append(out, Verdict{m.String() + ": time-to-GPU p99 >= 2x lower", ratio >= TargetP99Ratio,
			fmt.Sprintf("%s vs %s: %s", minutes(g.WaitP99), minutes(anchor.WaitP99), ratioText(ratio))})
		out = append(out, Verdict{m.String() + ": false culls <= 2 %", g.FalseCullRate <= TargetFalseCulls,
			fmt.Sprintf("%d of %d culls (%s)", g.falseCulls, g.culls, pct(g.FalseCullRate))})
		// Over the contended minutes: when no one waits, everyone gets what they ask and the index says nothing.
		out = append(out, Verdict{m.String() + ": Jain >= 0.9 (contended minutes)", g.JainContendedMin >= TargetJain,
			jainContendedText(g)})
	}
	out = append(out, Verdict{timing + " <= 60 s", seconds <= TargetSeconds, fmt.Sprintf("%.1f s", seconds)})
	return out
}

func ratioOf(anchor, x float64) float64 {
	switch {
	case x == 0 && anchor == 0:
		return 1
	case x == 0:
		return inf
	}
	return anchor / x
}

const inf = 1e18

func ratioText(r float64) string {
	if r >= inf {
		return "0 against a positive anchor"
	}
	return fmt.Sprintf("%.1fx lower", r)
}

// WriteVerdicts writes each target as "met" or "NOT met" with its numbers.
func WriteVerdicts(out io.Writer, vs []Verdict) {
	for _, v := range vs {
		state := "met"
		if !v.Met {
			state = "NOT met"
		}
		fmt.Fprintf(out, "- %s: **%s** (%s)\n", v.Target, state, v.Detail)
	}
}
