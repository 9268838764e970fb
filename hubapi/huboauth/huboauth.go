package huboauth

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/hubapi"
)

// Defaults applied by New.
const (
	DefaultSessionTTL = 15 * time.Minute
	// DefaultLoginTTL bounds the time between leaving for the Hub's authorize page and coming back.
	DefaultLoginTTL = 10 * time.Minute
)

// TokenChecker asks the Hub who owns a token. *hubapi.Client satisfies it.
type TokenChecker interface {
	WhoAmIWithToken(ctx context.Context, token string) (*hubapi.User, error)
}

// Options configure a Login.
type Options struct {
	// ClientID is the service's OAuth client id (JUPYTERHUB_CLIENT_ID, service-<name>); ClientSecret is its
	// Hub API token, which the Hub also uses as the client secret.
	ClientID, ClientSecret string
	// AuthorizeURL is where the browser goes to log in: the Hub's public authorize path, base URL included
	// (e.g. /hub/api/oauth2/authorize). TokenURL is where this service exchanges the code, on the Hub's
	// internal API address (e.g. http://hub:8081/hub/api/oauth2/token). HubLogoutURL is offered after logout.
	AuthorizeURL, TokenURL, HubLogoutURL string
	// CallbackURL is the redirect_uri exactly as the Hub registered it for the service
	// (JUPYTERHUB_OAUTH_CALLBACK_URL, by default /services/<name>/oauth_callback); the Hub compares it
	// verbatim. Its path is where Routes serves the callback.
	CallbackURL string
	// Prefix is the service prefix (/services/<name>/): the cookies' path and where logout is served.
	Prefix string
	// Hub identifies the user behind the token the flow returns (GET /hub/api/user).
	Hub TokenChecker
	// AdminGroups makes members of these Hub groups admins, besides the Hub's admin flag.
	AdminGroups []string
	// Key signs the session cookie and encrypts the Hub token inside it (>= 32 bytes). Nil: a random key per
	// process, so a restart or another replica sends users through the (silent) login again.
	Key []byte
	// SessionTTL is how long a session cookie is trusted before the user's admin status is checked with the
	// Hub again; default 15 min.
	SessionTTL time.Duration
	// Secure forces the Secure attribute on cookies; without it they are Secure when the request came over
	// HTTPS (TLS here, or X-Forwarded-Proto: https from the proxy).
	Secure     bool
	HTTPClient *http.Client
	Clock      func() time.Time
	Logger     *slog.Logger
	// Registerer, when set, gets gpuhub_huboauth_logins_total and gpuhub_huboauth_session_renewals_total.
	Registerer prometheus.Registerer
}

// Login logs browser users into a service's pages through the Hub's OAuth flow.
//
// After the flow, the session cookie (a JWT signed with HS256) names the user and whether they are an admin,
// carries a CSRF token, and holds the user's Hub OAuth token encrypted with AES-GCM. It is trusted until it
// expires (SessionTTL); then Require asks the Hub who owns that token and issues a fresh session with the
// current admin status, or starts a new login when the Hub refuses the token. The Hub token never leaves the
// cookie in clear, never appears in a URL, and is never logged.
type Login struct {
	opts      Options
	macKey    []byte
	aead      cipher.AEAD
	cookie    string // session cookie name
	stateBase string // login-state cookie names start with it
	callback  string // path of CallbackURL
	logins    *prometheus.CounterVec
	renewals  *prometheus.CounterVec
}

// New checks opts and returns a Login.
func New(opts Options) (*Login, error) {
	var missing []string
	for name, v := range map[string]string{"client id": opts.ClientID, "client secret": opts.ClientSecret,
		"authorize URL": opts.AuthorizeURL, "token URL": opts.TokenURL, "callback URL": opts.CallbackURL, "prefix": opts.Prefix} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("huboauth: missing %s", strings.Join(missing, ", "))
	}
	if opts.Hub == nil {
		return nil, errors.New("huboauth: no Hub to identify users with")
	}
	cb, err := url.Parse(opts.CallbackURL)
	if err != nil || cb.Path == "" {
		return nil, fmt.Errorf("huboauth: callback URL %q has no path", opts.CallbackURL)
	}
	if !strings.HasPrefix(opts.Prefix, "/") || !strings.HasSuffix(opts.Prefix, "/") {
		return nil, fmt.Errorf("huboauth: prefix %q must start and end with /", opts.Prefix)
	}
	if opts.Key == nil {
		opts.Key = make([]byte, 32)
		if _, err := rand.Read(opts.Key); err != nil {
			return nil, fmt.Errorf("huboauth: session key: %w", err)
		}
	}
	if len(opts.Key) < 32 {
		return nil, fmt.Errorf("huboauth: the session key has %d bytes; it needs at least 32", len(opts.Key))
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// One secret, two keys: signing and encryption never share key material.
	block, err := aes.NewCipher(derive(opts.Key, "gpuhub session encryption"))
	if err != nil {
		return nil, fmt.Errorf("huboauth: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("huboauth: %w", err)
	}
	base := cookieBase(opts.ClientID)
	l := &Login{
		opts: opts, macKey: derive(opts.Key, "gpuhub session signature"), aead: aead,
		cookie: base + "-session", stateBase: base + "-oauth-", callback: cb.Path,
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuhub_huboauth_logins_total",
			Help: "Logins through the Hub's OAuth flow, by result (ok, denied, bad_state, hub_error).",
		}, []string{"result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuhub_huboauth_session_renewals_total",
			Help: "Expired sessions checked again with the Hub, by result (ok, refused, hub_error).",
		}, []string{"result"}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(l.logins, l.renewals)
	}
	return l, nil
}

