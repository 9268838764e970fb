// Package hubapitest is a fake JupyterHub 5.5 REST API for unit tests.
//
// It follows the Hub's JSON shapes and rules where services depend on them
// (jupyterhub/apihandlers/base.py, users.py, groups.py, scopes.py at 5.5):
//   - pagination: {"items", "_pagination"} only with
//     "Accept: application/jupyterhub-pagination+json"; otherwise a bare list
//     capped at api_page_max_limit (200); default limit 50 with the header;
//   - fields filtered by the token's scopes: no "servers" without
//     read:servers, no "state" without admin:server_state, no "groups"
//     without read:users:groups ...;
//   - errors as {"status": N, "message": "..."}; 403 "Missing or invalid
//     credentials." for unknown tokens, 403 for missing scopes, 404 when the
//     scope is held only for other resources;
//   - GET /user always identifies the owner (name, admin, groups) and adds
//     scopes, token_id and session_id;
//   - server start 201/202 and 400 when running or pending, stop 204/202.
//
// Knobs inject failures (429/503 with Retry-After, dropped connections),
// make starts and stops stay pending, and count requests.
package hubapitest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/hubapi"
)

// Version is what GET /hub/api/ reports unless SetVersion changes it.
const Version = "5.5.1"

// Failure makes matching requests fail before they are handled.
type Failure struct {
	Method string // "" matches any method
	Path   string // API path without query relative to /hub/api, e.g. "/users"; "" matches any
	// Status is the answer's status code; 0 drops the connection instead
	// (a transport error for the client).
	Status     int
	RetryAfter string // Retry-After header value, e.g. "1" or an HTTP date
	Message    string // default: the status text
	Times      int    // how many matching requests fail; default 1, <0 forever
}

// Hub is a fake JupyterHub API server.
type Hub struct {
	t   testing.TB
	srv *httptest.Server

	mu            sync.Mutex
	version       string
	now           func() time.Time
	nextID        int
	users         map[string]*userRec
	groups        map[string]*groupRec
	tokens        map[string]*tokenRec
	failures      []*Failure
	startPending  bool
	stopPending   bool
	bareLists     bool
	defaultLimit  int
	maxLimit      int
	latency       time.Duration
	requests      map[string]int
	total         int
	inFlight      int
	maxInFlight   int
	namedServers  bool
	lastAuthValue string
}

type userRec struct {
	id   int
	user hubapi.User // Groups is derived from groups; Servers holds stopped servers too
}

type groupRec struct {
	id    int
	group hubapi.Group
}

type tokenRec struct {
	id      string
	owner   string
	scopes  []string // as given; expanded on use
	note    string
	created time.Time
	expires *time.Time
}

// New starts a fake Hub on loopback, closed when the test ends.
func New(t testing.TB) *Hub {
	t.Helper()
	h := &Hub{
		t:            t,
		version:      Version,
		now:          time.Now,
		users:        map[string]*userRec{},
		groups:       map[string]*groupRec{},
		tokens:       map[string]*tokenRec{},
		defaultLimit: 50,
		maxLimit:     200,
		requests:     map[string]int{},
		namedServers: true,
	}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

// URL returns the API root, ".../hub/api".
func (h *Hub) URL() string { return h.srv.URL + "/hub/api" }

// Client returns a hubapi client for this Hub with token. cfg may tune it:
// URL and Token are always set; HTTPClient, RetryBaseDelay (1ms) and
// RetryMaxDelay (2ms) default so that retries barely wait.
func (h *Hub) Client(token string, cfg ...hubapi.Config) *hubapi.Client {
	h.t.Helper()
	var c hubapi.Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.URL, c.Token = h.URL(), token
	if c.HTTPClient == nil {
		c.HTTPClient = h.srv.Client()
	}
	if c.RetryBaseDelay == 0 {
		c.RetryBaseDelay = time.Millisecond
	}
	if c.RetryMaxDelay == 0 {
		c.RetryMaxDelay = 2 * time.Millisecond
	}
	cl, err := hubapi.New(c)
	if err != nil {
		h.t.Fatalf("hubapitest: client: %v", err)
	}
	return cl
}

// SetVersion changes what GET /hub/api/ reports.
func (h *Hub) SetVersion(v string) { h.mu.Lock(); h.version = v; h.mu.Unlock() }

// SetClock sets the Hub's clock (server start times, activity checks).
func (h *Hub) SetClock(now func() time.Time) { h.mu.Lock(); h.now = now; h.mu.Unlock() }

// SetStartPending makes starts answer 202 and leave the server pending "spawn".
func (h *Hub) SetStartPending(on bool) { h.mu.Lock(); h.startPending = on; h.mu.Unlock() }

// SetStopPending makes stops answer 202 and leave the server pending "stop";
// FinishStop completes it.
func (h *Hub) SetStopPending(on bool) { h.mu.Lock(); h.stopPending = on; h.mu.Unlock() }

// SetBareLists makes list endpoints ignore the pagination Accept header and
// answer bare lists, like a Hub older than 2.0 or a proxy dropping the header.
func (h *Hub) SetBareLists(on bool) { h.mu.Lock(); h.bareLists = on; h.mu.Unlock() }

// SetPageLimits sets api_page_default_limit and api_page_max_limit (50, 200).
func (h *Hub) SetPageLimits(defaultLimit, maxLimit int) {
	h.mu.Lock()
	h.defaultLimit, h.maxLimit = defaultLimit, maxLimit
	h.mu.Unlock()
}

// SetLatency delays every answer, to observe concurrency.
func (h *Hub) SetLatency(d time.Duration) { h.mu.Lock(); h.latency = d; h.mu.Unlock() }

// SetNamedServers turns allow_named_servers on or off (default on).
func (h *Hub) SetNamedServers(on bool) { h.mu.Lock(); h.namedServers = on; h.mu.Unlock() }

// Fail queues a failure; failures are matched in the order they were added.
func (h *Hub) Fail(f Failure) {
	if f.Times == 0 {
		f.Times = 1
	}
	h.mu.Lock()
	h.failures = append(h.failures, &f)
	h.mu.Unlock()
}

// Requests counts requests by "METHOD /path" (API path, escaped, no query),
// e.g. Requests("GET /users"); failed and injected ones count too.
func (h *Hub) Requests(methodPath string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests[methodPath]
}

// TotalRequests counts all requests.
func (h *Hub) TotalRequests() int { h.mu.Lock(); defer h.mu.Unlock(); return h.total }

// MaxInFlight is the largest number of requests handled at once.
func (h *Hub) MaxInFlight() int { h.mu.Lock(); defer h.mu.Unlock(); return h.maxInFlight }

// LastAuthorization returns the Authorization header of the latest request,
// for tests that check how a client sends its token.
func (h *Hub) LastAuthorization() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastAuthValue
}

