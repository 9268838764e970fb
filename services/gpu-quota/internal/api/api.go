// Package api is gpu-quota's HTTP API under the Hub service prefix:
//
//	POST api/v1/admit              the Hub glue asks before creating a pod (gpu-quota's own token)
//	POST api/v1/assess             which spawn choices the policy admits for a user (admins, reader services)
//	POST api/v1/assess/watch       every user's verdicts, then their changes, as a stream (admins, reader services)
//	GET  api/v1/users/{name}/quota the user's limits, budgets and pending notice (the user, admins, reader services)
//	GET  api/v1/decisions          the decision log, newest first (admins, reader services)
//	GET  api/v1/explain?user=NAME  the user's effective policy and why (admins)
//	GET  api/v1/waitlist           every queue in line order (admins, reader services)
//	GET  api/v1/waitlist/contended the GPU classes someone waits for (admins, reader services: gpu-culler)
//	GET  api/v1/users/{name}/waitlist           the user's places (the user, admins, reader services)
//	POST api/v1/users/{name}/waitlist           join (the user, Hub admins)
//	DELETE api/v1/users/{name}/waitlist?server= leave (the user, Hub admins)
//
// Every answer is JSON (assess/watch: NDJSON); errors are {"status", "message"} with a message that says what to
// do next.
package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// Engine is what the API asks (*admit.Engine).
type Engine interface {
	Admit(ctx context.Context, r admit.Request) (admit.Result, error)
	Assess(ctx context.Context, r admit.AssessRequest) (admit.Assessment, error)
	UserQuota(name string) (admit.QuotaStatus, error)
	Explain(user string, groups []string) (admit.Explanation, error)
	Places(user string) ([]admit.Place, error)
	Contended() ([]admit.Contention, error)
	Join(r admit.Request) (admit.Place, error)
	Leave(user, server string) error
	// OnUnavailable is the policy's onUnavailable, "" before a policy loads (admit.Engine.OnUnavailable).
	OnUnavailable() string
}

// VerdictWatch is one stream's table of verdicts (*admit.VerdictWatch).
type VerdictWatch interface {
	Pass(ctx context.Context, emit func(admit.VerdictLine) error) (string, error)
	Close()
}

// Options configure the API handler.
type Options struct {
	Prefix string
	Engine Engine
	Log    *decision.Log
	// Token is gpu-quota's own Hub API token: the only credential admit accepts (the Hub glue has it from the
	// Hub's service definition). Empty refuses every admit.
	Token string
	// Auth is hubauth's Middleware: it resolves the other endpoints' tokens to a Hub identity.
	Auth func(http.Handler) http.Handler
	// ReaderServices are the Hub services that may read every user's quota and the decisions, and assess
	// (gpu-usage, gpu-profiles).
	ReaderServices []string
	Logger         *slog.Logger
	// Foreground is marked busy while an admission is served: long background passes (the usage refresh,
	// the enforcer's pass, Views) step aside for it (yield.Foreground). Nil: not marked.
	Foreground *yield.Foreground

	// Verdicts opens a watch of verdicts (admit.Engine.WatchVerdicts); nil: assess/watch answers 404.
	Verdicts func(options []admit.AssessOption) VerdictWatch
	// Deciding returns a channel closed once this replica stops deciding (admit.Engine.DecidingUntil): a
	// watch is served by the decider only, and ends when it steps down. Nil: it always decides.
	Deciding func() <-chan struct{}
	// Stopping is closed when the service stops: open watches end, so that the HTTP server's graceful
	// shutdown does not wait for them, and new ones are refused. Nil: never.
	Stopping <-chan struct{}
	// VerdictInterval is how often a watch looks for changes (--verdict-interval; default 2 s).
	VerdictInterval time.Duration
	// Keepalive is the longest a watch stays silent (default 10 s: within the 15 s readers are promised).
	Keepalive time.Duration
}

