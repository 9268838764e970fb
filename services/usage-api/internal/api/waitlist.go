package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// Waitlist keeps gpu-quota's waitlist state in the ledger's database (ledger.Ledger's methods); whether the
// database can answer is GPUHours.Available.
type Waitlist interface {
	WaitlistState(ctx context.Context) (ledger.WaitlistState, error)
	// PutWaitlistState writes state if ifVersion is the stored version, else returns a *ledger.StaleVersionError.
	PutWaitlistState(ctx context.Context, ifVersion int64, state json.RawMessage, now time.Time) (ledger.WaitlistState, error)
}

// MaxWaitlistBody bounds the body of a waitlist state write.
const MaxWaitlistBody = 1 << 20

// waitlistWriter says whether id may write the waitlist state: the Hub services of WaitlistServices only.
func (h *handler) waitlistWriter(id *hubauth.Identity) bool {
	return id.Kind == "service" && slices.Contains(h.opts.WaitlistServices, id.Name)
}

func (h *handler) waitlistServices() string {
	if len(h.opts.WaitlistServices) == 0 {
		return "none"
	}
	return strings.Join(h.opts.WaitlistServices, ",")
}

// etag is a version as an HTTP entity tag, the form If-Match takes it in.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// getWaitlistState answers the stored waitlist state: to its writers and admins.
func (h *handler) getWaitlistState(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	if !h.waitlistWriter(id) && !id.IsAdmin() {
		server.WriteError(w, http.StatusForbidden,
			"the waitlist state is for admins and the Hub services listed in the usage API's --waitlist-services (now: %s)", h.waitlistServices())
		return
	}
	if qerr := h.waitlistAvailable(); qerr != nil {
		writeQueryError(w, qerr)
		return
	}
	st, err := h.opts.Waitlist.WaitlistState(r.Context())
	if err != nil {
		h.opts.Logger.Error("reading the waitlist state failed", "err", err)
		writeQueryError(w, waitlistRetry())
		return
	}
	resp := contract.WaitlistStateResponse{Version: st.Version, State: st.State}
	if st.Version > 0 {
		resp.UpdatedAt = &st.UpdatedAt
	}
	w.Header().Set("ETag", etag(st.Version))
	server.WriteJSON(w, http.StatusOK, resp)
}

// putWaitlistState stores a new waitlist state if the caller read the stored version (If-Match): a
// compare-and-swap, so that of two writers on the same version exactly one wins and the other reads again.
func (h *handler) putWaitlistState(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	if !h.waitlistWriter(id) {
		server.WriteError(w, http.StatusForbidden,
			"only the Hub services listed in the usage API's --waitlist-services (now: %s) may write the waitlist state", h.waitlistServices())
		return
	}
	match := r.Header.Get("If-Match")
	if match == "" {
		server.WriteError(w, http.StatusPreconditionRequired,
			`send If-Match with the version you read from GET api/v1/waitlist/state, e.g. If-Match: "3" ("0" for the first write)`)
		return
	}
	version, err := strconv.ParseInt(strings.Trim(match, `"`), 10, 64)
	if err != nil || version < 0 || !strings.HasPrefix(match, `"`) || !strings.HasSuffix(match, `"`) || len(match) < 3 {
		server.WriteError(w, http.StatusBadRequest, `If-Match %q is not a version in quotes: send the version you read, e.g. If-Match: "3" ("0" for the first write)`, param(match))
		return
	}
	state, status, msg := readWaitlistBody(w, r)
	if msg != "" {
		server.WriteError(w, status, "%s", msg)
		return
	}
	if qerr := h.waitlistAvailable(); qerr != nil {
		writeQueryError(w, qerr)
		return
	}
	put, err := h.opts.Waitlist.PutWaitlistState(r.Context(), version, state, h.opts.Now())
	var stale *ledger.StaleVersionError
	switch {
	case errors.As(err, &stale):
		w.Header().Set("ETag", etag(stale.Stored))
		server.WriteError(w, http.StatusPreconditionFailed,
			"the waitlist state is at version %d, not %d: another writer stored it since you read it; GET it again, apply your change and PUT it with the new version", stale.Stored, version)
		return
	case err != nil:
		h.opts.Logger.Error("writing the waitlist state failed", "service", id.Name, "err", err)
		writeQueryError(w, waitlistRetry())
		return
	}
	w.Header().Set("ETag", etag(put.Version))
	server.WriteJSON(w, http.StatusOK, contract.WaitlistWriteResponse{Version: put.Version, UpdatedAt: put.UpdatedAt})
}

// readWaitlistBody reads {"state": {...}} of at most MaxWaitlistBody bytes and returns the state compacted, or
// what is wrong with the body and its status: 413 when it is too large (the writer tells it from a malformed
// body: it cannot succeed until the queue is smaller), else 400.
func readWaitlistBody(w http.ResponseWriter, r *http.Request) (json.RawMessage, int, string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxWaitlistBody))
	if err != nil {
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes (1 MiB): keep the waitlist state smaller", MaxWaitlistBody)
		}
		return nil, http.StatusBadRequest, fmt.Sprintf("reading the body failed: %v", err)
	}
	var req contract.WaitlistWrite
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	const want = `the body must be a JSON object {"state": {...}} whose state is a JSON object`
	if err := dec.Decode(&req); err != nil {
		return nil, http.StatusBadRequest, fmt.Sprintf("%s: %v", want, err)
	}
	// More is false before a stray '}' or ']', so ask for the next token: only the end of the body may follow.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, http.StatusBadRequest, want + ": found more after it"
	}
	if !bytes.HasPrefix(bytes.TrimSpace(req.State), []byte("{")) {
		return nil, http.StatusBadRequest, want
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, req.State); err != nil {
		return nil, http.StatusBadRequest, fmt.Sprintf("%s: %v", want, err)
	}
	return compact.Bytes(), 0, ""
}

// waitlistAvailable is a 503 while the ledger's database cannot answer.
func (h *handler) waitlistAvailable() *queryError {
	if err := h.opts.Ledger.Available(); err != nil {
		return &queryError{status: http.StatusServiceUnavailable, msg: "the waitlist state is unavailable: " + err.Error()}
	}
	return nil
}

func waitlistRetry() *queryError {
	return &queryError{status: http.StatusServiceUnavailable,
		msg: fmt.Sprintf("the ledger database could not answer just now; retry in %d s", retryAfterSeconds)}
}
