package report

import (
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/spreadsheet"
)

// rightSizePeriods are the windows the usage API keeps right-size profiles for.
var rightSizePeriods = []string{"24h", "7d", "30d"}

// rightSize is `gpuhub report --right-size`: the GPU-hours right-sizing would have saved (GET api/v1/right-size,
// an admin's or a reader service's token), or with --user one user's advice per server
// (GET api/v1/users/{name}/right-size, which their own token may read).
func rightSize(ctx context.Context, c *client, w io.Writer, period, by, user, format string) error {
	q := url.Values{"period": {period}}
	if user != "" {
		var r contract.RightSizeResponse
		if err := c.Get(ctx, "api/v1/users/"+url.PathEscape(user)+"/right-size", q, &r); err != nil {
			return err
		}
		switch format {
		case "json":
			return writeIndented(w, r)
		case "csv":
			return adviceCSV(w, r)
		}
		return adviceTable(w, r)
	}
	q.Set("by", by)
	var s contract.RightSizeSavings
	if err := c.Get(ctx, "api/v1/right-size", q, &s); err != nil {
		return err
	}
	switch format {
	case "json":
		return writeIndented(w, s)
	case "csv":
		return savingsCSV(w, s)
	}
	return savingsTable(w, s)
}

func writeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

const timeLayout = "2006-01-02 15:04 MST"

