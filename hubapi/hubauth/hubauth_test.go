package hubauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
)

// fakeChecker answers from a table and counts calls per token.
type fakeChecker struct {
	mu    sync.Mutex
	users map[string]*hubapi.User
	errs  map[string]error
	calls map[string]int
	gate  chan struct{} // when set, lookups wait for it
}

func newChecker() *fakeChecker {
	return &fakeChecker{users: map[string]*hubapi.User{}, errs: map[string]error{}, calls: map[string]int{}}
}

func (f *fakeChecker) WhoAmIWithToken(ctx context.Context, token string) (*hubapi.User, error) {
	f.mu.Lock()
	f.calls[token]++
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err, ok := f.errs[token]; ok {
		return nil, err
	}
	if u, ok := f.users[token]; ok {
		c := *u
		return &c, nil
	}
	return nil, &hubapi.APIError{StatusCode: 403, Method: "GET", Path: "/user", Message: "Missing or invalid credentials."}
}

func (f *fakeChecker) set(token string, u *hubapi.User, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.users, token)
	delete(f.errs, token)
	if u != nil {
		f.users[token] = u
	}
	if err != nil {
		f.errs[token] = err
	}
}

func (f *fakeChecker) n(token string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[token]
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newClock() *clock { return &clock{t: time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)} }

func req(token string) *http.Request {
	r := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/services/gpu-usage/api/v1/me", nil)
	if token != "" {
		r.Header.Set("Authorization", "token "+token)
	}
	return r
}

var alice = &hubapi.User{Kind: "user", Name: "alice", Groups: []string{"gpu"}, Scopes: []string{"read:users!user=alice"}}

func TestCacheTTLs(t *testing.T) {
	type step struct {
		advance   time.Duration
		wantErr   error // nil = identity
		wantCalls int
	}
	cases := map[string]struct {
		hubErr error
		steps  []step
	}{
		"positive TTL": {
			steps: []step{
				{wantCalls: 1},
				{advance: 59 * time.Second, wantCalls: 1},
				{advance: 2 * time.Second, wantCalls: 2}, // 61s: expired
				{advance: 30 * time.Second, wantCalls: 2},
			},
		},
		"negative TTL for 403": {
			hubErr: &hubapi.APIError{StatusCode: 403},
			steps: []step{
				{wantErr: hubauth.ErrInvalidToken, wantCalls: 1},
				{advance: 9 * time.Second, wantErr: hubauth.ErrInvalidToken, wantCalls: 1},
				{advance: 2 * time.Second, wantErr: hubauth.ErrInvalidToken, wantCalls: 2},
			},
		},
		"negative TTL for 401": {
			hubErr: &hubapi.APIError{StatusCode: 401},
			steps: []step{
				{wantErr: hubauth.ErrInvalidToken, wantCalls: 1},
				{advance: time.Second, wantErr: hubauth.ErrInvalidToken, wantCalls: 1},
			},
		},
		"hub 503 is not cached": {
			hubErr: &hubapi.APIError{StatusCode: 503},
			steps: []step{
				{wantErr: hubauth.ErrHubUnavailable, wantCalls: 1},
				{wantErr: hubauth.ErrHubUnavailable, wantCalls: 2},
			},
		},
		"transport error is not cached": {
			hubErr: errors.New("dial tcp 127.0.0.1:1: connect: connection refused"),
			steps: []step{
				{wantErr: hubauth.ErrHubUnavailable, wantCalls: 1},
				{wantErr: hubauth.ErrHubUnavailable, wantCalls: 2},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newChecker()
			f.set("tok", alice, tc.hubErr)
			clk := newClock()
			a := hubauth.New(hubauth.Options{Hub: f, Clock: clk.now})
			for i, s := range tc.steps {
				clk.add(s.advance)
				id, err := a.Authenticate(t.Context(), req("tok"))
				if s.wantErr != nil {
					if !errors.Is(err, s.wantErr) {
						t.Errorf("step %d: err = %v, want %v", i, err, s.wantErr)
					}
				} else if err != nil || id.Name != "alice" {
					t.Errorf("step %d: id = %+v, err = %v", i, id, err)
				}
				if got := f.n("tok"); got != s.wantCalls {
					t.Errorf("step %d: hub calls = %d, want %d", i, got, s.wantCalls)
				}
			}
		})
	}
}

