// Package hubauth authenticates incoming HTTP requests by their JupyterHub
// token: it asks the Hub who owns the token (GET /hub/api/user) and caches
// the answer by sha256(token), never by the token itself.
//
// What the Hub returns (JupyterHub 5.5, apihandlers/users.py SelfAPIHandler):
// GET /user works for any valid token, whatever its scopes, because the Hub
// adds the owner's identify scopes (read:users:name!user=<self> and
// read:users:groups!user=<self>) for that request. So name, admin and groups
// are always present, even for the OAuth token of a single-user server, whose
// scopes are only access:servers!server=<user>/ plus those two identify
// scopes. "scopes" lists the token's own expanded scopes, without the added
// identify ones. For a service token the model has kind "service" and no
// groups. An unknown or expired token gets 403 "Missing or invalid
// credentials." (or 403 Forbidden), not 401.
package hubauth

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/hubapi"
)

// Defaults applied by New.
const (
	DefaultPositiveTTL   = 60 * time.Second
	DefaultNegativeTTL   = 10 * time.Second
	DefaultMaxEntries    = 10000
	DefaultLookupTimeout = 15 * time.Second
)

// Identity is the owner of a validated token.
type Identity struct {
	Kind   string   `json:"kind"` // "user" or "service"
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
	Admin  bool     `json:"admin"`
	// HubAdmin is the Hub's own admin flag, or a token holding admin:users: Admin without the members of
	// Options.AdminGroups, who may read every user's data but not act for them (join or leave a waitlist).
	HubAdmin bool     `json:"hubAdmin,omitempty"`
	Scopes   []string `json:"scopes,omitempty"` // the token's expanded scopes as the Hub reports them
}

// IsAdmin reports whether the identity may read every user's data: the Hub's
// admin flag (New also sets it for a token holding admin:users and for
// members of Options.AdminGroups), or an unfiltered admin:users, users or
// read:users scope. A filtered scope (!user=, !group=) or list:users (names
// only) is not enough.
func (i Identity) IsAdmin() bool {
	if i.Admin {
		return true
	}
	for _, s := range i.Scopes {
		switch s {
		case "admin:users", "users", "read:users":
			return true
		}
	}
	return false
}

// CanReadUser reports whether the identity may read data of user name:
//   - a user reads its own data;
//   - an admin (IsAdmin) reads everyone's;
//   - a token holding admin:users, users or read:users filtered to
//     !user=<name> reads that user's data.
//
// Scopes filtered by !group= are not honoured: that would need the target's
// groups, and denying is the safe side.
func (i Identity) CanReadUser(name string) bool {
	if name == "" {
		return false
	}
	if i.IsAdmin() || (i.Kind == "user" && i.Name == name) {
		return true
	}
	for _, s := range i.Scopes {
		base, filter, filtered := strings.Cut(s, "!")
		switch base {
		case "admin:users", "users", "read:users":
			if filtered && filter == "user="+name {
				return true
			}
		}
	}
	return false
}

// TokenChecker asks the Hub who owns a token. *hubapi.Client satisfies it.
type TokenChecker interface {
	WhoAmIWithToken(ctx context.Context, token string) (*hubapi.User, error)
}

// Options configures an Authenticator.
type Options struct {
	Hub         TokenChecker
	PositiveTTL time.Duration // default 60s
	NegativeTTL time.Duration // default 10s; only for tokens the Hub rejected (401/403)
	MaxEntries  int           // default 10000; least recently used entries go first
	// LookupTimeout bounds one Hub lookup, which concurrent requests with the
	// same token share (so it does not follow any single caller's context).
	LookupTimeout time.Duration // default 15s
	Clock         func() time.Time
	Logger        *slog.Logger
	// AdminGroups makes members of these Hub groups admins (IsAdmin, CanReadUser).
	AdminGroups []string
	// Service is the Hub service these requests are for (JUPYTERHUB_SERVICE_NAME). When set, a user's token must
	// grant access to it (access:services, or access:services!service=<Service>), as JupyterHub's own HubAuth
	// requires, or be one of the user's own server's tokens: a token the user gave another service (its OAuth
	// login) is refused with ErrNoServiceAccess. Service tokens are authorized by name by each service.
	Service string
	// Registerer, when set, gets gpuhub_hubauth_* metrics (results, cache
	// hits, Hub lookups, cache size).
	Registerer prometheus.Registerer
}

