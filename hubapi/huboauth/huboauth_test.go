package huboauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/hubapi"
)

const (
	prefix   = "/services/gpu-usage/"
	clientID = "service-gpu-usage"
	secret   = "service-secret-0123456789"
	callback = prefix + "oauth_callback"
)

// fakeHub plays the Hub's token endpoint (checking what JupyterHub checks) and GET /hub/api/user.
type fakeHub struct {
	mu         sync.Mutex
	challenges map[string]string // code -> PKCE challenge
	users      map[string]*hubapi.User
	next       int
	whoamis    int
	t          *testing.T
}

func newFakeHub(t *testing.T) *fakeHub {
	return &fakeHub{t: t, challenges: map[string]string{}, users: map[string]*hubapi.User{}}
}

// authorize is what the Hub does when the logged-in user allows the authorize request: a code for that user.
func (h *fakeHub) authorize(t *testing.T, authorizeURL string, user *hubapi.User) (code, state string) {
	t.Helper()
	u, err := url.Parse(authorizeURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	want := map[string]string{"client_id": clientID, "redirect_uri": callback, "response_type": "code", "code_challenge_method": "S256"}
	for k, v := range want {
		if q.Get(k) != v {
			t.Fatalf("authorize %s = %q, want %q", k, q.Get(k), v)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	code = "code-" + string(rune('a'+h.next))
	h.challenges[code] = q.Get("code_challenge")
	h.users["token-for-"+code] = user
	return code, q.Get("state")
}

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	if _, _, basic := r.BasicAuth(); basic {
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	code := r.PostFormValue("code")
	challenge, ok := h.challenges[code]
	sum := sha256.Sum256([]byte(r.PostFormValue("code_verifier")))
	switch {
	case r.PostFormValue("client_id") != clientID || r.PostFormValue("client_secret") != secret:
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
	case !ok || r.PostFormValue("grant_type") != "authorization_code" || r.PostFormValue("redirect_uri") != callback ||
		base64.RawURLEncoding.EncodeToString(sum[:]) != challenge:
		w.WriteHeader(400)
		_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
	default:
		delete(h.challenges, code) // a code is good once
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "token-for-" + code, "token_type": "Bearer"})
	}
}

func (h *fakeHub) WhoAmIWithToken(_ context.Context, token string) (*hubapi.User, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.whoamis++
	if u, ok := h.users[token]; ok {
		c := *u
		return &c, nil
	}
	return nil, &hubapi.APIError{StatusCode: 403, Method: "GET", Path: "/user"}
}

type env struct {
	hub   *fakeHub
	login *Login
	mux   *http.ServeMux
	now   time.Time
	logs  *bytes.Buffer
}

func newEnv(t *testing.T) *env {
	e := &env{hub: newFakeHub(t), now: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC), logs: &bytes.Buffer{}}
	tokenSrv := httptest.NewServer(e.hub)
	t.Cleanup(tokenSrv.Close)
	l, err := New(Options{
		ClientID: clientID, ClientSecret: secret, AuthorizeURL: "/hub/api/oauth2/authorize",
		TokenURL: tokenSrv.URL + "/hub/api/oauth2/token", HubLogoutURL: "/hub/logout", CallbackURL: callback, Prefix: prefix,
		Hub: e.hub, AdminGroups: []string{"gpu-admins"}, Key: bytes.Repeat([]byte("k"), 32),
		Clock: func() time.Time { return e.now }, Logger: slog.New(slog.NewTextHandler(e.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.login = l
	e.mux = http.NewServeMux()
	l.Routes(e.mux)
	e.mux.Handle(prefix+"{$}", l.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := FromContext(r.Context())
		_ = json.NewEncoder(w).Encode(map[string]any{"user": s.User, "admin": s.Admin, "method": r.Method})
	})))
	e.mux.Handle(prefix+"users/{name}", l.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := FromContext(r.Context())
		_, _ = w.Write([]byte(s.User))
	})))
	return e
}

// browser keeps cookies the way a browser does for one origin (path-scoped).
type browser struct {
	cookies map[string]*http.Cookie
}

// reply is what the browser got back.
type reply struct {
	StatusCode int
	Header     http.Header
	Body       *bytes.Buffer
	cookies    []*http.Cookie
}