// AddUser adds or replaces a user. Groups in u are joined (created if
// needed); Servers are kept as given (Stopped ones show only with
// include_stopped_servers). Roles default to "user" (+ "admin").
func (h *Hub) AddUser(u hubapi.User) {
	h.mu.Lock()
	defer h.mu.Unlock()
	u.Kind = "user"
	if u.Roles == nil {
		u.Roles = []string{"user"}
		if u.Admin {
			u.Roles = []string{"admin", "user"}
		}
	}
	if u.Created == nil {
		t := h.now().UTC()
		u.Created = &t
	}
	u.Servers = maps.Clone(u.Servers)
	if u.Servers == nil {
		u.Servers = map[string]hubapi.Server{}
	}
	for name, s := range u.Servers {
		s.Name = name
		u.Servers[name] = s
	}
	groups := u.Groups
	u.Groups, u.Scopes, u.SessionID, u.TokenID = nil, nil, "", ""
	rec, ok := h.users[u.Name]
	if !ok {
		h.nextID++
		rec = &userRec{id: h.nextID}
		h.users[u.Name] = rec
	}
	rec.user = u
	for _, g := range groups {
		gr := h.groupLocked(g)
		if !slices.Contains(gr.group.Users, u.Name) {
			gr.group.Users = append(gr.group.Users, u.Name)
		}
	}
}

// RemoveUser deletes a user (and its group memberships).
func (h *Hub) RemoveUser(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.users, name)
	for _, g := range h.groups {
		g.group.Users = slices.DeleteFunc(g.group.Users, func(n string) bool { return n == name })
	}
}

// AddGroup adds or replaces a group with its members.
func (h *Hub) AddGroup(g hubapi.Group) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gr := h.groupLocked(g.Name)
	g.Kind = "group"
	g.Users = slices.Clone(g.Users)
	if g.Users == nil {
		g.Users = []string{}
	}
	if g.Roles == nil {
		g.Roles = []string{}
	}
	if g.Properties == nil {
		g.Properties = map[string]any{}
	}
	gr.group = g
}

func (h *Hub) groupLocked(name string) *groupRec {
	gr, ok := h.groups[name]
	if !ok {
		h.nextID++
		gr = &groupRec{id: h.nextID, group: hubapi.Group{
			Kind: "group", Name: name, Users: []string{}, Roles: []string{}, Properties: map[string]any{},
		}}
		h.groups[name] = gr
	}
	return gr
}

// AddToken registers token for owner with scopes. An owner that is not a
// user (now or later) is a service. Without scopes a user's token inherits
// the user's roles ("self", plus the admin role for admins) and a service's
// token has none. Like the Hub (scopes.get_scopes_for), a user's token
// always also holds read:users:name and read:users:groups for its owner.
// Unlike the Hub, scopes are not intersected with the owner's roles.
func (h *Hub) AddToken(token, owner string, scopes ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextID++
	h.tokens[token] = &tokenRec{
		id: "a" + strconv.Itoa(h.nextID), owner: owner, scopes: slices.Clone(scopes),
		note: "added by test", created: h.now().UTC(),
	}
}

