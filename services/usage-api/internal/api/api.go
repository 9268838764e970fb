// Package api serves the usage API v1 under the Hub service prefix: me, users/{name}, users (admin), cluster,
// gpu-hours (every user's rolling windows, for gpu-quota), gpu-hours/decayed (fair-share usage, for gpu-quota's
// waitlist), servers (every running GPU server's telemetry, for gpu-culler) and waitlist/state (gpu-quota's
// waitlist, kept in the ledger's database; the one thing written here). Live numbers come from memory (the
// latest view and the history); GPU-hours for today, 7 d and 30 d from the ledger's in-memory window cache;
// custom windows from the store; a user's budget from gpu-quota (cached). The OpenAPI file
// services/usage-api/openapi.yaml documents the shapes.
package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// GPUHours is what the API needs of the ledger.
type GPUHours interface {
	// Available is nil while GPU-hours can be served; otherwise its message says why not, in words for the
	// user (e.g. "the ledger database cannot be reached (retrying every 30 s)").
	Available() error
	UserWindows(user string) ledger.Windows
	Hours(ctx context.Context, q ledger.Query) ([]ledger.Row, error)
	// Rolling is every user's allocated GPU-hours by class in rolling windows ending at asOf
	// (ledger.Ledger.Rolling).
	Rolling(ctx context.Context, windows []time.Duration, asOf time.Time) (map[time.Duration]map[string]map[string]float64, error)
	// Decayed is every user's allocated GPU-hours by class, each hour weighted by 2^(-age/halfLife), over the
	// horizon (ledger.Ledger.Decayed).
	Decayed(ctx context.Context, halfLife, horizon time.Duration, asOf time.Time) (map[string]map[string]float64, error)
}

// Budget is a user's quota as gpu-quota answers it (budget.Client): the quota object, or
// {"status":"unavailable","reason":…}; it returns within a short timeout.
type Budget interface {
	Get(ctx context.Context, user string) json.RawMessage
}

// Options configure the handler.
type Options struct {
	Prefix string // e.g. /services/gpu-usage/
	State  *usage.State
	Ledger GPUHours
	// Auth authenticates requests and puts a *hubauth.Identity in the context (hubauth's Middleware).
	Auth func(http.Handler) http.Handler
	// Budget answers the budget of me and users/{name}; nil: no quota service configured (budget is null).
	Budget Budget
	// ReaderServices are the Hub services that may read every user's GPU-hours (gpu-hours, gpu-hours/decayed),
	// every server's telemetry (servers) and every user's right-size advice and savings (users/{name}/right-size,
	// right-size), besides admins.
	ReaderServices []string
	// AdviceReaders are the Hub services that may read any user's right-size advice (users/{name}/right-size)
	// and nothing else of other users: gpu-profiles marks the spawn form's recommended choice with it.
	AdviceReaders []string
	// Profiles reads right-size profiles; nil leaves the right-size routes out.
	Profiles Profiles
	// Waitlist keeps gpu-quota's waitlist state; nil leaves api/v1/waitlist/state out.
	Waitlist Waitlist
	// WaitlistServices are the Hub services that may write the waitlist state; they and admins may read it.
	WaitlistServices []string
	Now              func() time.Time
	Logger           *slog.Logger
}

type handler struct {
	opts  Options
	zones sync.Map // IANA name -> *time.Location, only names that loaded
	tz    tzCache
	// servers is the encoded answer of servers for the latest view it was asked of: every culler replica
	// polls it, and the view changes once a sampling interval.
	servers atomic.Pointer[serversBody]
}