func (r reply) Cookies() []*http.Cookie { return r.cookies }

func (b *browser) do(t *testing.T, e *env, method, target string, form url.Values, hdr http.Header) reply {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequestWithContext(t.Context(), method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		r.Header[k] = v
	}
	for _, c := range b.cookies {
		if strings.HasPrefix(r.URL.Path, c.Path) {
			r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		}
	}
	w := httptest.NewRecorder()
	e.mux.ServeHTTP(w, r)
	resp := reply{StatusCode: w.Code, Header: w.Header(), Body: w.Body, cookies: w.Result().Cookies()} //nolint:bodyclose // a recorder's body needs no closing
	if b.cookies == nil {
		b.cookies = map[string]*http.Cookie{}
	}
	for _, c := range resp.Cookies() {
		if c.MaxAge < 0 {
			delete(b.cookies, c.Name)
		} else {
			b.cookies[c.Name] = c
		}
	}
	return resp
}

// logIn runs the whole flow for user and returns the browser with its session.
func logIn(t *testing.T, e *env, user *hubapi.User, start string) (*browser, reply) {
	t.Helper()
	b := &browser{}
	resp := b.do(t, e, "GET", start, nil, nil)
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), "/hub/api/oauth2/authorize?") {
		t.Fatalf("first visit: %d to %q, want 302 to the Hub's authorize", resp.StatusCode, resp.Header.Get("Location"))
	}
	code, state := e.hub.authorize(t, resp.Header.Get("Location"), user)
	resp = b.do(t, e, "GET", callback+"?"+url.Values{"code": {code}, "state": {state}}.Encode(), nil, nil)
	return b, resp
}

func TestLoginFlow(t *testing.T) {
	e := newEnv(t)
	alice := &hubapi.User{Kind: "user", Name: "alice", Groups: []string{"students"}}
	b, resp := logIn(t, e, alice, prefix+"users/alice?window=7d")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != prefix+"users/alice?window=7d" {
		t.Fatalf("callback: %d to %q, want 302 back to the page asked for", resp.StatusCode, resp.Header.Get("Location"))
	}
	ck := b.cookies[e.login.cookie]
	if ck == nil {
		t.Fatal("no session cookie")
	}
	if !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != prefix || ck.Secure {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Lax, Path=%s, not Secure over plain HTTP", ck, prefix)
	}
	if len(b.cookies) != 1 {
		t.Errorf("cookies after login: %v, want only the session (the login state is spent)", b.cookies)
	}
	resp = b.do(t, e, "GET", prefix, nil, nil)
	var got map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&got)
	if diff := cmp.Diff(map[string]any{"user": "alice", "admin": false, "method": "GET"}, got); diff != "" {
		t.Errorf("page sees (-want +got):\n%s", diff)
	}
	if strings.Contains(e.logs.String(), "token-for-") || strings.Contains(e.logs.String(), secret) {
		t.Errorf("a token or the client secret reached the log:\n%s", e.logs)
	}
	if strings.Contains(ck.Value, "token-for-") {
		t.Error("the Hub token is readable in the cookie; it must be encrypted")
	}
}

func TestAdminByFlagOrGroup(t *testing.T) {
	for _, u := range []*hubapi.User{
		{Kind: "user", Name: "root", Admin: true},
		{Kind: "user", Name: "gina", Groups: []string{"gpu-admins"}},
	} {
		e := newEnv(t)
		b, _ := logIn(t, e, u, prefix)
		resp := b.do(t, e, "GET", prefix, nil, nil)
		var got map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&got)
		if got["admin"] != true {
			t.Errorf("%s: admin = %v, want true", u.Name, got["admin"])
		}
	}
}

func TestSecureCookieBehindHTTPS(t *testing.T) {
	e := newEnv(t)
	b := &browser{}
	resp := b.do(t, e, "GET", prefix, nil, http.Header{"X-Forwarded-Proto": {"https"}})
	for _, c := range resp.Cookies() {
		if !c.Secure {
			t.Errorf("cookie %s not Secure behind HTTPS", c.Name)
		}
	}
}

