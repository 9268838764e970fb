package adminview

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/spreadsheet"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// window is a span of the ledger's hour buckets. From is on the hour; To is where the last bucket taken ends
// (the buckets that start before To count, the current one with what was recorded up to the last sample).
// It is the window the JSON API answers for GET api/v1/users/{name}?from=From&to=To (gpuHours.custom), and for
// 7d and 30d the same buckets as its "7d" and "30d": the last 168 and 720 hour buckets, the current one included.
type window struct {
	Name     string // 24h, 7d, 30d or custom
	Label    string
	From, To time.Time
}

var rollingWindows = []struct {
	name, label string
	d           time.Duration
}{
	{"24h", "last 24 hours", 24 * time.Hour},
	{"7d", "last 7 days", 7 * 24 * time.Hour},
	{"30d", "last 30 days", 30 * 24 * time.Hour},
}

// maxCustom bounds a custom window, as the JSON API's rolling windows.
const maxCustom = 366 * 24 * time.Hour

func rolling(name string, asOf time.Time) (window, bool) {
	for _, rw := range rollingWindows {
		if rw.name == name {
			hour := asOf.Truncate(time.Hour)
			return window{Name: rw.name, Label: rw.label, From: hour.Add(-(rw.d - time.Hour)), To: asOf}, true
		}
	}
	return window{}, false
}

// customWindow reads from and to as dates (YYYY-MM-DD, UTC), to included, never past asOf.
func customWindow(from, to string, asOf time.Time) (window, error) {
	const layout = "2006-01-02"
	f, err := time.Parse(layout, from)
	if err != nil {
		return window{}, fmt.Errorf("the custom window's start %q is not a date: choose one as YYYY-MM-DD, e.g. %s", param(from), asOf.Add(-7*24*time.Hour).Format(layout))
	}
	t, err := time.Parse(layout, to)
	if err != nil {
		return window{}, fmt.Errorf("the custom window's end %q is not a date: choose one as YYYY-MM-DD, e.g. %s", param(to), asOf.Format(layout))
	}
	if t.Before(f) {
		return window{}, errors.New("the custom window ends before it starts: choose an end on or after the start")
	}
	end := t.Add(24 * time.Hour)
	if end.Sub(f) > maxCustom {
		return window{}, errors.New("the custom window is longer than 366 days: choose a shorter one")
	}
	if end.After(asOf) {
		end = asOf
	}
	if end.Before(f) {
		end = f // a window in the future: nothing recorded yet
	}
	return window{Name: "custom", Label: f.Format(layout) + " to " + t.Format(layout), From: f, To: end}, nil
}

