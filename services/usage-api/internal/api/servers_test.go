package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/notice"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// TestServersAuthorization: every server's telemetry is for admins and the reader services, like gpu-hours.
func TestServersAuthorization(t *testing.T) {
	srv := testServer(t)
	cases := map[string]struct {
		method, token string
		wantStatus    int
	}{
		"admin":                           {"GET", "root-token", http.StatusOK},
		"a reader service":                {"GET", "quota-token", http.StatusOK},
		"head":                            {"HEAD", "root-token", http.StatusOK},
		"a service not among the readers": {"GET", "culler-token", http.StatusForbidden},
		"a user":                          {"GET", "alice-token", http.StatusForbidden},
		"no token":                        {"GET", "", http.StatusUnauthorized},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status, body := get(t, srv, tc.method, prefix+"api/v1/servers", tc.token)
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d (body %v)", status, tc.wantStatus, body)
			}
			if status == http.StatusForbidden && body["message"] == nil {
				t.Errorf("403 without a JSON message: %v", body)
			}
		})
	}
}

// TestServers: the contract's shape (C1), from the test view.
func TestServers(t *testing.T) {
	srv := testServer(t)
	status, got := get(t, srv, "GET", prefix+"api/v1/servers", "quota-token")
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, got)
	}
	want := map[string]any{"sampledAt": "2026-11-22T10:30:00Z", "servers": []any{map[string]any{
		"user": "alice", "server": "", "pod": "jupyter-alice", "namespace": "jhub", "node": "gpu-a100-0",
		"kind": "mig", "class": "", "allocatedGPUs": 3.0 / 7, "smUtilPercent": 70.0, "utilizationUnknownReason": "",
		"memoryUsedBytes": 0.0, "stale": false, "staleReason": "", "simulated": true,
	}}}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("servers (-want +got):\n%s", diff)
	}
}

func TestServersBeforeFirstView(t *testing.T) {
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "root", Admin: true})
	hub.AddToken("root-token", "root")
	srv := httptest.NewServer(New(Options{Prefix: prefix, State: usage.NewState(usage.NewHistory(time.Hour, 5*time.Second)), Ledger: newTestLedger(t),
		Auth: hubauth.New(hubauth.Options{Hub: hub.Client("service-token")}).Middleware}))
	t.Cleanup(srv.Close)
	status, body := get(t, srv, "GET", prefix+"api/v1/servers", "root-token")
	if status != http.StatusServiceUnavailable || body["message"] == nil {
		t.Errorf("before the first view: %d %v, want 503 with a message", status, body)
	}
}

// manyServers is a view of n users with two servers each, alternately busy, idle and stale.
func manyServers(n int, at time.Time) *usage.View {
	v := &usage.View{SampledAt: at, Interval: 5 * time.Second, Users: map[string]*usage.User{},
		Hub: usage.Directory{Users: map[string]usage.HubUser{"root": {Name: "root", Admin: true}}}}
	for i := range n {
		name := fmt.Sprintf("user%05d", i)
		u := &usage.User{Name: name}
		for _, s := range []string{"", "train"} {
			g := usage.GPU{Kind: "shared", Class: "shared T4", Share: 0.25, SMUtilPercent: f(float64(i % 100)), MemoryUsedBytes: 1 << 20}
			srv := usage.Server{Name: s, Pod: "jupyter-" + name + "--" + s, Namespace: "jhub", Node: fmt.Sprintf("gpu-t4-%d", i%50),
				AllocatedGPUs: 0.25, Simulated: true, GPUs: []usage.GPU{g}}
			if i%7 == 0 {
				srv.Stale, srv.StaleReason = true, "the GPU agent is unreachable"
				srv.GPUs[0].SMUtilPercent, srv.GPUs[0].UtilizationUnknownReason = nil, "the GPU agent is unreachable"
			}
			u.Servers = append(u.Servers, srv)
		}
		v.Users[name] = u
	}
	return v
}