// ExpireToken makes a token unknown to the Hub, as after expiry or revocation.
func (h *Hub) ExpireToken(token string) { h.mu.Lock(); delete(h.tokens, token); h.mu.Unlock() }

// User returns a copy of a user as stored (groups included).
func (h *Hub) User(name string) (hubapi.User, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rec, ok := h.users[name]
	if !ok {
		return hubapi.User{}, false
	}
	u := rec.user
	u.Groups = h.groupsOfLocked(name)
	u.Servers = maps.Clone(u.Servers)
	return u, true
}

// Group returns a copy of a group.
func (h *Hub) Group(name string) (hubapi.Group, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gr, ok := h.groups[name]
	if !ok {
		return hubapi.Group{}, false
	}
	g := gr.group
	g.Users = slices.Clone(g.Users)
	return g, true
}

// SetServer puts a server of a user in the given state.
func (h *Hub) SetServer(user string, s hubapi.Server) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rec, ok := h.users[user]
	if !ok {
		h.t.Errorf("hubapitest: SetServer: no user %q", user)
		return
	}
	rec.user.Servers[s.Name] = s
}

// FinishStop completes a pending stop.
func (h *Hub) FinishStop(user, server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec, ok := h.users[user]; ok {
		h.stopLocked(rec, server)
	}
}

// FinishStart makes a pending server ready.
func (h *Hub) FinishStart(user, server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec, ok := h.users[user]; ok {
		if s, ok := rec.user.Servers[server]; ok {
			s.Pending, s.Ready = "", true
			rec.user.Servers[server] = s
		}
	}
}

func (h *Hub) groupsOfLocked(user string) []string {
	var out []string
	for _, gr := range h.sortedGroupsLocked() {
		if slices.Contains(gr.group.Users, user) {
			out = append(out, gr.group.Name)
		}
	}
	if out == nil {
		out = []string{}
	}
	return out
}

func (h *Hub) sortedUsersLocked() []*userRec {
	out := slices.Collect(maps.Values(h.users))
	slices.SortFunc(out, func(a, b *userRec) int { return a.id - b.id })
	return out
}

func (h *Hub) sortedGroupsLocked() []*groupRec {
	out := slices.Collect(maps.Values(h.groups))
	slices.SortFunc(out, func(a, b *groupRec) int { return a.id - b.id })
	return out
}

// httpError is answered as the Hub's {"status", "message"}.
type httpError struct {
	status  int
	message string
}

func errorf(status int, format string, args ...any) *httpError {
	return &httpError{status: status, message: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *httpError) {
	msg := e.message
	if msg == "" {
		msg = http.StatusText(e.status)
	}
	writeJSON(w, e.status, map[string]any{"status": e.status, "message": msg})
}

func (h *Hub) serve(w http.ResponseWriter, r *http.Request) {
	const prefix = "/hub/api"
	esc := r.URL.EscapedPath()
	if !strings.HasPrefix(esc, prefix) {
		writeError(w, errorf(http.StatusNotFound, ""))
		return
	}
	apiPath := strings.TrimPrefix(esc, prefix)
	if apiPath == "" {
		apiPath = "/"
	}

	h.mu.Lock()
	h.total++
	h.requests[r.Method+" "+apiPath]++
	h.lastAuthValue = r.Header.Get("Authorization")
	h.inFlight++
	h.maxInFlight = max(h.maxInFlight, h.inFlight)
	latency := h.latency
	fail := h.takeFailureLocked(r.Method, apiPath)
	h.mu.Unlock()
	defer func() { h.mu.Lock(); h.inFlight--; h.mu.Unlock() }()

	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
	}
	if fail != nil {
		if fail.Status == 0 {
			panic(http.ErrAbortHandler) // drops the connection
		}
		if fail.RetryAfter != "" {
			w.Header().Set("Retry-After", fail.RetryAfter)
		}
		writeError(w, &httpError{status: fail.Status, message: fail.Message})
		return
	}

	segs := strings.Split(strings.Trim(apiPath, "/"), "/")
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			writeError(w, errorf(http.StatusBadRequest, "bad path"))
			return
		}
		segs[i] = u
	}
	h.route(w, r, segs)
}

func (h *Hub) takeFailureLocked(method, path string) *Failure {
	for i, f := range h.failures {
		if (f.Method == "" || f.Method == method) && (f.Path == "" || f.Path == path) {
			out := *f
			if f.Times > 0 {
				f.Times--
				if f.Times == 0 {
					h.failures = slices.Delete(h.failures, i, i+1)
				}
			}
			return &out
		}
	}
	return nil
}

