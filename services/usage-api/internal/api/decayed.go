package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// maxHalfLife is the longest half-life: beyond it decayed usage is a plain sum over the horizon.
const maxHalfLife = 90 * 24 * time.Hour

// decayed answers every user's GPU-hours by class decayed with a half-life (fair share, Slurm's decayed usage):
// the readers of gpu-hours.
func (h *handler) decayed(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	if !h.canReadAll(id) {
		server.WriteError(w, http.StatusForbidden,
			"every user's GPU-hours are for admins and the services listed in the usage API's --reader-services; read your own at api/v1/me")
		return
	}
	q := r.URL.Query()
	raw := q.Get("halfLife")
	if raw == "" {
		server.WriteError(w, http.StatusBadRequest, "halfLife is required: whole hours from 1h to 90d, e.g. halfLife=7d")
		return
	}
	halfLife, err := policy.ParseDuration(raw)
	switch {
	case err != nil:
		server.WriteError(w, http.StatusBadRequest, "halfLife %q: %v", param(raw), err)
		return
	case halfLife < time.Hour || halfLife > maxHalfLife || halfLife%time.Hour != 0:
		server.WriteError(w, http.StatusBadRequest, "halfLife %q: whole hours from 1h to 90d (the ledger counts by the hour)", param(raw))
		return
	}
	horizon := min(8*halfLife, maxWindow) // 2^-8: older hours count less than 0.4 %
	if q.Has("horizon") {
		raw := q.Get("horizon")
		horizon, err = policy.ParseDuration(raw)
		switch {
		case err != nil:
			server.WriteError(w, http.StatusBadRequest, "horizon %q: %v", param(raw), err)
			return
		case horizon < time.Hour || horizon > maxWindow || horizon%time.Hour != 0:
			server.WriteError(w, http.StatusBadRequest, "horizon %q: whole hours from 1h to 366d (default 8 x halfLife)", param(raw))
			return
		}
	}
	if err := h.opts.Ledger.Available(); err != nil {
		writeQueryError(w, &queryError{status: http.StatusServiceUnavailable, msg: "GPU-hours are unavailable: " + err.Error()})
		return
	}
	asOf := h.opts.Now().UTC()
	users, err := h.opts.Ledger.Decayed(r.Context(), halfLife, horizon, asOf)
	if err != nil {
		h.opts.Logger.Error("ledger decayed usage failed", "halfLife", halfLife, "horizon", horizon, "err", err)
		writeQueryError(w, &queryError{status: http.StatusServiceUnavailable,
			msg: fmt.Sprintf("the GPU-hours ledger could not answer just now; retry in %d s", retryAfterSeconds)})
		return
	}
	server.WriteJSON(w, http.StatusOK, contract.DecayedResponse{AsOf: asOf, HalfLife: policy.FormatDuration(halfLife),
		Horizon: policy.FormatDuration(horizon), Users: users})
}
