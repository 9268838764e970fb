package adminview

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/profile"
)

var rightSizePeriods = []struct{ name, label string }{
	{"24h", "yesterday and today (24h)"}, {"7d", "last 7 days"}, {"30d", "last 30 days"},
}

var rightSizeGroupings = map[string]string{"user": "User", "group": "Hub group", "kind": "GPU kind"}

type rightSizeRow struct {
	contract.RightSizeSavingsRow
	Href string // the user's page (by user only)
}

type rightSizeContent struct {
	Periods     []option
	PeriodLabel string
	Groupings   []option
	ByLabel     string
	Report      contract.RightSizeSavings
	Rows        []rightSizeRow
	Unavailable string
	CSVHref     string
}

// rightSize is the GPU-hours right-sizing would save by user, group or kind over 24h, 7d or 30d, as a page or
// CSV (format=csv): profile.Report, the function the JSON API answers GET api/v1/right-size with.
func (h *handler) rightSize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	period, by, format := q.Get("period"), q.Get("by"), q.Get("format")
	if period == "" {
		period = "7d"
	}
	if by == "" {
		by = "user"
	}
	c := rightSizeContent{ByLabel: rightSizeGroupings[by]}
	for _, p := range rightSizePeriods {
		c.Periods = append(c.Periods, option{Value: p.name, Label: p.label, Selected: p.name == period})
		if p.name == period {
			c.PeriodLabel = p.label
		}
	}
	if c.PeriodLabel == "" {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("period %q is not one of 24h, 7d or 30d.", param(period)))
		return
	}
	if c.ByLabel == "" {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("by %q is not one of user, group or kind.", param(by)))
		return
	}
	if format != "" && format != "csv" && format != "html" {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("format %q is not csv or html.", param(format)))
		return
	}
	for _, g := range profile.Groupings {
		c.Groupings = append(c.Groupings, option{Value: g, Label: rightSizeGroupings[g], Selected: g == by})
	}
	c.CSVHref = h.o.Prefix + "right-size?" + url.Values{"period": {period}, "by": {by}, "format": {"csv"}}.Encode()

	err := h.o.Ledger.Available()
	if h.o.Profiles == nil {
		err = errors.New("the usage API keeps no right-size profiles here (no ledger database)")
	}
	if err == nil {
		c.Report, err = profile.Report(r.Context(), h.o.Profiles, h.o.State.View(), period, by, h.o.Now().UTC())
		if err != nil {
			h.o.Logger.Error("admin view: ledger profiles query failed", "period", period, "err", err)
			err = errors.New("the ledger database did not answer just now; reload the page in a few seconds")
		}
	}
	if format == "csv" {
		if err != nil {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "Right-size savings are unavailable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		profile.WriteCSVHeaders(w, c.Report)
		_ = profile.WriteCSV(w, c.Report)
		return
	}
	if err != nil {
		c.Unavailable = "Right-size savings are unavailable: " + err.Error() + ". Live numbers on the other pages are current."
		c.Report = contract.RightSizeSavings{Period: period, By: by}
	}
	for _, row := range c.Report.Rows {
		rr := rightSizeRow{RightSizeSavingsRow: row}
		if by == "user" {
			rr.Href = h.o.Prefix + "users/" + url.PathEscape(row.Key)
		}
		c.Rows = append(c.Rows, rr)
	}
	c.Rows = slices.Clip(c.Rows)
	h.render(w, r, http.StatusOK, "rightsize", h.newPage(r, "Right-size", h.o.Prefix+"right-size", c))
}