func (h *Hub) route(w http.ResponseWriter, r *http.Request, segs []string) {
	m := r.Method
	n := len(segs)
	if n == 1 && segs[0] == "" && m == http.MethodGet {
		h.mu.Lock()
		v := h.version
		h.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"version": v})
		return
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	caller, herr := h.authLocked(r)
	var status int
	var body any
	switch {
	case herr != nil:
	case n == 1 && segs[0] == "user" && m == http.MethodGet:
		body, herr = h.whoamiLocked(caller)
	case n == 1 && segs[0] == "users" && m == http.MethodGet:
		body, herr = h.listUsersLocked(r, caller)
	case n == 2 && segs[0] == "users" && m == http.MethodGet:
		body, herr = h.getUserLocked(r, caller, segs[1])
	case n == 3 && segs[0] == "users" && segs[2] == "server" && m == http.MethodPost:
		status, herr = h.startLocked(r, caller, segs[1], "")
	case n == 4 && segs[0] == "users" && segs[2] == "servers" && m == http.MethodPost:
		status, herr = h.startLocked(r, caller, segs[1], segs[3])
	case n == 3 && segs[0] == "users" && segs[2] == "server" && m == http.MethodDelete:
		status, herr = h.stopHTTPLocked(r, caller, segs[1], "")
	case n == 4 && segs[0] == "users" && segs[2] == "servers" && m == http.MethodDelete:
		status, herr = h.stopHTTPLocked(r, caller, segs[1], segs[3])
	case n == 3 && segs[0] == "users" && segs[2] == "tokens" && m == http.MethodPost:
		status = http.StatusCreated
		body, herr = h.createTokenLocked(r, caller, segs[1])
	case n == 3 && segs[0] == "users" && segs[2] == "activity" && m == http.MethodPost:
		herr = h.activityLocked(r, caller, segs[1])
	case n == 1 && segs[0] == "groups" && m == http.MethodGet:
		body, herr = h.listGroupsLocked(r, caller)
	case n == 2 && segs[0] == "groups" && m == http.MethodGet:
		body, herr = h.getGroupLocked(caller, segs[1])
	case n == 3 && segs[0] == "groups" && segs[2] == "users" && m == http.MethodPost:
		body, herr = h.addMembersLocked(r, caller, segs[1])
	default:
		herr = errorf(http.StatusNotFound, "")
	}
	if herr != nil {
		writeError(w, herr)
		return
	}
	if body == nil {
		if status == 0 {
			status = http.StatusOK
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	writeJSON(w, status, body)
}

// caller is the owner of the request's token with expanded scopes.
type caller struct {
	tokenID string
	name    string
	service bool
	scopes  []string
}

func (h *Hub) authLocked(r *http.Request) (*caller, *httpError) {
	tok := ""
	if v := r.Header.Get("Authorization"); v != "" {
		scheme, rest, _ := strings.Cut(v, " ")
		if strings.EqualFold(scheme, "token") || strings.EqualFold(scheme, "bearer") {
			tok = strings.TrimSpace(rest)
		}
	}
	if tok == "" {
		tok = r.URL.Query().Get("token")
	}
	rec, ok := h.tokens[tok]
	if tok == "" || !ok || (rec.expires != nil && !h.now().Before(*rec.expires)) {
		return nil, errorf(http.StatusForbidden, "Missing or invalid credentials.")
	}
	c := &caller{tokenID: rec.id, name: rec.owner}
	raw := rec.scopes
	u, isUser := h.users[rec.owner]
	c.service = !isUser
	if len(raw) == 0 && isUser {
		raw = []string{"self"}
		if u.user.Admin {
			raw = append(raw, adminScopes...)
		}
	}
	user := ""
	if isUser {
		user = rec.owner
		raw = append(slices.Clone(raw), identifyScopes(user)...)
	}
	c.scopes = expandScopes(raw, user)
	return c, nil
}

func (h *Hub) userTarget(name string) target {
	return target{kind: "user", user: name, groups: h.groupsOfLocked(name)}
}

// needScope mirrors jupyterhub.scopes.needs_scope: any of bases on t, 404
// when held only for other resources, 403 otherwise.
func needScope(c *caller, t target, bases ...string) *httpError {
	for _, b := range bases {
		if grants(c.scopes, b, t) {
			return nil
		}
	}
	if t.kind != "" {
		for _, b := range bases {
			if holdsAny(c.scopes, b) {
				return errorf(http.StatusNotFound, "No access to resources or resources not found")
			}
		}
	}
	return errorf(http.StatusForbidden, "Action is not authorized with current scopes; requires any of [%s]",
		strings.Join(bases, ", "))
}

func isoformat(t *time.Time) any {
	if t == nil {
		return nil
	}
	u := t.UTC()
	if u.Nanosecond()/1000 == 0 {
		return u.Format("2006-01-02T15:04:05") + "Z"
	}
	return u.Format("2006-01-02T15:04:05.000000") + "Z"
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func serverURL(user, server string) string {
	u := "/user/" + url.PathEscape(user) + "/"
	if server != "" {
		u += url.PathEscape(server) + "/"
	}
	return u
}

func progressURL(user, server string) string {
	if server == "" {
		return "/hub/api/users/" + url.PathEscape(user) + "/server/progress"
	}
	return "/hub/api/users/" + url.PathEscape(user) + "/servers/" + url.PathEscape(server) + "/progress"
}

func (h *Hub) serverModel(c *caller, user string, s hubapi.Server, t target) map[string]any {
	m := map[string]any{
		"name":              s.Name,
		"full_name":         user + "/" + s.Name,
		"last_activity":     isoformat(s.LastActivity),
		"started":           isoformat(s.Started),
		"pending":           nullable(s.Pending),
		"ready":             s.Ready,
		"stopped":           s.Stopped,
		"url":               serverURL(user, s.Name),
		"user_options":      orEmpty(s.UserOptions),
		"progress_url":      progressURL(user, s.Name),
		"full_url":          nil,
		"full_progress_url": nil,
	}
	if grants(c.scopes, "admin:server_state", t) {
		m["state"] = orEmpty(s.State)
	}
	return m
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// userModel mirrors APIHandler.user_model: nil when nothing is readable.
func (h *Hub) userModel(c *caller, rec *userRec, includeStopped bool, extra []string) map[string]any {
	u := rec.user
	t := h.userTarget(u.Name)
	def, hasDef := u.Servers[""]
	running := hasDef && def.Ready && !def.Stopped
	full := map[string]any{
		"kind":          "user",
		"name":          u.Name,
		"admin":         u.Admin,
		"roles":         orEmptyList(u.Roles),
		"groups":        t.groups,
		"server":        nil,
		"pending":       nil,
		"created":       isoformat(u.Created),
		"last_activity": isoformat(u.LastActivity),
		"auth_state":    nil,
	}
	if running {
		full["server"] = serverURL(u.Name, "")
	}
	access := map[string][]string{
		"read:users":          {"kind", "name", "admin", "roles", "groups", "server", "pending", "created", "last_activity"},
		"read:users:name":     {"kind", "name", "admin"},
		"read:users:groups":   {"kind", "name", "groups"},
		"read:users:activity": {"kind", "name", "last_activity"},
		"read:servers":        {"kind", "name", "servers"},
		"read:roles:users":    {"kind", "name", "roles", "admin"},
		"admin:auth_state":    {"kind", "name", "auth_state"},
	}
	scopes := c.scopes
	if extra != nil {
		scopes = append(slices.Clone(scopes), extra...)
	}
	allowed := map[string]bool{}
	for scope, keys := range access {
		if grants(scopes, scope, t) {
			for _, k := range keys {
				allowed[k] = true
			}
		}
	}
	if len(allowed) == 0 {
		return nil
	}
	m := map[string]any{}
	for k := range allowed {
		if v, ok := full[k]; ok {
			m[k] = v
		}
	}
	if hasDef && allowed["pending"] {
		m["pending"] = nullable(def.Pending)
	}
	servers := map[string]any{}
	for _, name := range slices.Sorted(maps.Keys(u.Servers)) {
		s := u.Servers[name]
		st := target{kind: "server", user: u.Name, server: name, groups: t.groups}
		if (!s.Stopped || includeStopped) && grants(scopes, "read:servers", st) {
			servers[name] = h.serverModel(c, u.Name, s, st)
		}
	}
	if allowed["servers"] || len(servers) > 0 {
		m["servers"] = servers
	}
	return m
}

func orEmptyList(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (h *Hub) whoamiLocked(c *caller) (any, *httpError) {
	var m map[string]any
	if c.service {
		m = map[string]any{"kind": "service", "name": c.name, "admin": false}
		if grants(c.scopes, "read:roles:services", target{}) || grants(c.scopes, "read:services", target{}) {
			m["roles"] = []string{}
		}
	} else {
		// the Hub adds the identify scopes so any token can read its owner's name and groups
		identify := []string{"read:users:name!user=" + c.name, "read:users:groups!user=" + c.name}
		m = h.userModel(c, h.users[c.name], false, identify)
	}
	m["token_id"] = c.tokenID
	m["session_id"] = nil
	m["scopes"] = c.scopes
	return m, nil
}

func (h *Hub) paginationLocked(r *http.Request) (offset, limit int, paged bool, herr *httpError) {
	paged = !h.bareLists && acceptsPagination(r)
	limit = h.defaultLimit
	if !paged {
		limit = h.maxLimit
	}
	q := r.URL.Query()
	var err error
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil {
			return 0, 0, false, errorf(http.StatusBadRequest, "Invalid argument type, offset and limit must be integers")
		}
		offset = abs(offset)
	}
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil {
			return 0, 0, false, errorf(http.StatusBadRequest, "Invalid argument type, offset and limit must be integers")
		}
		limit = abs(limit)
	}
	limit = min(max(limit, 1), h.maxLimit)
	return offset, limit, paged, nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func acceptsPagination(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if strings.EqualFold(strings.TrimSpace(part), hubapi.PaginationMediaType) {
			return true
		}
	}
	return false
}

func paginatedModel(r *http.Request, items []any, offset, limit, total int) map[string]any {
	p := map[string]any{"offset": offset, "limit": limit, "total": total, "next": nil}
	if next := offset + limit; next < total {
		q := r.URL.Query()
		q.Set("offset", strconv.Itoa(next))
		q.Set("limit", strconv.Itoa(limit))
		u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawQuery: q.Encode()}
		p["next"] = map[string]any{"offset": next, "limit": limit, "url": u.String()}
	}
	return map[string]any{"items": items, "_pagination": p}
}

func (h *Hub) listUsersLocked(r *http.Request, c *caller) (any, *httpError) {
	if !holdsAny(c.scopes, "list:users") {
		return nil, needScope(c, target{}, "list:users")
	}
	q := r.URL.Query()
	state := q.Get("state")
	includeStopped := !slices.Contains([]string{"", "0", "false"}, strings.ToLower(q.Get("include_stopped_servers")))
	sortKey := q.Get("sort")
	if sortKey == "" {
		sortKey = "id"
	}
	desc := strings.HasPrefix(sortKey, "-")
	key := strings.TrimPrefix(sortKey, "-")
	if key != "id" && key != "name" && key != "last_activity" {
		return nil, errorf(http.StatusBadRequest, "sort must be 'id', 'name', or 'last_activity', not '%s'", sortKey)
	}
	offset, limit, paged, herr := h.paginationLocked(r)
	if herr != nil {
		return nil, herr
	}

	var matched []*userRec
	for _, rec := range h.sortedUsersLocked() {
		active := false
		for _, s := range rec.user.Servers {
			if !s.Stopped {
				active = true
			}
		}
		switch state {
		case "":
		case "active", "ready":
			if !active {
				continue
			}
		case "inactive":
			if active {
				continue
			}
		default:
			return nil, errorf(http.StatusBadRequest, "Unrecognized state filter: '%s'", state)
		}
		if !grants(c.scopes, "list:users", h.userTarget(rec.user.Name)) {
			continue
		}
		matched = append(matched, rec)
	}
	slices.SortStableFunc(matched, func(a, b *userRec) int {
		var d int
		switch key {
		case "id":
			d = a.id - b.id
		case "name":
			d = strings.Compare(a.user.Name, b.user.Name)
		case "last_activity":
			d = compareTimes(a.user.LastActivity, b.user.LastActivity)
		}
		if desc {
			d = -d
		}
		return d
	})
	total := len(matched)
	page := matched[min(offset, total):min(offset+limit, total)]
	items := []any{}
	for _, rec := range page {
		// state=ready is filtered after paging, as in the Hub
		if state == "ready" && !hasReady(rec.user) {
			continue
		}
		if m := h.userModel(c, rec, includeStopped, nil); m != nil {
			items = append(items, m)
		}
	}
	if paged {
		return paginatedModel(r, items, offset, limit, total), nil
	}
	return items, nil
}

func compareTimes(a, b *time.Time) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	return a.Compare(*b)
}

