package app

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/huboauth"
)

// fakeLogin stands in for huboauth: a page request names its viewer in X-Test-User (an "admin" prefix makes a
// Hub admin); without one, Require answers 401 as a login redirect would stop it.
type fakeLogin struct{ prefix string }

func (l fakeLogin) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+l.prefix+"logout", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
}

func (l fakeLogin) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get("X-Test-User")
		if user == "" {
			http.Error(w, "log in", http.StatusUnauthorized)
			return
		}
		s := huboauth.Session{User: user, Admin: strings.HasPrefix(user, "admin"), CSRF: "x", Expires: time.Now().Add(time.Hour)}
		next.ServeHTTP(w, r.WithContext(huboauth.NewContext(r.Context(), s)))
	})
}

func request(t *testing.T, method, url, header, value string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), method, url, nil)
	if header != "" {
		req.Header.Set(header, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminViewMounted: with a Login the pages answer under the prefix behind it, the login's routes are
// reachable, and the JSON API under api/ keeps its token auth; without one GET {prefix} stays the API's 404.
func TestAdminViewMounted(t *testing.T) {
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "alice"})
	hub.AddToken("alice-token", "alice")
	hub.AddToken("svc-token", "gpu-usage", "list:users", "read:users", "read:users:groups")
	var busy atomic.Int64
	port := fakeAgent(t, &busy)
	const prefix = "/services/gpu-usage/"

	with := start(t, hub, filepath.Join(t.TempDir(), "ledger.db"), port, func(o *Options) { o.Login = fakeLogin{prefix: prefix} })
	defer with.stop(t)
	base := with.url + prefix
	tests := map[string]struct {
		method, path, header, value string
		wantStatus                  int
		wantBody                    string
	}{
		"admin home":               {"GET", "", "X-Test-User", "admin-root", 200, "<h1>GPU inventory</h1>"},
		"alice's home":             {"GET", "", "X-Test-User", "alice", 200, "<h1>Your GPUs</h1>"},
		"alice on holders":         {"GET", "holders", "X-Test-User", "alice", 403, "for Hub admins"},
		"no login":                 {"GET", "", "", "", 401, "log in"},
		"logout route":             {"POST", "logout", "X-Test-User", "alice", 204, ""},
		"api with a token":         {"GET", "api/v1/me", "Authorization", "token alice-token", 200, `"user":"alice"`},
		"api without a token":      {"GET", "api/v1/me", "X-Test-User", "alice", 401, ""},
		"api unknown endpoint":     {"GET", "api/v1/nope", "Authorization", "token alice-token", 404, "no such endpoint"},
		"api options, no token":    {"OPTIONS", "api/v1/me", "", "", 204, ""},
		"page that does not exist": {"GET", "nope", "X-Test-User", "admin-root", 404, "There is no page"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			status, body := request(t, tc.method, base+tc.path, tc.header, tc.value)
			if status != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
				t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.path, status, body, tc.wantStatus, tc.wantBody)
			}
		})
	}

	without := start(t, hub, filepath.Join(t.TempDir(), "ledger2.db"), port)
	defer without.stop(t)
	if status, body := request(t, "GET", without.url+prefix, "Authorization", "token alice-token"); status != 404 || !strings.Contains(body, "no such endpoint") {
		t.Errorf("without Login, GET %s: %d %q, want the API's 404", prefix, status, body)
	}
}