var (
	// ErrNoToken means the request carried no token.
	ErrNoToken = errors.New("no token")
	// ErrInvalidToken means the Hub rejected the token.
	ErrInvalidToken = errors.New("invalid token")
	// ErrOtherUsersServer means the token is the page token of another user's server (JupyterHub gives the
	// visitor of a server a token limited to that server, access:servers!server=<owner>/<name>): that server's
	// owner can read it from their own page, so it must not act for its user here.
	ErrOtherUsersServer = errors.New("the token was issued for another user's server")
	// ErrNoServiceAccess means a user's token does not grant access to this service (Options.Service).
	ErrNoServiceAccess = errors.New("the token does not grant access to this service")
	// ErrHubUnavailable means the Hub could not be asked (outage, 5xx): not
	// the caller's fault, and not cached.
	ErrHubUnavailable = errors.New("hub unavailable")
)

// Authenticator validates tokens against the Hub with a bounded cache.
// It is safe for concurrent use.
type Authenticator struct {
	hub           TokenChecker
	posTTL        time.Duration
	negTTL        time.Duration
	maxEntries    int
	lookupTimeout time.Duration
	now           func() time.Time
	log           *slog.Logger
	adminGroups   []string
	service       string
	metrics       *metrics

	mu       sync.Mutex
	entries  map[[sha256.Size]byte]*list.Element // of *entry
	lru      *list.List                          // front = most recently used
	inflight map[[sha256.Size]byte]*lookup
}

type entry struct {
	key     [sha256.Size]byte
	id      *Identity // nil for a rejected token
	refused error     // a valid token not taken here (refusal), decided once
	expires time.Time
}

type lookup struct {
	done    chan struct{}
	id      *Identity
	refused error
	err     error
}

// New returns an Authenticator; opts.Hub is required.
func New(opts Options) *Authenticator {
	a := &Authenticator{
		hub:           opts.Hub,
		posTTL:        orDefault(opts.PositiveTTL, DefaultPositiveTTL),
		negTTL:        orDefault(opts.NegativeTTL, DefaultNegativeTTL),
		maxEntries:    opts.MaxEntries,
		lookupTimeout: orDefault(opts.LookupTimeout, DefaultLookupTimeout),
		now:           opts.Clock,
		log:           opts.Logger,
		adminGroups:   slices.Clone(opts.AdminGroups),
		service:       opts.Service,
		metrics:       newMetrics(opts.Registerer),
		entries:       map[[sha256.Size]byte]*list.Element{},
		lru:           list.New(),
		inflight:      map[[sha256.Size]byte]*lookup{},
	}
	if a.maxEntries <= 0 {
		a.maxEntries = DefaultMaxEntries
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	return a
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Len is the number of cached entries (positive and negative).
func (a *Authenticator) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lru.Len()
}

// TokenFromRequest returns the token of "Authorization: token X" or
// "Authorization: Bearer X". Tokens in the query string are not accepted:
// proxies log URLs.
func TokenFromRequest(r *http.Request) string {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || (!strings.EqualFold(scheme, "token") && !strings.EqualFold(scheme, "bearer")) {
		return ""
	}
	return strings.TrimSpace(rest)
}

// Authenticate validates the request's "Authorization: token X" or "Bearer X".
// Errors: ErrNoToken, ErrInvalidToken, ErrNoServiceAccess, one wrapping ErrOtherUsersServer, or one wrapping
// ErrHubUnavailable.
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request) (*Identity, error) {
	return a.AuthenticateToken(ctx, TokenFromRequest(r))
}

// AuthenticateToken validates a token; see Authenticate. A page token of another user's server is refused with
// ErrOtherUsersServer, a user's token without access to Options.Service (and not its own server's) with
// ErrNoServiceAccess.
func (a *Authenticator) AuthenticateToken(ctx context.Context, tok string) (*Identity, error) {
	id, err := a.authenticate(ctx, tok)
	a.metrics.results.WithLabelValues(resultLabel(err)).Inc()
	return id, err
}

// refusal is why a token the Hub knows is not taken here, nil when it is: another user's server's token, or a
// user's token without access to this service. Decided once per token, when it enters the cache.
func (a *Authenticator) refusal(id *Identity) error {
	if server := id.otherUsersServer(); server != "" {
		return fmt.Errorf("%w %s", ErrOtherUsersServer, server)
	}
	if a.service != "" && id.Kind == "user" && !id.mayAccess(a.service) && !id.serverOnly() {
		return ErrNoServiceAccess
	}
	return nil
}