func TestOutageAfterSuccessKeepsServingCache(t *testing.T) {
	f := newChecker()
	f.set("tok", alice, nil)
	clk := newClock()
	a := hubauth.New(hubauth.Options{Hub: f, Clock: clk.now})
	if _, err := a.Authenticate(t.Context(), req("tok")); err != nil {
		t.Fatal(err)
	}
	f.set("tok", nil, &hubapi.APIError{StatusCode: 502})
	clk.add(30 * time.Second)
	if _, err := a.Authenticate(t.Context(), req("tok")); err != nil {
		t.Errorf("within TTL during an outage: %v", err)
	}
	clk.add(31 * time.Second)
	if _, err := a.Authenticate(t.Context(), req("tok")); !errors.Is(err, hubauth.ErrHubUnavailable) {
		t.Errorf("after TTL during an outage: err = %v, want ErrHubUnavailable", err)
	}
	f.set("tok", alice, nil)
	if _, err := a.Authenticate(t.Context(), req("tok")); err != nil {
		t.Errorf("after recovery: %v (outage must not be cached)", err)
	}
}

func TestCacheBoundEvictsLeastRecentlyUsed(t *testing.T) {
	f := newChecker()
	for i := range 5 {
		f.set(fmt.Sprintf("t%d", i), &hubapi.User{Kind: "user", Name: fmt.Sprintf("u%d", i)}, nil)
	}
	a := hubauth.New(hubauth.Options{Hub: f, MaxEntries: 3, Clock: newClock().now})
	auth := func(tok string) {
		t.Helper()
		if _, err := a.Authenticate(t.Context(), req(tok)); err != nil {
			t.Fatal(err)
		}
	}
	auth("t0")
	auth("t1")
	auth("t2")
	auth("t0") // t0 is now the most recently used; t1 the least
	auth("t3") // evicts t1
	auth("t4") // evicts t2
	if got := a.Len(); got != 3 {
		t.Errorf("entries = %d, want 3", got)
	}
	auth("t0")
	auth("t1")
	got := map[string]int{"t0": f.n("t0"), "t1": f.n("t1"), "t2": f.n("t2")}
	want := map[string]int{"t0": 1, "t1": 2, "t2": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hub calls (-want +got):\n%s", diff)
	}
}

func TestSingleflight(t *testing.T) {
	f := newChecker()
	f.set("tok", alice, nil)
	f.gate = make(chan struct{})
	a := hubauth.New(hubauth.Options{Hub: f})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			id, err := a.Authenticate(t.Context(), req("tok"))
			if err == nil && id.Name != "alice" {
				err = fmt.Errorf("got %q", id.Name)
			}
			errs <- err
		})
	}
	// let the goroutines pile up on the one lookup, then answer it
	for f.n("tok") == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(f.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := f.n("tok"); n != 1 {
		t.Errorf("hub calls = %d, want 1", n)
	}
}

func TestCallerCancelDoesNotPoisonLookup(t *testing.T) {
	f := newChecker()
	f.set("tok", alice, nil)
	f.gate = make(chan struct{})
	a := hubauth.New(hubauth.Options{Hub: f})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := a.Authenticate(ctx, req("tok")); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	close(f.gate)
	if _, err := a.Authenticate(t.Context(), req("tok")); err != nil {
		t.Errorf("second caller: %v", err)
	}
	if n := f.n("tok"); n != 1 {
		t.Errorf("hub calls = %d, want 1 (the first lookup finished and was cached)", n)
	}
}

