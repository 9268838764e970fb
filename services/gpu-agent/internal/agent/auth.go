package agent

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
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
	// AuthTokenReview requires a Kubernetes bearer token (the caller's
	// service-account token), validated with a TokenReview.
	AuthTokenReview = "tokenreview"
)

const (
	authOKTTL   = time.Minute
	authFailTTL = 10 * time.Second
	authMaxKeys = 1024
)

type authEntry struct {
	user    string
	ok      bool
	expires time.Time
}

// tokenReviewer authenticates bearer tokens with the API server and caches
// the answer by sha256(token), so the token itself is never kept or logged.
type tokenReviewer struct {
	client  kubernetes.Interface
	allowed map[string]bool // empty: any authenticated identity
	now     func() time.Time
	logger  *slog.Logger

	mu    sync.Mutex
	cache map[[32]byte]authEntry
}

func newTokenReviewer(client kubernetes.Interface, allowed []string, now func() time.Time, logger *slog.Logger) *tokenReviewer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := &tokenReviewer{client: client, allowed: map[string]bool{}, now: now, logger: logger, cache: map[[32]byte]authEntry{}}
	for _, u := range allowed {
		if u = strings.TrimSpace(u); u != "" {
			t.allowed[u] = true
		}
	}
	return t
}

// review returns the caller's user name and whether it may read the snapshot.
func (t *tokenReviewer) review(ctx context.Context, token string) (string, bool, error) {
	key := sha256.Sum256([]byte(token))
	now := t.now()
	t.mu.Lock()
	e, hit := t.cache[key]
	t.mu.Unlock()
	if hit && now.Before(e.expires) {
		return e.user, e.ok, nil
	}
	tr, err := t.client.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return "", false, fmt.Errorf("token review: %w", err)
	}
	e = authEntry{user: tr.Status.User.Username, ok: tr.Status.Authenticated}
	if e.ok && len(t.allowed) > 0 && !t.allowed[e.user] {
		e.ok = false
	}
	e.expires = now.Add(authFailTTL)
	if e.ok {
		e.expires = now.Add(authOKTTL)
	}
	t.mu.Lock()
	if len(t.cache) >= authMaxKeys {
		clear(t.cache) // bounded; a refill costs one review per caller
	}
	t.cache[key] = e
	t.mu.Unlock()
	return e.user, e.ok, nil
}

func (t *tokenReviewer) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpu-agent"`)
			server.WriteError(w, http.StatusUnauthorized, "send a Kubernetes service-account token as 'Authorization: Bearer <token>'")
			return
		}
		user, allowed, err := t.review(r.Context(), token)
		switch {
		case err != nil:
			t.logger.Warn("token review failed", "err", err)
			server.WriteError(w, http.StatusServiceUnavailable, "cannot validate the token with the API server; retry later")
		case !allowed && user == "":
			server.WriteError(w, http.StatusUnauthorized, "token not accepted by the API server")
		case !allowed:
			server.WriteError(w, http.StatusForbidden, "%s may not read the snapshot (see --snapshot-allowed-users)", user)
		default:
			next.ServeHTTP(w, r)
		}
	})
}
