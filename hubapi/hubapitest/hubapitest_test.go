package hubapitest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
)

// get sends a raw request, so these tests check the wire format, not the client.
func get(t *testing.T, h *hubapitest.Hub, method, path, token string, header map[string]string) (int, http.Header, any) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), method, h.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		r.Header.Set("Authorization", "token "+token)
	}
	for k, v := range header {
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s %s: body is not JSON: %q", method, path, b)
		}
	}
	return resp.StatusCode, resp.Header, v
}

func hubWithUsers(t *testing.T, n int) *hubapitest.Hub {
	h := hubapitest.New(t)
	h.SetClock(func() time.Time { return time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC) })
	h.AddUser(hubapi.User{Name: "root", Admin: true})
	h.AddToken("admin", "root")
	for i := range n {
		h.AddUser(hubapi.User{Name: fmt.Sprintf("u%03d", i)})
	}
	return h
}

const paged = hubapi.PaginationMediaType

func TestPaginationWire(t *testing.T) {
	h := hubWithUsers(t, 259) // 260 users with root
	cases := map[string]struct {
		path       string
		accept     string
		wantItems  int
		wantPaging any // nil: want a bare list
	}{
		"bare list capped at 200": {path: "/users", wantItems: 200},
		"bare list honours limit": {path: "/users?limit=10&offset=255", wantItems: 5},
		"paged default limit 50": {path: "/users", accept: paged, wantItems: 50, wantPaging: map[string]any{
			"offset": 0.0, "limit": 50.0, "total": 260.0,
			"next": map[string]any{"offset": 50.0, "limit": 50.0, "url": "URL/users?limit=50&offset=50"},
		}},
		"paged limit capped at 200": {path: "/users?limit=1000&offset=200", accept: "application/json, " + paged,
			wantItems: 60, wantPaging: map[string]any{"offset": 200.0, "limit": 200.0, "total": 260.0, "next": nil}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.accept != "" {
				hdr["Accept"] = tc.accept
			}
			code, _, body := get(t, h, "GET", tc.path, "admin", hdr)
			if code != 200 {
				t.Fatalf("status %d: %v", code, body)
			}
			if tc.wantPaging == nil {
				list, ok := body.([]any)
				if !ok || len(list) != tc.wantItems {
					t.Fatalf("want bare list of %d, got %T len %d", tc.wantItems, body, len(list))
				}
				return
			}
			m := body.(map[string]any)
			if n := len(m["items"].([]any)); n != tc.wantItems {
				t.Errorf("items = %d, want %d", n, tc.wantItems)
			}
			p := m["_pagination"].(map[string]any)
			if next, ok := p["next"].(map[string]any); ok {
				next["url"] = strings.Replace(next["url"].(string), h.URL(), "URL", 1)
			}
			if diff := cmp.Diff(tc.wantPaging, p); diff != "" {
				t.Errorf("_pagination (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUserModelWire(t *testing.T) {
	h := hubWithUsers(t, 0)
	started := time.Date(2026, 11, 22, 9, 0, 0, 500000000, time.UTC)
	h.AddUser(hubapi.User{Name: "alice", Servers: map[string]hubapi.Server{
		"": {Ready: true, Started: &started, State: map[string]any{"pod_name": "jupyter-alice"}},
	}})
	h.AddUser(hubapi.User{Name: "bob"})
	h.AddToken("reader", "svc", "read:users")

	_, _, got := get(t, h, "GET", "/users/bob", "admin", nil)
	want := map[string]any{
		"kind": "user", "name": "bob", "admin": false, "roles": []any{"user"}, "groups": []any{},
		"server": nil, "pending": nil, "created": "2026-11-22T10:00:00Z", "last_activity": nil, "servers": map[string]any{},
		"auth_state": nil,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("admin view of bob (-want +got):\n%s", diff)
	}

	_, _, got = get(t, h, "GET", "/users/alice", "admin", nil)
	srv := got.(map[string]any)["servers"].(map[string]any)[""].(map[string]any)
	wantSrv := map[string]any{
		"name": "", "full_name": "alice/", "last_activity": nil, "started": "2026-11-22T09:00:00.500000Z",
		"pending": nil, "ready": true, "stopped": false, "url": "/user/alice/", "user_options": map[string]any{},
		"progress_url": "/hub/api/users/alice/server/progress", "full_url": nil, "full_progress_url": nil,
		"state": map[string]any{"pod_name": "jupyter-alice"},
	}
	if diff := cmp.Diff(wantSrv, srv); diff != "" {
		t.Errorf("server model (-want +got):\n%s", diff)
	}
	if s := got.(map[string]any)["server"]; s != "/user/alice/" {
		t.Errorf("server = %v, want /user/alice/", s)
	}

	_, _, got = get(t, h, "GET", "/users/alice", "reader", nil)
	if _, ok := got.(map[string]any)["servers"]; ok {
		t.Errorf("servers present without read:servers: %v", got)
	}
}

func TestErrorsWire(t *testing.T) {
	h := hubWithUsers(t, 1)
	h.AddToken("self", "u000")
	h.AddToken("reader", "svc", "read:users")
	cases := map[string]struct {
		method, path, token string
		wantCode            int
		wantBody            any
	}{
		"no token": {method: "GET", path: "/users", wantCode: 403,
			wantBody: map[string]any{"status": 403.0, "message": "Missing or invalid credentials."}},
		"missing scope": {method: "GET", path: "/users", token: "self", wantCode: 403,
			wantBody: map[string]any{"status": 403.0, "message": "Action is not authorized with current scopes; requires any of [list:users]"}},
		"filtered scope on other user": {method: "GET", path: "/users/root", token: "self", wantCode: 404,
			wantBody: map[string]any{"status": 404.0, "message": "No access to resources or resources not found"}},
		"no such user": {method: "GET", path: "/users/ghost", token: "admin", wantCode: 404,
			wantBody: map[string]any{"status": 404.0, "message": "Not Found"}},
		"bad state filter": {method: "GET", path: "/users?state=weird", token: "admin", wantCode: 400,
			wantBody: map[string]any{"status": 400.0, "message": "Unrecognized state filter: 'weird'"}},
		"delete without scope": {method: "DELETE", path: "/users/u000/server", token: "reader", wantCode: 403,
			wantBody: map[string]any{"status": 403.0, "message": "Action is not authorized with current scopes; requires any of [delete:servers]"}},
		"version without token": {method: "GET", path: "/", wantCode: 200, wantBody: map[string]any{"version": hubapitest.Version}},
		"unknown route":         {method: "GET", path: "/nope", token: "admin", wantCode: 404, wantBody: map[string]any{"status": 404.0, "message": "Not Found"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, _, body := get(t, h, tc.method, tc.path, tc.token, nil)
			if code != tc.wantCode {
				t.Errorf("status = %d, want %d", code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantBody, body); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFailureInjectionAndCounters(t *testing.T) {
	h := hubWithUsers(t, 0)
	h.Fail(hubapitest.Failure{Method: "GET", Path: "/users/root", Status: 429, RetryAfter: "4", Times: 2})
	for i, want := range []int{429, 429, 200} {
		code, hdr, _ := get(t, h, "GET", "/users/root", "admin", nil)
		if code != want {
			t.Errorf("request %d: status %d, want %d", i, code, want)
		}
		if want == 429 && hdr.Get("Retry-After") != "4" {
			t.Errorf("request %d: Retry-After = %q", i, hdr.Get("Retry-After"))
		}
	}
	if n := h.Requests("GET /users/root"); n != 3 {
		t.Errorf("counted %d, want 3", n)
	}
	if n := h.TotalRequests(); n != 3 {
		t.Errorf("total %d, want 3", n)
	}
}

func TestStopPendingThenFinish(t *testing.T) {
	h := hubWithUsers(t, 0)
	h.AddUser(hubapi.User{Name: "alice", Servers: map[string]hubapi.Server{"": {Ready: true}}})
	h.SetStopPending(true)
	code, _, _ := get(t, h, "DELETE", "/users/alice/server", "admin", nil)
	if code != 202 {
		t.Fatalf("stop: %d, want 202", code)
	}
	u, _ := h.User("alice")
	if s := u.Servers[""]; s.Pending != "stop" || s.Ready {
		t.Errorf("server after 202 = %+v, want pending stop", s)
	}
	code, _, _ = get(t, h, "DELETE", "/users/alice/server", "admin", nil)
	if code != 202 {
		t.Errorf("second stop while stopping: %d, want 202", code)
	}
	h.FinishStop("alice", "")
	code, _, _ = get(t, h, "DELETE", "/users/alice/server", "admin", nil)
	if code != 204 {
		t.Errorf("stop of a stopped server: %d, want 204", code)
	}
}