// param cuts a query value short for messages.
func param(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// rows returns the window's GPU-hours per user, kind and class (one user's when user is set), cached briefly.
func (h *handler) rows(ctx context.Context, w window, user string) ([]ledger.Usage, error) {
	k := hoursKey{kind: "rows", from: w.From.Unix(), to: ceilHour(w.To).Unix(), user: user}
	now := h.o.Now()
	if e, ok := h.hours.get(k, now); ok {
		return e.rows, nil
	}
	if !w.From.Before(w.To) {
		return nil, nil
	}
	rows, err := h.o.Ledger.Breakdown(ctx, ledger.Query{From: w.From, To: w.To, User: user})
	if err != nil {
		return nil, err
	}
	h.hours.put(k, hoursEntry{at: now, rows: rows})
	return rows, nil
}

// hourly returns the window's GPU-hours per hour bucket, every user together, cached briefly.
func (h *handler) hourly(ctx context.Context, w window) ([]ledger.HourTotals, error) {
	k := hoursKey{kind: "hourly", from: w.From.Unix(), to: ceilHour(w.To).Unix()}
	now := h.o.Now()
	if e, ok := h.hours.get(k, now); ok {
		return e.hourly, nil
	}
	if !w.From.Before(w.To) {
		return nil, nil
	}
	hs, err := h.o.Ledger.Hourly(ctx, ledger.Query{From: w.From, To: w.To})
	if err != nil {
		return nil, err
	}
	h.hours.put(k, hoursEntry{at: now, hourly: hs})
	return hs, nil
}

func ceilHour(t time.Time) time.Time {
	if h := t.Truncate(time.Hour); !h.Equal(t) {
		return h.Add(time.Hour)
	}
	return t
}

// hoursRow is GPU-hours of one user, group, kind or class.
type hoursRow struct {
	Name string
	Href string // the user's page (by user only)
	// Allocated, Used and Unknown are the JSON API's allocated, used and usedUnknown; Idle is held time nobody
	// used, counted per user, class and hour where allocated exceeds used plus used-unknown (as in the chart).
	Allocated, Used, Unknown, Idle float64
}

func (r *hoursRow) add(u ledger.Usage) {
	r.Allocated += u.Allocated
	r.Used += u.Used
	r.Unknown += u.UsedUnknown
	r.Idle += u.Idle
}

// groupings are the ways GPU-hours are broken down, in the order the form offers them.
var groupings = []struct{ key, label string }{
	{"user", "User"}, {"group", "Hub group"}, {"kind", "GPU kind"}, {"class", "GPU class"},
}

// noGroup names the users in no Hub group.
const noGroup = "(no group)"

// aggregate sums rows by user, group, kind or class, largest allocation first. A user in several groups counts
// in each. Rows are added in the ledger's order (user, kind, class), as the JSON API adds a user's.
func (h *handler) aggregate(rows []ledger.Usage, by string, dir usage.Directory) (out []hoursRow, total hoursRow) {
	idx := map[string]int{}
	add := func(name string, t ledger.Usage) {
		i, ok := idx[name]
		if !ok {
			i = len(out)
			idx[name] = i
			out = append(out, hoursRow{Name: name})
			if by == "user" {
				out[i].Href = h.o.Prefix + "users/" + url.PathEscape(name)
			}
		}
		out[i].add(t)
	}
	for _, r := range rows {
		total.add(r)
		switch by {
		case "user":
			add(r.User, r)
		case "group":
			groups := dir.Users[r.User].Groups
			if len(groups) == 0 {
				add(noGroup, r)
			}
			for _, g := range groups {
				add(g, r)
			}
		case "kind":
			add(string(r.Kind), r)
		case "class":
			add(r.Class, r)
		}
	}
	slices.SortStableFunc(out, func(a, b hoursRow) int {
		if c := cmp.Compare(b.Allocated, a.Allocated); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, total
}

type option struct {
	Value, Label string
	Selected     bool
}

type hoursContent struct {
	Window      window
	Windows     []option
	By          string
	ByLabel     string
	Groupings   []option
	CustomFrom  string
	CustomTo    string
	Rows        []hoursRow
	Total       hoursRow
	Unavailable string
	CSVHref     string
	Chart       *chart
	ChartError  string
}

// gpuHours is GPU-hours by user, group, kind or class over a window, as a page or CSV (format=csv).
func (h *handler) gpuHours(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	asOf := h.asOf()
	name := q.Get("window")
	if name == "" {
		name = "24h"
		if q.Get("from") != "" || q.Get("to") != "" {
			name = "custom"
		}
	}
	by := q.Get("by")
	if by == "" {
		by = "user"
	}
	c := hoursContent{By: by, CustomFrom: q.Get("from"), CustomTo: q.Get("to")}
	if c.CustomFrom == "" {
		c.CustomFrom = asOf.Add(-6 * 24 * time.Hour).Format("2006-01-02")
	}
	if c.CustomTo == "" {
		c.CustomTo = asOf.Format("2006-01-02")
	}
	var win window
	var ok bool
	if name == "custom" {
		var err error
		if win, err = customWindow(c.CustomFrom, c.CustomTo, asOf); err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
	} else if win, ok = rolling(name, asOf); !ok {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("window %q is not one of 24h, 7d, 30d or custom (with from and to dates).", param(name)))
		return
	}
	c.Window = win
	for _, g := range groupings {
		c.Groupings = append(c.Groupings, option{Value: g.key, Label: g.label, Selected: g.key == by})
		if g.key == by {
			c.ByLabel = g.label
		}
	}
	if c.ByLabel == "" {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("by %q is not one of user, group, kind or class.", param(by)))
		return
	}
	for _, rw := range rollingWindows {
		c.Windows = append(c.Windows, option{Value: rw.name, Label: rw.label, Selected: rw.name == win.Name})
	}
	c.Windows = append(c.Windows, option{Value: "custom", Label: "from … to … (UTC dates)", Selected: win.Name == "custom"})
	csvQuery := url.Values{"window": {win.Name}, "by": {by}, "format": {"csv"}}
	if win.Name == "custom" {
		csvQuery.Set("from", c.CustomFrom)
		csvQuery.Set("to", c.CustomTo)
	}
	c.CSVHref = h.o.Prefix + "gpu-hours?" + csvQuery.Encode()
	format := q.Get("format")
	if format != "" && format != "csv" && format != "html" {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("format %q is not csv or html.", param(format)))
		return
	}

	var dir usage.Directory
	if v := h.o.State.View(); v != nil {
		dir = v.Hub
	}
	var rows []ledger.Usage
	err := h.o.Ledger.Available()
	if err == nil {
		rows, err = h.rows(r.Context(), win, "")
		if err != nil {
			h.o.Logger.Error("admin view: ledger query failed", "window", win.Name, "err", err)
			err = errors.New("the ledger database did not answer just now; reload the page in a few seconds")
		}
	}
	if format == "csv" {
		if err != nil {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "GPU-hours are unavailable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		agg, _ := h.aggregate(rows, by, dir)
		writeCSV(w, win, by, agg)
		return
	}
	if err != nil {
		c.Unavailable = "GPU-hours are unavailable: " + err.Error() + ". Live numbers on the other pages are current."
	} else {
		c.Rows, c.Total = h.aggregate(rows, by, dir)
		hs, herr := h.hourly(r.Context(), win)
		if herr != nil {
			h.o.Logger.Error("admin view: ledger hourly query failed", "window", win.Name, "err", herr)
			c.ChartError = "The chart is unavailable: the ledger database did not answer just now; reload the page in a few seconds."
		} else {
			c.Chart = newChart(win, hs)
		}
	}
	h.render(w, r, http.StatusOK, "gpuhours", h.newPage(r, "GPU-hours", h.o.Prefix+"gpu-hours", c))
}

// writeCSV writes one line per user, group, kind or class with the window's bounds; numbers in GPU-hours to six
// decimals (3.6 ms of one GPU).
func writeCSV(w http.ResponseWriter, win window, by string, rows []hoursRow) {
	name := fmt.Sprintf("gpu-hours-%s-by-%s-%s.csv", win.Name, by, win.To.UTC().Format("20060102T1504Z"))
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"window", "from", "to", by, "allocated_gpu_hours", "used_gpu_hours", "used_unknown_gpu_hours", "idle_held_gpu_hours"})
	from, to := win.From.UTC().Format(time.RFC3339), win.To.UTC().Format(time.RFC3339)
	for _, r := range rows {
		_ = cw.Write([]string{win.Name, from, to, spreadsheet.Text(r.Name), num(r.Allocated), num(r.Used), num(r.Unknown), num(r.Idle)})
	}
	cw.Flush()
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 6, 64) }
