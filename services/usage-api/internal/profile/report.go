package profile

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
	"github.com/gpuhub/gpuhub/services/internal/spreadsheet"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// Source reads the profiles of one user ("" for everyone) from the day of from on, as of now, merged over the
// days (Reader).
type Source interface {
	Profiles(ctx context.Context, from, now time.Time, user string) ([]rightsize.Profile, error)
}

// Groupings are the ways savings are added up (GET right-size's by=), in the order a form offers them.
var Groupings = []string{"user", "group", "kind"}

// Report is the body of GET right-size: every server's advice over the named period (Periods) as of asOf,
// against what the view's nodes offer now, added up by user, group or kind. The JSON API, its CSV and the admin
// view's Right-size page all come from this one function, so they cannot disagree. The error is the source's
// (the caller answers 503) or an unknown period or grouping.
func Report(ctx context.Context, src Source, view *usage.View, period, by string, asOf time.Time) (contract.RightSizeSavings, error) {
	d, ok := Periods[period]
	if !ok {
		return contract.RightSizeSavings{}, fmt.Errorf("period %q is not 24h, 7d or 30d", period)
	}
	var (
		offers []rightsize.Offer
		dir    map[string]usage.HubUser
	)
	if view != nil {
		offers, dir = view.Offers, view.Hub.Users
	}
	from := PeriodFrom(d, asOf)
	ps, err := src.Profiles(ctx, from, asOf, "")
	if err != nil {
		return contract.RightSizeSavings{}, err
	}
	rows, saved, held, err := Savings(Advise(ps, offers, asOf), by, func(u string) []string { return dir[u].Groups })
	if err != nil {
		return contract.RightSizeSavings{}, err
	}
	return contract.RightSizeSavings{Period: period, From: from, AsOf: asOf, By: by, Rows: rows, SaveableGPUHours: saved, HeldGPUHours: held}, nil
}

// CSVName is the file a report's CSV is saved as.
func CSVName(s contract.RightSizeSavings) string {
	return fmt.Sprintf("right-size-%s-by-%s-%s.csv", s.Period, s.By, s.AsOf.Format("20060102T1504Z"))
}

// WriteCSVHeaders sets the headers of a report's CSV download.
func WriteCSVHeaders(w http.ResponseWriter, s contract.RightSizeSavings) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+CSVName(s)+`"`)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// WriteCSV writes one line per row with the period's bounds; GPU-hours to six decimals, as the admin view's
// GPU-hours CSV.
func WriteCSV(w io.Writer, s contract.RightSizeSavings) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"period", "from", "to", s.By, "saveable_gpu_hours", "held_gpu_hours", "servers", "advised_smaller", "simulated", "stale"})
	from, to := s.From.Format(time.RFC3339), s.AsOf.Format(time.RFC3339)
	for _, r := range s.Rows {
		_ = cw.Write([]string{s.Period, from, to, spreadsheet.Text(r.Key), GPUHours(r.SaveableGPUHours), GPUHours(r.HeldGPUHours),
			strconv.Itoa(r.Servers), strconv.Itoa(r.Smaller), strconv.Itoa(r.Simulated), strconv.Itoa(r.Stale)})
	}
	cw.Flush()
	return cw.Error()
}

// GPUHours writes GPU-hours as the CSV does (six decimals: 3.6 ms of one GPU).
func GPUHours(v float64) string { return strconv.FormatFloat(v, 'f', 6, 64) }
