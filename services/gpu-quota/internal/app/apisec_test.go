package app

import (
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/apicheck"
)

// readers are the default --reader-services (main.go), as openapi.yaml states them.
var readers = []string{"gpu-usage", "gpu-profiles", "gpu-culler"}

// target is the running service with the callers its Hub knows: alice (a Hub admin), bob (a student, the
// subject of per-user requests), carol (another user), the Hub glue with gpu-quota's own token, the reader
// services and a service nobody named.
func target(t *testing.T) *apicheck.Target {
	t.Helper()
	doc, err := apicheck.Load("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, func(o *Options) { o.ReaderServices = readers })
	callers := []apicheck.Caller{
		{Name: "gpu-quota", Kind: "service", Token: "quota-token", Own: true},
		{Name: "alice", Kind: "user", Admin: true, Token: "alice-token"},
		{Name: "bob", Kind: "user", Token: "bob-token"},
		{Name: "carol", Kind: "user", Token: "carol-token"},
		{Name: "intruder", Kind: "service", Token: "intruder-token"},
	}
	r.hub.AddToken("carol-token", "carol")
	r.hub.AddToken("intruder-token", "intruder")
	for _, s := range readers {
		r.hub.AddToken(s+"-token", s)
		callers = append(callers, apicheck.Caller{Name: s, Kind: "service", Token: s + "-token"})
	}
	r.hub.AddToken("revoked-token", "bob")
	r.hub.ExpireToken("revoked-token")
	return &apicheck.Target{
		Doc: doc, URL: r.url, Callers: callers, Subject: "bob",
		Bad:      apicheck.TokenBad("revoked-token", "alice-token"),
		CatchAll: []string{"no such endpoint"},
	}
}

// TestOpenAPIRoutes: every route api.New registers is documented, and every documented one is registered.
func TestOpenAPIRoutes(t *testing.T) {
	doc, err := apicheck.Load("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	apicheck.Routes(t, doc, apicheck.SourceRoutes(t, map[string]string{"p": "/api/v1/"}, "../api/api.go"))
}

// TestSecurity: every operation refuses what its x-gpuhub-access does not allow (issue 15, security suite).
func TestSecurity(t *testing.T) { apicheck.Security(t, target(t)) }

// TestBadInput: malformed input answers 4xx with a message, never a server error (issue 15, bad input).
func TestBadInput(t *testing.T) { apicheck.BadInput(t, target(t)) }