// New returns the API handler; it expects full paths (prefix included).
func New(opts Options) http.Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Prefix = server.NormalizePrefix(opts.Prefix)
	h := &handler{opts: opts}
	mux := http.NewServeMux()
	p := opts.Prefix + "api/v1/"
	mux.HandleFunc("GET "+p+"me", h.me)
	mux.HandleFunc("GET "+p+"users/{name}", h.user)
	mux.HandleFunc("GET "+p+"users", h.users)
	mux.HandleFunc("GET "+p+"cluster", h.cluster)
	mux.HandleFunc("GET "+p+"gpu-hours", h.rolling)
	mux.HandleFunc("GET "+p+"gpu-hours/decayed", h.decayed)
	mux.HandleFunc("GET "+p+"servers", h.serverList)
	if opts.Profiles != nil {
		mux.HandleFunc("GET "+p+"me/right-size", h.meRightSize)
		mux.HandleFunc("GET "+p+"users/{name}/right-size", h.userRightSize)
		mux.HandleFunc("GET "+p+"right-size", h.rightSizeSavings)
	}
	statePath := p + "waitlist/state"
	if opts.Waitlist != nil {
		mux.HandleFunc("GET "+statePath, h.getWaitlistState)
		mux.HandleFunc("PUT "+statePath, h.putWaitlistState)
	}
	mux.HandleFunc(opts.Prefix, func(w http.ResponseWriter, r *http.Request) {
		server.WriteError(w, http.StatusNotFound, "no such endpoint %s; see %sapi/v1/ in openapi.yaml", r.URL.Path, opts.Prefix)
	})
	authed := opts.Auth(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Everything is read-only but the waitlist state, which gpu-quota writes.
		writable := opts.Waitlist != nil && r.URL.Path == statePath
		allow := "GET, HEAD, OPTIONS"
		if writable {
			allow = "GET, HEAD, PUT, OPTIONS"
		}
		if r.Method == http.MethodOptions {
			// Same origin through the proxy: no CORS, but say what is allowed (and do it without a token, since
			// preflights carry none).
			w.Header().Set("Allow", allow)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && (r.Method != http.MethodPut || !writable) {
			w.Header().Set("Allow", allow)
			server.WriteError(w, http.StatusMethodNotAllowed, "this part of the usage API is read-only: use GET")
			return
		}
		authed.ServeHTTP(w, r)
	})
}

func (h *handler) me(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	if id.Kind != "user" {
		// A service has no usage of its own: refused like any request for data it may not read.
		server.WriteError(w, http.StatusForbidden, "me is for user tokens; a service reads api/v1/users/{name}")
		return
	}
	h.writeUser(w, r, id.Name, id.Groups)
}

func (h *handler) user(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	name := r.PathValue("name")
	if !id.CanReadUser(name) {
		server.WriteError(w, http.StatusForbidden, "you may read only your own usage; %q is another user's", name)
		return
	}
	v := h.opts.State.View()
	var groups []string
	if v != nil {
		hu, known := v.Hub.Users[name]
		if _, holding := v.Users[name]; !known && !holding && len(v.Hub.Users) > 0 && name != id.Name {
			server.WriteError(w, http.StatusNotFound, "no user %q in the Hub", name)
			return
		}
		groups = hu.Groups
	}
	h.writeUser(w, r, name, groups)
}

func (h *handler) writeUser(w http.ResponseWriter, r *http.Request, name string, groups []string) {
	q := newQueryParams(r.URL.RawQuery)
	loc, qerr := h.zone(q.Get("tz"))
	if qerr != nil {
		writeQueryError(w, qerr)
		return
	}
	a := userAnswer{UserResponse: contract.UserResponse{User: name, Groups: groups, Servers: []usage.Server{}, Notices: []usage.Notice{}}}
	asOf := h.opts.Now()
	if v := h.opts.State.View(); v != nil {
		if ns := v.Notices[name]; ns != nil {
			a.Notices = ns
		}
		asOf = v.SampledAt
		a.SampledAt, a.IntervalSeconds = &v.SampledAt, v.Interval.Seconds() // a view is immutable
		if hu, ok := v.Hub.Users[name]; ok {
			a.Groups = hu.Groups
		}
		if u := v.Users[name]; u != nil {
			a.Simulated, a.Stale, a.StaleReason, a.Share, a.Servers = u.Simulated, u.Stale, u.StaleReason, u.Share, u.Servers
		} else {
			a.Share.UsedGPUs = &noGPUs
		}
	}
	if a.Groups == nil {
		a.Groups = []string{}
	}
	history := q.Get("history")
	if history != "" && history != "true" && history != "false" {
		server.WriteError(w, http.StatusBadRequest, "history %q is not true or false (false leaves the history out)", param(history))
		return
	}
	var since time.Time
	if s := q.Get("since"); s != "" && history != "false" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			server.WriteError(w, http.StatusBadRequest, "since must be an RFC 3339 time, e.g. 2026-11-22T10:00:00Z")
			return
		}
		since = t
	}
	a.Hours, a.GPUHoursStatus, a.GPUHoursReason, qerr = h.gpuHours(r.Context(), q, name, loc, asOf)
	if qerr != nil {
		writeQueryError(w, qerr)
		return
	}
	if h.opts.Budget != nil {
		a.Budget = h.opts.Budget.Get(r.Context(), name)
	}
	h.writeUserJSON(w, &a, history != "false", since)
}