// WriteUnavailable answers 503 with the policy's onUnavailable (contract.Unavailable; "" leaves it out).
func WriteUnavailable(w http.ResponseWriter, onUnavailable, format string, args ...any) {
	server.WriteJSON(w, http.StatusServiceUnavailable, contract.Unavailable{Status: http.StatusServiceUnavailable,
		Message: fmt.Sprintf(format, args...), OnUnavailable: onUnavailable})
}

// NotLeaderHeader is on a 503 of a replica that does not decide (admit.ErrNotLeader): the replica that relayed
// the request looks for the decider again instead of passing the 503 on.
const NotLeaderHeader = "X-Gpuhub-Not-Leader"

// maxBody bounds an admit request: the pod's containers' resources and node selector (a few hundred bytes), and
// the spawn's user_options when it joins the waitlist.
const maxBody = 64 << 10

// An assess request is a form's choices: far fewer than maxOptions, each of admit's size or less.
const (
	maxOptions    = 512
	maxAssessBody = 1 << 20
)

// New returns the handler; it sees full paths, prefix included.
func New(o Options) (http.Handler, error) {
	if o.Engine == nil || o.Log == nil || o.Auth == nil {
		return nil, errors.New("api: Engine, Log and Auth are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.VerdictInterval <= 0 {
		o.VerdictInterval = 2 * time.Second
	}
	if o.Keepalive <= 0 {
		o.Keepalive = 10 * time.Second
	}
	a := &api{o: o, prefix: server.NormalizePrefix(o.Prefix)}
	if o.Token != "" {
		sum := sha256.Sum256([]byte(o.Token))
		a.tokenSum = sum[:]
	}
	mux := http.NewServeMux()
	p := a.prefix + "api/v1/"
	mux.HandleFunc("POST "+p+"admit", a.admit)
	mux.Handle("POST "+p+"assess", o.Auth(a.readers(http.HandlerFunc(a.assess))))
	mux.Handle("POST "+p+"assess/watch", o.Auth(a.readers(http.HandlerFunc(a.watch))))
	mux.Handle("GET "+p+"users/{name}/quota", o.Auth(http.HandlerFunc(a.quota)))
	mux.Handle("GET "+p+"decisions", o.Auth(a.readers(o.Log.Handler())))
	mux.Handle("GET "+p+"explain", o.Auth(http.HandlerFunc(a.explain)))
	mux.Handle("GET "+p+"waitlist", o.Auth(a.readers(http.HandlerFunc(a.queues))))
	mux.Handle("GET "+p+"waitlist/contended", o.Auth(a.readers(http.HandlerFunc(a.contended))))
	mux.Handle("GET "+p+"users/{name}/waitlist", o.Auth(http.HandlerFunc(a.places)))
	mux.Handle("POST "+p+"users/{name}/waitlist", o.Auth(http.HandlerFunc(a.join)))
	mux.Handle("DELETE "+p+"users/{name}/waitlist", o.Auth(http.HandlerFunc(a.leave)))
	mux.HandleFunc(a.prefix, func(w http.ResponseWriter, r *http.Request) {
		server.WriteError(w, http.StatusNotFound, "no such endpoint: %s %s; see services/gpu-quota/README.md for the API", r.Method, r.URL.Path)
	})
	return mux, nil
}

type api struct {
	o        Options
	prefix   string
	tokenSum []byte
}

// admit answers the Hub glue: 200 with the decision, 400 for a bad body, 401 without gpu-quota's token, 503
// when no decision can be made (the glue applies onUnavailable).
func (a *api) admit(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	if !a.ownToken(r) {
		w.Header().Set("WWW-Authenticate", `token realm="gpu-quota"`)
		server.WriteError(w, http.StatusUnauthorized, "admit needs gpu-quota's own Hub API token (Authorization: token ...), as the Hub glue sends it")
		return
	}
	a.o.Foreground.Start()
	defer a.o.Foreground.Done()
	req, err := readAdmit(w, r)
	if err != nil {
		server.WriteError(w, http.StatusBadRequest, "the body is not an admission request: %v", err)
		return
	}
	if msg := check(req); msg != "" {
		server.WriteError(w, http.StatusBadRequest, "%s", msg)
		return
	}
	if req.Waitlist == nil {
		// The glue sends the spawn's user_options when they speak of the waitlist; what they ask is read here.
		req.Waitlist = contract.WaitlistChoiceFrom(req.UserOptions)
	}
	req.Arrived = arrived
	res, err := a.o.Engine.Admit(r.Context(), req)
	res.CountedPod = req.FromPod
	if err != nil {
		if r.Context().Err() != nil {
			return // the glue is gone (its timeout): there is no one to answer
		}
		if errors.Is(err, admit.ErrNotLeader) {
			w.Header().Set(NotLeaderHeader, "1")
		} else {
			a.o.Logger.Warn("cannot decide an admission", "user", req.User, "server", req.Server, "err", err)
		}
		w.Header().Set("Retry-After", "5")
		WriteUnavailable(w, a.o.Engine.OnUnavailable(), "%v", err)
		return
	}
	writeResult(w, res)
}

// readAdmit reads the whole body, at most maxBody bytes (the glue sends a few hundred, with a length), then
// decodes decodeAdmit's shape in one pass and anything else as json.Decoder does (the first JSON value; what
// follows it is ignored).
func readAdmit(w http.ResponseWriter, r *http.Request) (admit.Request, error) {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer bodyBuffers.Put(buf) // kept for the next request (at most about twice maxBody); both decoders copy what they keep
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		return admit.Request{}, err
	}
	body := buf.Bytes()
	if req, ok := decodeAdmit(body); ok {
		return req, nil
	}
	return decodeAdmitJSON(body)
}