func hasReady(u hubapi.User) bool {
	for _, s := range u.Servers {
		if s.Ready && !s.Stopped {
			return true
		}
	}
	return false
}

func (h *Hub) getUserLocked(r *http.Request, c *caller, name string) (any, *httpError) {
	t := h.userTarget(name)
	if herr := needScope(c, t, "read:users", "read:users:name", "read:servers", "read:users:groups",
		"read:users:activity", "read:roles:users"); herr != nil {
		return nil, herr
	}
	rec, ok := h.users[name]
	if !ok {
		return nil, errorf(http.StatusNotFound, "")
	}
	q := r.URL.Query().Get("include_stopped_servers")
	return h.userModel(c, rec, !slices.Contains([]string{"", "0", "false"}, strings.ToLower(q)), nil), nil
}

func logName(user, server string) string {
	if server == "" {
		return user
	}
	return user + ":" + server
}

func (h *Hub) startLocked(r *http.Request, c *caller, user, server string) (int, *httpError) {
	t := target{kind: "server", user: user, server: server, groups: h.groupsOfLocked(user)}
	if herr := needScope(c, t, "servers"); herr != nil {
		return 0, herr
	}
	rec, ok := h.users[user]
	if !ok {
		return 0, errorf(http.StatusNotFound, "")
	}
	if server != "" && !h.namedServers {
		return 0, errorf(http.StatusBadRequest, "Named servers are not enabled.")
	}
	s, exists := rec.user.Servers[server]
	if exists && !s.Stopped {
		switch {
		case s.Pending == "spawn":
			return http.StatusAccepted, nil
		case s.Pending != "":
			return 0, errorf(http.StatusBadRequest, "%s is pending %s", logName(user, server), s.Pending)
		case s.Ready:
			return 0, errorf(http.StatusBadRequest, "%s is already running", logName(user, server))
		}
	}
	var options map[string]any
	if err := decodeBody(r, &options); err != nil {
		return 0, err
	}
	now := h.now().UTC()
	s = hubapi.Server{
		Name: server, Ready: true, Started: &now, LastActivity: &now, UserOptions: options,
		State: map[string]any{"pod_name": podName(user, server), "namespace": "jhub"},
	}
	status := http.StatusCreated
	if h.startPending {
		s.Ready, s.Pending = false, "spawn"
		status = http.StatusAccepted
	}
	rec.user.Servers[server] = s
	return status, nil
}