func TestIdentity(t *testing.T) {
	cases := map[string]struct {
		user *hubapi.User
		want *hubauth.Identity
	}{
		"plain user": {
			user: &hubapi.User{Kind: "user", Name: "alice", Groups: []string{"gpu"}},
			want: &hubauth.Identity{Kind: "user", Name: "alice", Groups: []string{"gpu"}},
		},
		"admin flag": {
			user: &hubapi.User{Kind: "user", Name: "root", Admin: true},
			want: &hubauth.Identity{Kind: "user", Name: "root", Admin: true, HubAdmin: true},
		},
		"admin:users scope": {
			user: &hubapi.User{Kind: "service", Name: "ops", Scopes: []string{"admin:users"}},
			want: &hubauth.Identity{Kind: "service", Name: "ops", Admin: true, HubAdmin: true, Scopes: []string{"admin:users"}},
		},
		"filtered admin:users is not admin": {
			user: &hubapi.User{Kind: "user", Name: "bob", Scopes: []string{"admin:users!group=x"}},
			want: &hubauth.Identity{Kind: "user", Name: "bob", Scopes: []string{"admin:users!group=x"}},
		},
		"admin group: reads every user's data, is not the Hub's admin": {
			user: &hubapi.User{Kind: "user", Name: "carol", Groups: []string{"staff", "gpu-admins"}},
			want: &hubauth.Identity{Kind: "user", Name: "carol", Admin: true, Groups: []string{"staff", "gpu-admins"}},
		},
		"missing kind means user": {
			user: &hubapi.User{Name: "dave"},
			want: &hubauth.Identity{Kind: "user", Name: "dave"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newChecker()
			f.set("tok", tc.user, nil)
			a := hubauth.New(hubauth.Options{Hub: f, AdminGroups: []string{"gpu-admins"}})
			got, err := a.Authenticate(t.Context(), req("tok"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("identity (-want +got):\n%s", diff)
			}
			got.Groups = append(got.Groups, "mutated")
			again, _ := a.Authenticate(t.Context(), req("tok"))
			if diff := cmp.Diff(tc.want, again); diff != "" {
				t.Errorf("cached identity changed by caller (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCanReadUser(t *testing.T) {
	cases := map[string]struct {
		id     hubauth.Identity
		target string
		want   bool
	}{
		"self":                      {id: hubauth.Identity{Kind: "user", Name: "alice"}, target: "alice", want: true},
		"other":                     {id: hubauth.Identity{Kind: "user", Name: "alice"}, target: "bob"},
		"empty target":              {id: hubauth.Identity{Kind: "user", Name: ""}, target: ""},
		"service named like user":   {id: hubauth.Identity{Kind: "service", Name: "bob"}, target: "bob"},
		"admin":                     {id: hubauth.Identity{Kind: "user", Name: "root", Admin: true}, target: "bob", want: true},
		"read:users":                {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"read:users"}}, target: "bob", want: true},
		"read:users for that user":  {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"read:users!user=bob"}}, target: "bob", want: true},
		"read:users for other user": {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"read:users!user=carol"}}, target: "bob"},
		"read:users by group":       {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"read:users!group=gpu"}}, target: "bob"},
		"read:users:name only":      {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"read:users:name"}}, target: "bob"},
		"users":                     {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"users"}}, target: "bob", want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.id.CanReadUser(tc.target); got != tc.want {
				t.Errorf("CanReadUser(%q) = %v, want %v", tc.target, got, tc.want)
			}
		})
	}
}

// TestIsAdmin keeps IsAdmin equal to "may read every user" in CanReadUser's terms: the admin flag (which New
// also sets for admin:users and the configured admin groups), or an unfiltered admin:users, users or
// read:users scope. Filtered scopes and list:users (names only) are not admin.
func TestIsAdmin(t *testing.T) {
	cases := map[string]struct {
		id   hubauth.Identity
		want bool
	}{
		"plain user":                {id: hubauth.Identity{Kind: "user", Name: "alice"}},
		"admin flag":                {id: hubauth.Identity{Kind: "user", Name: "root", Admin: true}, want: true},
		"admin:users":               {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"admin:users"}}, want: true},
		"users":                     {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"users"}}, want: true},
		"read:users":                {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"read:users"}}, want: true},
		"read:users for one user":   {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"read:users!user=bob"}}},
		"read:users for a group":    {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"read:users!group=gpu"}}},
		"list:users (names only)":   {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"list:users"}}},
		"read:users:name only":      {id: hubauth.Identity{Kind: "service", Name: "s", Scopes: []string{"read:users:name"}}},
		"self scope of a user":      {id: hubauth.Identity{Kind: "user", Name: "alice", Scopes: []string{"read:users!user=alice"}}},
		"a user named like a scope": {id: hubauth.Identity{Kind: "user", Name: "read:users"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.id.IsAdmin(); got != tc.want {
				t.Errorf("IsAdmin() = %v, want %v", got, tc.want)
			}
			// An admin reads anyone; a non-admin reads nobody but itself.
			if got := tc.id.CanReadUser("someone-else"); got != tc.want {
				t.Errorf("CanReadUser(someone-else) = %v, but IsAdmin() should be %v", got, tc.want)
			}
		})
	}
}

