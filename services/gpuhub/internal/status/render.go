package status

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// location is where times are printed (tests: UTC).
var location = time.Local

const timeLayout = "2006-01-02 15:04 MST"

// inventoryRow is one GPU class in GPU-equivalents (a whole GPU = 1, a MIG 3g.20gb on an A100 = 3/7) and in
// units (GPUs, MIG slices, time-sliced replicas).
type inventoryRow struct {
	Class                       string
	TotalUnits, HeldUnits       int64
	Total, Held, Busy, IdleHeld float64
	Unknown, Free               float64
	FreeUnits                   int64
}

// inventoryRows turns the usage API's classes into rows and their total. Idle but held is what the chart's
// rules call it: held minus busy minus the part whose utilization is unknown (unknown is never idle). Busy is
// GPU time kept busy and can exceed held on a time-sliced GPU (a share measures its whole GPU).
func inventoryRows(classes []contract.ClassStats) ([]inventoryRow, inventoryRow) {
	rows := make([]inventoryRow, 0, len(classes))
	total := inventoryRow{Class: "TOTAL"}
	for _, c := range classes {
		r := inventoryRow{
			Class: c.Class, TotalUnits: c.CapacityUnits, HeldUnits: c.AllocatedUnits,
			FreeUnits: max(c.CapacityUnits-c.AllocatedUnits, 0),
			Total:     c.CapacityGPUs, Held: c.AllocatedGPUs, Busy: c.UsedGPUs, Unknown: c.UsedUnknownGPUs,
			IdleHeld: max(c.AllocatedGPUs-c.UsedGPUs-c.UsedUnknownGPUs, 0),
			Free:     max(c.CapacityGPUs-c.AllocatedGPUs, 0),
		}
		rows = append(rows, r)
		total.TotalUnits += r.TotalUnits
		total.HeldUnits += r.HeldUnits
		total.FreeUnits += r.FreeUnits
		total.Total += r.Total
		total.Held += r.Held
		total.Busy += r.Busy
		total.IdleHeld += r.IdleHeld
		total.Unknown += r.Unknown
		total.Free += r.Free
	}
	return rows, total
}

func gpusText(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

func withUnits(v float64, units int64) string { return fmt.Sprintf("%s (%d)", gpusText(v), units) }

func writeInventory(w io.Writer, c contract.Cluster) {
	title := "GPU inventory at " + c.SampledAt.In(location).Format(timeLayout) + " (GPU-equivalents, units in parentheses"
	if c.Simulated {
		title += "; utilization simulated"
	}
	_, _ = fmt.Fprintln(w, title+")")
	if len(c.Classes) == 0 {
		_, _ = fmt.Fprintln(w, "No GPUs: no node offers a GPU resource.")
	} else {
		rows, total := inventoryRows(c.Classes)
		table := [][]string{{"CLASS", "TOTAL", "HELD", "BUSY", "IDLE BUT HELD", "UNKNOWN", "FREE"}}
		for _, r := range append(rows, total) {
			table = append(table, []string{r.Class, withUnits(r.Total, r.TotalUnits), withUnits(r.Held, r.HeldUnits),
				gpusText(r.Busy), gpusText(r.IdleHeld), gpusText(r.Unknown), withUnits(r.Free, r.FreeUnits)})
		}
		writeAligned(w, table, "LRRRRRR")
		_, _ = fmt.Fprintln(w, "Busy: GPU time kept busy. Idle but held: held, neither busy nor unknown. Unknown: held without a known\n"+
			"utilization (MIG without DCGM, stale telemetry), never counted as idle.")
	}
	if c.StaleAgents > 0 {
		_, _ = fmt.Fprintf(w, "Stale telemetry from %d of %d GPU agents:\n", c.StaleAgents, c.Agents)
		for _, a := range c.AgentStatus {
			if a.Stale {
				_, _ = fmt.Fprintf(w, "  %s: %s\n", a.Node, firstNonEmpty(a.StaleReason, "stale"))
			}
		}
	}
}

func writeHolders(w io.Writer, l contract.ServersResponse) {
	users := map[string]bool{}
	simulated := false
	for _, s := range l.Servers {
		users[s.User] = true
		simulated = simulated || s.Simulated
	}
	if len(l.Servers) == 0 {
		_, _ = fmt.Fprintf(w, "GPU holders at %s: nobody holds a GPU.\n", l.SampledAt.In(location).Format(timeLayout))
		return
	}
	title := fmt.Sprintf("GPU holders at %s: %s of %s", l.SampledAt.In(location).Format(timeLayout),
		plural(len(l.Servers), "server"), plural(len(users), "user"))
	if simulated {
		title += " (utilization simulated)"
	}
	_, _ = fmt.Fprintln(w, title)
	table := [][]string{{"USER", "SERVER", "CLASS", "NODE", "HELD", "SM UTIL", "GPU MEMORY", "NOTE"}}
	for _, s := range l.Servers {
		name := s.Server
		if name == "" {
			name = "(default)"
		}
		util, note := "unknown", ""
		switch {
		case s.Stale:
			note = "stale: " + firstNonEmpty(s.StaleReason, "no recent telemetry")
		case s.SMUtilPercent == nil:
			note = firstNonEmpty(s.UtilizationUnknownReason, "utilization unknown")
		default:
			util = strconv.FormatFloat(*s.SMUtilPercent, 'f', 0, 64) + " %"
		}
		table = append(table, []string{s.User, name, s.Class, s.Node, gpusText(s.AllocatedGPUs), util, bytesText(s.MemoryUsedBytes), note})
	}
	writeAligned(w, table, "LLLLRRRL")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// bytesText is a size in binary units with one decimal (GPU memory as nvidia-smi shows it).
func bytesText(b uint64) string {
	const unit = 1024
	if b < unit {
		return strconv.FormatUint(b, 10) + " B"
	}
	v, suffix := float64(b)/unit, "KMGTPE"
	i := 0
	for v >= unit && i < len(suffix)-1 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + suffix[i:i+1] + "iB"
}

// writeAligned writes table in columns two spaces apart, each column aligned as align says: L to the left
// (names, notes), R to the right (numbers).
func writeAligned(w io.Writer, table [][]string, align string) {
	widths := make([]int, len(table[0]))
	for _, line := range table {
		for i, cell := range line {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, line := range table {
		var l strings.Builder
		for i, cell := range line {
			if i > 0 {
				l.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if align[i] == 'R' {
				l.WriteString(pad + cell)
			} else {
				l.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
	}
	_, _ = io.WriteString(w, b.String())
}