// gpuHours are a user's GPU-hours windows (custom when from or to is given) with their status: "ok", or
// "unavailable" with null windows and a reason while the ledger cannot answer; the live share is served either
// way. A custom window the ledger fails to answer while it is up is a 503 (qerr).
func (h *handler) gpuHours(ctx context.Context, q queryParams, name string, loc *time.Location, asOf time.Time) (hours hoursAnswer, status, reason string, qerr *queryError) {
	hours.Custom = q.Has("from") || q.Has("to")
	var from, to time.Time
	if hours.Custom {
		if from, to, qerr = h.window(q); qerr != nil {
			return hoursAnswer{}, "", "", qerr
		}
	}
	unavailable := func(why string) (hoursAnswer, string, string, *queryError) {
		h.tz.reset() // what the store said before the outage may have changed after it
		return hoursAnswer{Custom: hours.Custom}, "unavailable", "GPU-hours are unavailable: " + why + "; live numbers are current.", nil
	}
	if err := h.opts.Ledger.Available(); err != nil {
		return unavailable(err.Error())
	}
	win := h.opts.Ledger.UserWindows(name)
	if loc != time.UTC {
		today, err := h.todayIn(ctx, name, loc, win.Today, asOf)
		if err != nil {
			h.opts.Logger.Error("ledger query failed", "user", name, "tz", loc.String(), "err", err)
			return unavailable(fmt.Sprintf("the ledger database did not answer just now (retry in %d s)", retryAfterSeconds))
		}
		win.Today = today
	}
	hours.Available, hours.Windows = true, win
	if hours.Custom {
		if hours.CustomWindow, qerr = h.custom(ctx, name, from, to); qerr != nil {
			return hoursAnswer{}, "", "", qerr
		}
	}
	return hours, "ok", "", nil
}

// zone resolves the tz parameter: an IANA name ("" and "UTC" are UTC). The server's own zone ("Local") means
// nothing to a caller and is refused.
func (h *handler) zone(name string) (*time.Location, *queryError) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if l, ok := h.zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	bad := badRequest("tz %q is not an IANA time zone name; send one such as Europe/Berlin, America/New_York or UTC", param(name))
	if name == "Local" || len(name) > 64 {
		return nil, bad
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, bad
	}
	h.zones.Store(name, loc)
	return loc, nil
}

