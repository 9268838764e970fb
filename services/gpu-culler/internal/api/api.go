// Package api is gpu-culler's HTTP API under the Hub service prefix (contract C3):
//
//	GET  api/v1/me            the user's last stop by the culler and pending notices (the panel; Hub token)
//	POST api/v1/snooze        snooze the stop announced on one of the user's servers (Hub token)
//	GET  api/v1/stops/{user}  a user's last stop (the Hub glue with gpu-culler's own token; the user; admins)
//	GET  api/v1/decisions     the culler's decisions (Hub admins and the reader services)
//
// Every answer is JSON; errors are {"status", "message"} with a message that says what to do next.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/snooze"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/stops"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/notice"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// Stops is the last stop of each user (*stops.Store).
type Stops interface {
	Last(user string) (stops.Stop, bool)
}

// Snoozer snoozes an announced stop (*snooze.Snoozer); actor is who asked (the user or an admin).
type Snoozer interface {
	Snooze(ctx context.Context, actor, user, server string) (notice.Notice, error)
}

// Options configure the handler.
type Options struct {
	Prefix string
	// Auth is hubauth's Middleware: every endpoint but the Hub glue's stops takes a Hub token.
	Auth func(http.Handler) http.Handler
	// OwnToken is gpu-culler's own Hub API token, which the Hub glue sends to read stops; compared in constant
	// time. Empty: only Hub tokens are taken.
	OwnToken  string
	Decisions *decision.Log
	Stops     Stops
	Snoozer   Snoozer
	// Notices are the culler's notices on user's running servers (notices.FromPods over the user's pods).
	Notices func(user string) []notices.OnServer
	// ReaderServices are the Hub services that may read the decisions besides admins.
	ReaderServices []string
	Logger         *slog.Logger
}

// maxBody bounds a snooze request: a server and a user name.
const maxBody = 16 << 10

// New returns the handler; it sees full paths, prefix included.
func New(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &api{o: o, prefix: server.NormalizePrefix(o.Prefix)}
	if o.OwnToken != "" {
		sum := sha256.Sum256([]byte(o.OwnToken))
		a.tokenSum = sum[:]
	}
	auth := o.Auth
	if auth == nil {
		// Without an authenticator nothing but the own token gets in.
		auth = func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				server.WriteError(w, http.StatusUnauthorized, "this endpoint takes a Hub token, and gpu-culler was started without Hub authentication")
			})
		}
	}
	mux := http.NewServeMux()
	p := a.prefix + "api/v1/"
	mux.Handle("GET "+p+"me", auth(http.HandlerFunc(a.me)))
	mux.Handle("POST "+p+"snooze", auth(http.HandlerFunc(a.snooze)))
	stopsAuthed := auth(http.HandlerFunc(a.stops))
	mux.HandleFunc("GET "+p+"stops/{user}", func(w http.ResponseWriter, r *http.Request) {
		if a.ownToken(r) {
			// The Hub glue: checked here, before hubauth would ask the Hub about the culler's own token.
			a.writeStops(w, r.PathValue("user"))
			return
		}
		stopsAuthed.ServeHTTP(w, r)
	})
	mux.Handle("GET "+p+"decisions", auth(http.HandlerFunc(a.decisions)))
	mux.HandleFunc(a.prefix, func(w http.ResponseWriter, r *http.Request) {
		server.WriteError(w, http.StatusNotFound, "no such endpoint: %s %s (me and stops take GET, snooze takes POST); see services/gpu-culler/README.md (API) or openapi.yaml", r.Method, r.URL.Path)
	})
	return mux
}

type api struct {
	o        Options
	prefix   string
	tokenSum []byte
}

// ownToken compares the request's token with gpu-culler's own in constant time (hashes of equal length).
func (a *api) ownToken(r *http.Request) bool {
	tok := hubauth.TokenFromRequest(r)
	if a.tokenSum == nil || tok == "" {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], a.tokenSum) == 1
}

