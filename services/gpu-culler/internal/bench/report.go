package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// stat is a per-run number: its median and range over the runs.
type stat []float64

func (s stat) med() float64 { return benchkit.Median(s) }

func (s stat) String() string { return s.format("%.0f") }

func (s stat) format(f string) string {
	if len(s) == 0 {
		return "-"
	}
	lo, hi := benchkit.MinMax(s)
	if len(s) == 1 || lo == hi {
		return fmt.Sprintf(f, s.med())
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", s.med(), lo, hi)
}

// Table is the report's rows, each a per-run number for gpu-culler and for idle-culler.
type Table struct {
	Rows []Row
}

// Row is one line of the table.
type Row struct {
	Name, Unit   string
	Ours, Theirs stat
	// Ratio is theirs over ours per run ("" none); Target says what B3 asks of gpu-culler, Verdict how many runs
	// met it (nil: no target, or gpu-culler not measured). A target is met only if every run met it.
	Ratio   stat
	Target  string
	Verdict *benchkit.Verdict
}

func durs(f func(PhaseResult) time.Duration, p []PhaseResult) stat {
	var s stat
	for _, r := range p {
		if r.Passes > 0 {
			s = append(s, float64(f(r))/1e6)
		}
	}
	return s
}

// Summarize turns the runs into the table's rows; pages is the fewest pages that list the running servers
// (the Hub's largest page is 200 users).
func Summarize(runs []RunResult, busyStopped, pages int) Table {
	var ours, theirs []PhaseResult
	measured := false
	for _, r := range runs {
		ours, theirs = append(ours, r.Ours), append(theirs, r.Theirs)
		measured = measured || r.Ours.Passes > 0
	}
	ratio := func(f func(PhaseResult) float64) stat {
		var s stat
		for i := range runs {
			if o := f(ours[i]); o > 0 && ours[i].Passes > 0 {
				s = append(s, f(theirs[i])/o)
			}
		}
		return s
	}
	// judged is the target judged on each run in which gpu-culler was measured.
	judged := func(ok func(i int) bool) *benchkit.Verdict {
		if !measured {
			return nil
		}
		var v benchkit.Verdict
		for i := range runs {
			if ours[i].Passes > 0 {
				v.Runs++
				if ok(i) {
					v.Met++
				}
			}
		}
		return &v
	}
	perPass := func(p PhaseResult, n int) float64 {
		if p.Passes == 0 {
			return 0
		}
		return float64(n) / float64(p.Passes)
	}
	var t Table
	passOurs := durs(func(p PhaseResult) time.Duration { return median(p.PassTimes) }, ours)
	t.Rows = append(t.Rows, Row{Name: "pass time (culler's metric)", Unit: "ms", Ours: passOurs, Target: "<= 2 s, its slowest pass",
		Verdict: judged(func(i int) bool { return slices.Max(append([]time.Duration{0}, ours[i].PassTimes...)) <= 2*time.Second })})
	hubTime := func(p PhaseResult) time.Duration { return median(p.HubPassTimes) }
	withBursts := func(ps []PhaseResult) []PhaseResult {
		var out []PhaseResult
		for _, p := range ps {
			if len(p.HubPassTimes) > 0 {
				out = append(out, p)
			}
		}
		return out
	}
	t.Rows = append(t.Rows, Row{Name: "pass time at the Hub", Unit: "ms", Ours: durs(hubTime, withBursts(ours)), Theirs: durs(hubTime, withBursts(theirs))})

	var req, reqT, bound stat
	for i := range runs {
		if ours[i].Passes > 0 {
			o := ours[i]
			req = append(req, perPass(o, o.Requests))
			bound = append(bound, float64(pages)+perPass(o, o.Stopped))
		}
		reqT = append(reqT, perPass(theirs[i], theirs[i].Requests))
	}
	t.Rows = append(t.Rows, Row{Name: "Hub requests per pass", Ours: req, Theirs: reqT,
		Ratio:  ratio(func(p PhaseResult) float64 { return perPass(p, p.Requests) }),
		Target: fmt.Sprintf("<= %d pages + culled (%s)", pages, bound.format("%.1f")),
		Verdict: judged(func(i int) bool {
			return perPass(ours[i], ours[i].Requests) <= float64(pages)+perPass(ours[i], ours[i].Stopped)
		})})

	cpuW := func(p PhaseResult) time.Duration { return p.PerPass(p.HubCPUWindow) }
	cpuB := func(p PhaseResult) time.Duration { return p.PerPass(p.HubCPUBursts) }
	t.Rows = append(t.Rows, Row{Name: "Hub CPU per pass (window less idle)", Unit: "ms", Ours: durs(cpuW, ours), Theirs: durs(cpuW, theirs),
		Ratio: ratio(func(p PhaseResult) float64 { return float64(cpuW(p)) }), Target: "<= 1/5 of idle-culler's in the same run",
		Verdict: judged(func(i int) bool { return 5*cpuW(ours[i]) <= cpuW(theirs[i]) })})
	t.Rows = append(t.Rows, Row{Name: "Hub CPU per pass (in its requests)", Unit: "ms", Ours: durs(cpuB, ours), Theirs: durs(cpuB, theirs),
		Ratio: ratio(func(p PhaseResult) float64 { return float64(cpuB(p)) })})

	var idle, degO, degT stat
	for _, r := range runs {
		idle = append(idle, float64(r.IdleProbeP99)/1e6)
		if r.IdleProbeP99 > 0 {
			if r.Ours.Passes > 0 {
				degO = append(degO, 100*(float64(r.Ours.ProbeP99)/float64(r.IdleProbeP99)-1))
			}
			degT = append(degT, 100*(float64(r.Theirs.ProbeP99)/float64(r.IdleProbeP99)-1))
		}
	}
	probe := func(p PhaseResult) time.Duration { return p.ProbeP99 }
	t.Rows = append(t.Rows, Row{Name: "Hub probe p99, no culler", Unit: "ms", Ours: idle, Theirs: idle})
	t.Rows = append(t.Rows, Row{Name: "Hub probe p99 during passes", Unit: "ms", Ours: durs(probe, ours), Theirs: durs(probe, theirs),
		Ratio: ratio(func(p PhaseResult) float64 { return float64(p.ProbeP99) }), Target: "<= 1/3 of idle-culler's in the same run",
		Verdict: judged(func(i int) bool { return 3*ours[i].ProbeP99 <= theirs[i].ProbeP99 })})
	t.Rows = append(t.Rows, Row{Name: "  degradation vs no culler", Unit: "%", Ours: degO, Theirs: degT})

	var stopped, stoppedT stat
	for i := range runs {
		if ours[i].Passes > 0 {
			stopped = append(stopped, float64(ours[i].Stopped))
		}
		stoppedT = append(stoppedT, float64(theirs[i].Stopped))
	}
	t.Rows = append(t.Rows, Row{Name: "idle servers stopped per run", Ours: stopped, Theirs: stoppedT})
	var busy *benchkit.Verdict
	if measured { // counted once, after all runs
		busy = &benchkit.Verdict{Runs: 1}
		if busyStopped == 0 {
			busy.Met = 1
		}
	}
	t.Rows = append(t.Rows, Row{Name: "busy or stale servers stopped (all runs)", Ours: stat{float64(busyStopped)}, Theirs: stat{float64(busyStopped)},
		Target: "0", Verdict: busy})
	return t
}

// Report prints the table (to o.Out, and to o.Report where set).
func Report(o RunOptions, runs []RunResult, busyStopped int) {
	if o.Report != nil {
		o.Out = io.MultiWriter(o.Out, o.Report)
	}
	f := o.Fleet
	idle, stale := 0, 0
	for _, s := range f.List() {
		switch s.State {
		case Idle:
			idle++
		case Stale:
			stale++
		}
	}
	o.printf("\nB3 culler pass: JupyterHub (%s), %d users, %d running servers (%d idle with a due notice, %d with stale telemetry), pods in a real kube-apiserver;\n",
		o.HubVenv, f.Users, f.Servers, idle, stale)
	o.printf("%d runs of %d passes each (every %s; idle-culler --cull-every %s); Hub on CPU %q, the rest elsewhere. Median (min–max) over runs; ratio = idle-culler / gpu-culler.\n",
		o.Runs, o.Passes, o.Every, o.IdleCullEvery, o.HubCPU)
	o.printf("Targets (gpu-culler's) are judged on each run and met only if every run met them.\n")
	if o.CullerBin == "" {
		o.printf("gpu-culler was not measured (no binary): the anchor alone.\n")
	}
	t := Summarize(runs, busyStopped, (f.Servers+199)/200)
	o.printf("%-40s %22s %22s %12s  %s\n", "", "gpu-culler", "idle-culler 1.4.0", "ratio", "target")
	for _, r := range t.Rows {
		met := ""
		if r.Verdict != nil {
			met = ": " + r.Verdict.String()
		}
		name := r.Name
		if r.Unit != "" {
			name += ", " + r.Unit
		}
		ratio := ""
		if len(r.Ratio) > 0 {
			ratio = r.Ratio.format("%.1fx")
		}
		target := strings.TrimSpace(r.Target + met)
		o.printf("%-40s %22s %22s %12s  %s\n", name, r.Ours, r.Theirs, ratio, target)
	}
}