// TestAdminGroupsMakeAdmin: membership in a configured admin group makes IsAdmin true through the Hub lookup.
func TestAdminGroupsMakeAdmin(t *testing.T) {
	f := newChecker()
	f.set("tok", &hubapi.User{Kind: "user", Name: "carol", Groups: []string{"gpu-admins"}}, nil)
	a := hubauth.New(hubauth.Options{Hub: f, AdminGroups: []string{"gpu-admins"}})
	id, err := a.Authenticate(t.Context(), req("tok"))
	if err != nil {
		t.Fatal(err)
	}
	if !id.IsAdmin() {
		t.Errorf("member of an admin group: IsAdmin() = false")
	}
}

func TestMiddleware(t *testing.T) {
	f := newChecker()
	f.set("good", alice, nil)
	f.set("down", nil, &hubapi.APIError{StatusCode: 503})
	a := hubauth.New(hubauth.Options{Hub: f})
	h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := hubauth.FromContext(r.Context())
		if !ok {
			t.Error("no identity in context")
			return
		}
		_, _ = fmt.Fprint(w, id.Name)
	}))
	cases := map[string]struct {
		header     string
		wantStatus int
		wantBody   string
		wantWWW    bool
	}{
		"token scheme":   {header: "token good", wantStatus: 200, wantBody: "alice"},
		"bearer scheme":  {header: "Bearer good", wantStatus: 200, wantBody: "alice"},
		"no header":      {wantStatus: 401, wantBody: `{"status":401,"message":"no token: send a JupyterHub API token`, wantWWW: true},
		"basic auth":     {header: "Basic Zm9vOmJhcg==", wantStatus: 401, wantBody: `{"status":401,"message":"no token: send a JupyterHub API token`, wantWWW: true},
		"invalid token":  {header: "token nope", wantStatus: 401, wantBody: `{"status":401,"message":"invalid token: the Hub does not know it`, wantWWW: true},
		"hub down → 503": {header: "token down", wantStatus: 503, wantBody: `{"status":503,"message":"hub unavailable: `},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/x", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.wantStatus {
				t.Errorf("status = %d, want %d", w.Code, tc.wantStatus)
			}
			if got := strings.TrimSpace(w.Body.String()); !strings.HasPrefix(got, tc.wantBody) || tc.wantStatus == 200 && got != tc.wantBody {
				t.Errorf("body = %q, want it to start with %q", got, tc.wantBody)
			}
			if got := w.Header().Get("WWW-Authenticate") != ""; got != tc.wantWWW {
				t.Errorf("WWW-Authenticate present = %v, want %v", got, tc.wantWWW)
			}
			if tc.wantStatus != 200 {
				var body struct {
					Status  int    `json:"status"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Status != tc.wantStatus || body.Message == "" {
					t.Errorf("error body %q is not {\"status\", \"message\"}: %v", w.Body.String(), err)
				}
			}
		})
	}
}

// TestWithFakeHub runs the real client against the fake Hub: the OAuth token
// of a single-user server identifies its owner with groups, an expired token
// is rejected, and a Hub outage is a 503, not a 401.
func TestWithFakeHub(t *testing.T) {
	const secret = "oauth-SECRET-9a8b7c"
	h := hubapitest.New(t)
	h.AddUser(hubapi.User{Name: "alice", Groups: []string{"gpu-users"}})
	h.AddToken("svc-token", "gpu-usage")
	h.AddToken(secret, "alice", "access:servers!server=alice/")
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client := h.Client("svc-token", hubapi.Config{MaxRetries: 1, Logger: logger})
	clk := newClock()
	a := hubauth.New(hubauth.Options{Hub: client, Clock: clk.now, Logger: logger})

	id, err := a.Authenticate(t.Context(), req(secret))
	if err != nil {
		t.Fatal(err)
	}
	want := &hubauth.Identity{Kind: "user", Name: "alice", Groups: []string{"gpu-users"},
		Scopes: []string{"access:servers!server=alice/", "read:users:groups!user=alice", "read:users:name!user=alice"}}
	if diff := cmp.Diff(want, id); diff != "" {
		t.Errorf("identity (-want +got):\n%s", diff)
	}

	h.ExpireToken(secret)
	clk.add(61 * time.Second)
	_, err = a.Authenticate(t.Context(), req(secret))
	if !errors.Is(err, hubauth.ErrInvalidToken) {
		t.Errorf("expired token: err = %v, want ErrInvalidToken", err)
	}

	h.Fail(hubapitest.Failure{Path: "/user", Status: 503, Times: -1})
	_, err = a.Authenticate(t.Context(), req("another-"+secret))
	if !errors.Is(err, hubauth.ErrHubUnavailable) {
		t.Errorf("outage: err = %v, want ErrHubUnavailable", err)
	}
	for _, s := range []string{fmt.Sprint(err), logs.String()} {
		if strings.Contains(s, secret) {
			t.Errorf("token leaked: %q", s)
		}
	}
	if !strings.Contains(logs.String(), "cannot validate hub token") {
		t.Errorf("outage not logged: %s", logs.String())
	}
}

func TestMetrics(t *testing.T) {
	f := newChecker()
	f.set("good", alice, nil)
	f.set("down", nil, &hubapi.APIError{StatusCode: 503})
	reg := prometheus.NewRegistry()
	a := hubauth.New(hubauth.Options{Hub: f, Registerer: reg})
	for _, tok := range []string{"good", "good", "bad", "bad", "down", ""} {
		_, _ = a.AuthenticateToken(t.Context(), tok)
	}
	want := `
# HELP gpuhub_hubauth_authentications_total Token authentications by result (ok, no_token, invalid, no_service_access, other_users_server, hub_unavailable).
# TYPE gpuhub_hubauth_authentications_total counter
gpuhub_hubauth_authentications_total{result="hub_unavailable"} 1
gpuhub_hubauth_authentications_total{result="invalid"} 2
gpuhub_hubauth_authentications_total{result="no_token"} 1
gpuhub_hubauth_authentications_total{result="ok"} 2
# HELP gpuhub_hubauth_cache_entries Tokens in the cache (positive and negative).
# TYPE gpuhub_hubauth_cache_entries gauge
gpuhub_hubauth_cache_entries 2
# HELP gpuhub_hubauth_cache_hits_total Authentications answered from the token cache, by kind (positive, negative).
# TYPE gpuhub_hubauth_cache_hits_total counter
gpuhub_hubauth_cache_hits_total{kind="negative"} 1
gpuhub_hubauth_cache_hits_total{kind="positive"} 1
# HELP gpuhub_hubauth_hub_lookups_total GET /hub/api/user calls by result (ok, rejected, error).
# TYPE gpuhub_hubauth_hub_lookups_total counter
gpuhub_hubauth_hub_lookups_total{result="error"} 1
gpuhub_hubauth_hub_lookups_total{result="ok"} 1
gpuhub_hubauth_hub_lookups_total{result="rejected"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestOtherUsersServerToken: the page token JupyterHub gives the visitor of another user's server (limited to
// access:servers!server=<owner>/<name>, readable by that server's owner) is refused with 403, whoever its user is
// (an admin helping included); the user's own page token, API tokens and tokens without server access are not.
func TestOtherUsersServerToken(t *testing.T) {
	cases := map[string]struct {
		user   *hubapi.User
		status int
		server string // named in the refusal
	}{
		"own server's page token": {
			user: &hubapi.User{Kind: "user", Name: "alice", Scopes: []string{"access:servers!server=alice/"}}, status: 200},
		"own named server's page token": {
			user: &hubapi.User{Kind: "user", Name: "alice", Scopes: []string{"access:servers!server=alice/gpu", "access:services!service=gpu-usage"}}, status: 200},
		"a visitor's page token on bob's server": {
			user:   &hubapi.User{Kind: "user", Name: "carol", Scopes: []string{"access:servers!server=bob/"}},
			status: 403, server: "bob/"},
		"an admin's page token on bob's named server": {
			user:   &hubapi.User{Kind: "user", Name: "root", Admin: true, Scopes: []string{"access:servers!server=bob/gpu", "access:services!service=gpu-usage"}},
			status: 403, server: "bob/gpu"},
		"a look-alike name is another user": {
			user:   &hubapi.User{Kind: "user", Name: "bo", Scopes: []string{"access:servers!server=bob/"}},
			status: 403, server: "bob/"},
		"an API token with a share of bob's server": {
			user: &hubapi.User{Kind: "user", Name: "carol", Scopes: []string{"access:servers!server=bob/", "access:servers!user=carol", "read:users!user=carol"}}, status: 200},
		"an admin's API token": {
			user: &hubapi.User{Kind: "user", Name: "root", Admin: true, Scopes: []string{"access:servers", "access:servers!server=bob/", "admin:users"}}, status: 200},
		"a token without server access (a service's OAuth login)": {
			user: &hubapi.User{Kind: "user", Name: "carol", Scopes: []string{"access:services!service=gpu-usage"}}, status: 200},
		"a service's token": {
			user: &hubapi.User{Kind: "service", Name: "gpu-quota", Scopes: []string{"access:servers!server=bob/"}}, status: 200},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newChecker()
			f.set("secret-page-token", tc.user, nil)
			a := hubauth.New(hubauth.Options{Hub: f})
			h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			for range 2 { // the second from the cache
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req("secret-page-token"))
				if rec.Code != tc.status {
					t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
				}
				body := rec.Body.String()
				if tc.status == 403 && !strings.Contains(body, "another user's server ("+tc.server+")") {
					t.Errorf("refusal does not name the server %q: %s", tc.server, body)
				}
				if strings.Contains(body, "secret-page-token") {
					t.Errorf("the answer holds the token: %s", body)
				}
			}
		})
	}
}