func podName(user, server string) string {
	if server == "" {
		return "jupyter-" + user
	}
	return "jupyter-" + user + "--" + server
}

func decodeBody(r *http.Request, v any) *httpError {
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return errorf(http.StatusBadRequest, "Invalid JSON in body of request")
	}
	return nil
}

func (h *Hub) stopHTTPLocked(r *http.Request, c *caller, user, server string) (int, *httpError) {
	t := target{kind: "server", user: user, server: server, groups: h.groupsOfLocked(user)}
	if herr := needScope(c, t, "delete:servers"); herr != nil {
		return 0, herr
	}
	rec, ok := h.users[user]
	if !ok {
		return 0, errorf(http.StatusNotFound, "")
	}
	var body struct {
		Remove bool `json:"remove"`
	}
	if err := decodeBody(r, &body); err != nil {
		return 0, err
	}
	if server != "" {
		if !h.namedServers {
			return 0, errorf(http.StatusBadRequest, "Named servers are not enabled.")
		}
		if _, ok := rec.user.Servers[server]; !ok {
			return 0, errorf(http.StatusNotFound, "%s has no server named '%s'", user, server)
		}
	} else if body.Remove {
		return 0, errorf(http.StatusBadRequest, "Cannot delete the default server")
	}
	s, ok := rec.user.Servers[server]
	if !ok || s.Stopped {
		if body.Remove {
			delete(rec.user.Servers, server)
		}
		return http.StatusNoContent, nil
	}
	if s.Pending == "stop" || h.stopPending {
		s.Pending, s.Ready = "stop", false
		rec.user.Servers[server] = s
		return http.StatusAccepted, nil
	}
	h.stopLocked(rec, server)
	if body.Remove {
		delete(rec.user.Servers, server)
	}
	return http.StatusNoContent, nil
}

