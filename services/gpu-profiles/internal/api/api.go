// Package api is gpu-profiles' HTTP API under the Hub service prefix (contract C1):
//
//	POST api/v1/profiles   the Hub glue asks for a user's form (gpu-profiles' own token)
//	POST api/v1/start      the Hub glue asks whether a start may go on, before its pod is created (the same token)
//	GET  api/v1/inventory  the GPU kinds with their counts (Hub admins and the reader services)
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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// Renderer renders a user's form (*profiles.Renderer).
type Renderer interface {
	// Encoded is the user's form (profiles.Response) as the JSON body of the answer.
	Encoded(ctx context.Context, req profiles.Request) ([]byte, error)
	// Start judges a start against the user's form.
	Start(ctx context.Context, req profiles.StartRequest) (profiles.StartAnswer, error)
}

// Kinds is the inventory by kind (*catalog.Catalog).
type Kinds interface {
	Kinds() ([]catalog.KindStatus, error)
}

// Options configure the handler.
type Options struct {
	Prefix   string
	Renderer Renderer
	Kinds    Kinds
	// Token is gpu-profiles' own Hub API token: the only credential the profiles endpoint accepts (the Hub glue
	// has it from the Hub's service definition). Empty refuses every request.
	Token string
	// Auth is hubauth's Middleware (inventory).
	Auth func(http.Handler) http.Handler
	// ReaderServices are the Hub services that may read the inventory besides admins.
	ReaderServices []string
	Logger         *slog.Logger
	Registerer     prometheus.Registerer
	Now            func() time.Time
}

// maxBody bounds a request: a user name and their groups, and for a start the pod's containers' resources.
const maxBody = 64 << 10

// Render results (gpuhub_profiles_renders_total{result}).
const (
	resultOK           = "ok"
	resultUnavailable  = "unavailable"
	resultBadRequest   = "bad_request"
	resultUnauthorized = "unauthorized"
	resultRefused      = "refused"
)

// New returns the handler; it sees full paths, prefix included.
func New(o Options) (http.Handler, error) {
	if o.Renderer == nil || o.Kinds == nil || o.Auth == nil || o.Registerer == nil {
		return nil, errors.New("api: Renderer, Kinds, Auth and Registerer are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a := &api{o: o, prefix: server.NormalizePrefix(o.Prefix)}
	if o.Token != "" {
		sum := sha256.Sum256([]byte(o.Token))
		a.tokenSum = sum[:]
	}
	a.renders = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "profiles", Name: "renders_total",
		Help: "Forms asked for by the Hub glue, by result: ok, unavailable (inventory not ready: the glue falls back), bad_request, unauthorized."},
		[]string{"result"})
	if err := o.Registerer.Register(a.renders); err != nil {
		return nil, err
	}
	for _, r := range []string{resultOK, resultUnavailable, resultBadRequest, resultUnauthorized} {
		a.renders.WithLabelValues(r)
	}
	a.starts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "profiles", Name: "start_checks_total",
		Help: "Starts the Hub glue asked about before creating the pod, by result: ok, refused (the choice is unavailable), unavailable (inventory not ready: gpu-quota decides alone), bad_request, unauthorized."},
		[]string{"result"})
	if err := o.Registerer.Register(a.starts); err != nil {
		return nil, err
	}
	for _, r := range []string{resultOK, resultRefused, resultUnavailable, resultBadRequest, resultUnauthorized} {
		a.starts.WithLabelValues(r)
	}
	mux := http.NewServeMux()
	p := a.prefix + "api/v1/"
	mux.HandleFunc("POST "+p+"profiles", a.profiles)
	mux.HandleFunc("POST "+p+"start", a.start)
	mux.Handle("GET "+p+"inventory", o.Auth(http.HandlerFunc(a.inventory)))
	mux.HandleFunc(a.prefix, func(w http.ResponseWriter, r *http.Request) {
		server.WriteError(w, http.StatusNotFound, "no such endpoint: %s %s; see services/gpu-profiles/README.md for the API", r.Method, r.URL.Path)
	})
	return mux, nil
}

type api struct {
	o        Options
	prefix   string
	tokenSum []byte
	renders  *prometheus.CounterVec
	starts   *prometheus.CounterVec
}

