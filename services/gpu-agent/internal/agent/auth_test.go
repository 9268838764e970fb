package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	testAudience = "gpuhub-agent"
	apiAudience  = "https://kubernetes.default.svc.cluster.local"
)

// issuedToken is what the fake API server knows about a token it issued.
type issuedToken struct {
	user      string
	audiences []string
	// ignoresAudiences models an authenticator that does not support audiences (some webhook
	// authenticators): it authenticates and answers no status.audiences.
	ignoresAudiences bool
}

// reviewingClient is a fake clientset whose TokenReview behaves as the API server's does for bound
// service-account tokens: a token is authenticated only for an audience it was issued for (spec.audiences,
// or the API server's own when empty), and status.audiences is the intersection. It records every review.
func reviewingClient(tokens map[string]issuedToken, apiErr *error, reviews *[]authnv1.TokenReviewSpec) *fake.Clientset {
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tr := action.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		*reviews = append(*reviews, tr.Spec)
		if apiErr != nil && *apiErr != nil {
			return true, nil, *apiErr
		}
		tok, ok := tokens[tr.Spec.Token]
		if !ok {
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
			return true, tr, nil
		}
		if tok.ignoresAudiences {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: tok.user}}
			return true, tr, nil
		}
		want := tr.Spec.Audiences
		if len(want) == 0 {
			want = []string{apiAudience}
		}
		var both []string
		for _, a := range want {
			if slices.Contains(tok.audiences, a) {
				both = append(both, a)
			}
		}
		if len(both) == 0 {
			tr.Status = authnv1.TokenReviewStatus{Error: "token audiences is invalid for the target audiences"}
			return true, tr, nil
		}
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: tok.user}, Audiences: both}
		return true, tr, nil
	})
	return client
}

func serveThrough(h http.Handler, authorization string) int {
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/api/v1/snapshot", nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	h.ServeHTTP(rec, req)
	return rec.Code
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })

// TestTokenReviewAudience: only a token of the allowed ServiceAccount issued for the agent's audience is
// admitted; the usage API's API-server credential and other ServiceAccounts' agent tokens are not.
func TestTokenReviewAudience(t *testing.T) {
	tokens := map[string]issuedToken{
		"usage-agent-aud":   {user: usageSA, audiences: []string{testAudience}},
		"usage-api-aud":     {user: usageSA, audiences: []string{apiAudience}},
		"usage-both-aud":    {user: usageSA, audiences: []string{apiAudience, testAudience}},
		"other-agent-aud":   {user: "system:serviceaccount:jhub:default", audiences: []string{testAudience}},
		"usage-no-aud-ctrl": {user: usageSA, ignoresAudiences: true},
	}
	cases := map[string]struct {
		authorization string
		wantCode      int
		wantReviews   int
	}{
		"no token":                              {wantCode: http.StatusUnauthorized},
		"not a bearer token":                    {authorization: "token usage-agent-aud", wantCode: http.StatusUnauthorized},
		"empty bearer token":                    {authorization: "Bearer ", wantCode: http.StatusUnauthorized},
		"usage SA, agent audience":              {authorization: "Bearer usage-agent-aud", wantCode: http.StatusNoContent, wantReviews: 1},
		"usage SA, also agent audience":         {authorization: "Bearer usage-both-aud", wantCode: http.StatusNoContent, wantReviews: 1},
		"usage SA, API server audience":         {authorization: "Bearer usage-api-aud", wantCode: http.StatusUnauthorized, wantReviews: 1},
		"other SA, agent audience":              {authorization: "Bearer other-agent-aud", wantCode: http.StatusForbidden, wantReviews: 1},
		"authenticator answers no audiences":    {authorization: "Bearer usage-no-aud-ctrl", wantCode: http.StatusUnauthorized, wantReviews: 1},
		"unknown token":                         {authorization: "Bearer forged", wantCode: http.StatusUnauthorized, wantReviews: 1},
		"bearer scheme is case-insensitive":     {authorization: "bearer usage-agent-aud", wantCode: http.StatusNoContent, wantReviews: 1},
		"token with surrounding spaces trimmed": {authorization: "Bearer  usage-agent-aud ", wantCode: http.StatusNoContent, wantReviews: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var reviews []authnv1.TokenReviewSpec
			client := reviewingClient(tokens, nil, &reviews)
			tr := newTokenReviewer(client, testAudience, []string{usageSA}, func() time.Time { return t0 }, nil)
			if got := serveThrough(tr.wrap(okHandler), tc.authorization); got != tc.wantCode {
				t.Errorf("status %d, want %d", got, tc.wantCode)
			}
			if len(reviews) != tc.wantReviews {
				t.Fatalf("%d reviews, want %d", len(reviews), tc.wantReviews)
			}
			for _, r := range reviews {
				if diff := cmp.Diff([]string{testAudience}, r.Audiences); diff != "" {
					t.Errorf("TokenReview spec.audiences (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestTokenReviewAPIError: an API server outage answers 503 and is not remembered as a denial, so the
// usage API is admitted as soon as the API server answers again.
func TestTokenReviewAPIError(t *testing.T) {
	var reviews []authnv1.TokenReviewSpec
	apiErr := errors.New("connection refused")
	client := reviewingClient(map[string]issuedToken{"good": {user: usageSA, audiences: []string{testAudience}}}, &apiErr, &reviews)
	now := t0
	tr := newTokenReviewer(client, testAudience, []string{usageSA}, func() time.Time { return now }, nil)
	h := tr.wrap(okHandler)
	if got := serveThrough(h, "Bearer good"); got != http.StatusServiceUnavailable {
		t.Errorf("API server down: status %d, want %d", got, http.StatusServiceUnavailable)
	}
	apiErr = nil
	now = now.Add(time.Second)
	if got := serveThrough(h, "Bearer good"); got != http.StatusNoContent {
		t.Errorf("API server back a second later: status %d, want %d (the outage must not be cached as a denial)", got, http.StatusNoContent)
	}
	if len(reviews) != 2 {
		t.Errorf("%d reviews, want 2", len(reviews))
	}
}

func TestTokenReviewCache(t *testing.T) {
	var reviews []authnv1.TokenReviewSpec
	var apiErr error
	client := reviewingClient(map[string]issuedToken{"good": {user: usageSA, audiences: []string{testAudience}}}, &apiErr, &reviews)
	now := t0
	tr := newTokenReviewer(client, testAudience, []string{usageSA}, func() time.Time { return now }, nil)
	h := tr.wrap(okHandler)

	steps := []struct {
		name        string
		advance     time.Duration
		token       string
		apiErr      error
		wantCode    int
		wantReviews int
	}{
		{name: "first good token is reviewed", token: "good", wantCode: http.StatusNoContent, wantReviews: 1},
		{name: "cached", advance: 30 * time.Second, token: "good", wantCode: http.StatusNoContent, wantReviews: 1},
		{name: "positive entry expires after a minute", advance: 31 * time.Second, token: "good", wantCode: http.StatusNoContent, wantReviews: 2},
		{name: "bad token", token: "bad", wantCode: http.StatusUnauthorized, wantReviews: 3},
		{name: "bad token cached", advance: 5 * time.Second, token: "bad", wantCode: http.StatusUnauthorized, wantReviews: 3},
		{name: "negative entry expires after 10s", advance: 6 * time.Second, token: "bad", wantCode: http.StatusUnauthorized, wantReviews: 4},
		{name: "API server down", advance: time.Hour, token: "good", apiErr: errors.New("connection refused"),
			wantCode: http.StatusServiceUnavailable, wantReviews: 5},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		apiErr = s.apiErr
		if got := serveThrough(h, "Bearer "+s.token); got != s.wantCode {
			t.Errorf("%s: status %d, want %d", s.name, got, s.wantCode)
		}
		if len(reviews) != s.wantReviews {
			t.Errorf("%s: %d reviews, want %d", s.name, len(reviews), s.wantReviews)
		}
	}
}

func TestNewTokenReviewerRefusesOpenConfig(t *testing.T) {
	cases := map[string]struct {
		audience string
		allowed  []string
	}{
		"no audience":           {allowed: []string{usageSA}},
		"no allowed identity":   {audience: testAudience},
		"only blank identities": {audience: testAudience, allowed: []string{" ", ""}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := checkTokenReviewConfig(tc.audience, tc.allowed); err == nil {
				t.Error("accepted, want an error")
			}
		})
	}
	if err := checkTokenReviewConfig(testAudience, []string{usageSA}); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}