// TestServersMany: 2,000 servers, every one listed in order; polls of one view are served from the encoded
// answer (a few allocations, not thousands), and the next view is answered as soon as it is published.
func TestServersMany(t *testing.T) {
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "root", Admin: true})
	hub.AddToken("root-token", "root")
	state := usage.NewState(usage.NewHistory(time.Hour, 5*time.Second))
	state.Publish(manyServers(1000, now))
	h := New(Options{Prefix: prefix, State: state, Ledger: newTestLedger(t),
		Auth: hubauth.New(hubauth.Options{Hub: hub.Client("service-token")}).Middleware, Now: func() time.Time { return now }})
	poll := func() contract.ServersResponse {
		req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, prefix+"api/v1/servers", nil)
		req.Header.Set("Authorization", "token root-token")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var resp contract.ServersResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := poll()
	if len(resp.Servers) != 2000 || !resp.SampledAt.Equal(now) {
		t.Fatalf("%d servers at %v, want 2000 at %v", len(resp.Servers), resp.SampledAt, now)
	}
	for i, s := range resp.Servers {
		if want := fmt.Sprintf("user%05d", i/2); s.User != want || (s.Server == "train") != (i%2 == 1) {
			t.Fatalf("line %d is %s/%s, want %s, sorted by user then server", i, s.User, s.Server, want)
		}
		if (i/2)%7 == 0 && (s.SMUtilPercent != nil || !s.Stale) {
			t.Errorf("%s: stale %v with utilization %v", s.User, s.Stale, s.SMUtilPercent)
		}
	}

	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, prefix+"api/v1/servers", nil)
	req.Header.Set("Authorization", "token root-token")
	allocs := testing.AllocsPerRun(20, func() { h.ServeHTTP(httptest.NewRecorder(), req) })
	t.Logf("%.0f allocations per poll", allocs)
	if allocs > 200 {
		t.Errorf("a poll of an unchanged view made %.0f allocations; it should reuse the encoded answer", allocs)
	}

	later := now.Add(5 * time.Second)
	next := manyServers(1000, later)
	delete(next.Users, "user00000")
	state.Publish(next)
	if resp := poll(); len(resp.Servers) != 1998 || !resp.SampledAt.Equal(later) {
		t.Errorf("after the next view: %d servers at %v, want 1998 at %v", len(resp.Servers), resp.SampledAt, later)
	}
}

// TestMeCullerNotice: the culler's snooze counts pass through me, and the schema names them.
func TestMeCullerNotice(t *testing.T) {
	culler := usage.Notice{Server: "train", Notice: notice.Notice{Service: "gpu-culler", Kind: notice.KindIdle, Reason: "idle",
		Message:  "Your GPU has been idle for 52 min; this server stops at 10:40 UTC unless you use it or snooze.",
		Deadline: now.Add(10 * time.Minute), Snoozable: true, CreatedAt: now, Stops: true, StopsSince: now, Snoozes: 1, MaxSnoozes: 2}}
	v := &usage.View{SampledAt: now, Interval: 5 * time.Second, Users: map[string]*usage.User{},
		Hub:     usage.Directory{Users: map[string]usage.HubUser{"alice": {Name: "alice"}}},
		Notices: map[string][]usage.Notice{"alice": {culler}}}
	_, me := get(t, serveView(t, v), "GET", prefix+"api/v1/me", "alice-token")
	ns, _ := me["notices"].([]any)
	if len(ns) != 1 {
		t.Fatalf("notices: %v", me["notices"])
	}
	n := ns[0].(map[string]any)
	if n["snoozes"] != 1.0 || n["maxSnoozes"] != 2.0 || n["snoozable"] != true || n["server"] != "train" {
		t.Errorf("culler notice: %v", n)
	}
	checkSchemas(t, readSchemas(t), map[string]map[string]any{"Notice": n})
}