// todayIn returns the user's GPU-hours since local midnight in loc, as of the last sample. The ledger keeps
// "today" for UTC in memory (utcToday); the difference to local midnight is a run of completed hour buckets
// (between the two midnights, both at or before asOf's hour), summed from the store and cached per user, zone and
// hour. Local midnight is rounded down to its UTC hour bucket (for zones with half-hour offsets "today" starts up
// to 45 minutes early).
func (h *handler) todayIn(ctx context.Context, user string, loc *time.Location, utcToday ledger.Totals, asOf time.Time) (ledger.Totals, error) {
	hour := asOf.UTC().Truncate(time.Hour)
	y, m, d := hour.Date()
	utcStart := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	y, m, d = asOf.In(loc).Date()
	localStart := time.Date(y, m, d, 0, 0, 0, 0, loc).Truncate(time.Hour).UTC()
	if localStart.Equal(utcStart) {
		return utcToday, nil
	}
	lo, hi := localStart, utcStart
	if lo.After(hi) {
		lo, hi = hi, lo
	}
	key := tzKey{user: user, zone: loc.String(), lo: lo.Unix(), hi: hi.Unix()}
	diff, ok := h.tz.get(hour, key)
	if !ok {
		rows, err := h.opts.Ledger.Hours(ctx, ledger.Query{From: lo, To: hi, User: user})
		if err != nil {
			return ledger.Totals{}, err
		}
		for _, r := range rows {
			diff.Allocated += r.Allocated
			diff.Used += r.Used
			diff.UsedUnknown += r.UsedUnknown
		}
		h.tz.put(hour, key, diff)
	}
	if localStart.Before(utcStart) { // east of UTC: the local day began the day before
		return ledger.Totals{Allocated: utcToday.Allocated + diff.Allocated, Used: utcToday.Used + diff.Used,
			UsedUnknown: utcToday.UsedUnknown + diff.UsedUnknown}, nil
	}
	// West of UTC: the local day began after UTC midnight. Clamp rounding dust below zero.
	return ledger.Totals{Allocated: max(0, utcToday.Allocated-diff.Allocated), Used: max(0, utcToday.Used-diff.Used),
		UsedUnknown: max(0, utcToday.UsedUnknown-diff.UsedUnknown)}, nil
}

type tzKey struct {
	user, zone string
	lo, hi     int64
}

// tzCache holds the bucket sums of todayIn for the current hour; it starts afresh each hour (and when the
// ledger was unavailable), so late writes to past buckets are picked up within the hour.
type tzCache struct {
	mu   sync.Mutex
	hour time.Time
	m    map[tzKey]ledger.Totals
}

// maxTZEntries bounds the cache: a user polls in one or two zones.
const maxTZEntries = 100_000

func (c *tzCache) get(hour time.Time, k tzKey) (ledger.Totals, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hour.Equal(hour) {
		return ledger.Totals{}, false
	}
	t, ok := c.m[k]
	return t, ok
}

func (c *tzCache) put(hour time.Time, k tzKey, t ledger.Totals) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hour.Equal(hour) || len(c.m) >= maxTZEntries {
		c.hour, c.m = hour, map[tzKey]ledger.Totals{}
	}
	c.m[k] = t
}

// reset forgets every entry.
func (c *tzCache) reset() {
	c.mu.Lock()
	c.hour, c.m = time.Time{}, nil
	c.mu.Unlock()
}

// answerBuffers are the buffers me answers are written in: up to an hour of points is ~100 KB, which would
// otherwise be garbage at every panel poll (2,000 a second at 10,000 users) and make the collector run often.
var answerBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledAnswer bounds the buffers kept for reuse (an answer that grew past it is left to the collector).
const maxPooledAnswer = 1 << 20

