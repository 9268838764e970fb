//go:build integration

package hubint_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
)

func TestVersion(t *testing.T) {
	got, err := client(t, svcAuth).Version(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got != hub.Version() {
		t.Errorf("Version() = %q, the venv has jupyterhub %q", got, hub.Version())
	}
	if !strings.HasPrefix(got, "5.5.") && !strings.HasPrefix(got, "6.") {
		t.Errorf("Version() = %q, want a supported line (5.5.x or 6.x)", got)
	}
}

// TestListUsersPaginated proves the pagination header: without it the Hub silently caps GET /users at
// api_page_max_limit, with it hubapi follows the pages to the end.
func TestListUsersPaginated(t *testing.T) {
	tests := map[string]struct {
		pageSize  int
		wantPages int // exactly: ceil(users / the page size the Hub grants), the Hub capping a page at 200
	}{
		"default page size": {pageSize: 0, wantPages: 3},
		"small pages":       {pageSize: 100, wantPages: 5},
		"above Hub maximum": {pageSize: 1000, wantPages: 3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rt := newCountingTransport()
			users, err := clientWith(t, svcLister, rt).ListUsers(ctxT(t, time.Minute), hubapi.ListUsersOptions{PageSize: tc.pageSize})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]string, 0, len(users))
			for _, u := range users {
				got = append(got, u.Name)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(userNames))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ListUsers names (-want +got):\n%s", diff)
			}
			if pages := rt.count("/users"); pages != tc.wantPages {
				t.Errorf("GET /users sent %d times for %d users, want exactly %d pages", pages, len(userNames), tc.wantPages)
			}
			if n := rt.acceptsContaining("application/jupyterhub-pagination+json"); n != rt.count("/users") {
				t.Errorf("%d of %d GET /users carried Accept: application/jupyterhub-pagination+json; sent %v", n, rt.count("/users"), rt.accepts)
			}
		})
	}

	t.Run("bare list without the header is capped", func(t *testing.T) {
		var bare []json.RawMessage
		rawGet(t, "/users", hub.ServiceToken(svcLister), &bare)
		// Without the header the Hub answers one page of api_page_max_limit (200), not api_page_default_limit (50):
		// jupyterhub/apihandlers/base.py get_api_pagination, the same in 5.5 and 6.x.
		const hubMaxLimit = 200
		if len(bare) != hubMaxLimit {
			t.Errorf("GET /users without pagination header returned %d of %d users, want exactly the Hub's cap %d", len(bare), len(userNames), hubMaxLimit)
		}
		t.Logf("GET /users without the pagination header: %d of %d users", len(bare), len(userNames))
	})
}