func derive(key []byte, label string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// cookieBase makes a cookie name from the client id: letters, digits and dashes only.
func cookieBase(clientID string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, clientID)
}

// Routes adds the OAuth callback and logout to mux.
func (l *Login) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+l.callback, l.handleCallback)
	mux.HandleFunc("POST "+l.opts.Prefix+"logout", l.handleLogout)
}

// Require lets a request through with its Session in the context (FromContext), renews an expired session
// with the Hub, and otherwise sends a browser (GET, HEAD) to log in; other methods get 401.
func (l *Login) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := l.session(r)
		switch {
		case err == nil:
		case errors.Is(err, errExpired) && c != nil:
			// Past its TTL but genuine: ask the Hub again (admin status may have changed).
			var renewed bool
			c, renewed = l.renew(r.Context(), c)
			if !renewed {
				l.startLogin(w, r)
				return
			}
			l.setSession(w, r, c)
		default:
			l.startLogin(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !l.csrfOK(r, c.CSRF) {
			http.Error(w, "This form is out of date or did not come from this page: reload the page and try again.", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), c.session())))
	})
}

// claims is the session cookie's payload.
type claims struct {
	Admin bool   `json:"adm"`
	CSRF  string `json:"csrf"`
	// Hub is the user's Hub OAuth token, AES-GCM encrypted, base64url.
	Hub string `json:"hub"`
	jwt.RegisteredClaims
}

func (c *claims) session() Session {
	s := Session{User: c.Subject, Admin: c.Admin, CSRF: c.CSRF}
	if c.ExpiresAt != nil {
		s.Expires = c.ExpiresAt.Time
	}
	return s
}

var errExpired = errors.New("session expired")

// session reads and verifies the session cookie. An expired but otherwise valid cookie returns its claims with
// errExpired.
func (l *Login) session(r *http.Request) (*claims, error) {
	ck, err := r.Cookie(l.cookie)
	if err != nil {
		return nil, err
	}
	c := &claims{}
	_, err = jwt.ParseWithClaims(ck.Value, c, func(*jwt.Token) (any, error) { return l.macKey, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(l.opts.ClientID), jwt.WithAudience(l.opts.ClientID),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(l.opts.Clock))
	if errors.Is(err, jwt.ErrTokenExpired) && c.Subject != "" {
		return c, errExpired
	}
	if err != nil {
		return nil, err
	}
	if c.Subject == "" || c.CSRF == "" {
		return nil, errors.New("session without a user")
	}
	return c, nil
}

// renew asks the Hub who owns the session's Hub token now.
func (l *Login) renew(ctx context.Context, old *claims) (*claims, bool) {
	token, err := l.decrypt(old.Hub)
	if err != nil {
		l.renewals.WithLabelValues("refused").Inc()
		return nil, false
	}
	u, err := l.opts.Hub.WhoAmIWithToken(ctx, token)
	if err != nil || u.Kind == "service" || u.Name != old.Subject {
		result := "refused"
		if err != nil && !isRefusal(err) {
			result = "hub_error"
			l.opts.Logger.Warn("could not check an expired session with the Hub; the user logs in again", "user", old.Subject, "err", err)
		}
		l.renewals.WithLabelValues(result).Inc()
		return nil, false
	}
	l.renewals.WithLabelValues("ok").Inc()
	c := l.newClaims(u, old.Hub)
	c.CSRF = old.CSRF // keep open forms valid across the renewal
	return c, true
}

func isRefusal(err error) bool {
	var ae *hubapi.APIError
	return errors.As(err, &ae) && (ae.StatusCode == http.StatusUnauthorized || ae.StatusCode == http.StatusForbidden)
}

func (l *Login) newClaims(u *hubapi.User, sealedHub string) *claims {
	now := l.opts.Clock()
	admin := u.Admin
	for _, g := range u.Groups {
		admin = admin || slices.Contains(l.opts.AdminGroups, g)
	}
	return &claims{
		Admin: admin, CSRF: randomString(24), Hub: sealedHub,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject: u.Name, Issuer: l.opts.ClientID, Audience: jwt.ClaimStrings{l.opts.ClientID},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(l.opts.SessionTTL)),
		},
	}
}

