package hubapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
)

var (
	t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	t1 = time.Date(2026, 11, 22, 10, 5, 7, 123456000, time.UTC)
)

func ptr[T any](v T) *T { return &v }

func seedAlice(h *hubapitest.Hub) {
	h.AddUser(hubapi.User{
		Name: "alice@example.org", Groups: []string{"gpu-users"}, Created: ptr(t0), LastActivity: ptr(t1),
		Servers: map[string]hubapi.Server{
			"": {Ready: true, Started: ptr(t0), LastActivity: ptr(t1),
				UserOptions: map[string]any{"profile": "a100-mig-3g"},
				State:       map[string]any{"pod_name": "jupyter-alice-40example-2eorg", "namespace": "jhub"}},
			"train.v2": {Stopped: true},
		},
	})
}

func TestGetUserModelByScopes(t *testing.T) {
	aliceServer := hubapi.Server{
		Name: "", Ready: true, URL: "/user/alice@example.org/",
		ProgressURL: "/hub/api/users/alice@example.org/server/progress",
		Started:     ptr(t0), LastActivity: ptr(t1),
		UserOptions: map[string]any{"profile": "a100-mig-3g"},
	}
	withState := aliceServer
	withState.State = map[string]any{"pod_name": "jupyter-alice-40example-2eorg", "namespace": "jhub"}
	stopped := hubapi.Server{Name: "train.v2", Stopped: true, URL: "/user/alice@example.org/train.v2/",
		ProgressURL: "/hub/api/users/alice@example.org/servers/train.v2/progress", UserOptions: map[string]any{}}

	cases := map[string]struct {
		scopes         []string
		includeStopped bool
		want           *hubapi.User
	}{
		"read:users only: no servers": {
			scopes: []string{"read:users"},
			want: &hubapi.User{Kind: "user", Name: "alice@example.org", Roles: []string{"user"},
				Groups: []string{"gpu-users"}, Server: "/user/alice@example.org/", Created: ptr(t0), LastActivity: ptr(t1)},
		},
		"read:servers without admin:server_state: no state": {
			scopes: []string{"read:users:name", "read:servers"},
			want: &hubapi.User{Kind: "user", Name: "alice@example.org",
				Servers: map[string]hubapi.Server{"": aliceServer}},
		},
		"admin:server_state shows state": {
			scopes: []string{"read:users:name", "read:servers", "admin:server_state"},
			want: &hubapi.User{Kind: "user", Name: "alice@example.org",
				Servers: map[string]hubapi.Server{"": withState}},
		},
		"group-filtered scopes": {
			scopes: []string{"read:users:activity!group=gpu-users", "read:servers!group=gpu-users"},
			want: &hubapi.User{Kind: "user", Name: "alice@example.org", LastActivity: ptr(t1),
				Servers: map[string]hubapi.Server{"": aliceServer}},
		},
		"include stopped servers": {
			scopes:         []string{"list:users", "read:servers"},
			includeStopped: true,
			want: &hubapi.User{Kind: "user", Name: "alice@example.org",
				Servers: map[string]hubapi.Server{"": aliceServer, "train.v2": stopped}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHub(t)
			seedAlice(h)
			h.AddToken("svc-token", "svc", tc.scopes...)
			c := h.Client("svc-token")
			var got *hubapi.User
			if tc.includeStopped {
				us, err := c.ListUsers(t.Context(), hubapi.ListUsersOptions{IncludeStoppedServers: true})
				if err != nil || len(us) == 0 {
					t.Fatalf("list: %v %v", us, err)
				}
				for _, u := range us {
					if u.Name == "alice@example.org" {
						got = &u
					}
				}
			} else {
				var err error
				if got, err = c.GetUser(t.Context(), "alice@example.org"); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("user (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWhoAmI(t *testing.T) {
	h := newHub(t)
	seedAlice(h)
	// the scopes jupyterhub-singleuser's OAuth client gets: no read:users
	h.AddToken("oauth-token", "alice@example.org",
		"access:servers!server=alice@example.org/", "read:users:groups!user=alice@example.org",
		"read:users:name!user=alice@example.org")
	h.AddToken("svc-token", "gpu-usage", "list:users", "read:users")
	c := h.Client(adminToken)

	cases := map[string]struct {
		token string
		want  *hubapi.User
	}{
		"single-user server OAuth token": {
			token: "oauth-token",
			want: &hubapi.User{Kind: "user", Name: "alice@example.org", Groups: []string{"gpu-users"},
				Scopes: []string{"access:servers!server=alice@example.org/",
					"read:users:groups!user=alice@example.org", "read:users:name!user=alice@example.org"}},
		},
		"service token": {
			token: "svc-token",
			want: &hubapi.User{Kind: "service", Name: "gpu-usage", Scopes: []string{
				"list:users", "read:users", "read:users:activity", "read:users:groups", "read:users:name"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := c.WhoAmIWithToken(t.Context(), tc.token)
			if err != nil {
				t.Fatal(err)
			}
			if got.TokenID == "" {
				t.Error("token_id empty")
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(hubapi.User{}, "TokenID")); diff != "" {
				t.Errorf("whoami (-want +got):\n%s", diff)
			}
			if h.LastAuthorization() != "token "+tc.token {
				t.Error("whoami did not send the given token")
			}
		})
	}

	me, err := c.WhoAmI(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if me.Name != "root" || !me.Admin {
		t.Errorf("WhoAmI = %+v, want admin root", me)
	}
}

func TestVersionNeedsNoAuth(t *testing.T) {
	h := newHub(t)
	c := h.Client("not-a-known-token")
	v, err := c.Version(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v != hubapitest.Version {
		t.Errorf("version = %q, want %q", v, hubapitest.Version)
	}
	if h.LastAuthorization() != "" {
		t.Error("Version sent the token")
	}
}

func TestStartStop(t *testing.T) {
	cases := map[string]struct {
		user, server string
		startPending bool
		stopPending  bool
		remove       bool
		wantStart    hubapi.StartResult
		wantStop     hubapi.StopResult
		wantPath     string
		wantAfter    bool // server still in the model after stop
	}{
		"default server": {
			user: "alice@example.org", wantPath: "/users/alice@example.org/server",
		},
		"pending start and stop": {
			user: "alice@example.org", startPending: true, stopPending: true,
			wantStart: hubapi.StartResult{Pending: true}, wantStop: hubapi.StopResult{Pending: true},
			wantPath: "/users/alice@example.org/server", wantAfter: true,
		},
		"named server with unicode and dots": {
			user: "josé.d", server: "run 1.v2", wantPath: "/users/jos%C3%A9.d/servers/run%201.v2", wantAfter: true,
		},
		"named server removed": {
			user: "josé.d", server: "run 1.v2", remove: true, wantPath: "/users/jos%C3%A9.d/servers/run%201.v2",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHub(t)
			h.AddUser(hubapi.User{Name: tc.user})
			h.SetStartPending(tc.startPending)
			h.SetStopPending(tc.stopPending)
			c := h.Client(adminToken)
			opts := map[string]any{"profile": "a100"}

			gotStart, err := c.StartServer(t.Context(), tc.user, tc.server, opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantStart, gotStart); diff != "" {
				t.Errorf("start (-want +got):\n%s", diff)
			}
			if n := h.Requests("POST " + tc.wantPath); n != 1 {
				t.Errorf("POST %s requests = %d, want 1", tc.wantPath, n)
			}
			u, _ := h.User(tc.user)
			if diff := cmp.Diff(opts, u.Servers[tc.server].UserOptions); diff != "" {
				t.Errorf("user_options (-want +got):\n%s", diff)
			}

			gotStop, err := c.StopServer(t.Context(), tc.user, tc.server, tc.remove)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantStop, gotStop); diff != "" {
				t.Errorf("stop (-want +got):\n%s", diff)
			}
			u, _ = h.User(tc.user)
			if _, ok := u.Servers[tc.server]; ok != tc.wantAfter {
				t.Errorf("server present after stop = %v, want %v", ok, tc.wantAfter)
			}
		})
	}
}

func TestStartWhilePendingStop(t *testing.T) {
	h := newHub(t)
	h.AddUser(hubapi.User{Name: "alice", Servers: map[string]hubapi.Server{"": {Pending: "stop"}}})
	c := h.Client(adminToken)
	_, err := c.StartServer(t.Context(), "alice", "", nil)
	if !hubapi.IsConflict(err) {
		t.Errorf("err = %v, want conflict (pending stop)", err)
	}
	if _, err := c.StopServer(t.Context(), "alice", "", true); err == nil ||
		!strings.Contains(err.Error(), "Cannot delete the default server") {
		t.Errorf("remove default server: err = %v", err)
	}
}

func TestCreateToken(t *testing.T) {
	h := newHub(t)
	h.AddUser(hubapi.User{Name: "alice"})
	c := h.Client(adminToken)
	tok, err := c.CreateToken(t.Context(), "alice", hubapi.TokenRequest{
		ExpiresIn: 3600, Note: "e2e", Scopes: []string{"read:users:name!user=alice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Token == "" || tok.ID == "" || tok.Expires == nil || tok.Note != "e2e" || tok.User != "alice" {
		t.Errorf("token = %+v", tok)
	}
	if strings.Contains(tok.String(), tok.Token) {
		t.Errorf("Token.String leaks the secret: %s", tok)
	}
	me, err := h.Client(tok.Token).WhoAmI(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if me.Name != "alice" {
		t.Errorf("minted token belongs to %q", me.Name)
	}

	h.AddUser(hubapi.User{Name: "bob"})
	_, err = h.Client(tok.Token).CreateToken(t.Context(), "bob", hubapi.TokenRequest{})
	if !hubapi.IsForbidden(err) {
		t.Errorf("alice minting for bob: err = %v, want 403", err)
	}
}

func TestNotifyActivity(t *testing.T) {
	h := newHub(t)
	h.SetClock(func() time.Time { return t1 })
	h.AddUser(hubapi.User{Name: "alice", Servers: map[string]hubapi.Server{"": {Ready: true}}})
	c := h.Client(adminToken)
	err := c.NotifyActivity(t.Context(), "alice", hubapi.Activity{
		LastActivity: t1, Servers: map[string]time.Time{"": t1},
	})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := h.User("alice")
	if diff := cmp.Diff(ptr(t1), u.LastActivity); diff != "" {
		t.Errorf("user last_activity (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ptr(t1), u.Servers[""].LastActivity); diff != "" {
		t.Errorf("server last_activity (-want +got):\n%s", diff)
	}

	err = c.NotifyActivity(t.Context(), "alice", hubapi.Activity{Servers: map[string]time.Time{"nope": t1}})
	if err == nil || !strings.Contains(err.Error(), "No such server 'nope' for user alice") {
		t.Errorf("unknown server: err = %v", err)
	}
	if err := c.NotifyActivity(t.Context(), "alice", hubapi.Activity{}); err == nil {
		t.Error("empty activity: want error")
	}
}

func TestAddGroupMembers(t *testing.T) {
	h := newHub(t)
	h.AddUser(hubapi.User{Name: "alice"})
	h.AddUser(hubapi.User{Name: "bob"})
	h.AddGroup(hubapi.Group{Name: "gpu users", Users: []string{"alice"}})
	c := h.Client(adminToken)
	if err := c.AddGroupMembers(t.Context(), "gpu users", "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	g, err := c.GetGroup(t.Context(), "gpu users")
	if err != nil {
		t.Fatal(err)
	}
	want := &hubapi.Group{Kind: "group", Name: "gpu users", Users: []string{"alice", "bob"}, Properties: map[string]any{}}
	if diff := cmp.Diff(want, g, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("group (-want +got):\n%s", diff)
	}
	if err := c.AddGroupMembers(t.Context(), "gpu users", "nobody"); err == nil {
		t.Error("unknown member: want error")
	}
	if err := c.AddGroupMembers(t.Context(), "no group", "alice"); !hubapi.IsNotFound(err) {
		t.Errorf("unknown group: err = %v, want 404", err)
	}
}

func TestNew(t *testing.T) {
	cases := map[string]struct {
		cfg     hubapi.Config
		wantURL string
		wantErr string
	}{
		"trailing slash":  {cfg: hubapi.Config{URL: "http://127.0.0.1:8081/hub/api/", Token: "t"}, wantURL: "http://127.0.0.1:8081/hub/api"},
		"https":           {cfg: hubapi.Config{URL: "https://hub.example/hub/api", Token: "t"}, wantURL: "https://hub.example/hub/api"},
		"empty URL":       {cfg: hubapi.Config{Token: "t"}, wantErr: "hubapi: URL is empty (set JUPYTERHUB_API_URL, e.g. http://hub:8081/hub/api)"},
		"bad scheme":      {cfg: hubapi.Config{URL: "hub:8081/hub/api", Token: "t"}, wantErr: `hubapi: URL "hub:8081/hub/api": scheme must be http or https`},
		"no host":         {cfg: hubapi.Config{URL: "http:///hub/api", Token: "t"}, wantErr: `hubapi: URL "http:///hub/api" has no host`},
		"query":           {cfg: hubapi.Config{URL: "http://h/hub/api?x=1", Token: "t"}, wantErr: `hubapi: URL "http://h/hub/api?x=1": user info, query and fragment are not allowed`},
		"password in URL": {cfg: hubapi.Config{URL: "http://u:pw@h/hub/api", Token: "t"}, wantErr: `hubapi: URL "http://u:xxxxx@h/hub/api": user info, query and fragment are not allowed`},
		"empty token":     {cfg: hubapi.Config{URL: "http://h/hub/api"}, wantErr: "hubapi: token is empty (set JUPYTERHUB_API_TOKEN)"},
		"token with newline": {cfg: hubapi.Config{URL: "http://h/hub/api", Token: "abc\n"},
			wantErr: "hubapi: config token: token contains whitespace or control characters"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := hubapi.New(tc.cfg)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, gotErr); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if err == nil && c.URL() != tc.wantURL {
				t.Errorf("URL = %q, want %q", c.URL(), tc.wantURL)
			}
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api")
	t.Setenv("JUPYTERHUB_API_TOKEN", "env-token")
	got := hubapi.ConfigFromEnv()
	want := hubapi.Config{URL: "http://127.0.0.1:8081/hub/api", Token: "env-token"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