// stopLocked stops a server: the default one disappears from the model,
// a named one stays as stopped (shown with include_stopped_servers).
func (h *Hub) stopLocked(rec *userRec, server string) {
	if server == "" {
		delete(rec.user.Servers, server)
		return
	}
	s := rec.user.Servers[server]
	s.Ready, s.Pending, s.Stopped, s.Started = false, "", true, nil
	rec.user.Servers[server] = s
}

func (h *Hub) createTokenLocked(r *http.Request, c *caller, user string) (any, *httpError) {
	var body struct {
		ExpiresIn *int     `json:"expires_in"`
		Note      string   `json:"note"`
		Scopes    []string `json:"scopes"`
	}
	if err := decodeBody(r, &body); err != nil {
		return nil, err
	}
	kind := "User"
	if c.service {
		kind = "Service"
	}
	if _, ok := h.users[user]; !ok || !grants(c.scopes, "tokens", h.userTarget(user)) {
		return nil, errorf(http.StatusForbidden, "%s %s not found or no permissions to generate tokens", kind, user)
	}
	note := body.Note
	if note == "" {
		note = "Requested via api"
		if c.service || c.name != user {
			note += fmt.Sprintf(" by %s %s", strings.ToLower(kind), c.name)
		}
	}
	h.nextID++
	secret := fmt.Sprintf("fake-%d-%d", h.nextID, h.now().UnixNano())
	now := h.now().UTC()
	rec := &tokenRec{id: "a" + strconv.Itoa(h.nextID), owner: user, scopes: body.Scopes, note: note, created: now}
	if body.ExpiresIn != nil && *body.ExpiresIn > 0 {
		e := now.Add(time.Duration(*body.ExpiresIn) * time.Second)
		rec.expires = &e
	}
	h.tokens[secret] = rec
	raw := rec.scopes
	if len(raw) == 0 {
		raw = []string{"self"}
	}
	raw = append(slices.Clone(raw), identifyScopes(user)...)
	return map[string]any{
		"user": user, "id": rec.id, "kind": "api_token", "roles": []string{},
		"scopes": expandScopes(raw, user), "created": isoformat(&now), "last_activity": nil,
		"expires_at": isoformat(rec.expires), "note": note, "session_id": nil,
		"oauth_client": "JupyterHub", "token": secret,
	}, nil
}

