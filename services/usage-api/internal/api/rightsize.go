package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/profile"
)

// Profiles reads the right-size profiles of one user ("" for everyone) from the day of from on, as of now,
// merged over the days (profile.Reader).
type Profiles interface {
	Profiles(ctx context.Context, from, now time.Time, user string) ([]rightsize.Profile, error)
}

// defaultPeriod is the period advice is computed over unless period= says otherwise: a week covers the working
// days of a notebook's pattern, and is short enough that old work does not hide a change.
const defaultPeriod = "7d"

// period reads period= (24h, 7d or 30d).
func period(r *http.Request) (string, time.Duration, *queryError) {
	name := r.URL.Query().Get("period")
	if name == "" {
		name = defaultPeriod
	}
	d, ok := profile.Periods[name]
	if !ok {
		return "", 0, badRequest("period %q is not 24h, 7d or 30d", param(name))
	}
	return name, d, nil
}

// advice reads the profiles of one user ("" for everyone) over the period and judges them against what the
// nodes offer now.
func (h *handler) advice(ctx context.Context, user string, d time.Duration) (from, asOf time.Time, out []contract.RightSize, qerr *queryError) {
	if err := h.opts.Ledger.Available(); err != nil {
		return from, asOf, nil, &queryError{status: http.StatusServiceUnavailable, msg: "right-size advice is unavailable: " + err.Error()}
	}
	asOf = h.opts.Now().UTC()
	var offers []rightsize.Offer
	var free map[string]int64
	if v := h.opts.State.View(); v != nil {
		offers, free = v.Offers, v.Free
	}
	from = profile.PeriodFrom(d, asOf)
	ps, err := h.opts.Profiles.Profiles(ctx, from, asOf, user)
	if err != nil {
		h.opts.Logger.Error("ledger profiles query failed", "user", user, "err", err)
		return from, asOf, nil, &queryError{status: http.StatusServiceUnavailable,
			msg: fmt.Sprintf("the ledger database could not answer just now; retry in %d s", retryAfterSeconds)}
	}
	return from, asOf, withFreeNow(profile.Advise(ps, offers, asOf), free), nil
}

// withFreeNow says of each candidate how many units are free now (free is nil before the first view).
func withFreeNow(adv []contract.RightSize, free map[string]int64) []contract.RightSize {
	if free == nil {
		return adv
	}
	for i := range adv {
		for j := range adv[i].Candidates {
			c := &adv[i].Candidates[j]
			n := free[c.Class]
			c.FreeNow = &n
		}
	}
	return adv
}

func (h *handler) meRightSize(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	if id.Kind != "user" {
		server.WriteError(w, http.StatusForbidden, "me/right-size is for user tokens; a service reads api/v1/users/{name}/right-size")
		return
	}
	h.writeRightSize(w, r, id.Name)
}

func (h *handler) userRightSize(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	name := r.PathValue("name")
	// The advice readers too (gpu-profiles marks the spawn form's recommended choice from any user's advice), and
	// the reader services, who may read everyone's savings anyway.
	if !id.CanReadUser(name) && !h.canReadAdvice(id) {
		if id.Kind == "service" {
			server.WriteError(w, http.StatusForbidden,
				"the Hub service %q may not read other users' right-size advice: list it in the usage API's --advice-readers (advice only) or --reader-services (every user's GPU-hours and telemetry too)", id.Name)
			return
		}
		server.WriteError(w, http.StatusForbidden, "you may read only your own right-size advice; %q is another user's", name)
		return
	}
	h.writeRightSize(w, r, name)
}

// canReadAdvice says whether id may read any user's right-size advice: those who may read everything
// (canReadAll) and the Hub services of AdviceReaders.
func (h *handler) canReadAdvice(id *hubauth.Identity) bool {
	return h.canReadAll(id) || (id.Kind == "service" && slices.Contains(h.opts.AdviceReaders, id.Name))
}

func (h *handler) writeRightSize(w http.ResponseWriter, r *http.Request, name string) {
	pname, d, qerr := period(r)
	if qerr != nil {
		writeQueryError(w, qerr)
		return
	}
	from, asOf, adv, qerr := h.advice(r.Context(), name, d)
	if qerr != nil {
		writeQueryError(w, qerr)
		return
	}
	server.WriteJSON(w, http.StatusOK, contract.RightSizeResponse{User: name, Period: pname, From: from, AsOf: asOf, Servers: adv})
}

// rightSizeSavings answers the GPU-hours right-sizing would save, by user, group or kind, as JSON or CSV: admins
// and the Hub services of ReaderServices (not AdviceReaders: the savings name every user's GPU-hours).
func (h *handler) rightSizeSavings(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	if !h.canReadAll(id) {
		server.WriteError(w, http.StatusForbidden,
			"every user's right-size savings are for admins and the services listed in the usage API's --reader-services; read your own advice at api/v1/me/right-size")
		return
	}
	q := r.URL.Query()
	pname, _, qerr := period(r)
	if qerr != nil {
		writeQueryError(w, qerr)
		return
	}
	by := q.Get("by")
	if by == "" {
		by = "user"
	}
	if by != "user" && by != "group" && by != "kind" {
		writeQueryError(w, badRequest("by %q is not user, group or kind", param(by)))
		return
	}
	format := q.Get("format")
	if format != "" && format != "json" && format != "csv" {
		writeQueryError(w, badRequest("format %q is not json or csv", param(format)))
		return
	}
	if err := h.opts.Ledger.Available(); err != nil {
		writeQueryError(w, &queryError{status: http.StatusServiceUnavailable, msg: "right-size advice is unavailable: " + err.Error()})
		return
	}
	resp, err := profile.Report(r.Context(), h.opts.Profiles, h.opts.State.View(), pname, by, h.opts.Now().UTC())
	if err != nil {
		h.opts.Logger.Error("ledger profiles query failed", "err", err)
		writeQueryError(w, &queryError{status: http.StatusServiceUnavailable,
			msg: fmt.Sprintf("the ledger database could not answer just now; retry in %d s", retryAfterSeconds)})
		return
	}
	if format == "csv" {
		profile.WriteCSVHeaders(w, resp)
		_ = profile.WriteCSV(w, resp)
		return
	}
	server.WriteJSON(w, http.StatusOK, resp)
}