// TestServiceAccess: with Options.Service, a user's token must grant access to that service, as JupyterHub's
// HubAuth requires, or be one of the user's own server's tokens: a token limited to another service is refused
// with 403 saying which scope; a service's token is authorized by name later, not here.
func TestServiceAccess(t *testing.T) {
	cases := map[string]struct {
		user   *hubapi.User
		status int
	}{
		"a user's API token (the user role grants it)": {
			user: &hubapi.User{Kind: "user", Name: "alice", Scopes: []string{"access:servers!user=alice", "access:services!service=gpu-usage"}}, status: 200},
		"an admin's API token (every service)": {
			user: &hubapi.User{Kind: "user", Name: "root", Admin: true, Scopes: []string{"access:servers", "access:services", "admin:users"}}, status: 200},
		"the page token of the user's own server, with the glue's allowed scopes": {
			user: &hubapi.User{Kind: "user", Name: "alice", Scopes: []string{"access:servers!server=alice/", "access:services!service=gpu-usage"}}, status: 200},
		"this service's own OAuth login": {
			user: &hubapi.User{Kind: "user", Name: "alice", Scopes: []string{"access:services!service=gpu-usage"}}, status: 200},
		"the page token of the user's own server, without the scope (JupyterHub's default)": {
			user: &hubapi.User{Kind: "user", Name: "alice", Scopes: []string{"access:servers!server=alice/"}}, status: 200},
		"the server token of the user's own named server": {
			user: &hubapi.User{Kind: "user", Name: "alice", Scopes: []string{"access:servers!server=alice/gpu", "users:activity!user=alice"}}, status: 200},
		"a token the user gave another service": {
			user: &hubapi.User{Kind: "user", Name: "carol", Scopes: []string{"access:services!service=grader"}}, status: 403},
		"an admin's token given to another service": {
			user: &hubapi.User{Kind: "user", Name: "root", Admin: true, Scopes: []string{"access:services!service=grader"}}, status: 403},
		"a token with only a user filter": {
			user: &hubapi.User{Kind: "user", Name: "alice", Scopes: []string{"read:users!user=alice"}}, status: 403},
		"a service's token": {
			user: &hubapi.User{Kind: "service", Name: "gpu-quota", Scopes: []string{"read:users"}}, status: 200},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newChecker()
			f.set("tok", tc.user, nil)
			a := hubauth.New(hubauth.Options{Hub: f, Service: "gpu-usage"})
			rec := httptest.NewRecorder()
			a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(rec, req("tok"))
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.status == 403 && !strings.Contains(rec.Body.String(), "access:services!service=gpu-usage") {
				t.Errorf("the refusal does not name the scope: %s", rec.Body)
			}
			// The verdict is cached with the token: the same answer without asking the Hub again.
			rec = httptest.NewRecorder()
			a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(rec, req("tok"))
			if rec.Code != tc.status || f.n("tok") != 1 {
				t.Errorf("again: status %d after %d Hub lookups, want %d after 1", rec.Code, f.n("tok"), tc.status)
			}
			// Without Service nothing is checked (unit tests, a service that names none).
			rec = httptest.NewRecorder()
			hubauth.New(hubauth.Options{Hub: f}).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(rec, req("tok"))
			if rec.Code != 200 {
				t.Errorf("without Service: status %d", rec.Code)
			}
		})
	}
}