func (l *Login) setSession(w http.ResponseWriter, r *http.Request, c *claims) {
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(l.macKey)
	if err != nil {
		http.Error(w, "could not sign the session", http.StatusInternalServerError)
		return
	}
	// The cookie outlives the session's TTL: an expired session is renewed with the Hub token it holds.
	http.SetCookie(w, l.newCookie(r, l.cookie, signed, 14*24*time.Hour))
}

func (l *Login) newCookie(r *http.Request, name, value string, maxAge time.Duration) *http.Cookie {
	ck := &http.Cookie{
		Name: name, Value: value, Path: l.opts.Prefix, HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: l.opts.Secure || r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	}
	if maxAge < 0 {
		ck.MaxAge = -1
	} else {
		ck.MaxAge = int(maxAge / time.Second)
	}
	return ck
}

// loginState is what the login-state cookie remembers between leaving for the Hub and coming back.
type loginState struct {
	State    string `json:"state"`
	Verifier string `json:"verifier"`
	Next     string `json:"next"`
	jwt.RegisteredClaims
}

// startLogin sends a browser to the Hub's authorize endpoint with a fresh state and PKCE challenge
// (JupyterHub 5.5 ignores PKCE; 6.x verifies it once a challenge is sent).
func (l *Login) startLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "Your session has ended: reload the page to log in again.", http.StatusUnauthorized)
		return
	}
	st := loginState{State: randomString(32), Verifier: randomString(32), Next: l.safeNext(r.URL.RequestURI())}
	now := l.opts.Clock()
	st.Issuer, st.ExpiresAt = l.opts.ClientID, jwt.NewNumericDate(now.Add(DefaultLoginTTL))
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, st).SignedString(l.macKey)
	if err != nil {
		http.Error(w, "could not start the login", http.StatusInternalServerError)
		return
	}
	// One cookie per login in flight (named by the state), so two tabs logging in at once both succeed.
	http.SetCookie(w, l.newCookie(r, l.stateCookie(st.State), signed, DefaultLoginTTL))
	sum := sha256.Sum256([]byte(st.Verifier))
	q := url.Values{
		"client_id": {l.opts.ClientID}, "redirect_uri": {l.opts.CallbackURL}, "response_type": {"code"},
		"state": {st.State}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, l.opts.AuthorizeURL+"?"+q.Encode(), http.StatusFound)
}

func (l *Login) stateCookie(state string) string {
	sum := sha256.Sum256([]byte(state))
	return l.stateBase + base64.RawURLEncoding.EncodeToString(sum[:6])
}

