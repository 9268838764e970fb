package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/huboauth"
	"github.com/gpuhub/gpuhub/services/internal/apicheck"
)

const (
	suitePrefix  = "/services/gpu-usage/"
	clientID     = "service-gpu-usage"
	authorizeURL = "/hub/api/oauth2/authorize"
	sessionName  = "service-gpu-usage-session"
)

// oauthHub is the Hub's OAuth token endpoint: code-<user> is exchanged for <user>-token.
func oauthHub(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.PostForm.Get("client_secret") != "svc-token" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		user, ok := strings.CutPrefix(r.PostForm.Get("code"), "code-")
		if !ok {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"access_token": user + "-token", "token_type": "Bearer"})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/hub/api/oauth2/token"
}

// logIn goes through the login as user does in a browser and returns the session cookie.
func logIn(t *testing.T, base, user string) *http.Cookie {
	t.Helper()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	type reply struct {
		status   int
		location string
		cookies  []*http.Cookie
	}
	do := func(u string, cookies []*http.Cookie) reply {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		return reply{resp.StatusCode, resp.Header.Get("Location"), resp.Cookies()}
	}
	first := do(base+suitePrefix, nil)
	loc, err := url.Parse(first.location)
	if first.status != http.StatusFound || err != nil || !strings.HasPrefix(loc.Path, authorizeURL) {
		t.Fatalf("first visit: %d to %q, want the Hub's authorize", first.status, first.location)
	}
	back := do(base+suitePrefix+"oauth_callback?"+url.Values{"code": {"code-" + user}, "state": {loc.Query().Get("state")}}.Encode(), first.cookies)
	for _, c := range back.cookies {
		if c.Name == sessionName {
			return &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	t.Fatalf("callback for %s: %d, no session cookie", user, back.status)
	return nil
}

// tampered is the session cookie with its payload edited (the signature left as it was).
func tampered(t *testing.T, c *http.Cookie, from, to string) *http.Cookie {
	t.Helper()
	parts := strings.Split(c.Value, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || !bytes.Contains(payload, []byte(from)) {
		t.Fatalf("session payload %s has no %s", payload, from)
	}
	parts[1] = base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, []byte(from), []byte(to), 1))
	return &http.Cookie{Name: c.Name, Value: strings.Join(parts, ".")}
}

// forged is a session for an admin signed with a key that is not the service's (or not signed at all).
func forged(t *testing.T, key []byte, method jwt.SigningMethod) *http.Cookie {
	t.Helper()
	claims := jwt.MapClaims{"sub": "root", "adm": true, "csrf": "x", "iss": clientID, "aud": clientID,
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	v, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if method == jwt.SigningMethodNone {
		v, err = jwt.NewWithClaims(method, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &http.Cookie{Name: sessionName, Value: v}
}

func withCookie(c *http.Cookie) func(*http.Request) { return func(r *http.Request) { r.AddCookie(c) } }

// suiteTarget runs the usage API as main does, the admin view behind the real huboauth login included, with the
// callers its Hub knows: root (a Hub admin), alice (holds a GPU; the subject of per-user requests), bob, the
// reader and waitlist services, and a service nobody named. People log in through the OAuth flow; the bad
// credentials add forged, tampered and expired-and-revoked sessions to the bad tokens.
func suiteTarget(t *testing.T) *apicheck.Target {
	t.Helper()
	doc, err := apicheck.Load("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	hub := newHub(t)
	hub.AddUser(hubapi.User{Name: "root", Admin: true})
	hub.AddUser(hubapi.User{Name: "dave"})
	for _, tok := range []string{"root", "dave"} {
		hub.AddToken(tok+"-token", tok)
	}
	for _, s := range []string{"gpu-quota", "gpu-culler", "gpu-profiles", "intruder"} {
		hub.AddToken(s+"-token", s)
	}
	hub.AddToken("revoked-token", "alice")
	hub.ExpireToken("revoked-token")
	var skew atomic.Int64 // the login's clock runs behind by this many seconds
	key := bytes.Repeat([]byte("s"), 32)
	login, err := huboauth.New(huboauth.Options{
		ClientID: clientID, ClientSecret: "svc-token", AuthorizeURL: authorizeURL, TokenURL: oauthHub(t),
		CallbackURL: suitePrefix + "oauth_callback", Prefix: suitePrefix, Hub: hub.Client("svc-token"), Key: key,
		Clock: func() time.Time { return time.Now().Add(-time.Duration(skew.Load()) * time.Second) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var busy atomic.Int64
	r := start(t, hub, filepath.Join(t.TempDir(), "ledger.db"), fakeAgent(t, &busy), func(o *Options) {
		o.Login, o.ReaderServices, o.WaitlistServices = login, []string{"gpu-quota", "gpu-culler"}, []string{"gpu-quota"}
		o.AdviceReaders = []string{"gpu-profiles"} // any user's right-size advice, nothing else
	})
	t.Cleanup(func() { r.stop(t) })
	eventually(t, "a first sample", func() (bool, string) {
		code := getJSON(t, r.url+"/readyz", "", nil)
		return code == http.StatusOK, http.StatusText(code)
	})
	alice := logIn(t, r.url, "alice")
	// dave's session is an hour old (past its 15 minutes) and his Hub login has been revoked since.
	skew.Store(3600)
	expired := logIn(t, r.url, "dave")
	skew.Store(0)
	hub.ExpireToken("dave-token")
	bad := append(apicheck.TokenBad("revoked-token", "root-token"),
		apicheck.BadCredential{Name: "session signed with another key", Apply: withCookie(forged(t, []byte("another key, 32 bytes long......"), jwt.SigningMethodHS256))},
		apicheck.BadCredential{Name: "session with alg none", Apply: withCookie(forged(t, nil, jwt.SigningMethodNone))},
		apicheck.BadCredential{Name: "alice's session altered to say bob", Apply: withCookie(tampered(t, alice, `"sub":"alice"`, `"sub":"bob"`))},
		apicheck.BadCredential{Name: "alice's session altered to say admin", Apply: withCookie(tampered(t, alice, `"adm":false`, `"adm":true`))},
		apicheck.BadCredential{Name: "expired session of a revoked login", Apply: withCookie(expired)},
		apicheck.BadCredential{Name: "garbage session", Apply: withCookie(&http.Cookie{Name: sessionName, Value: "x.y.z"})},
	)
	return &apicheck.Target{
		Doc: doc, URL: r.url, Subject: "alice", Bad: bad, LoginURL: authorizeURL,
		CatchAll: []string{"no such endpoint", "There is no page"},
		Callers: []apicheck.Caller{
			{Name: "root", Kind: "user", Admin: true, Token: "root-token", Cookie: logIn(t, r.url, "root")},
			{Name: "alice", Kind: "user", Token: "alice-token", Cookie: alice},
			{Name: "bob", Kind: "user", Token: "bob-token", Cookie: logIn(t, r.url, "bob")},
			{Name: "gpu-quota", Kind: "service", Token: "gpu-quota-token"},
			{Name: "gpu-culler", Kind: "service", Token: "gpu-culler-token"},
			{Name: "gpu-profiles", Kind: "service", Token: "gpu-profiles-token"},
			{Name: "intruder", Kind: "service", Token: "intruder-token"},
		},
	}
}

// TestOpenAPIRoutes: every route the usage API, the admin view and the login register is documented, and
// every documented one is registered.
func TestOpenAPIRoutes(t *testing.T) {
	doc, err := apicheck.Load("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	routes := apicheck.SourceRoutes(t, map[string]string{"p": "/api/v1/", "statePath": "/api/v1/waitlist/state"}, "../api/api.go")
	routes = append(routes, apicheck.SourceRoutes(t, map[string]string{"p": "/"}, "../adminview/adminview.go")...)
	routes = append(routes, apicheck.SourceRoutes(t, map[string]string{"l.callback": "/oauth_callback", "l.opts.Prefix": "/"},
		"../../../../hubapi/huboauth/huboauth.go")...)
	apicheck.Routes(t, doc, routes)
}

// TestSecurity: every operation, API and pages, refuses what its x-gpuhub-access does not allow; a session
// cookie cannot be forged, altered for another user or admin, or outlive a revoked Hub login (issue 15).
func TestSecurity(t *testing.T) { apicheck.Security(t, suiteTarget(t)) }

// TestBadInput: malformed input answers 4xx with a message, never a server error (issue 15, bad input).
func TestBadInput(t *testing.T) { apicheck.BadInput(t, suiteTarget(t)) }
