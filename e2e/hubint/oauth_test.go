//go:build integration

package hubint_test

import (
	"context"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/huboauth"
)

// oauthPages is a service's pages behind huboauth, served before the Hub starts (JupyterHub 6 waits for every
// service with a url to answer) and wired to the Hub once it runs.
type oauthPages struct {
	url     string
	srv     *http.Server
	handler atomic.Pointer[http.Handler]
}

func startOAuthPages() (*oauthPages, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &oauthPages{url: "http://" + ln.Addr().String()}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := p.handler.Load()
		if h == nil {
			// Not 5xx: JupyterHub 6 waits at startup (up to 30 s) until a service answers anything else.
			http.Error(w, "not wired to the Hub yet", http.StatusNotFound)
			return
		}
		(*h).ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *oauthPages) close() { _ = p.srv.Close() }

// wire builds the login against the running Hub the way the usage API does: the browser goes to the Hub's public
// authorize path, the code is exchanged on the Hub's API address.
func (p *oauthPages) wire(t *testing.T) {
	t.Helper()
	if p.handler.Load() != nil {
		return
	}
	// The service's token is its OAuth client secret; hubproc generated it.
	token := hub.ServiceToken(svcPages)
	hc, err := hubapi.New(hubapi.Config{URL: hub.APIURL(), Token: token, UserAgent: "gpuhub-hubint"})
	if err != nil {
		t.Fatal(err)
	}
	prefix := "/services/" + svcPages + "/"
	login, err := huboauth.New(huboauth.Options{
		ClientID: "service-" + svcPages, ClientSecret: token, Hub: hc, Prefix: prefix,
		AuthorizeURL: "/hub/api/oauth2/authorize", TokenURL: hub.APIURL() + "/oauth2/token", HubLogoutURL: "/hub/logout",
		CallbackURL: prefix + "oauth_callback",
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	login.Routes(mux)
	mux.Handle("GET "+prefix+"{$}", login.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := huboauth.FromContext(r.Context())
		fmt.Fprintf(w, "user=%s admin=%t csrf=%s", s.User, s.Admin, s.CSRF)
	})))
	var h http.Handler = mux
	p.handler.Store(&h)
}

// oauthService is the service TestMain registered with the Hub.
var oauthService *oauthPages

var confirmScopes = regexp.MustCompile(`name="scopes" value="([^"]*)"`)

// TestServiceOAuthLogin runs huboauth's whole flow against the real Hub (5.5 and 6.x in make integration):
// redirect_uri as the Hub registered it, PKCE (verified by 6.x), the code exchanged with the client secret in
// the form body, whoami with the user's token, the session cookie, CSRF on logout. A user without
// access:services for the service gets no session.
func TestServiceOAuthLogin(t *testing.T) {
	oauthService.wire(t)
	h := &hubtest.Hub{Name: "plain", Proc: hub, Password: hub.Password()}
	page := "services/" + svcPages + "/"

	b := h.Login(t, "alice")
	code, body, loc := b.Do(t, http.MethodGet, page, nil)
	if code != http.StatusFound || !strings.HasPrefix(loc, "/hub/api/oauth2/authorize?") {
		t.Fatalf("first visit: %d to %q, want 302 to the Hub's authorize endpoint: %s", code, loc, body)
	}
	code, body, next := b.Do(t, http.MethodGet, loc, nil)
	if code == http.StatusOK { // the Hub asks once whether alice allows the service to know who she is
		form := url.Values{"_xsrf": {hubtest.XSRF(t, body)}}
		for _, m := range confirmScopes.FindAllStringSubmatch(body, -1) {
			form.Add("scopes", html.UnescapeString(m[1]))
		}
		code, body, next = b.Do(t, http.MethodPost, loc, form)
	}
	if code != http.StatusFound || !strings.HasPrefix(next, "/services/"+svcPages+"/oauth_callback?") {
		t.Fatalf("authorize: %d to %q, want 302 to the callback: %s", code, next, body)
	}
	code, body, back := b.Do(t, http.MethodGet, next, nil)
	if code != http.StatusFound || back != "/"+page {
		t.Fatalf("callback: %d to %q, want 302 to the page: %s\nhub log:\n%s", code, back, body, hub.LogTail(30))
	}
	code, body, _ = b.Do(t, http.MethodGet, page, nil)
	if code != http.StatusOK || !strings.HasPrefix(body, "user=alice admin=false csrf=") {
		t.Fatalf("page after login: %d %q, want alice's session", code, body)
	}
	csrf := strings.TrimPrefix(body, "user=alice admin=false csrf=")

	// Logging in again (expiry, another tab) needs no confirmation: the Hub remembers the authorization.
	b2 := h.Login(t, "alice")
	_, _, loc = b2.Do(t, http.MethodGet, page, nil)
	if code, _, next := b2.Do(t, http.MethodGet, loc, nil); code != http.StatusFound || !strings.Contains(next, "oauth_callback") {
		t.Errorf("second login: %d to %q, want straight back to the callback", code, next)
	}

	if code, _, _ := b.Do(t, http.MethodPost, "services/"+svcPages+"/logout", url.Values{}); code != http.StatusForbidden {
		t.Errorf("logout without the CSRF field: %d, want 403", code)
	}
	if code, _, _ := b.Do(t, http.MethodPost, "services/"+svcPages+"/logout", url.Values{huboauth.CSRFField: {csrf}}); code != http.StatusOK {
		t.Errorf("logout: %d, want 200", code)
	}
	if code, _, _ := b.Do(t, http.MethodGet, page, nil); code != http.StatusFound {
		t.Errorf("page after logout: %d, want a new login", code)
	}

	// bob lacks access:services!service=oauth-pages: the Hub refuses to authorize, so no session.
	bob := h.Login(t, "bob")
	_, _, loc = bob.Do(t, http.MethodGet, page, nil)
	if code, _, next := bob.Do(t, http.MethodGet, loc, nil); code < 400 && strings.Contains(next, "oauth_callback") {
		t.Errorf("bob without access: %d to %q, want a refusal", code, next)
	}
	if code, _, _ := bob.Do(t, http.MethodGet, page, nil); code == http.StatusOK {
		t.Error("bob got the page")
	}
}