func savingsTable(w io.Writer, s contract.RightSizeSavings) error {
	var b strings.Builder
	fmt.Fprintf(&b, "GPU-hours right-sizing would have saved, by %s, over the last %s (UTC days since %s), as of %s\n\n",
		s.By, s.Period, s.From.UTC().Format("2006-01-02"), s.AsOf.UTC().Format(timeLayout))
	if len(s.Rows) == 0 {
		b.WriteString("No server was measured in this period.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	table := [][]string{{strings.ToUpper(s.By), "SAVEABLE", "HELD", "SAVEABLE %", "SERVERS", "ADVISED SMALLER"}}
	servers, smaller := 0, 0
	for _, r := range s.Rows {
		name := r.Key
		if s.By == byKind {
			if words := kindWords[name]; words != "" {
				name += " (" + words + ")"
			}
		}
		table = append(table, []string{name, hoursText(r.SaveableGPUHours), hoursText(r.HeldGPUHours), share(r.SaveableGPUHours, r.HeldGPUHours),
			strconv.Itoa(r.Servers), strconv.Itoa(r.Smaller)})
		servers, smaller = servers+r.Servers, smaller+r.Smaller
	}
	total := []string{"TOTAL", hoursText(s.SaveableGPUHours), hoursText(s.HeldGPUHours), share(s.SaveableGPUHours, s.HeldGPUHours), strconv.Itoa(servers), strconv.Itoa(smaller)}
	if s.By == byGroup { // a user in several groups counts in each: the server counts would add up wrong
		total[4], total[5] = "-", "-"
	}
	table = append(table, total)
	writeAligned(&b, table, 1)
	b.WriteString("\nSaveable: GPU-hours that taking each server's right-size advice (the smallest offered kind that holds its\n" +
		"peak memory with a margin and covers its p95 SM use) would have saved. Held: GPU-hours the servers held.\n" +
		"Servers without enough busy time get no advice and save nothing here.\n")
	if s.By == byGroup {
		b.WriteString("A user in several groups counts in each; the total counts every server once.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func share(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	p := 100 * part / whole
	return percentText(&p)
}

func savingsCSV(w io.Writer, s contract.RightSizeSavings) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{s.By, "saveable_gpu_hours", "held_gpu_hours", "servers", "advised_smaller", "simulated", "stale"})
	for _, r := range s.Rows {
		_ = cw.Write([]string{spreadsheet.Text(r.Key), strconv.FormatFloat(r.SaveableGPUHours, 'f', 4, 64), strconv.FormatFloat(r.HeldGPUHours, 'f', 4, 64),
			strconv.Itoa(r.Servers), strconv.Itoa(r.Smaller), strconv.Itoa(r.Simulated), strconv.Itoa(r.Stale)})
	}
	cw.Flush()
	return cw.Error()
}

func serverName(s string) string { return cmp.Or(s, "(default)") }

// take is what the advice says to take: the first candidate, or the verdict in words.
func take(a contract.RightSize) (what, saves string) {
	switch {
	case a.Verdict == contract.VerdictSmaller && len(a.Candidates) > 0:
		return a.Candidates[0].Class, hoursText(a.Candidates[0].SavedPerHour)
	case a.Verdict == contract.VerdictKeep:
		return "keep", "-"
	}
	return "not enough data", "-"
}

func adviceTable(w io.Writer, r contract.RightSizeResponse) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Right-size advice for %s over the last %s (UTC days since %s), as of %s\n\n",
		r.User, r.Period, r.From.UTC().Format("2006-01-02"), r.AsOf.UTC().Format(timeLayout))
	if len(r.Servers) == 0 {
		b.WriteString("No server was measured in this period.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	table := [][]string{{"SERVER", "HELD", "ADVICE", "SAVES/H", "PEAK MEMORY", "P95 SM", "BUSY"}}
	for _, a := range r.Servers {
		what, saves := take(a)
		table = append(table, []string{serverName(a.Server), a.Held.Class, what, saves,
			fmt.Sprintf("%.1f GiB", float64(a.Evidence.PeakMemoryBytes)/(1<<30)),
			strconv.FormatFloat(a.Evidence.P95SMUtilPercent, 'f', 0, 64) + " %", fmt.Sprintf("%.1f h", a.Evidence.BusySeconds/3600)})
	}
	writeAligned(&b, table, 3)
	b.WriteString("\n")
	for _, a := range r.Servers {
		fmt.Fprintf(&b, "%s on %s: %s\n", serverName(a.Server), a.Held.Class, a.Reason)
		for _, c := range a.Caveats {
			fmt.Fprintf(&b, "  note: %s\n", c)
		}
	}
	b.WriteString("\nSAVES/H: GPU-hours saved per hour held. The advice lists every smaller kind that fits, smallest first;\n" +
		"take the first your profiles allow (gpu-quota decides which you may take).\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func adviceCSV(w io.Writer, r contract.RightSizeResponse) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"server", "held_class", "verdict", "first_candidate", "saved_per_hour", "peak_memory_bytes",
		"p95_sm_util_percent", "busy_hours", "held_hours", "caveats"})
	for _, a := range r.Servers {
		first, saved := "", ""
		if len(a.Candidates) > 0 {
			first, saved = a.Candidates[0].Class, strconv.FormatFloat(a.Candidates[0].SavedPerHour, 'f', 4, 64)
		}
		_ = cw.Write([]string{spreadsheet.Text(a.Server), spreadsheet.Text(a.Held.Class), a.Verdict, spreadsheet.Text(first), saved, strconv.FormatUint(a.Evidence.PeakMemoryBytes, 10),
			strconv.FormatFloat(a.Evidence.P95SMUtilPercent, 'f', 0, 64), strconv.FormatFloat(a.Evidence.BusySeconds/3600, 'f', 4, 64),
			strconv.FormatFloat(a.Evidence.HeldSeconds/3600, 'f', 4, 64), spreadsheet.Text(strings.Join(a.Caveats, "; "))})
	}
	cw.Flush()
	return cw.Error()
}

// writeAligned writes table with columns padded, the first left columns to the left, the rest to the right.
func writeAligned(b *strings.Builder, table [][]string, left int) {
	widths := make([]int, len(table[0]))
	for _, line := range table {
		for i, cell := range line {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, line := range table {
		for i, cell := range line {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i < left {
				b.WriteString(cell + pad)
			} else {
				b.WriteString(pad + cell)
			}
			if i < len(line)-1 {
				b.WriteString("  ")
			}
		}
		b.WriteString("\n")
	}
}
