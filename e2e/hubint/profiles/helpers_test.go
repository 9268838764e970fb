//go:build integration

package profiles_test

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

	"github.com/gpuhub/gpuhub/hubapi"
)

// startServer is POST /hub/api/users/{user}/server[s/{server}] with the profile in user_options.
func (h *hubUnderTest) startServer(ctx context.Context, token, user, server, profile string) (int, []byte, error) {
	u := h.hub.APIURL() + "/users/" + url.PathEscape(user) + "/server"
	if server != "" {
		u += "s/" + url.PathEscape(server)
	}
	body, _ := json.Marshal(map[string]string{"profile": profile})
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

// waitStopped waits until user's server is neither pending nor running.
func (h *hubUnderTest) waitStopped(ctx context.Context, user, server string) error {
	c, err := hubapi.New(hubapi.Config{URL: h.hub.APIURL(), Token: h.hub.AdminToken()})
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

// userToken mints a token for user, as the user would create one on /hub/token.
func (h *hubUnderTest) userToken(t *testing.T, user string) string {
	t.Helper()
	c, err := hubapi.New(hubapi.Config{URL: h.hub.APIURL(), Token: h.hub.AdminToken()})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.CreateToken(ctxT(t, 10*time.Second), user, hubapi.TokenRequest{ExpiresIn: 600, Note: "hubint/profiles"})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// progressEvent is one event of /hub/api/users/{user}/server/progress.
type progressEvent struct {
	Progress int    `json:"progress"`
	Failed   bool   `json:"failed"`
	Ready    bool   `json:"ready"`
	Message  string `json:"message"`
}

// failedEvent reads user's progress stream until the failure event.
func (h *hubUnderTest) failedEvent(ctx context.Context, token, user string) (progressEvent, []progressEvent, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.hub.APIURL()+"/users/"+url.PathEscape(user)+"/server/progress", http.NoBody)
	if err != nil {
		return progressEvent{}, nil, err
	}
	req.Header.Set("Authorization", "token "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return progressEvent{}, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return progressEvent{}, nil, fmt.Errorf("progress: %s %s", resp.Status, b)
	}
	var all []progressEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev progressEvent
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &ev); err != nil {
			return progressEvent{}, all, fmt.Errorf("progress event %q: %w", data, err)
		}
		all = append(all, ev)
		if ev.Failed || ev.Ready {
			return ev, all, nil
		}
	}
	return progressEvent{}, all, fmt.Errorf("progress stream ended without a failed or ready event: %w", sc.Err())
}

// browser is a logged-in user of the Hub's web pages (cookies, xsrf), redirects not followed.
type browser struct {
	base   string
	client *http.Client
}

var (
	xsrfField  = regexp.MustCompile(`name="_xsrf" value="([^"]+)"`)
	formAction = regexp.MustCompile(`id="spawn_form"\s+action="([^"]+)"`)
)

// spawnAction is where the spawn form posts to (the Hub puts the xsrf token in its query).
func spawnAction(t *testing.T, page string) string {
	t.Helper()
	m := formAction.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no spawn form in page:\n%s", page)
	}
	return html.UnescapeString(m[1])
}

func (h *hubUnderTest) login(t *testing.T, user string) *browser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &browser{base: h.hub.BaseURL(), client: &http.Client{
		Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	_, page := b.get(t, "hub/login")
	code, _, _ := b.post(t, "hub/login", url.Values{"username": {user}, "password": {password}, "_xsrf": {xsrf(t, page)}})
	if code != http.StatusFound {
		t.Fatalf("login as %s: status %d, want 302", user, code)
	}
	return b
}

func xsrf(t *testing.T, page string) string {
	t.Helper()
	m := xsrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no _xsrf field in page:\n%s", page)
	}
	return html.UnescapeString(m[1])
}

func (b *browser) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.base+strings.TrimPrefix(path, "/"), http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b *browser) post(t *testing.T, path string, form url.Values) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.base+strings.TrimPrefix(path, "/"), strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header.Get("Location")
}

// metric reads one sample of the Hub's /hub/metrics (0 when absent).
func (h *hubUnderTest) metric(t *testing.T, sample string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, h.hub.APIURL()[:len(h.hub.APIURL())-len("/api")]+"/metrics", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+h.hub.ServiceToken(metricsService))
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

// alive fails the test when the Hub has exited or does not answer GET /hub/api/.
func (h *hubUnderTest) alive(t *testing.T) {
	t.Helper()
	select {
	case <-h.hub.Exited():
		t.Fatalf("hub %s (jupyterhub %s) exited", h.name, h.hub.Version())
	default:
	}
	req, _ := http.NewRequestWithContext(ctxT(t, 5*time.Second), http.MethodGet, h.hub.BaseURL()+"hub/api/", http.NoBody)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("hub %s does not answer: %v", h.name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("hub %s: GET /hub/api/: %s", h.name, resp.Status)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