func TestCallbackRefusals(t *testing.T) {
	e := newEnv(t)
	alice := &hubapi.User{Kind: "user", Name: "alice"}
	b := &browser{}
	resp := b.do(t, e, "GET", prefix, nil, nil)
	code, state := e.hub.authorize(t, resp.Header.Get("Location"), alice)
	for _, tc := range []struct {
		name   string
		b      *browser
		query  url.Values
		status int
	}{
		{"state of another login", b, url.Values{"code": {code}, "state": {"forged-state"}}, http.StatusBadRequest},
		{"no login-state cookie (another browser)", &browser{}, url.Values{"code": {code}, "state": {state}}, http.StatusBadRequest},
		{"no code", b, url.Values{"state": {state}}, http.StatusBadRequest},
		{"user denied", b, url.Values{"error": {"access_denied"}, "state": {state}}, http.StatusForbidden},
		{"code the Hub does not know", b, url.Values{"code": {"stolen"}, "state": {state}}, http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := map[string]*http.Cookie{}
			for k, v := range tc.b.cookies {
				saved[k] = v
			}
			resp := tc.b.do(t, e, "GET", callback+"?"+tc.query.Encode(), nil, nil)
			tc.b.cookies = saved
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if _, ok := tc.b.cookies[e.login.cookie]; ok {
				t.Error("a session was set")
			}
		})
	}
}

func TestOpenRedirectRefused(t *testing.T) {
	e := newEnv(t)
	for _, next := range []string{"//evil.example/", "/hub/admin", prefix + "oauth_callback?x=1", `/services/gpu-usage/\evil`} {
		if got := e.login.safeNext(next); got != prefix {
			t.Errorf("safeNext(%q) = %q, want the prefix", next, got)
		}
	}
	if got := e.login.safeNext(prefix + "hours?window=7d"); got != prefix+"hours?window=7d" {
		t.Errorf("a page under the prefix was not kept: %q", got)
	}
}

func TestForgedAndTamperedCookies(t *testing.T) {
	e := newEnv(t)
	b, _ := logIn(t, e, &hubapi.User{Kind: "user", Name: "alice"}, prefix)
	genuine := b.cookies[e.login.cookie].Value

	other := &claims{Admin: true, CSRF: "x", RegisteredClaims: jwt.RegisteredClaims{Subject: "bob", Issuer: clientID,
		Audience: jwt.ClaimStrings{clientID}, ExpiresAt: jwt.NewNumericDate(e.now.Add(time.Hour))}}
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, other).SignedString([]byte("another key, 32 bytes long......"))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, other).SignedString(jwt.UnsafeAllowNoneSignatureType)
	parts := strings.Split(genuine, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	swapped := strings.Replace(string(payload), `"sub":"alice"`, `"sub":"bob"`, 1)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(swapped)) + "." + parts[2]

	for name, value := range map[string]string{"signed with another key": forged, "alg none": none, "user swapped": tampered, "garbage": "x.y.z"} {
		t.Run(name, func(t *testing.T) {
			fb := &browser{cookies: map[string]*http.Cookie{e.login.cookie: {Name: e.login.cookie, Value: value, Path: prefix}}}
			resp := fb.do(t, e, "GET", prefix+"users/bob", nil, nil)
			if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), "/hub/api/oauth2/authorize") {
				t.Errorf("%d %q: want a new login", resp.StatusCode, resp.Header.Get("Location"))
			}
		})
	}
}

func TestExpiredSessionRenewedWithTheHub(t *testing.T) {
	e := newEnv(t)
	alice := &hubapi.User{Kind: "user", Name: "alice"}
	b, _ := logIn(t, e, alice, prefix)
	before := e.hub.whoamis

	// The Hub made alice an admin meanwhile; her session learns it when it expires, not before.
	e.hub.mu.Lock()
	for _, u := range e.hub.users {
		u.Admin = true
	}
	e.hub.mu.Unlock()
	e.now = e.now.Add(DefaultSessionTTL - time.Second)
	resp := b.do(t, e, "GET", prefix, nil, nil)
	var got map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&got)
	if got["admin"] != false || e.hub.whoamis != before {
		t.Fatalf("within the TTL: admin %v, Hub asked %d times; want the cookie trusted without asking", got["admin"], e.hub.whoamis-before)
	}
	e.now = e.now.Add(2 * time.Second)
	resp = b.do(t, e, "GET", prefix, nil, nil)
	got = nil
	_ = json.NewDecoder(resp.Body).Decode(&got)
	if resp.StatusCode != 200 || got["admin"] != true || e.hub.whoamis != before+1 {
		t.Fatalf("after the TTL: %d admin %v, Hub asked %d times; want one renewal with the new admin status", resp.StatusCode, got["admin"], e.hub.whoamis-before)
	}

	// The Hub revokes the token (user deleted, token expired): the next expiry sends her to log in.
	e.hub.mu.Lock()
	e.hub.users = map[string]*hubapi.User{}
	e.hub.mu.Unlock()
	e.now = e.now.Add(DefaultSessionTTL + time.Second)
	resp = b.do(t, e, "GET", prefix, nil, nil)
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("revoked token: %d, want a new login", resp.StatusCode)
	}
	// A POST never starts a login (it would lose the form): 401 with what to do.
	resp = b.do(t, e, "POST", prefix, url.Values{}, nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without a session: %d, want 401", resp.StatusCode)
	}
}