// writeUserJSON writes a with the user's history after since (zero: the whole window; withHistory false:
// none) spliced in as the last member, encoded straight from the history: encoding/json would re-validate
// pre-encoded text, which costs more than encoding it.
func (h *handler) writeUserJSON(w http.ResponseWriter, a *userAnswer, withHistory bool, since time.Time) {
	a.History = nil // written from the history
	buf := answerBuffers.Get().(*[]byte)
	b, ok := appendUserJSON((*buf)[:0], a)
	if !ok {
		// Something appendUserJSON leaves to json.Marshal (or json.Marshal refuses, such as NaN): its
		// answer, or its error, as it always was.
		body, err := json.Marshal(a.contract())
		if err != nil {
			answerBuffers.Put(buf)
			server.WriteError(w, http.StatusInternalServerError, "encode answer: %v", err)
			return
		}
		b = append(b[:0], body...)
	}
	b = append(b[:len(b)-1], `,"history":`...) // reopen the object
	if withHistory {
		b = h.opts.State.History.AppendUserJSON(b, a.User, since)
	} else {
		b = append(b, "[]"...)
	}
	b = append(b, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	if cap(b) <= maxPooledAnswer {
		*buf = b
		answerBuffers.Put(buf)
	}
}

// queryError is an answer other than 200 for a query: 400 for the caller's mistakes, 503 when the ledger cannot
// answer now.
type queryError struct {
	status int
	msg    string
}

func (e *queryError) Error() string { return e.msg }

func badRequest(format string, args ...any) *queryError {
	return &queryError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// retryAfterSeconds is the Retry-After of a 503 from the ledger: about one sampling interval.
const retryAfterSeconds = 5

func writeQueryError(w http.ResponseWriter, err *queryError) {
	if err.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	}
	server.WriteError(w, err.status, "%s", err.msg)
}

// window parses a custom window. Buckets are whole UTC hours, so the window covers [hour(from),
// ceil-hour(to)); these effective bounds are returned, with to never past now (the current bucket holds what was
// recorded so far).
func (h *handler) window(q queryParams) (from, to time.Time, qerr *queryError) {
	now := h.opts.Now().UTC()
	to = now
	var err error
	if s := q.Get("to"); s != "" {
		if to, err = time.Parse(time.RFC3339, s); err != nil {
			return from, to, badRequest("to must be an RFC 3339 time, e.g. 2026-11-22T00:00:00Z")
		}
	}
	from = to.Add(-24 * time.Hour) // the documented default: 24 h before to
	if s := q.Get("from"); s != "" {
		if from, err = time.Parse(time.RFC3339, s); err != nil {
			return from, to, badRequest("from must be an RFC 3339 time, e.g. 2026-11-01T00:00:00Z")
		}
	}
	if !from.Before(to) {
		return from, to, badRequest("from must be before to")
	}
	// JSON times have four-digit years: a window reaching outside them could not be answered.
	if from.UTC().Year() < 1 || to.UTC().Year() > 9999 {
		return from, to, badRequest("from and to must lie between the years 0001 and 9999 (UTC)")
	}
	from, to = from.UTC().Truncate(time.Hour), ceilHour(to.UTC())
	if to.After(now) {
		to = now
	}
	if !from.Before(to) {
		to = from // the window starts after now: nothing recorded yet
	}
	return from, to, nil
}

// custom sums a custom window [from, to) (effective bounds from window) from the store.
func (h *handler) custom(ctx context.Context, name string, from, to time.Time) (*contract.Window, *queryError) {
	out := &contract.Window{From: &from, To: &to, ByClass: []contract.ClassHours{}}
	if !from.Before(to) {
		return out, nil
	}
	rows, err := h.opts.Ledger.Hours(ctx, ledger.Query{From: from, To: to, User: name})
	if err != nil {
		h.opts.Logger.Error("ledger query failed", "user", name, "err", err)
		return nil, &queryError{status: http.StatusServiceUnavailable,
			msg: fmt.Sprintf("the GPU-hours ledger could not answer this window just now; retry in %d s (live numbers are served without from/to)", retryAfterSeconds)}
	}
	for _, row := range rows {
		out.Allocated += row.Allocated
		out.Used += row.Used
		out.UsedUnknown += row.UsedUnknown
		out.ByClass = append(out.ByClass, contract.ClassHours{Kind: row.Kind, Class: row.Class, Allocated: row.Allocated, Used: row.Used, UsedUnknown: row.UsedUnknown})
	}
	return out, nil
}

// ceilHour rounds t up to the next whole hour (t itself when it is one).
func ceilHour(t time.Time) time.Time {
	if h := t.Truncate(time.Hour); !h.Equal(t) {
		return h.Add(time.Hour)
	}
	return t
}

func fromTotals(t ledger.Totals) *contract.Window {
	return &contract.Window{Allocated: t.Allocated, Used: t.Used, UsedUnknown: t.UsedUnknown}
}

const (
	defaultLimit = 200
	maxLimit     = 1000
	// maxOffset is far above any Hub's user count and keeps offset+limit from overflowing.
	maxOffset = 1_000_000_000
)

func (h *handler) users(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	if !id.IsAdmin() {
		server.WriteError(w, http.StatusForbidden, "listing users needs an admin; read your own usage at api/v1/me")
		return
	}
	offset, ok1 := intParam(r, "offset", 0, 0, maxOffset)
	limit, ok2 := intParam(r, "limit", defaultLimit, 1, math.MaxInt32)
	switch {
	case !ok1:
		server.WriteError(w, http.StatusBadRequest, "offset %q is not an integer from 0 to %d", param(r.URL.Query().Get("offset")), maxOffset)
		return
	case !ok2:
		server.WriteError(w, http.StatusBadRequest, "limit %q is not a positive integer (values above %d are reduced to %d)", param(r.URL.Query().Get("limit")), maxLimit, maxLimit)
		return
	}
	// Like the Hub, a larger limit is reduced rather than refused; bounded offset and limit cannot overflow.
	limit = min(limit, maxLimit)
	v := h.opts.State.View()
	var names []string
	if v != nil {
		names = make([]string, 0, len(v.Hub.Users)+len(v.Users))
		for n := range v.Hub.Users {
			names = append(names, n)
		}
		for n := range v.Users {
			if _, ok := v.Hub.Users[n]; !ok {
				names = append(names, n)
			}
		}
		sort.Strings(names)
	}
	resp := contract.UsersResponse{Items: []contract.UserSummary{}, Pagination: contract.Pagination{Offset: offset, Limit: limit, Total: len(names)}}
	ledgerErr := h.opts.Ledger.Available()
	end := min(offset+limit, len(names))
	for i := min(offset, len(names)); i < end; i++ {
		n := names[i]
		s := contract.UserSummary{Name: n, Groups: v.Hub.Users[n].Groups, UsedGPUs: new(float64)}
		if s.Groups == nil {
			s.Groups = []string{}
		}
		if u := v.Users[n]; u != nil {
			s.Servers, s.AllocatedGPUs, s.UsedGPUs, s.Simulated, s.Stale = len(u.Servers), u.Share.AllocatedGPUs, u.Share.UsedGPUs, u.Simulated, u.Stale
			s.StaleReason = u.StaleReason
		}
		if ledgerErr != nil {
			s.GPUHours = map[string]*contract.Window{"today": nil, "7d": nil, "30d": nil}
			s.GPUHoursStatus, s.GPUHoursReason = "unavailable", "GPU-hours are unavailable: "+ledgerErr.Error()+"; live numbers are current."
		} else {
			win := h.opts.Ledger.UserWindows(n)
			s.GPUHours = map[string]*contract.Window{"today": fromTotals(win.Today), "7d": fromTotals(win.Days7), "30d": fromTotals(win.Days30)}
			s.GPUHoursStatus = "ok"
		}
		resp.Items = append(resp.Items, s)
	}
	if end < len(names) {
		resp.Pagination.Next = &contract.NextPage{Offset: end, Limit: limit,
			URL: h.opts.Prefix + "api/v1/users?offset=" + strconv.Itoa(end) + "&limit=" + strconv.Itoa(limit)}
	}
	server.WriteJSON(w, http.StatusOK, resp)
}

// intParam reads an integer query parameter in [lo, hi]; def when absent; ok is false when it is not one.
func intParam(r *http.Request, name string, def, lo, hi int) (n int, ok bool) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, true
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= lo && n <= hi
}