// profiles answers the Hub glue: 200 with the form, 400 for a bad body, 401 without gpu-profiles' token, 503
// while the inventory is not ready (the glue then shows the administrator's static list).
func (a *api) profiles(w http.ResponseWriter, r *http.Request) {
	if !a.glue(w, r, "profiles") {
		return
	}
	var req profiles.Request
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(&req); err != nil {
		a.renders.WithLabelValues(resultBadRequest).Inc()
		server.WriteError(w, http.StatusBadRequest, "the body is not a profiles request ({\"user\", \"groups\", \"server\"}): %v", err)
		return
	}
	if strings.TrimSpace(req.User) == "" {
		a.renders.WithLabelValues(resultBadRequest).Inc()
		server.WriteError(w, http.StatusBadRequest, `"user" is required: the Hub user whose form is rendered`)
		return
	}
	body, err := a.o.Renderer.Encoded(r.Context(), req)
	if err != nil {
		a.renders.WithLabelValues(resultUnavailable).Inc()
		a.o.Logger.Warn("cannot render a form", "user", req.User, "err", err)
		w.Header().Set("Retry-After", "5")
		server.WriteError(w, http.StatusServiceUnavailable, "gpu-profiles cannot tell what is free right now (%v); the Hub shows the static choices", err)
		return
	}
	a.renders.WithLabelValues(resultOK).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

// start answers the Hub glue before a start's pod is created: 200 with a refusal or none, 400 for a bad body,
// 401 without gpu-profiles' token, 503 while the inventory is not ready (the glue then lets gpu-quota decide).
func (a *api) start(w http.ResponseWriter, r *http.Request) {
	if !a.glue(w, r, "start") {
		return
	}
	var req profiles.StartRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(&req); err != nil {
		a.starts.WithLabelValues(resultBadRequest).Inc()
		server.WriteError(w, http.StatusBadRequest, "the body is not a start request ({\"user\", \"groups\", \"server\", \"profile\", \"pod\", ...}): %v", err)
		return
	}
	if strings.TrimSpace(req.User) == "" {
		a.starts.WithLabelValues(resultBadRequest).Inc()
		server.WriteError(w, http.StatusBadRequest, `"user" is required: the Hub user whose server starts`)
		return
	}
	answer, err := a.o.Renderer.Start(r.Context(), req)
	if err != nil {
		a.starts.WithLabelValues(resultUnavailable).Inc()
		a.o.Logger.Warn("cannot check a start", "user", req.User, "err", err)
		w.Header().Set("Retry-After", "5")
		server.WriteError(w, http.StatusServiceUnavailable, "gpu-profiles cannot tell what is free right now (%v); gpu-quota decides alone", err)
		return
	}
	result := resultOK
	if answer.Refusal != nil {
		result = resultRefused
		a.o.Logger.Info("start refused", "user", req.User, "server", req.Server, "profile", req.Profile, "reason", answer.Refusal.Reason)
	}
	a.starts.WithLabelValues(result).Inc()
	w.Header().Set("Cache-Control", "no-store")
	server.WriteJSON(w, http.StatusOK, answer)
}

// glue lets only the Hub glue through (gpu-profiles' own token); otherwise it answers 401 and counts it.
func (a *api) glue(w http.ResponseWriter, r *http.Request, what string) bool {
	if a.ownToken(r) {
		return true
	}
	counter := a.renders
	if what == "start" {
		counter = a.starts
	}
	counter.WithLabelValues(resultUnauthorized).Inc()
	w.Header().Set("WWW-Authenticate", `token realm="gpu-profiles"`)
	server.WriteError(w, http.StatusUnauthorized, "%s needs gpu-profiles' own Hub API token (Authorization: token ...), as the Hub glue sends it", what)
	return false
}

// ownToken compares the request's token with gpu-profiles' own in constant time (hashes of equal length).
func (a *api) ownToken(r *http.Request) bool {
	tok := hubauth.TokenFromRequest(r)
	if a.tokenSum == nil || tok == "" {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], a.tokenSum) == 1
}

func (a *api) reader(id *hubauth.Identity) bool {
	return id.IsAdmin() || id.Kind == "service" && slices.Contains(a.o.ReaderServices, id.Name)
}

type inventoryResponse struct {
	Kinds []catalog.KindStatus `json:"kinds"`
	At    time.Time            `json:"at"`
}

func (a *api) inventory(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok || !a.reader(id) {
		server.WriteError(w, http.StatusForbidden, "only Hub admins and the services %s may read the GPU inventory",
			strings.Join(a.o.ReaderServices, ", "))
		return
	}
	kinds, err := a.o.Kinds.Kinds()
	if err != nil {
		w.Header().Set("Retry-After", "5")
		server.WriteError(w, http.StatusServiceUnavailable, "%v; try again in a few seconds", err)
		return
	}
	server.WriteJSON(w, http.StatusOK, inventoryResponse{Kinds: kinds, At: a.o.Now().UTC()})
}