// admitBody is the admission request on the wire: the glue sends the pod ("pod": its spec cut to the containers'
// resources and the node selector), and gpu-quota counts its GPUs the scheduler's way; a client may send
// "resources" and "nodeSelector" instead, counted already.
type admitBody struct {
	admit.Request
	Pod json.RawMessage `json:"pod"`
}

// decodeAdmitJSON decodes an admission request with encoding/json's rules and errors (decodeAdmit's fallback).
func decodeAdmitJSON(body []byte) (admit.Request, error) {
	var b admitBody
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&b); err != nil {
		return admit.Request{}, err
	}
	if len(b.Pod) == 0 || string(b.Pod) == "null" {
		return b.Request, nil
	}
	if b.Resources != nil || b.NodeSelector != nil {
		return admit.Request{}, errors.New(`give "pod", or "resources" and "nodeSelector", not both`)
	}
	p, err := podRequest(b.Pod)
	if err != nil {
		return admit.Request{}, err
	}
	b.Resources, b.NodeSelector, b.FromPod = p.resources, p.nodeSelector, true
	return b.Request, nil
}

// podGPUs is what an admission needs of the pod: its GPU request (gpu.PodResources) and its node selector.
type podGPUs struct {
	resources    map[string]int64
	nodeSelector map[string]string
}

// podRequest reads the pod's spec (only containers, init containers and the node selector matter).
func podRequest(raw []byte) (podGPUs, error) {
	var spec corev1.PodSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return podGPUs{}, fmt.Errorf(`"pod" is not a pod spec: %w`, err)
	}
	return podGPUs{resources: gpu.PodResources(&corev1.Pod{Spec: spec}), nodeSelector: spec.NodeSelector}, nil
}

var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// assess answers gpu-profiles at each form render: 200 with a verdict per option, 400 for a bad body, 503
// when no decision can be made (gpu-profiles then applies onUnavailable itself).
func (a *api) assess(w http.ResponseWriter, r *http.Request) {
	var req admit.AssessRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAssessBody))
	if err := dec.Decode(&req); err != nil {
		server.WriteError(w, http.StatusBadRequest, "the body is not an assess request ({\"user\", \"groups\", \"options\": [{\"id\", \"resources\", \"nodeSelector\"}]}): %v", err)
		return
	}
	if msg := checkAssess(req); msg != "" {
		server.WriteError(w, http.StatusBadRequest, "%s", msg)
		return
	}
	res, err := a.o.Engine.Assess(r.Context(), req)
	if err != nil {
		a.o.Logger.Warn("cannot assess spawn choices", "user", req.User, "err", err)
		w.Header().Set("Retry-After", "5")
		WriteUnavailable(w, a.o.Engine.OnUnavailable(), "%v", err)
		return
	}
	server.WriteJSON(w, http.StatusOK, res)
}