func (h *Hub) activityLocked(r *http.Request, c *caller, user string) *httpError {
	if herr := needScope(c, h.userTarget(user), "users:activity"); herr != nil {
		return herr
	}
	rec, ok := h.users[user]
	if !ok {
		return errorf(http.StatusNotFound, "No such user: '%s'", user)
	}
	var body struct {
		LastActivity string `json:"last_activity"`
		Servers      map[string]struct {
			LastActivity string `json:"last_activity"`
		} `json:"servers"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if body.LastActivity == "" && len(body.Servers) == 0 {
		return errorf(http.StatusBadRequest, "body must contain at least one of `last_activity` or `servers`")
	}
	parse := func(s string) (time.Time, *httpError) {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, errorf(http.StatusBadRequest, "Not a valid timestamp: '%s'", s)
		}
		if t.Sub(h.now()) > 59*time.Minute {
			return time.Time{}, errorf(http.StatusBadRequest,
				"Rejecting activity from more than an hour in the future: %s", isoformat(&t))
		}
		return t.UTC(), nil
	}
	servers := map[string]time.Time{}
	for name, si := range body.Servers {
		if _, ok := rec.user.Servers[name]; !ok {
			return errorf(http.StatusBadRequest, "No such server '%s' for user %s", name, user)
		}
		t, herr := parse(si.LastActivity)
		if herr != nil {
			return herr
		}
		servers[name] = t
	}
	if body.LastActivity != "" {
		t, herr := parse(body.LastActivity)
		if herr != nil {
			return herr
		}
		if rec.user.LastActivity == nil || t.After(*rec.user.LastActivity) {
			rec.user.LastActivity = &t
		}
	}
	for name, t := range servers {
		s := rec.user.Servers[name]
		if s.LastActivity == nil || t.After(*s.LastActivity) {
			s.LastActivity = &t
			rec.user.Servers[name] = s
		}
	}
	return nil
}

func (h *Hub) groupModel(c *caller, g hubapi.Group) map[string]any {
	full := map[string]any{
		"kind": "group", "name": g.Name, "roles": orEmptyList(g.Roles),
		"users": orEmptyList(g.Users), "properties": orEmpty(g.Properties),
	}
	access := map[string][]string{
		"read:groups":       {"kind", "name", "properties", "users"},
		"read:groups:name":  {"kind", "name"},
		"read:roles:groups": {"kind", "name", "roles"},
	}
	t := target{kind: "group", group: g.Name}
	m := map[string]any{}
	for scope, keys := range access {
		if grants(c.scopes, scope, t) {
			for _, k := range keys {
				m[k] = full[k]
			}
		}
	}
	return m
}

func (h *Hub) listGroupsLocked(r *http.Request, c *caller) (any, *httpError) {
	if !holdsAny(c.scopes, "list:groups") {
		return nil, needScope(c, target{}, "list:groups")
	}
	offset, limit, paged, herr := h.paginationLocked(r)
	if herr != nil {
		return nil, herr
	}
	var matched []*groupRec
	for _, gr := range h.sortedGroupsLocked() {
		if grants(c.scopes, "list:groups", target{kind: "group", group: gr.group.Name}) {
			matched = append(matched, gr)
		}
	}
	total := len(matched)
	items := []any{}
	for _, gr := range matched[min(offset, total):min(offset+limit, total)] {
		items = append(items, h.groupModel(c, gr.group))
	}
	if paged {
		return paginatedModel(r, items, offset, limit, total), nil
	}
	return items, nil
}

func (h *Hub) getGroupLocked(c *caller, name string) (any, *httpError) {
	t := target{kind: "group", group: name}
	if herr := needScope(c, t, "read:groups", "read:groups:name", "read:roles:groups"); herr != nil {
		return nil, herr
	}
	gr, ok := h.groups[name]
	if !ok {
		return nil, errorf(http.StatusNotFound, "No such group: %s", name)
	}
	return h.groupModel(c, gr.group), nil
}

func (h *Hub) addMembersLocked(r *http.Request, c *caller, name string) (any, *httpError) {
	if herr := needScope(c, target{kind: "group", group: name}, "groups"); herr != nil {
		return nil, herr
	}
	gr, ok := h.groups[name]
	if !ok {
		return nil, errorf(http.StatusNotFound, "No such group: %s", name)
	}
	var body struct {
		Users *[]string `json:"users"`
	}
	if err := decodeBody(r, &body); err != nil {
		return nil, err
	}
	if body.Users == nil {
		return nil, errorf(http.StatusBadRequest, "Must specify users to add")
	}
	for _, u := range *body.Users {
		if _, ok := h.users[u]; !ok {
			return nil, errorf(http.StatusBadRequest, "No such user: %s", u)
		}
	}
	for _, u := range *body.Users {
		if !slices.Contains(gr.group.Users, u) {
			gr.group.Users = append(gr.group.Users, u)
		}
	}
	return h.groupModel(c, gr.group), nil
}
