// Package hubtest holds what the Hub integration tests (e2e/hubint/...) do with a real JupyterHub: REST spawns and
// their progress stream, tokens, a logged-in browser session for the HTML pages (cookies, xsrf), the Hub's own
// metrics, and whether it is still alive. It talks to 127.0.0.1 only.
package hubtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
	"github.com/gpuhub/gpuhub/hubapi"
)

// Hub is a running JupyterHub under test.
type Hub struct {
	Name string       // in failure messages ("z2jh", "plain")
	Proc *hubproc.Hub // the process
	// Password is the users' password (the dummy authenticator's); MetricsService a service with read:metrics;
	// TokenNote the note of the tokens UserToken mints.
	Password, MetricsService, TokenNote string
	// Kube is an admin client of the cluster the Hub spawns on, Namespace the Hub's single-user namespace (Pods).
	Kube      kubernetes.Interface
	Namespace string
}

// StartServer is POST /hub/api/users/{user}/server[s/{server}] with the profile in user_options.
func (h *Hub) StartServer(ctx context.Context, token, user, server, profile string) (int, []byte, error) {
	return h.StartServerWith(ctx, token, user, server, map[string]any{"profile": profile})
}

// StartServerWith is StartServer with user_options of the caller's (the profile and anything else).
func (h *Hub) StartServerWith(ctx context.Context, token, user, server string, userOptions map[string]any) (int, []byte, error) {
	u := h.Proc.APIURL() + "/users/" + url.PathEscape(user) + "/server"
	if server != "" {
		u += "s/" + url.PathEscape(server)
	}
	body, err := json.Marshal(userOptions)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// WaitStopped waits until user's server is neither pending nor running.
func (h *Hub) WaitStopped(ctx context.Context, user, server string) error {
	c, err := hubapi.New(hubapi.Config{URL: h.Proc.APIURL(), Token: h.Proc.AdminToken()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		u, err := c.GetUser(ctx, user)
		if err != nil {
			return err
		}
		if _, active := u.Servers[server]; !active {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s's server %q still active: %w", user, server, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// UserToken mints a token for user, as the user would create one on /hub/token.
func (h *Hub) UserToken(t *testing.T, user string) string {
	t.Helper()
	c, err := hubapi.New(hubapi.Config{URL: h.Proc.APIURL(), Token: h.Proc.AdminToken()})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.CreateToken(CtxT(t, 10*time.Second), user, hubapi.TokenRequest{ExpiresIn: 600, Note: h.TokenNote})
	if err != nil {
		t.Fatal(err)
	}
	logscan.Register("Hub token of user "+user+" (hubtest)", tok.Token)
	return tok.Token
}

// ProgressEvent is one event of /hub/api/users/{user}/server/progress.
type ProgressEvent struct {
	Progress int    `json:"progress"`
	Failed   bool   `json:"failed"`
	Ready    bool   `json:"ready"`
	Message  string `json:"message"`
}

// FailedEvent reads user's progress stream until the failure event.
func (h *Hub) FailedEvent(ctx context.Context, token, user string) (ProgressEvent, []ProgressEvent, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.Proc.APIURL()+"/users/"+url.PathEscape(user)+"/server/progress", http.NoBody)
	if err != nil {
		return ProgressEvent{}, nil, err
	}
	req.Header.Set("Authorization", "token "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ProgressEvent{}, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return ProgressEvent{}, nil, fmt.Errorf("progress: %s %s", resp.Status, b)
	}
	var all []ProgressEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev ProgressEvent
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &ev); err != nil {
			return ProgressEvent{}, all, fmt.Errorf("progress event %q: %w", data, err)
		}
		all = append(all, ev)
		if ev.Failed || ev.Ready {
			return ev, all, nil
		}
	}
	return ProgressEvent{}, all, fmt.Errorf("progress stream ended without a failed or ready event: %w", sc.Err())
}

// Browser is a logged-in user of the Hub's web pages (cookies, xsrf), redirects not followed.
type Browser struct {
	base   string
	client *http.Client
}

var (
	xsrfField  = regexp.MustCompile(`name="_xsrf" value="([^"]+)"`)
	formAction = regexp.MustCompile(`id="spawn_form"\s+action="([^"]+)"`)
)

// SpawnAction is where the spawn form posts to (the Hub puts the xsrf token in its query).
func SpawnAction(t *testing.T, page string) string {
	t.Helper()
	m := formAction.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no spawn form in page:\n%s", page)
	}
	return html.UnescapeString(m[1])
}

func (h *Hub) Login(t *testing.T, user string) *Browser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &Browser{base: h.Proc.BaseURL(), client: &http.Client{
		Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	_, page := b.Get(t, "hub/login")
	code, _, _ := b.Post(t, "hub/login", url.Values{"username": {user}, "password": {h.Password}, "_xsrf": {XSRF(t, page)}})
	if code != http.StatusFound {
		t.Fatalf("login as %s: status %d, want 302", user, code)
	}
	return b
}

func XSRF(t *testing.T, page string) string {
	t.Helper()
	m := xsrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no _xsrf field in page:\n%s", page)
	}
	return html.UnescapeString(m[1])
}

func (b *Browser) Get(t *testing.T, path string) (int, string) {
	t.Helper()
	code, body, _ := b.Do(t, http.MethodGet, path, nil)
	return code, body
}

func (b *Browser) Post(t *testing.T, path string, form url.Values) (int, string, string) {
	t.Helper()
	return b.Do(t, http.MethodPost, path, form)
}

// Do sends one request (a form when form is not nil) with the browser's cookies and returns the status, the
// body and the Location header; it never follows a redirect. path is relative to the proxy's base URL; a leading
// slash is dropped, so a Location the Hub sent can be passed back as it is.
func (b *Browser) Do(t *testing.T, method, path string, form url.Values) (int, string, string) {
	t.Helper()
	var body io.Reader = http.NoBody
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.base+strings.TrimPrefix(path, "/"), body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(page), resp.Header.Get("Location")
}

// Metric reads one sample of the Hub's /hub/metrics (0 when absent).
func (h *Hub) Metric(t *testing.T, sample string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(CtxT(t, 10*time.Second), http.MethodGet, h.Proc.APIURL()[:len(h.Proc.APIURL())-len("/api")]+"/metrics", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+h.Proc.ServiceToken(h.MetricsService))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /hub/metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// Alive fails the test when the Hub has exited or does not answer GET /hub/api/.
func (h *Hub) Alive(t *testing.T) {
	t.Helper()
	select {
	case <-h.Proc.Exited():
		t.Fatalf("hub %s (jupyterhub %s) exited", h.Name, h.Proc.Version())
	default:
	}
	req, _ := http.NewRequestWithContext(CtxT(t, 5*time.Second), http.MethodGet, h.Proc.BaseURL()+"hub/api/", http.NoBody)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("hub %s does not answer: %v", h.Name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("hub %s: GET /hub/api/: %s", h.Name, resp.Status)
	}
}

func CtxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