func checkAssess(req admit.AssessRequest) string {
	if strings.TrimSpace(req.User) == "" {
		return `"user" is required: the Hub user whose spawn form is rendered`
	}
	return checkOptions(req.Options)
}

func checkOptions(opts []admit.AssessOption) string {
	if len(opts) > maxOptions {
		return fmt.Sprintf("%d options: at most %d per request", len(opts), maxOptions)
	}
	for i, o := range opts {
		if o.ID == "" {
			return fmt.Sprintf(`options[%d] has no "id": name each option (the profile's slug)`, i)
		}
		for k, v := range o.Resources {
			if v < 0 {
				return fmt.Sprintf("options[%d] (%s): resources[%q] is %d: a count of GPUs is 0 or more", i, o.ID, k, v)
			}
		}
	}
	return ""
}

// checkWatch is checkOptions, with at least one option and each ID once: the reader keeps verdicts by ID.
func checkWatch(req admit.VerdictWatchRequest) string {
	if len(req.Options) == 0 {
		return `"options" is empty: list every GPU choice the spawn forms may show ({"id", "resources", "nodeSelector"})`
	}
	if msg := checkOptions(req.Options); msg != "" {
		return msg
	}
	seen := make(map[string]bool, len(req.Options))
	for i, o := range req.Options {
		if seen[o.ID] {
			return fmt.Sprintf("options[%d]: the id %q is given twice: one option per id", i, o.ID)
		}
		seen[o.ID] = true
	}
	return ""
}

// watch streams every user's verdicts for their default server (NDJSON, one admit.VerdictLine a line): a
// line per user of the directory, a synced line, then at each VerdictInterval the lines of users whose
// verdicts or groups changed and of users who left, with a keepalive when nothing was sent for Keepalive. 400
// for a bad body, 503 while no verdict can be made or on a replica that does not decide (with NotLeaderHeader:
// the relay looks for the decider). The stream ends when this replica stops deciding or stops: the reader
// connects again and gets the next decider's whole table.
func (a *api) watch(w http.ResponseWriter, r *http.Request) {
	var req admit.VerdictWatchRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAssessBody)).Decode(&req); err != nil {
		server.WriteError(w, http.StatusBadRequest, "the body is not a watch request ({\"options\": [{\"id\", \"resources\", \"nodeSelector\"}]}): %v", err)
		return
	}
	if msg := checkWatch(req); msg != "" {
		server.WriteError(w, http.StatusBadRequest, "%s", msg)
		return
	}
	if a.o.Verdicts == nil {
		server.WriteError(w, http.StatusNotFound, "this gpu-quota does not serve watches of verdicts: ask api/v1/assess")
		return
	}
	var until <-chan struct{} // nil: decides for good
	if a.o.Deciding != nil {
		until = a.o.Deciding()
	}
	select {
	case <-until:
		w.Header().Set(NotLeaderHeader, "1")
		w.Header().Set("Retry-After", "1")
		server.WriteError(w, http.StatusServiceUnavailable, "%v", admit.ErrNotLeader)
		return
	case <-a.o.Stopping:
		w.Header().Set("Retry-After", "1")
		server.WriteError(w, http.StatusServiceUnavailable, "this gpu-quota replica is stopping; connect again")
		return
	default:
	}
	// The stream's work ends with the reader, the step-down or the stop, a pass in progress included.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-until:
		case <-a.o.Stopping:
		}
		cancel()
	}()
	vw := a.o.Verdicts(req.Options)
	defer vw.Close()

	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	started, wrote := false, false
	emit := func(l admit.VerdictLine) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		wrote = true
		return enc.Encode(l)
	}
	flush := func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	who := "?"
	if id, ok := hubauth.FromContext(r.Context()); ok {
		who = id.Name
	}
	if _, err := vw.Pass(ctx, emit); err != nil {
		if !started && ctx.Err() == nil {
			a.o.Logger.Warn("cannot start a watch of verdicts", "caller", who, "err", err)
			w.Header().Set("Retry-After", "5")
			server.WriteError(w, http.StatusServiceUnavailable, "%v", err)
		}
		return // the reader saw no synced line: it connects again
	}
	if emit(admit.VerdictLine{Kind: contract.WatchSynced}) != nil || flush() != nil {
		return
	}
	a.o.Logger.Info("watch of verdicts open", "caller", who, "options", len(req.Options))
	defer a.o.Logger.Info("watch of verdicts closed", "caller", who)
	tick := time.NewTicker(a.o.VerdictInterval)
	defer tick.Stop()
	keep := time.NewTimer(a.o.Keepalive)
	defer keep.Stop()
	for {
		wrote = false
		select {
		case <-ctx.Done():
			return
		case <-keep.C:
			if emit(admit.VerdictLine{Kind: contract.WatchKeepalive}) != nil {
				return
			}
		case <-tick.C:
			if _, err := vw.Pass(ctx, emit); err != nil {
				if ctx.Err() == nil {
					a.o.Logger.Warn("a watch of verdicts ends: no pass could be made", "caller", who, "err", err)
				}
				return
			}
		}
		if wrote {
			if flush() != nil {
				return
			}
			keep.Reset(a.o.Keepalive)
		}
	}
}