func TestUserFieldsFollowScopes(t *testing.T) {
	// lister holds read:users but not read:servers: the Hub leaves out the servers dict.
	u, err := client(t, svcLister).GetUser(ctxT(t, 10*time.Second), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "alice" || u.Kind != "user" || u.Servers != nil {
		t.Errorf("GetUser(alice) with read:users = {Name:%q Kind:%q Servers:%v}, want alice, user, no servers", u.Name, u.Kind, u.Servers)
	}
	if diff := cmp.Diff([]string{"gpu-team"}, u.Groups); diff != "" {
		t.Errorf("alice's groups (-want +got):\n%s", diff)
	}
}

func TestGroups(t *testing.T) {
	c := client(t, svcGroups)
	ctx := ctxT(t, 30*time.Second)
	list, err := c.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, g := range list {
		got[g.Name] = slices.Sorted(slices.Values(g.Users))
	}
	if diff := cmp.Diff(groups, got); diff != "" {
		t.Errorf("ListGroups (-want +got):\n%s", diff)
	}

	g, err := c.GetGroup(ctx, "gpu-team")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(groups["gpu-team"], slices.Sorted(slices.Values(g.Users))); diff != "" {
		t.Errorf("GetGroup(gpu-team) members (-want +got):\n%s", diff)
	}

	if _, err := c.GetGroup(ctx, "no-such-group"); !hubapi.IsNotFound(err) {
		t.Errorf("GetGroup(no-such-group) error = %v, want a 404", err)
	}
	// Reading groups does not allow changing them.
	if err := c.AddGroupMembers(ctx, "gpu-team", "carol"); !hubapi.IsForbidden(err) {
		t.Errorf("AddGroupMembers with read-only scopes: error = %v, want a 403", err)
	}
}

// TestStartStopServer runs a real single-user server for alice with a service that may only manage
// alice's servers and read activity.
func TestStartStopServer(t *testing.T) {
	c := client(t, svcServers)
	ctx := ctxT(t, 3*time.Minute)

	res, err := c.StartServer(ctx, "alice", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// slow_spawn_timeout is 0.1s in this Hub, far below the seconds a local server takes to start.
	if !res.Pending {
		t.Errorf("StartServer: Pending = false, want the Hub's 202 (spawn still in progress)")
	}
	srv := waitServer(ctx, t, c, "alice", func(s *hubapi.Server) bool { return s != nil && s.Ready })
	if srv.URL == "" || srv.Started == nil {
		t.Errorf("ready server = %+v, want url and started set", srv)
	}
	u, err := c.GetUser(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if u.LastActivity == nil {
		t.Errorf("alice's last_activity missing with read:users:activity")
	}

	// Starting a running server is a conflict (the Hub answers 400).
	if _, err := c.StartServer(ctx, "alice", "", nil); !hubapi.IsConflict(err) {
		t.Errorf("StartServer on a running server: error = %v, want a conflict", err)
	}
	// The scope is filtered to alice: bob's server is out of reach.
	if _, err := c.StartServer(ctx, "bob", "", nil); err == nil {
		t.Errorf("StartServer(bob) with servers!user=alice succeeded")
	} else {
		var apiErr *hubapi.APIError
		if !errors.As(err, &apiErr) || (apiErr.StatusCode != http.StatusForbidden && apiErr.StatusCode != http.StatusNotFound) {
			t.Errorf("StartServer(bob) error = %v, want 403 or 404", err)
		}
		t.Logf("StartServer(bob) with servers!user=alice: %v", err)
	}

	stop, err := c.StopServer(ctx, "alice", "", false)
	if err != nil {
		t.Fatal(err)
	}
	// slow_stop_timeout is 0.1s in this Hub, far below the seconds a local server takes to stop.
	if !stop.Pending {
		t.Errorf("StopServer: Pending = false, want the Hub's 202 (stop still in progress)")
	}
	waitServer(ctx, t, c, "alice", func(s *hubapi.Server) bool { return s == nil })
}

// waitServer polls GET /users/{name} until done holds for the default server (nil when absent).
func waitServer(ctx context.Context, t *testing.T, c *hubapi.Client, user string, done func(*hubapi.Server) bool) *hubapi.Server {
	t.Helper()
	for {
		u, err := c.GetUser(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		var s *hubapi.Server
		if srv, ok := u.Servers[""]; ok {
			s = &srv
		}
		if done(s) {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s's server: condition not met before %v; last: %+v pending=%q", user, ctx.Err(), s, u.Pending)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func TestLeastPrivilege(t *testing.T) {
	c := client(t, svcWeak)
	ctx := ctxT(t, 30*time.Second)

	_, err := c.StopServer(ctx, "alice", "", false)
	var apiErr *hubapi.APIError
	if !errors.As(err, &apiErr) || !hubapi.IsForbidden(err) {
		t.Fatalf("StopServer with list:users only: error = %v, want *hubapi.APIError 403", err)
	}
	if apiErr.StatusCode != http.StatusForbidden || apiErr.Method != http.MethodDelete {
		t.Errorf("APIError = %+v, want 403 on DELETE", apiErr)
	}
	// The Hub names the scope it wanted; the error must pass that on.
	if !strings.Contains(apiErr.Message, "delete:servers") || !strings.Contains(err.Error(), "delete:servers") {
		t.Errorf("error %q (message %q) does not name the missing scope delete:servers", err, apiErr.Message)
	}
	t.Logf("StopServer with list:users only: %v", err)

	who, err := c.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if who.Kind != "service" || who.Name != svcWeak {
		t.Errorf("WhoAmI = {Kind:%q Name:%q}, want service %q", who.Kind, who.Name, svcWeak)
	}
	if !slices.Contains(who.Scopes, "list:users") || slices.Contains(who.Scopes, "delete:servers") {
		t.Errorf("WhoAmI scopes = %v, want list:users and no delete:servers", who.Scopes)
	}
}

// TestTokenAuth is the end-to-end proof of service auth: a token minted for alice is accepted by
// hubauth.Middleware (identity alice, not admin), a garbage token is not.
func TestTokenAuth(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	minter := client(t, svcMinter)
	tok, err := minter.CreateToken(ctx, "alice", hubapi.TokenRequest{
		ExpiresIn: 600, Note: "hubint", Scopes: []string{"read:users!user=alice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	logscan.Register("Hub token of alice minted with tokens!user=alice", tok.Token)
	if tok.Token == "" || !slices.Contains(tok.Scopes, "read:users!user=alice") {
		t.Fatalf("CreateToken = %v (secret set: %v), want the secret and scope read:users!user=alice", tok, tok.Token != "")
	}
	if _, err := minter.CreateToken(ctx, "bob", hubapi.TokenRequest{ExpiresIn: 600}); !hubapi.IsForbidden(err) {
		t.Errorf("CreateToken(bob) with tokens!user=alice: error = %v, want a 403", err)
	}

	auth := hubauth.New(hubauth.Options{Hub: client(t, svcAuth)})
	srv := httptest.NewServer(auth.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := hubauth.FromContext(r.Context())
		if !ok {
			http.Error(w, "no identity", http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(id)
	})))
	defer srv.Close()

	tests := map[string]struct {
		header   string
		wantCode int
		wantID   *hubauth.Identity
	}{
		"minted token":  {header: "token " + tok.Token, wantCode: http.StatusOK, wantID: &hubauth.Identity{Kind: "user", Name: "alice"}},
		"bearer form":   {header: "Bearer " + tok.Token, wantCode: http.StatusOK, wantID: &hubauth.Identity{Kind: "user", Name: "alice"}},
		"garbage token": {header: "token not-a-real-token-0123456789", wantCode: http.StatusUnauthorized},
		"no token":      {wantCode: http.StatusUnauthorized},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/me", http.NoBody)
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.wantCode)
			}
			if tc.wantID == nil {
				return
			}
			var got hubauth.Identity
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(got.Scopes, "read:users!user=alice") {
				t.Errorf("identity scopes = %v, want the token's read:users!user=alice", got.Scopes)
			}
			got.Scopes, got.Groups = nil, nil
			if diff := cmp.Diff(tc.wantID, &got); diff != "" {
				t.Errorf("identity (-want +got):\n%s", diff)
			}
		})
	}
}

// TestServiceAccessRealTokens: hubauth's service-access rule (Options.Service) on the scopes this JupyterHub
// reports for real tokens: a token limited to another service is refused at gpu-usage and taken at that service; a
// token limited to alice's own server (what a server's page token and $JUPYTERHUB_API_TOKEN hold) is taken, for
// alice alone; a token that only reads alice is refused.
func TestServiceAccessRealTokens(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	minter := client(t, svcMinter)
	tests := map[string]struct {
		scopes  []string
		service string
		want    int
	}{
		"a token for another service":               {[]string{"access:services!service=" + svcPages}, "gpu-usage", http.StatusForbidden},
		"the same token at that service":            {[]string{"access:services!service=" + svcPages}, svcPages, http.StatusOK},
		"a token limited to alice's default server": {[]string{"access:servers!server=alice/"}, "gpu-usage", http.StatusOK},
		"a token limited to a named server of hers": {[]string{"access:servers!server=alice/gpu", "users:activity!user=alice"}, "gpu-usage", http.StatusOK},
		"a token that reads alice only":             {[]string{"read:users!user=alice"}, "gpu-usage", http.StatusForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tok, err := minter.CreateToken(ctx, "alice", hubapi.TokenRequest{ExpiresIn: 600, Note: "hubint service access", Scopes: tc.scopes})
			if err != nil {
				t.Fatal(err)
			}
			logscan.Register("Hub token of alice minted for the service-access test", tok.Token)
			auth := hubauth.New(hubauth.Options{Hub: client(t, svcAuth), Service: tc.service})
			id, err := auth.AuthenticateToken(ctx, tok.Token)
			got := http.StatusOK
			switch {
			case errors.Is(err, hubauth.ErrNoServiceAccess):
				got = http.StatusForbidden
			case err != nil:
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("%v at %s: %d (%v), want %d", tc.scopes, tc.service, got, err, tc.want)
			}
			if id != nil && (id.Name != "alice" || id.IsAdmin() || id.CanReadUser("bob")) {
				t.Errorf("identity %s (admin %v, reads bob %v), want alice for herself alone; scopes %v", id.Name, id.IsAdmin(), id.CanReadUser("bob"), id.Scopes)
			}
		})
	}
}

// rawGet calls the Hub without hubapi, to observe what the Hub does on its own.
func rawGet(t *testing.T, path, token string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), http.MethodGet, hub.APIURL()+path, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// TestVersionGatedScopes: JupyterHub 6 split start:servers out of servers, so a role holding servers
// also grants start:servers there; on 5.5 the scope does not exist (and would stop the Hub if a role
// named it).
func TestVersionGatedScopes(t *testing.T) {
	who, err := client(t, svcServers).WhoAmI(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("jupyterhub %s: scopes of servers!user=alice + read:users:activity: %v", hub.Version(), who.Scopes)
	want := []string{"servers!user=alice", "read:servers!user=alice", "delete:servers!user=alice", "read:users:activity"}
	if strings.HasPrefix(hub.Version(), "6.") {
		want = append(want, "start:servers!user=alice")
	}
	for _, s := range want {
		if !slices.Contains(who.Scopes, s) {
			t.Errorf("WhoAmI scopes lack %q: %v", s, who.Scopes)
		}
	}
	if strings.HasPrefix(hub.Version(), "5.") && slices.Contains(who.Scopes, "start:servers!user=alice") {
		t.Errorf("jupyterhub %s reports start:servers, a 6.x scope: %v", hub.Version(), who.Scopes)
	}
}
