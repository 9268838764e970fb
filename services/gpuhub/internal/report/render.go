package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/spreadsheet"
)

// kindWords says in the table what each GPU kind is (services/internal/gpu's kinds).
var kindWords = map[string]string{
	"gpu":        "whole GPUs",
	"mig":        "MIG slices",
	"shared":     "time-sliced shares",
	"mps":        "MPS shares",
	"mig-shared": "time-sliced MIG slices",
}

func hoursText(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

func percentText(p *float64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'f', 0, 64) + " %"
}

func writeTable(w io.Writer, r *Report) error {
	const layout = "2006-01-02 15:04 MST"
	title := fmt.Sprintf("GPU-hours by %s over the last %s, as of %s", r.By, r.Window, r.AsOf.Format(layout))
	switch {
	case r.User != "":
		title += ", user " + r.User
	case r.Group != "":
		title += ", Hub group " + r.Group
	}
	var b strings.Builder
	b.WriteString(title + "\n\n")
	if len(r.Rows) == 0 {
		b.WriteString("No GPU-hours in this window.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	header := []string{strings.ToUpper(r.By), "", "ALLOCATED", "USED", "USED %", "UNKNOWN"}
	switch r.By {
	case byUser:
		header[1] = "GROUPS"
	default:
		header[1] = "USERS"
	}
	table := [][]string{header}
	for _, row := range r.Rows {
		name, second := row.Name, strconv.Itoa(row.Users)
		switch r.By {
		case byUser:
			second = strings.Join(row.Groups, ",")
		case byKind:
			if words := kindWords[row.Name]; words != "" {
				name += " (" + words + ")"
			}
		}
		table = append(table, []string{name, second, hoursText(row.Allocated), hoursText(row.Used), percentText(row.UsedPercent), hoursText(row.UsedUnknown)})
	}
	users := strconv.Itoa(r.Total.Users)
	switch {
	case r.By != byUser:
	case r.Total.Users == 1:
		users = "1 user"
	default:
		users += " users"
	}
	table = append(table, []string{"TOTAL", users, hoursText(r.Total.Allocated), hoursText(r.Total.Used), percentText(r.Total.UsedPercent), hoursText(r.Total.UsedUnknown)})
	// Names and groups to the left, numbers to the right.
	leftAligned := 2
	if r.By != byUser {
		leftAligned = 1
	}
	writeAligned(&b, table, leftAligned)
	b.WriteString("\nAllocated: GPU-hours held (a whole GPU for an hour = 1). Used: GPU time kept busy, over the part whose\n" +
		"utilization was known (used % of that part). Unknown: allocated GPU-hours without a known utilization.\n")
	if r.By == byGroup && r.Group == "" {
		b.WriteString("A user in several groups counts in each; the total counts every user once.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCSV writes the rows only (no total), so that a spreadsheet's sums stay right.
func writeCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	header := []string{r.By, "groups", "allocated_gpu_hours", "used_gpu_hours", "used_percent", "unknown_gpu_hours"}
	if r.By != byUser {
		header[1] = "users"
	}
	_ = cw.Write(header)
	for _, row := range r.Rows {
		second := strconv.Itoa(row.Users)
		if r.By == byUser {
			second = strings.Join(row.Groups, ";")
		}
		pct := ""
		if row.UsedPercent != nil {
			pct = strconv.FormatFloat(*row.UsedPercent, 'f', 1, 64)
		}
		_ = cw.Write([]string{spreadsheet.Text(row.Name), spreadsheet.Text(second), strconv.FormatFloat(row.Allocated, 'f', 4, 64),
			strconv.FormatFloat(row.Used, 'f', 4, 64), pct, strconv.FormatFloat(row.UsedUnknown, 'f', 4, 64)})
	}
	cw.Flush()
	return cw.Error()
}

func writeJSON(w io.Writer, r *Report) error {
	out := *r
	out.AsOf = r.AsOf.UTC().Truncate(time.Second)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