func check(req admit.Request) string {
	if strings.TrimSpace(req.User) == "" {
		return `"user" is required: the Hub user whose server starts`
	}
	for k, v := range req.Resources {
		if v < 0 {
			return fmt.Sprintf("resources[%q] is %d: a count of GPUs is 0 or more", k, v)
		}
	}
	return ""
}

// ownToken compares the request's token with gpu-quota's own in constant time (hashes of equal length).
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

// readers lets admins and reader services through.
func (a *api) readers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := hubauth.FromContext(r.Context())
		if !ok || !a.reader(id) {
			server.WriteError(w, http.StatusForbidden, "only Hub admins and the services %s may read gpu-quota's decisions and assess spawn choices",
				strings.Join(a.o.ReaderServices, ", "))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *api) quota(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	id, ok := hubauth.FromContext(r.Context())
	if !ok || !id.CanReadUser(name) && !a.reader(id) {
		server.WriteError(w, http.StatusForbidden, "you may read your own quota only; Hub admins and the services %s read everyone's",
			strings.Join(a.o.ReaderServices, ", "))
		return
	}
	q, err := a.o.Engine.UserQuota(name)
	if err != nil {
		w.Header().Set("Retry-After", "5")
		server.WriteError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	server.WriteJSON(w, http.StatusOK, q)
}

func (a *api) explain(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok || !id.IsAdmin() {
		server.WriteError(w, http.StatusForbidden, "only Hub admins may read another user's effective policy")
		return
	}
	user := r.URL.Query().Get("user")
	if user == "" {
		server.WriteError(w, http.StatusBadRequest, "say whose policy: explain?user=NAME (and &groups=a,b to try other groups)")
		return
	}
	var groups []string
	if r.URL.Query().Has("groups") {
		groups = config.List(r.URL.Query().Get("groups"))
		if groups == nil {
			groups = []string{}
		}
	}
	e, err := a.o.Engine.Explain(user, groups)
	if err != nil {
		server.WriteError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	server.WriteJSON(w, http.StatusOK, e)
}

// waitlistError answers an error of the waitlist: 404 when it is off or the server is not queued, 409 for a
// join the user can act on, 503 otherwise.
func (a *api) waitlistError(w http.ResponseWriter, err error) {
	var je *admit.JoinError
	switch {
	case errors.As(err, &je):
		server.WriteError(w, http.StatusConflict, "%s", je.Message)
	case errors.Is(err, admit.ErrWaitlistOff), errors.Is(err, admit.ErrNotQueued):
		server.WriteError(w, http.StatusNotFound, "%v", err)
	default:
		if errors.Is(err, admit.ErrNotLeader) {
			w.Header().Set(NotLeaderHeader, "1")
		}
		w.Header().Set("Retry-After", "5")
		server.WriteError(w, http.StatusServiceUnavailable, "%v", err)
	}
}

func (a *api) queues(w http.ResponseWriter, r *http.Request) {
	ps, err := a.o.Engine.Places("")
	if err != nil {
		a.waitlistError(w, err)
		return
	}
	server.WriteJSON(w, http.StatusOK, contract.Places{Places: ps})
}

func (a *api) contended(w http.ResponseWriter, r *http.Request) {
	cs, err := a.o.Engine.Contended()
	if err != nil {
		a.waitlistError(w, err)
		return
	}
	server.WriteJSON(w, http.StatusOK, contract.Contended{AsOf: time.Now().UTC(), Classes: cs})
}

func (a *api) places(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	id, ok := hubauth.FromContext(r.Context())
	if !ok || !id.CanReadUser(name) && !a.reader(id) {
		server.WriteError(w, http.StatusForbidden, "you may read your own places in the waitlist only")
		return
	}
	ps, err := a.o.Engine.Places(name)
	if err != nil {
		a.waitlistError(w, err)
		return
	}
	server.WriteJSON(w, http.StatusOK, contract.Places{Places: ps})
}

// actsFor reports whether id may join or leave the waitlist for user name: the user, or a Hub admin (not a member
// of --admin-groups: those read every user's quota and the decisions, and act only for themselves).
func actsFor(id *hubauth.Identity, name string) bool {
	return id.HubAdmin || id.Kind == "user" && id.Name == name
}

// joinBody is what the panel or a script sends to join: the server and its GPU request, as admit's.
type joinBody struct {
	Server       string            `json:"server"`
	Resources    map[string]int64  `json:"resources"`
	NodeSelector map[string]string `json:"nodeSelector"`
	Profile      string            `json:"profile"`
	AutoStart    bool              `json:"autoStart"`
	UserOptions  map[string]any    `json:"userOptions"`
}

func (a *api) join(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	id, ok := hubauth.FromContext(r.Context())
	if !ok || !actsFor(id, name) {
		server.WriteError(w, http.StatusForbidden, "you may join the waitlist for yourself only")
		return
	}
	var b joinBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&b); err != nil {
		server.WriteError(w, http.StatusBadRequest, "the body is not a join request ({\"server\", \"resources\", \"nodeSelector\", \"autoStart\"}): %v", err)
		return
	}
	req := admit.Request{User: name, Server: b.Server, Resources: b.Resources, NodeSelector: b.NodeSelector, Profile: b.Profile,
		UserOptions: b.UserOptions, Waitlist: &admit.WaitlistChoice{Join: true, AutoStart: b.AutoStart}}
	if id.Kind == "user" && id.Name == name {
		req.Groups = id.Groups
	}
	if msg := check(req); msg != "" {
		server.WriteError(w, http.StatusBadRequest, "%s", msg)
		return
	}
	if err := admit.UserOptionsError(req.UserOptions); err != nil { // the body's fault: 400, not a 409 to act on
		server.WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	p, err := a.o.Engine.Join(req)
	if err != nil {
		a.waitlistError(w, err)
		return
	}
	a.o.Logger.Info("joined the waitlist", "user", name, "server", b.Server, "class", p.Class, "position", p.Position, "autoStart", b.AutoStart)
	server.WriteJSON(w, http.StatusOK, p)
}

func (a *api) leave(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	id, ok := hubauth.FromContext(r.Context())
	if !ok || !actsFor(id, name) {
		server.WriteError(w, http.StatusForbidden, "you may leave the waitlist for yourself only")
		return
	}
	srv := r.URL.Query().Get("server")
	if err := a.o.Engine.Leave(name, srv); err != nil {
		a.waitlistError(w, err)
		return
	}
	a.o.Logger.Info("left the waitlist", "user", name, "server", srv)
	w.WriteHeader(http.StatusNoContent)
}