// param cuts a query value short for error messages (a caller may send a huge value).
func param(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

func (h *handler) cluster(w http.ResponseWriter, r *http.Request) {
	if _, ok := hubauth.FromContext(r.Context()); !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	v := h.opts.State.View()
	if v == nil {
		server.WriteError(w, http.StatusServiceUnavailable, "no sample yet; retry after one sampling interval")
		return
	}
	resp := contract.ClusterResponse{Cluster: v.Cluster, Users: len(v.Users)}
	if resp.Classes == nil {
		resp.Classes = []usage.ClassStats{}
	}
	if resp.AgentStatus == nil {
		resp.AgentStatus = []usage.AgentStatus{}
	}
	server.WriteJSON(w, http.StatusOK, resp)
}

// maxWindow is the longest rolling window, as in gpu-quota's policy.
const maxWindow = 366 * 24 * time.Hour

// rolling answers every user's allocated GPU-hours by class in rolling windows [asOf-w, asOf] (gpu-quota's
// budgets): admins and the Hub services of ReaderServices.
func (h *handler) rolling(w http.ResponseWriter, r *http.Request) {
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
	raw := r.URL.Query().Get("windows")
	if raw == "" {
		server.WriteError(w, http.StatusBadRequest, "windows is required: a comma-separated list of whole-hour windows such as 24h,7d,30d")
		return
	}
	var names []string
	var durations []time.Duration
	for n := range strings.SplitSeq(raw, ",") {
		n = strings.TrimSpace(n)
		if slices.Contains(names, n) {
			continue
		}
		d, err := policy.ParseDuration(n)
		switch {
		case err != nil:
			server.WriteError(w, http.StatusBadRequest, "window %q: %v", param(n), err)
			return
		case d < time.Hour || d > maxWindow || d%time.Hour != 0:
			server.WriteError(w, http.StatusBadRequest, "window %q: whole hours from 1h to 366d (the ledger counts by the hour)", param(n))
			return
		}
		names, durations = append(names, n), append(durations, d)
	}
	if len(names) > ledger.MaxRollingWindows {
		server.WriteError(w, http.StatusBadRequest, "at most %d windows at once", ledger.MaxRollingWindows)
		return
	}
	if err := h.opts.Ledger.Available(); err != nil {
		writeQueryError(w, &queryError{status: http.StatusServiceUnavailable, msg: "GPU-hours are unavailable: " + err.Error()})
		return
	}
	asOf := h.opts.Now().UTC()
	got, err := h.opts.Ledger.Rolling(r.Context(), durations, asOf)
	if err != nil {
		h.opts.Logger.Error("ledger rolling windows failed", "windows", raw, "err", err)
		writeQueryError(w, &queryError{status: http.StatusServiceUnavailable,
			msg: fmt.Sprintf("the GPU-hours ledger could not answer just now; retry in %d s", retryAfterSeconds)})
		return
	}
	resp := contract.RollingResponse{AsOf: asOf, Windows: make(map[string]map[string]map[string]float64, len(names))}
	for i, n := range names {
		resp.Windows[n] = got[durations[i]]
		if resp.Windows[n] == nil {
			resp.Windows[n] = map[string]map[string]float64{}
		}
	}
	server.WriteJSON(w, http.StatusOK, resp)
}

// canReadAll says whether id may read every user's data: admins and the Hub services of ReaderServices.
func (h *handler) canReadAll(id *hubauth.Identity) bool {
	return id.IsAdmin() || (id.Kind == "service" && slices.Contains(h.opts.ReaderServices, id.Name))
}

type serversBody struct {
	view *usage.View
	body []byte
}

// serverList answers every running GPU server's telemetry (gpu-culler's input): admins and the Hub services of
// ReaderServices. The answer is built and encoded once per view, so that polls from several replicas cost a
// pointer comparison and a write.
func (h *handler) serverList(w http.ResponseWriter, r *http.Request) {
	id, ok := hubauth.FromContext(r.Context())
	if !ok {
		server.WriteError(w, http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	if !h.canReadAll(id) {
		server.WriteError(w, http.StatusForbidden,
			"every server's telemetry is for admins and the services listed in the usage API's --reader-services; read your own at api/v1/me")
		return
	}
	v := h.opts.State.View()
	if v == nil {
		server.WriteError(w, http.StatusServiceUnavailable, "no sample yet; retry after one sampling interval")
		return
	}
	b := h.servers.Load()
	if b == nil || b.view != v {
		body, err := json.Marshal(contract.ServersResponse{SampledAt: v.SampledAt, Servers: v.Telemetry()})
		if err != nil {
			server.WriteError(w, http.StatusInternalServerError, "encode answer: %v", err)
			return
		}
		b = &serversBody{view: v, body: append(body, '\n')}
		h.servers.Store(b) // concurrent builders of one view store equal bodies
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b.body)
	}
}