// safeNext keeps a return address only when it is a path under the prefix (never another site).
func (l *Login) safeNext(next string) string {
	if !strings.HasPrefix(next, l.opts.Prefix) || strings.HasPrefix(next, "//") || strings.Contains(next, `\`) ||
		strings.HasPrefix(next, l.callback) {
		return l.opts.Prefix
	}
	return next
}

func (l *Login) handleCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		l.logins.WithLabelValues("denied").Inc()
		l.page(w, http.StatusForbidden, "Login not completed",
			"The Hub did not authorize this page ("+e+"). If you clicked Deny, log in again and allow access.", l.opts.Prefix, "Log in again")
		return
	}
	state, code := q.Get("state"), q.Get("code")
	ck, err := r.Cookie(l.stateCookie(state))
	st := &loginState{}
	if err == nil {
		_, err = jwt.ParseWithClaims(ck.Value, st, func(*jwt.Token) (any, error) { return l.macKey, nil },
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer(l.opts.ClientID),
			jwt.WithExpirationRequired(), jwt.WithTimeFunc(l.opts.Clock))
	}
	if err != nil || state == "" || code == "" || subtle.ConstantTimeCompare([]byte(st.State), []byte(state)) != 1 {
		l.logins.WithLabelValues("bad_state").Inc()
		l.page(w, http.StatusBadRequest, "Login expired",
			"This login link is stale or was started in another browser. Start again.", l.opts.Prefix, "Log in again")
		return
	}
	http.SetCookie(w, l.newCookie(r, ck.Name, "", -1))
	token, err := l.exchange(r.Context(), code, st.Verifier)
	if err != nil {
		l.logins.WithLabelValues("hub_error").Inc()
		l.opts.Logger.Warn("OAuth code exchange with the Hub failed", "err", err)
		l.page(w, http.StatusBadGateway, "Login failed",
			"The Hub did not complete the login. Try again; if it keeps failing, ask the Hub's admin to check this service's log.", l.opts.Prefix, "Try again")
		return
	}
	u, err := l.opts.Hub.WhoAmIWithToken(r.Context(), token)
	if err != nil || u.Kind == "service" || u.Name == "" {
		l.logins.WithLabelValues("hub_error").Inc()
		l.opts.Logger.Warn("could not identify the user after login", "err", err)
		l.page(w, http.StatusBadGateway, "Login failed", "The Hub did not say who you are. Try again.", l.opts.Prefix, "Try again")
		return
	}
	sealed, err := l.encrypt(token)
	if err != nil {
		http.Error(w, "could not keep the session", http.StatusInternalServerError)
		return
	}
	c := l.newClaims(u, sealed)
	l.setSession(w, r, c)
	l.logins.WithLabelValues("ok").Inc()
	l.opts.Logger.Info("logged in", "user", u.Name, "admin", c.Admin)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, l.safeNext(st.Next), http.StatusFound)
}

// exchange trades the code for the user's token. JupyterHub reads client_id and client_secret from the form
// body (HTTP Basic gets invalid_client).
func (l *Login) exchange(ctx context.Context, code, verifier string) (string, error) {
	form := url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {l.opts.CallbackURL},
		"client_id": {l.opts.ClientID}, "client_secret": {l.opts.ClientSecret}, "code_verifier": {verifier},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.opts.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := l.opts.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("POST %s: %w", l.opts.TokenURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", fmt.Errorf("POST %s: %w", l.opts.TokenURL, err)
	}
	var reply struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
	}
	_ = json.Unmarshal(body, &reply)
	if resp.StatusCode != http.StatusOK || reply.AccessToken == "" {
		// The reply's error code (e.g. invalid_grant) names the problem without repeating any secret.
		return "", fmt.Errorf("POST %s: %s %s", l.opts.TokenURL, resp.Status, reply.Error)
	}
	return reply.AccessToken, nil
}

func (l *Login) handleLogout(w http.ResponseWriter, r *http.Request) {
	c, err := l.session(r)
	if err != nil && !errors.Is(err, errExpired) {
		// No session: nothing to log out of; say so rather than fail.
		l.page(w, http.StatusOK, "Logged out", "You are not logged in to this page.", l.opts.Prefix, "Log in")
		return
	}
	if !l.csrfOK(r, c.CSRF) {
		http.Error(w, "This logout did not come from this page: reload the page and use its Log out button.", http.StatusForbidden)
		return
	}
	http.SetCookie(w, l.newCookie(r, l.cookie, "", -1))
	l.opts.Logger.Info("logged out", "user", c.Subject)
	l.page(w, http.StatusOK, "Logged out",
		"You are logged out of this page. You are still logged in to JupyterHub.", l.opts.Prefix, "Log in again")
}

// csrfOK checks the form's CSRF field against the session's, and that a browser-sent Origin is this host.
func (l *Login) csrfOK(r *http.Request, want string) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	got := r.PostFormValue(CSRFField)
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (l *Login) encrypt(token string) (string, error) {
	nonce := make([]byte, l.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(l.aead.Seal(nonce, nonce, []byte(token), []byte(l.opts.ClientID))), nil
}

func (l *Login) decrypt(sealed string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil || len(b) < l.aead.NonceSize() {
		return "", errors.New("bad sealed token")
	}
	n := l.aead.NonceSize()
	plain, err := l.aead.Open(nil, b[:n], b[n:], []byte(l.opts.ClientID))
	if err != nil {
		return "", err
	}
	return string(plain), nil
}

func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on supported platforms (Go 1.24+)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark"><title>{{.Title}}</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;line-height:1.5}</style>
</head><body><main><h1>{{.Title}}</h1><p>{{.Message}}</p>
<p><a href="{{.Link}}">{{.LinkText}}</a>{{if .HubLogout}} · <a href="{{.HubLogout}}">Log out of JupyterHub</a>{{end}}</p>
</main></body></html>
`))

// page writes a small HTML page with one message and a way on.
func (l *Login) page(w http.ResponseWriter, status int, title, message, link, linkText string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = pageTemplate.Execute(w, map[string]string{"Title": title, "Message": message, "Link": link, "LinkText": linkText,
		"HubLogout": l.opts.HubLogoutURL})
}