// serverOnly reports whether a user's token reaches servers only as its user's own server's tokens do
// (access:servers!server=<self>/..., not access:servers!user=<self> nor every server): the page token JupyterLab
// gets (the GPU panel's) and $JUPYTERHUB_API_TOKEN. JupyterHub gives them no access to services unless the admin
// allows it, and a server started before gpuhub was installed keeps the ones it got: they are taken without the
// service's scope. They act for their user alone (New drops admin powers from them): the server role holds no
// admin scope, and whoever the server is shared with can read $JUPYTERHUB_API_TOKEN.
func (i *Identity) serverOnly() bool {
	broad, own, _ := i.serverReach()
	return own && !broad
}

// serverReach is how the token reaches servers: broad, to every server or every one of its user's
// (access:servers, access:servers!user=<self>); own, through access:servers!server= scopes naming its user's
// servers; other, the last server of another user named so ("bob/", "bob/gpu"; '/' is not allowed in Hub user
// names, so the owner is what comes before it).
func (i *Identity) serverReach() (broad, own bool, other string) {
	for _, s := range i.Scopes {
		if s == "access:servers" || s == "access:servers!user="+i.Name {
			broad = true
		} else if server, ok := strings.CutPrefix(s, "access:servers!server="); ok {
			if owner, _, _ := strings.Cut(server, "/"); owner == i.Name {
				own = true
			} else {
				other = server
			}
		}
	}
	return broad, own, other
}

// mayAccess reports whether the token's scopes grant access to the Hub service name.
func (i *Identity) mayAccess(name string) bool {
	return slices.Contains(i.Scopes, "access:services") || slices.Contains(i.Scopes, "access:services!service="+name)
}

// otherUsersServer is the server ("bob/", "bob/gpu") a user's token is limited to when it is another user's: the
// token reaches servers only through access:servers!server= scopes, none of them its user's. JupyterHub issues
// such a token to whoever opens a server (a visit, a share, an admin helping) and puts it in that server's page,
// where the server's owner can read it. "" for every other token: a user's own page token (its own server), an
// API token (access:servers!user=<self>, or all servers for an admin), a token without server access (a
// service's OAuth login), a service's token.
func (i *Identity) otherUsersServer() string {
	if i.Kind != "user" {
		return ""
	}
	if broad, own, other := i.serverReach(); !broad && !own {
		return other
	}
	return ""
}

func (a *Authenticator) authenticate(ctx context.Context, tok string) (*Identity, error) {
	if tok == "" {
		return nil, ErrNoToken
	}
	if strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, ErrInvalidToken
	}
	key := sha256.Sum256([]byte(tok))

	a.mu.Lock()
	if el, ok := a.entries[key]; ok {
		e := el.Value.(*entry)
		if a.now().Before(e.expires) {
			a.lru.MoveToFront(el)
			a.mu.Unlock()
			if e.id == nil {
				a.metrics.cacheHits.WithLabelValues("negative").Inc()
				return nil, ErrInvalidToken
			}
			a.metrics.cacheHits.WithLabelValues("positive").Inc()
			if e.refused != nil {
				return nil, e.refused
			}
			return e.id.clone(), nil
		}
		a.removeLocked(el)
	}
	l, running := a.inflight[key]
	if !running {
		l = &lookup{done: make(chan struct{})}
		a.inflight[key] = l
	}
	a.mu.Unlock()

	if !running {
		go a.resolve(ctx, key, tok, l)
	}
	select {
	case <-l.done:
		if l.err != nil {
			return nil, l.err
		}
		if l.refused != nil {
			return nil, l.refused
		}
		return l.id.clone(), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrHubUnavailable, ctx.Err())
	}
}

// resolve asks the Hub once for all requests waiting on key.
func (a *Authenticator) resolve(ctx context.Context, key [sha256.Size]byte, tok string, l *lookup) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.lookupTimeout)
	defer cancel()
	u, err := a.hub.WhoAmIWithToken(lctx, tok)
	hash := hex.EncodeToString(key[:4]) // enough to correlate log lines, useless to an attacker

	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.inflight, key)
	defer close(l.done)
	switch {
	case err == nil:
		a.metrics.lookups.WithLabelValues("ok").Inc()
		l.id = a.identity(u)
		l.refused = a.refusal(l.id)
		a.storeLocked(key, l.id, l.refused, a.posTTL)
		a.log.DebugContext(ctx, "hub token accepted", "tokenHash", hash, "kind", l.id.Kind, "name", l.id.Name)
	case hubapi.IsUnauthorized(err) || hubapi.IsForbidden(err):
		a.metrics.lookups.WithLabelValues("rejected").Inc()
		l.err = ErrInvalidToken
		a.storeLocked(key, nil, nil, a.negTTL)
		a.log.DebugContext(ctx, "hub token rejected", "tokenHash", hash)
	default:
		a.metrics.lookups.WithLabelValues("error").Inc()
		l.err = fmt.Errorf("%w: %w", ErrHubUnavailable, err)
		a.log.WarnContext(ctx, "cannot validate hub token", "tokenHash", hash, "err", err)
	}
}

