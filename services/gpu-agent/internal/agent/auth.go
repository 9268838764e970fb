package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/internal/server"
)

// Snapshot access modes (--snapshot-auth).
const (
	// AuthNone serves the snapshot to anyone who reaches the port; use it
	// only with a NetworkPolicy that admits just the usage API.
	AuthNone = "none"
	// AuthTokenReview requires a Kubernetes service-account token issued for
	// the agent's audience (--snapshot-audience) to an allowed identity,
	// validated with a TokenReview.
	AuthTokenReview = "tokenreview"
)

// DefaultAudience is the audience of the projected token the usage API
// sends (chart: usage Deployment's agent-token volume). A dedicated audience
// means the token is worthless against the API server, and the API server's
// own credentials are worthless here.
const DefaultAudience = "gpuhub-agent"

const (
	authOKTTL   = time.Minute
	authFailTTL = 10 * time.Second
	authMaxKeys = 1024
)

// authEntry is a remembered verdict; code is 0 when the caller is admitted.
type authEntry struct {
	user    string
	code    int
	message string
	expires time.Time
}

// tokenReviewer authenticates bearer tokens with the API server and caches
// the answer by sha256(token), so the token itself is never kept or logged.
type tokenReviewer struct {
	client   kubernetes.Interface
	audience string
	allowed  map[string]bool
	now      func() time.Time
	logger   *slog.Logger

	mu    sync.Mutex
	cache map[[32]byte]authEntry
}

// checkTokenReviewConfig refuses a configuration that would admit more than
// intended: without an audience the API server's own tokens would pass, and
// without an identity list any ServiceAccount (every pod can mount a token
// for any audience) would.
func checkTokenReviewConfig(audience string, allowed []string) error {
	if strings.TrimSpace(audience) == "" {
		return errors.New("--snapshot-audience is required with --snapshot-auth=tokenreview")
	}
	if !slices.ContainsFunc(allowed, func(u string) bool { return strings.TrimSpace(u) != "" }) {
		return errors.New("--snapshot-allowed-users is required with --snapshot-auth=tokenreview " +
			"(e.g. system:serviceaccount:jhub:gpuhub-usage): any pod can get a token for any audience")
	}
	return nil
}

func newTokenReviewer(client kubernetes.Interface, audience string, allowed []string, now func() time.Time, logger *slog.Logger) *tokenReviewer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := &tokenReviewer{client: client, audience: strings.TrimSpace(audience), allowed: map[string]bool{}, now: now, logger: logger,
		cache: map[[32]byte]authEntry{}}
	for _, u := range allowed {
		if u = strings.TrimSpace(u); u != "" {
			t.allowed[u] = true
		}
	}
	return t
}

// review decides whether token may read the snapshot. An error means the
// API server could not be asked; it is not cached, so an outage never turns
// into a remembered denial.
func (t *tokenReviewer) review(ctx context.Context, token string) (authEntry, error) {
	key := sha256.Sum256([]byte(token))
	now := t.now()
	t.mu.Lock()
	e, hit := t.cache[key]
	t.mu.Unlock()
	if hit && now.Before(e.expires) {
		return e, nil
	}
	tr, err := t.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{
		Token: token, Audiences: []string{t.audience},
	}}, metav1.CreateOptions{})
	if err != nil {
		return authEntry{}, fmt.Errorf("token review: %w", err)
	}
	e = t.verdict(tr.Status)
	e.user = tr.Status.User.Username
	e.expires = now.Add(authFailTTL)
	if e.code == 0 {
		e.expires = now.Add(authOKTTL)
	} else {
		t.logger.Warn("snapshot reader refused", "user", e.user, "status", e.code, "reason", e.message)
	}
	t.mu.Lock()
	if len(t.cache) >= authMaxKeys {
		clear(t.cache) // bounded; a refill costs one review per caller
	}
	t.cache[key] = e
	t.mu.Unlock()
	return e, nil
}

func (t *tokenReviewer) verdict(st authnv1.TokenReviewStatus) authEntry {
	switch {
	case !st.Authenticated:
		return authEntry{code: http.StatusUnauthorized, message: fmt.Sprintf(
			"token not accepted by the API server for audience %q (send a projected service-account token with that audience)", t.audience)}
	case !slices.Contains(st.Audiences, t.audience):
		// An authenticator that ignores audiences answers none: the token
		// may have been issued for anything, so it proves nothing here.
		return authEntry{code: http.StatusUnauthorized, message: fmt.Sprintf(
			"the API server did not confirm the token's audience %q", t.audience)}
	case !t.allowed[st.User.Username]:
		return authEntry{code: http.StatusForbidden, message: fmt.Sprintf(
			"%s may not read the snapshot (see --snapshot-allowed-users)", st.User.Username)}
	}
	return authEntry{}
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 7235).
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (t *tokenReviewer) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpu-agent"`)
			server.WriteError(w, http.StatusUnauthorized,
				"send a Kubernetes service-account token for audience %q as 'Authorization: Bearer <token>'", t.audience)
			return
		}
		e, err := t.review(r.Context(), token)
		switch {
		case err != nil:
			t.logger.Warn("token review failed", "err", err)
			w.Header().Set("Retry-After", "5")
			server.WriteError(w, http.StatusServiceUnavailable, "cannot validate the token with the API server; retry later")
		case e.code == http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpu-agent", error="invalid_token"`)
			server.WriteError(w, e.code, "%s", e.message)
		case e.code != 0:
			server.WriteError(w, e.code, "%s", e.message)
		default:
			next.ServeHTTP(w, r)
		}
	})
}
