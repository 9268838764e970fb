// Package hubauth authenticates incoming HTTP requests by their JupyterHub
// token: it asks the Hub who owns the token (GET /hub/api/user) and caches
// the answer by sha256(token), never by the token itself.
package hubauth

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gpuhub/gpuhub/hubapi"
)

// Identity is the owner of a validated token.
type Identity struct {
	Kind   string // "user" or "service"
	Name   string
	Groups []string
	Admin  bool
	Scopes []string
}

// CanReadUser reports whether the identity may read data of user name.
func (i Identity) CanReadUser(name string) bool { return false }

// TokenChecker asks the Hub who owns a token. *hubapi.Client satisfies it.
type TokenChecker interface {
	WhoAmIWithToken(ctx context.Context, token string) (*hubapi.User, error)
}

// Options configures an Authenticator.
type Options struct {
	Hub         TokenChecker
	PositiveTTL time.Duration // default 60s
	NegativeTTL time.Duration // default 10s; only for tokens the Hub rejected (401/403)
	MaxEntries  int           // default 10000
	Clock       func() time.Time
	Logger      *slog.Logger
	AdminGroups []string
}

var (
	// ErrNoToken means the request carried no token.
	ErrNoToken = errors.New("no token")
	// ErrInvalidToken means the Hub rejected the token.
	ErrInvalidToken = errors.New("invalid token")
	// ErrHubUnavailable means the Hub could not be asked (outage, 5xx): not the caller's fault.
	ErrHubUnavailable = errors.New("hub unavailable")
)

// Authenticator validates tokens against the Hub with a bounded cache.
type Authenticator struct {
	opts Options
}

// New returns an Authenticator.
func New(opts Options) *Authenticator { return &Authenticator{opts: opts} }

// Authenticate validates the request's "Authorization: token X" or "Bearer X".
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request) (*Identity, error) {
	return nil, ErrHubUnavailable
}

// Middleware rejects unauthenticated requests and puts the Identity in the context.
func (a *Authenticator) Middleware(next http.Handler) http.Handler { return next }

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