func (a *Authenticator) identity(u *hubapi.User) *Identity {
	id := &Identity{
		Kind:   u.Kind,
		Name:   u.Name,
		Groups: slices.Clone(u.Groups),
		Admin:  u.Admin,
		Scopes: slices.Clone(u.Scopes),
	}
	if id.Kind == "" {
		id.Kind = "user"
	}
	if slices.Contains(id.Scopes, "admin:users") {
		id.Admin = true
	}
	id.HubAdmin = id.Admin
	for _, g := range a.adminGroups {
		if slices.Contains(id.Groups, g) {
			id.Admin = true
		}
	}
	if id.Kind == "user" && id.serverOnly() {
		// A server's token acts for its user alone, an admin's too, whatever scopes the admin gave servers: it
		// keeps no admin flag nor any scope that reads other users.
		id.Admin, id.HubAdmin = false, false
		id.Scopes = slices.DeleteFunc(id.Scopes, func(s string) bool {
			base, filter, _ := strings.Cut(s, "!")
			return (base == "admin:users" || base == "users" || base == "read:users") && filter != "user="+id.Name
		})
	}
	return id
}

func (a *Authenticator) storeLocked(key [sha256.Size]byte, id *Identity, refused error, ttl time.Duration) {
	if el, ok := a.entries[key]; ok {
		a.removeLocked(el)
	}
	a.entries[key] = a.lru.PushFront(&entry{key: key, id: id, refused: refused, expires: a.now().Add(ttl)})
	for a.lru.Len() > a.maxEntries {
		a.removeLocked(a.lru.Back())
	}
	a.metrics.entries.Set(float64(a.lru.Len()))
}

func (a *Authenticator) removeLocked(el *list.Element) {
	a.lru.Remove(el)
	delete(a.entries, el.Value.(*entry).key)
	a.metrics.entries.Set(float64(a.lru.Len()))
}

func (i *Identity) clone() *Identity {
	c := *i
	c.Groups = slices.Clone(i.Groups)
	c.Scopes = slices.Clone(i.Scopes)
	return &c
}

// Middleware rejects unauthenticated requests and puts the Identity in the
// request context (FromContext). Missing or rejected tokens get 401 with
// WWW-Authenticate; a Hub that cannot be asked gets 503 with Retry-After,
// so clients retry instead of dropping their token.
func (a *Authenticator) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.Authenticate(r.Context(), r)
		switch {
		case err == nil:
			next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), id)))
		case errors.Is(err, ErrNoToken):
			w.Header().Set("WWW-Authenticate", `token realm="jupyterhub"`)
			writeError(w, http.StatusUnauthorized, "no token: send a JupyterHub API token in the Authorization header (Authorization: token <token>); tokens in the URL are not taken")
		case errors.Is(err, ErrInvalidToken):
			w.Header().Set("WWW-Authenticate", `token realm="jupyterhub"`)
			writeError(w, http.StatusUnauthorized, "invalid token: the Hub does not know it (expired, revoked or mistyped); get a new one from the Hub")
		case errors.Is(err, ErrNoServiceAccess):
			writeError(w, http.StatusForbidden, "this token does not grant access to the "+a.service+" service (access:services!service="+
				a.service+"): a token made for another service does not carry it; use your own server's page or an API "+
				"token of yours; your Hub role must hold the scope (the chart's z2jh values give every user the scopes of "+
				"gpu-usage, gpu-quota and gpu-culler; an admin grants others in a Hub role)")
		case errors.Is(err, ErrOtherUsersServer):
			writeError(w, http.StatusForbidden, "this token was issued for another user's server ("+
				strings.TrimSpace(strings.TrimPrefix(err.Error(), ErrOtherUsersServer.Error()))+
				"), whose owner can read it: open your own server to see your GPU use here, or use an API token of yours")
		default:
			w.Header().Set("Retry-After", "5")
			writeError(w, http.StatusServiceUnavailable, "hub unavailable: the Hub cannot be asked who owns this token right now; try again in a few seconds")
		}
	})
}

// writeError answers in the services' error shape ({"status", "message"}, as server.WriteError), which the
// panel and the Hub glue show.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
	}{status, msg})
}

type ctxKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the Identity put there by Middleware.
func FromContext(ctx context.Context) (*Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(*Identity)
	return id, ok && id != nil
}