func TestCSRFAndLogout(t *testing.T) {
	e := newEnv(t)
	b, _ := logIn(t, e, &hubapi.User{Kind: "user", Name: "alice"}, prefix)
	c, err := e.login.session(&http.Request{Header: http.Header{"Cookie": {e.login.cookie + "=" + b.cookies[e.login.cookie].Value}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		hdr    http.Header
		status int
	}{
		{"no CSRF field", url.Values{}, nil, http.StatusForbidden},
		{"wrong CSRF field", url.Values{CSRFField: {"guess"}}, nil, http.StatusForbidden},
		{"right field, other site's Origin", url.Values{CSRFField: {c.CSRF}}, http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"right field", url.Values{CSRFField: {c.CSRF}}, http.Header{"Origin": {"http://example.com"}}, http.StatusOK},
	} {
		t.Run("POST page: "+tc.name, func(t *testing.T) {
			if resp := b.do(t, e, "POST", prefix, tc.form, tc.hdr); resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
	if resp := b.do(t, e, "POST", prefix+"logout", url.Values{}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without CSRF: %d, want 403", resp.StatusCode)
	}
	if b.cookies[e.login.cookie] == nil {
		t.Fatal("a refused logout cleared the session")
	}
	if resp := b.do(t, e, "POST", prefix+"logout", url.Values{CSRFField: {c.CSRF}}, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("logout: %d, want 200", resp.StatusCode)
	}
	if b.cookies[e.login.cookie] != nil {
		t.Error("logout kept the session cookie")
	}
	if resp := b.do(t, e, "GET", prefix, nil, nil); resp.StatusCode != http.StatusFound {
		t.Errorf("after logout: %d, want a new login", resp.StatusCode)
	}
}

func TestTwoLoginsAtOnce(t *testing.T) {
	e := newEnv(t)
	alice := &hubapi.User{Kind: "user", Name: "alice"}
	b := &browser{}
	first := b.do(t, e, "GET", prefix+"users/alice", nil, nil).Header.Get("Location")
	second := b.do(t, e, "GET", prefix, nil, nil).Header.Get("Location")
	c1, s1 := e.hub.authorize(t, first, alice)
	c2, s2 := e.hub.authorize(t, second, alice)
	for _, cs := range [][2]string{{c2, s2}, {c1, s1}} {
		resp := b.do(t, e, "GET", callback+"?"+url.Values{"code": {cs[0]}, "state": {cs[1]}}.Encode(), nil, nil)
		if resp.StatusCode != http.StatusFound {
			t.Errorf("login in its own tab: %d, want 302", resp.StatusCode)
		}
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	good := Options{ClientID: clientID, ClientSecret: secret, AuthorizeURL: "/a", TokenURL: "http://h/t", CallbackURL: callback, Prefix: prefix, Hub: newFakeHub(t)}
	for name, mut := range map[string]func(*Options){
		"no secret":   func(o *Options) { o.ClientSecret = "" },
		"short key":   func(o *Options) { o.Key = []byte("short") },
		"bad prefix":  func(o *Options) { o.Prefix = "services/x" },
		"no hub":      func(o *Options) { o.Hub = nil },
		"no callback": func(o *Options) { o.CallbackURL = "" },
	} {
		o := good
		mut(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Errorf("good options: %v", err)
	}
}