// TestOwnServerTokenActsForItsUserOnly: a user's own server's token (it reaches servers only through
// access:servers!server=<self>/...) never carries admin powers, an admin's or an admin group member's, whatever
// scopes the admin gave servers: the server role holds no admin scope, and whoever the server is shared with can
// read it. The same admin's API token still does.
func TestOwnServerTokenActsForItsUserOnly(t *testing.T) {
	cases := map[string]struct {
		user          *hubapi.User
		admin, hubAdm bool
	}{
		"an admin's server token": {
			user: &hubapi.User{Kind: "user", Name: "root", Admin: true, Scopes: []string{"access:servers!server=root/", "users:activity!user=root"}}},
		"an admin group member's page token": {
			user: &hubapi.User{Kind: "user", Name: "tina", Groups: []string{"gpu-admins"}, Scopes: []string{"access:servers!server=tina/"}}},
		"an admin's API token": {
			user:  &hubapi.User{Kind: "user", Name: "root", Admin: true, Scopes: []string{"access:servers", "access:services", "admin:users"}},
			admin: true, hubAdm: true},
		"an admin's server token that the admin gave the service's scope and read:users": {
			user: &hubapi.User{Kind: "user", Name: "root", Admin: true, Scopes: []string{"access:servers!server=root/", "access:services!service=gpu-usage", "read:users", "admin:users!user=bob"}}},
		"a user's server token keeps what reads its own user": {
			user: &hubapi.User{Kind: "user", Name: "alice", Scopes: []string{"access:servers!server=alice/", "read:users!user=alice"}}},
		"an admin group member's API token": {
			user:  &hubapi.User{Kind: "user", Name: "tina", Groups: []string{"gpu-admins"}, Scopes: []string{"access:servers!user=tina", "access:services!service=gpu-usage"}},
			admin: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newChecker()
			f.set("tok", tc.user, nil)
			a := hubauth.New(hubauth.Options{Hub: f, Service: "gpu-usage", AdminGroups: []string{"gpu-admins"}})
			id, err := a.AuthenticateToken(context.Background(), "tok")
			if err != nil {
				t.Fatal(err)
			}
			if id.Name != tc.user.Name || id.IsAdmin() != tc.admin || id.HubAdmin != tc.hubAdm {
				t.Errorf("%s: IsAdmin %v, HubAdmin %v; want %v, %v", id.Name, id.IsAdmin(), id.HubAdmin, tc.admin, tc.hubAdm)
			}
			if got := id.CanReadUser("bob"); got != tc.admin {
				t.Errorf("%s reads bob: %v, want %v", id.Name, got, tc.admin)
			}
			if got := id.CanReadUser(id.Name); !got {
				t.Errorf("%s cannot read their own data", id.Name)
			}
		})
	}
}
