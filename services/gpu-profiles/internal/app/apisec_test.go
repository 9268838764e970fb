package app

import (
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/apicheck"
)

// target is the running service with the callers its Hub knows: alice (a Hub admin), bob (a student), the Hub
// glue with gpu-profiles' own token, gpu-usage (a reader service) and a service nobody named.
func target(t *testing.T) *apicheck.Target {
	t.Helper()
	doc, err := apicheck.Load("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, func(o *Options) { o.ReaderServices = []string{"gpu-usage"} })
	r.hub.AddToken("intruder-token", "intruder")
	r.hub.AddToken("revoked-token", "bob")
	r.hub.ExpireToken("revoked-token")
	return &apicheck.Target{
		Doc: doc, URL: r.url,
		Callers: []apicheck.Caller{
			{Name: "gpu-profiles", Kind: "service", Token: "profiles-token", Own: true},
			{Name: "alice", Kind: "user", Admin: true, Token: "alice-token"},
			{Name: "bob", Kind: "user", Token: "bob-token"},
			{Name: "gpu-usage", Kind: "service", Token: "usage-token"},
			{Name: "intruder", Kind: "service", Token: "intruder-token"},
		},
		Subject:  "bob",
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
