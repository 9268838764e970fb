// Package huboauth logs a browser user into a Hub service's pages through the Hub's OAuth flow and keeps them
// logged in with a short-lived signed session cookie scoped to the service prefix.
package huboauth

import (
	"context"
	"time"
)

// Session is who is looking at a page, as the session cookie says.
type Session struct {
	User  string
	Admin bool
	// CSRF is the token a form that changes state must echo back (a hidden field named CSRFField).
	CSRF    string
	Expires time.Time
}

// CSRFField is the form field that carries Session.CSRF.
const CSRFField = "csrf"

type sessionKey struct{}

// NewContext returns ctx carrying s (the middleware does this; tests of pages may too).
func NewContext(ctx context.Context, s Session) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

// FromContext returns the session the middleware put into ctx.
func FromContext(ctx context.Context) (Session, bool) {
	s, ok := ctx.Value(sessionKey{}).(Session)
	return s, ok
}