// LastStop is a user's last stop by the culler, as the API shows it.
type LastStop struct {
	Server  string    `json:"server"`
	At      time.Time `json:"at"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
}

// Notice is a pending stop of one of the user's servers, as the API shows it.
type Notice struct {
	Server     string    `json:"server"`
	Reason     string    `json:"reason"`
	Deadline   time.Time `json:"deadline"`
	Snoozable  bool      `json:"snoozable"`
	Snoozes    int       `json:"snoozes"`
	MaxSnoozes int       `json:"maxSnoozes"`
	Message    string    `json:"message"`
}

// Me is the body of GET me.
type Me struct {
	User     string    `json:"user"`
	LastStop *LastStop `json:"lastStop"`
	Notices  []Notice  `json:"notices"`
}

// StopsAnswer is the body of GET stops/{user}.
type StopsAnswer struct {
	LastStop *LastStop `json:"lastStop"`
}

func (a *api) lastStop(user string) *LastStop {
	if a.o.Stops == nil {
		return nil
	}
	st, ok := a.o.Stops.Last(user)
	if !ok {
		return nil
	}
	return &LastStop{Server: st.Server, At: st.At.UTC(), Reason: st.Reason, Message: st.Message}
}

// subject is the user a request is about: ?user= (or the body's user) when given, else the token's owner; ok
// is false (and the answer written) when the identity may not act for them. write asks for more than reading:
// only Hub admins act for other users.
func subject(w http.ResponseWriter, id *hubauth.Identity, asked string, write bool) (string, bool) {
	if asked == "" {
		if id.Kind != "user" {
			server.WriteError(w, http.StatusBadRequest, "a service token must name the user (\"user\")")
			return "", false
		}
		return id.Name, true
	}
	switch {
	case id.Kind == "user" && id.Name == asked:
		return asked, true
	case write && id.Admin:
		return asked, true
	case !write && id.CanReadUser(asked):
		return asked, true
	}
	if write {
		server.WriteError(w, http.StatusForbidden, "only Hub admins may snooze another user's server; leave \"user\" out to snooze your own")
	} else {
		server.WriteError(w, http.StatusForbidden, "you may read only your own stops and notices; Hub admins may read everyone's")
	}
	return "", false
}

func identity(w http.ResponseWriter, r *http.Request) (*hubauth.Identity, bool) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "send a Hub token (Authorization: token ...)")
	}
	return id, ok
}

func (a *api) me(w http.ResponseWriter, r *http.Request) {
	id, ok := identity(w, r)
	if !ok {
		return
	}
	user, ok := subject(w, id, r.URL.Query().Get("user"), false)
	if !ok {
		return
	}
	out := Me{User: user, LastStop: a.lastStop(user), Notices: []Notice{}}
	if a.o.Notices != nil {
		for _, n := range a.o.Notices(user) {
			out.Notices = append(out.Notices, Notice{
				Server: n.Server, Reason: n.Notice.Reason, Deadline: n.Notice.Deadline.UTC(), Snoozable: n.Notice.Snoozable,
				Snoozes: n.Notice.Snoozes, MaxSnoozes: n.Notice.MaxSnoozes, Message: n.Notice.Message,
			})
		}
	}
	server.WriteJSON(w, http.StatusOK, out)
}

// SnoozeRequest is the body of POST snooze.
type SnoozeRequest struct {
	Server string `json:"server"`
	// User is for admins acting for a user; left out, the token's owner.
	User string `json:"user,omitempty"`
}

// SnoozeAnswer is the body of a snooze's 200.
type SnoozeAnswer struct {
	Server     string    `json:"server"`
	Deadline   time.Time `json:"deadline"`
	Snoozable  bool      `json:"snoozable"`
	Snoozes    int       `json:"snoozes"`
	MaxSnoozes int       `json:"maxSnoozes"`
	Message    string    `json:"message"`
}

func (a *api) snooze(w http.ResponseWriter, r *http.Request) {
	id, ok := identity(w, r)
	if !ok {
		return
	}
	var req SnoozeRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		server.WriteError(w, http.StatusBadRequest, "the body is not a snooze request ({\"server\": \"\"} for the default server): %v", err)
		return
	}
	user, ok := subject(w, id, req.User, true)
	if !ok {
		return
	}
	if a.o.Snoozer == nil {
		w.Header().Set("Retry-After", "5")
		server.WriteError(w, http.StatusServiceUnavailable, "gpu-culler is starting; try again in a few seconds")
		return
	}
	n, err := a.o.Snoozer.Snooze(r.Context(), id.Name, user, req.Server)
	switch {
	case err == nil:
		server.WriteJSON(w, http.StatusOK, SnoozeAnswer{Server: req.Server, Deadline: n.Deadline.UTC(), Snoozable: n.Snoozable,
			Snoozes: n.Snoozes, MaxSnoozes: n.MaxSnoozes, Message: n.Message})
	case errors.Is(err, snooze.ErrNoServer):
		server.WriteError(w, http.StatusNotFound, "%s", sentence(err))
	case errors.Is(err, snooze.ErrNothing), errors.Is(err, snooze.ErrBusy):
		server.WriteError(w, http.StatusConflict, "%s", sentence(err))
	case errors.Is(err, snooze.ErrNoPolicy):
		w.Header().Set("Retry-After", "30")
		server.WriteError(w, http.StatusServiceUnavailable, "%s", sentence(err))
	default:
		a.o.Logger.Error("snooze failed", "user", user, "server", req.Server, "actor", id.Name, "err", err)
		server.WriteError(w, http.StatusInternalServerError, "the snooze could not be saved (%v); try again, and tell an admin if it keeps failing", err)
	}
}

// sentence makes an error's text a sentence for the user.
func sentence(err error) string {
	s := err.Error()
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

func (a *api) stops(w http.ResponseWriter, r *http.Request) {
	id, ok := identity(w, r)
	if !ok {
		return
	}
	user, ok := subject(w, id, r.PathValue("user"), false)
	if !ok {
		return
	}
	a.writeStops(w, user)
}

func (a *api) writeStops(w http.ResponseWriter, user string) {
	server.WriteJSON(w, http.StatusOK, StopsAnswer{LastStop: a.lastStop(user)})
}

func (a *api) decisions(w http.ResponseWriter, r *http.Request) {
	id, ok := identity(w, r)
	if !ok {
		return
	}
	reader := id.Kind == "service" && slices.Contains(a.o.ReaderServices, id.Name)
	if !id.IsAdmin() && !reader {
		server.WriteError(w, http.StatusForbidden, "only Hub admins and the services %s may read the culler's decisions",
			strings.Join(a.o.ReaderServices, ", "))
		return
	}
	if a.o.Decisions == nil {
		server.WriteJSON(w, http.StatusOK, decision.List{Decisions: []decision.Record{}})
		return
	}
	a.o.Decisions.Handler().ServeHTTP(w, r)
}
