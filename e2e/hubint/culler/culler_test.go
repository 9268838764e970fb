//go:build integration

package culler_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
	"github.com/gpuhub/gpuhub/hubapi"
)

// countingTransport counts GET /users requests: the pages a listing took.
type countingTransport struct {
	mu    sync.Mutex
	pages int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/users") {
		c.mu.Lock()
		c.pages++
		c.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func newClient(t *testing.T, token string, rt http.RoundTripper) *hubapi.Client {
	t.Helper()
	cfg := hubapi.Config{URL: hub.Proc.APIURL(), Token: token, UserAgent: "gpuhub-hubint-culler"}
	if rt != nil {
		cfg.HTTPClient = &http.Client{Transport: rt}
	}
	c, err := hubapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readyNames lists the users with a ready server as c sees them, page by page (pageSize users a page).
func readyNames(ctx context.Context, t *testing.T, c *hubapi.Client, pageSize int) ([]hubapi.User, []string) {
	t.Helper()
	list, err := c.ListUsers(ctx, hubapi.ListUsersOptions{State: "ready", PageSize: pageSize})
	if err != nil {
		t.Fatalf("GET /users?state=ready: %v", err)
	}
	var names []string
	for _, u := range list {
		names = append(names, u.Name)
	}
	sort.Strings(names)
	return list, names
}

// TestCullerScopes: with exactly the chart's four scopes gpu-culler's token does what a pass does (the ready
// servers, page by page, with their activity; stopping one) and nothing more the test tries.
func TestCullerScopes(t *testing.T) {
	ctx := hubtest.CtxT(t, 4*time.Minute)
	admin := newClient(t, hub.Proc.AdminToken(), nil)
	pages := &countingTransport{}
	culler := newClient(t, hub.Proc.ServiceToken(cullerService), pages)

	// The token is the service's, with the four scopes (the Hub may expand them; none is missing).
	me, err := culler.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if me.Kind != "service" || me.Name != cullerService {
		t.Errorf("GET /user with gpu-culler's token: %s %q, want service %q", me.Kind, me.Name, cullerService)
	}
	for _, s := range cullerScopes {
		if !slices.Contains(me.Scopes, s) {
			t.Errorf("gpu-culler's token lacks %s: scopes %v", s, me.Scopes)
		}
	}
	t.Logf("gpu-culler's scopes as the Hub expands them: %v", me.Scopes)

	running := []string{"alice", "bob", "carol"}
	for _, u := range running {
		if _, err := admin.StartServer(ctx, u, "", nil); err != nil {
			t.Fatalf("start %s's server: %v", u, err)
		}
		t.Cleanup(func() { _, _ = admin.StopServer(context.Background(), u, "", false) })
	}
	var list []hubapi.User
	var names []string
	for {
		pages.mu.Lock()
		pages.pages = 0
		pages.mu.Unlock()
		list, names = readyNames(ctx, t, culler, 2)
		if slices.Equal(names, running) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ready servers seen by gpu-culler: %v, want %v (%v)", names, running, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	pages.mu.Lock()
	if pages.pages < 2 {
		t.Errorf("3 ready users listed in %d GET /users with 2 a page, want pages", pages.pages)
	}
	pages.mu.Unlock()
	for _, u := range list {
		srv, ok := u.Servers[""]
		if !ok || !srv.Ready || srv.Started == nil {
			t.Errorf("%s's default server as gpu-culler reads it: %+v (present %v), want ready with started (read:servers)", u.Name, srv, ok)
		}
		if srv.LastActivity == nil || u.LastActivity == nil {
			t.Errorf("%s: server last_activity %v, user last_activity %v: want both (read:users:activity, read:servers)", u.Name, srv.LastActivity, u.LastActivity)
		}
		if u.Groups != nil {
			t.Errorf("%s's groups visible without read:users:groups: %v", u.Name, u.Groups)
		}
	}

	// Nothing more: no starting servers, and groups stay hidden (a policy that exempts by group needs
	// read:users:groups, culler.extraHubScopes).
	if _, err := culler.StartServer(ctx, "dave", "", nil); !hubapi.IsForbidden(err) && !hubapi.IsNotFound(err) {
		t.Errorf("gpu-culler starting dave's server: error %v, want 403 or 404", err)
	}
	// list:users carries read:users:name in 5.5 and 6.x, and with it the admin flag: a policy with exempt.admins
	// needs no further scope.
	raw := rawUsers(ctx, t, hub.Proc.ServiceToken(cullerService))
	for _, u := range raw {
		if _, ok := u["groups"]; ok {
			t.Errorf("user %v has a groups field for gpu-culler's token", u["name"])
		}
		if _, ok := u["admin"].(bool); !ok {
			t.Errorf("user %v has no admin flag for gpu-culler's token: exempt.admins would need more scopes", u["name"])
		}
	}
	if !slices.Contains(me.Scopes, "read:users:name") {
		t.Errorf("gpu-culler's expanded scopes %v lack read:users:name (list:users implies it)", me.Scopes)
	}

	// Stop carol's server as a pass does (DELETE, 202, then gone from state=ready).
	res, err := culler.StopServer(ctx, "carol", "", false)
	if err != nil {
		t.Fatalf("gpu-culler stopping carol's server: %v", err)
	}
	t.Logf("DELETE carol's server: %+v", res)
	want := []string{"alice", "bob"}
	for {
		if _, names = readyNames(ctx, t, culler, 2); slices.Equal(names, want) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after the stop, ready servers %v, want %v (%v)", names, want, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err := hub.WaitStopped(ctx, "carol", ""); err != nil {
		t.Fatal(err)
	}
}

// rawUsers is GET /users as JSON objects, to see which fields the token is shown.
func rawUsers(ctx context.Context, t *testing.T, token string) []map[string]any {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hub.Proc.APIURL()+"/users?state=ready", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /users: %s %s", resp.Status, b)
	}
	var out []map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET /users: %v: %s", err, b)
	}
	return out
}

var stopBox = regexp.MustCompile(`(?s)<div class="alert alert-info" role="status" id="gpuhub-culler-stop">(.*?)</div>`)

// homeStop loads /hub/home as b's user: the status, how long it took, and the culler's message box ("" when none).
func homeStop(t *testing.T, b *hubtest.Browser) (int, time.Duration, string) {
	t.Helper()
	start := time.Now()
	code, page := b.Get(t, "hub/home")
	took := time.Since(start)
	if code == http.StatusOK && !strings.Contains(page, `id="start"`) {
		t.Errorf("the home page lost the Hub's own content (no start button):\n%s", page)
	}
	m := stopBox.FindStringSubmatch(page)
	if m == nil {
		if strings.Contains(page, "gpuhub-culler-stop") {
			t.Errorf("the home page has a broken culler box:\n%s", page)
		}
		return code, took, ""
	}
	return code, took, strings.TrimSpace(m[1])
}

// TestHomePage: the Hub home page says why gpu-culler stopped a server, as gpu-culler words it, escaped, asking
// with gpu-culler's own token and only on the home page; slow, failing or down, the page renders at once without
// it and the Hub logs each outage once.
func TestHomePage(t *testing.T) {
	culler.setStop("alice", map[string]any{"server": "", "at": "2026-11-23T15:10:00Z", "reason": "idle",
		"message": "Stopped at 15:10 UTC: GPU idle for 1 h 7 min."})
	culler.setStop("bob", map[string]any{"server": "big-model", "at": "2026-11-23T15:10:00Z", "reason": "max_age",
		"message": `Stopped at 15:10 UTC: running for 7 d <script>alert("x")</script>`})
	culler.setStop("dave", nil)
	culler.asked()

	alice, bob, dave := hub.Login(t, "alice"), hub.Login(t, "bob"), hub.Login(t, "dave")
	culler.asked() // logging in may land on the home page

	t.Run("message", func(t *testing.T) {
		cases := map[string]struct {
			b    *hubtest.Browser
			user string
			want string
		}{
			"default server": {alice, "alice", "Stopped at 15:10 UTC: GPU idle for 1 h 7 min."},
			"named server, escaped": {bob, "bob",
				"<strong>big-model</strong>: Stopped at 15:10 UTC: running for 7 d &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"},
			"no stop": {dave, "dave", ""},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				code, _, got := homeStop(t, tc.b)
				if code != http.StatusOK {
					t.Fatalf("GET /hub/home as %s: %d", tc.user, code)
				}
				if got != tc.want {
					t.Errorf("home page of %s says %q, want %q", tc.user, got, tc.want)
				}
			})
		}
		asked, bad := culler.asked()
		sort.Strings(asked)
		if diff := cmp.Diff([]string{"alice", "bob", "dave"}, asked); diff != "" || bad != 0 {
			t.Errorf("gpu-culler asked about (-want +got):\n%s\nrequests without its token: %d", diff, bad)
		}
	})

	t.Run("only the home page asks", func(t *testing.T) {
		for _, p := range []string{"hub/token", "hub/spawn-pending/alice", "hub/api/"} {
			alice.Get(t, p)
		}
		if asked, _ := culler.asked(); len(asked) != 0 {
			t.Errorf("pages other than home asked gpu-culler about %v", asked)
		}
	})

	// Each outage, however many pages it spans, is one warning in the Hub log; the page never waits past the
	// glue's bound (GPUHUB_CULLER_TIMEOUT 1 s + 0.25 s).
	warning := "the home page shows no culler stops"
	outages := 0
	for _, outage := range []struct {
		name       string
		begin, end func()
	}{
		{"slow", func() { culler.setMode("slow") }, func() { culler.setMode("ok") }},
		{"failing", func() { culler.setMode("error") }, func() { culler.setMode("ok") }},
		{"down", culler.down, func() {
			if err := culler.up(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(outage.name, func(t *testing.T) {
			outage.begin()
			for range 2 {
				code, took, got := homeStop(t, alice)
				if code != http.StatusOK || got != "" {
					t.Errorf("home page while gpu-culler is %s: status %d, message %q; want 200 without one", outage.name, code, got)
				}
				if took > 3*time.Second {
					t.Errorf("home page while gpu-culler is %s took %s, want at most the glue's bound (1.25 s) and some", outage.name, took)
				}
			}
			outages++
			waitLog(t, warning, outages)
			outage.end()
			if _, _, got := homeStop(t, alice); got == "" {
				t.Errorf("after gpu-culler was %s, the home page does not say why again", outage.name)
			}
			waitLog(t, "gpuhub culler glue: gpu-culler answers again", outages)
			culler.asked()
		})
	}
	hub.Alive(t)
}

// waitLog waits a little for the Hub log to hold want exactly n times, and fails when it holds it more often.
func waitLog(t *testing.T, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := strings.Count(hub.Proc.LogTail(100000), want)
		if got == n {
			return
		}
		if got > n || time.Now().After(deadline) {
			t.Fatalf("the Hub log holds %q %d times, want %d", want, got, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGlueUnit runs the culler part's Python unit tests (glue_test.py) with the Hub's own Python: where it asks, the
// answer it passes on, one log line per outage, and the templates it installs or leaves to the admin.
func TestGlueUnit(t *testing.T) {
	hubtest.GlueUnit(t, chartDir)
}
