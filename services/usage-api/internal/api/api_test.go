package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

const prefix = "/services/gpu-usage/"

var now = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

type fakeLedger struct{}

func (fakeLedger) UserWindows(user string) ledger.Windows {
	if user == "alice" {
		return ledger.Windows{Today: ledger.Totals{Allocated: 0.5, Used: 0.1}, Days7: ledger.Totals{Allocated: 2}, Days30: ledger.Totals{Allocated: 3}}
	}
	return ledger.Windows{}
}

func (fakeLedger) Hours(_ context.Context, q ledger.Query) ([]ledger.Row, error) {
	return []ledger.Row{{Key: ledger.Key{User: q.User, Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}, Totals: ledger.Totals{Allocated: 1.5, Used: 0.5}}}, nil
}

func f(v float64) *float64 { return &v }

func testServer(t *testing.T) *httptest.Server {
	t.Helper()
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "alice", Groups: []string{"physics"}})
	hub.AddUser(hubapi.User{Name: "bob"})
	hub.AddUser(hubapi.User{Name: "root", Admin: true})
	hub.AddToken("alice-token", "alice")
	hub.AddToken("bob-token", "bob")
	hub.AddToken("root-token", "root")
	auth := hubauth.New(hubauth.Options{Hub: hub.Client("service-token")})

	state := usage.NewState(usage.NewHistory(time.Hour, 5*time.Second))
	v := &usage.View{
		SampledAt: now, Interval: 5 * time.Second,
		Users: map[string]*usage.User{"alice": {Name: "alice", Groups: []string{"physics"}, Simulated: true,
			Share: usage.Share{AllocatedGPUs: 3.0 / 7, UsedGPUs: f(0.3), MemoryTotalBytes: 20 << 30},
			Servers: []usage.Server{{Pod: "jupyter-alice", Namespace: "jhub", Node: "gpu-a100-0", Ready: true, AllocatedGPUs: 3.0 / 7, UsedGPUs: f(0.3), Simulated: true,
				GPUs: []usage.GPU{{Kind: "mig", Resource: "nvidia.com/mig-3g.20gb", Share: 3.0 / 7, ShareNumerator: 3, ShareDenominator: 7, SMUtilPercent: f(70), UtilizationSource: "simulated"}}}}}},
		Hub: usage.Directory{Users: map[string]usage.HubUser{"alice": {Name: "alice", Groups: []string{"physics"}}, "bob": {Name: "bob"}, "root": {Name: "root", Admin: true}}},
		Cluster: usage.Cluster{SampledAt: now, CapacityGPUs: 1, AllocatedGPUs: 3.0 / 7,
			Classes: []usage.ClassStats{{Class: "mig A100-SXM4-40GB 3g.20gb", Kind: "mig", CapacityUnits: 2, AllocatedUnits: 1}}},
	}
	state.Publish(v)
	h := New(Options{Prefix: prefix, State: state, Ledger: fakeLedger{}, Auth: auth.Middleware, Now: func() time.Time { return now }})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, method, path, token string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(body) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, body)
		}
	}
	return resp.StatusCode, m
}

func TestAuthorization(t *testing.T) {
	srv := testServer(t)
	cases := map[string]struct {
		method, path, token string
		wantStatus          int
	}{
		"me without token":            {"GET", "api/v1/me", "", http.StatusUnauthorized},
		"me with a bad token":         {"GET", "api/v1/me", "nope", http.StatusUnauthorized},
		"alice reads me":              {"GET", "api/v1/me", "alice-token", http.StatusOK},
		"alice reads herself by name": {"GET", "api/v1/users/alice", "alice-token", http.StatusOK},
		"bob cannot read alice":       {"GET", "api/v1/users/alice", "bob-token", http.StatusForbidden},
		"admin reads alice":           {"GET", "api/v1/users/alice", "root-token", http.StatusOK},
		"admin: unknown user":         {"GET", "api/v1/users/zed", "root-token", http.StatusNotFound},
		"bob cannot list users":       {"GET", "api/v1/users", "bob-token", http.StatusForbidden},
		"admin lists users":           {"GET", "api/v1/users", "root-token", http.StatusOK},
		"cluster for any user":        {"GET", "api/v1/cluster", "bob-token", http.StatusOK},
		"cluster without token":       {"GET", "api/v1/cluster", "", http.StatusUnauthorized},
		"options without token":       {"OPTIONS", "api/v1/me", "", http.StatusNoContent},
		"post is refused":             {"POST", "api/v1/me", "alice-token", http.StatusMethodNotAllowed},
		"unknown endpoint":            {"GET", "api/v2/me", "alice-token", http.StatusNotFound},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status, body := get(t, srv, tc.method, prefix+tc.path, tc.token)
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d (body %v)", status, tc.wantStatus, body)
			}
			if status == http.StatusForbidden && body["message"] == nil {
				t.Errorf("403 without a JSON message: %v", body)
			}
		})
	}
}

func TestMe(t *testing.T) {
	srv := testServer(t)
	_, got := get(t, srv, "GET", prefix+"api/v1/me", "alice-token")
	servers := got["servers"].([]any)
	gpu := servers[0].(map[string]any)["gpus"].([]any)[0].(map[string]any)
	type summary struct {
		User                            string
		Kind                            string
		Num, Den, Util, Allocated, Used float64
		Today                           map[string]any
		Simulated                       bool
	}
	want := summary{User: "alice", Kind: "mig", Num: 3, Den: 7, Util: 70, Allocated: 3.0 / 7, Used: 0.3,
		Today: map[string]any{"allocated": 0.5, "used": 0.1, "usedUnknown": 0.0}, Simulated: true}
	share := got["share"].(map[string]any)
	gotS := summary{User: got["user"].(string), Kind: gpu["kind"].(string), Num: gpu["shareNumerator"].(float64), Den: gpu["shareDenominator"].(float64),
		Util: gpu["smUtilPercent"].(float64), Allocated: share["allocatedGPUs"].(float64), Used: share["usedGPUs"].(float64),
		Today: got["gpuHours"].(map[string]any)["today"].(map[string]any), Simulated: got["simulated"].(bool)}
	if diff := cmp.Diff(want, gotS); diff != "" {
		t.Errorf("me (-want +got):\n%s", diff)
	}
	for _, k := range []string{"sampledAt", "intervalSeconds", "history", "budget", "idleCull", "groups"} {
		if _, ok := got[k]; !ok {
			t.Errorf("me lacks %q", k)
		}
	}

	// bob holds nothing: zeros, empty lists, not nulls.
	_, bob := get(t, srv, "GET", prefix+"api/v1/me", "bob-token")
	if bob["servers"] == nil || bob["history"] == nil || bob["share"].(map[string]any)["allocatedGPUs"].(float64) != 0 {
		t.Errorf("bob's me: %v", bob)
	}

	// A custom window comes from the store.
	status, custom := get(t, srv, "GET", prefix+"api/v1/me?from=2026-11-01T00:00:00Z&to=2026-11-22T00:00:00Z", "alice-token")
	if status != http.StatusOK || custom["gpuHours"].(map[string]any)["custom"].(map[string]any)["allocated"].(float64) != 1.5 {
		t.Errorf("custom window: %d %v", status, custom["gpuHours"])
	}
	if status, _ := get(t, srv, "GET", prefix+"api/v1/me?from=yesterday", "alice-token"); status != http.StatusBadRequest {
		t.Errorf("bad from: status %d, want 400", status)
	}
}

func TestUsersPagination(t *testing.T) {
	srv := testServer(t)
	_, page1 := get(t, srv, "GET", prefix+"api/v1/users?limit=2", "root-token")
	items := page1["items"].([]any)
	pg := page1["_pagination"].(map[string]any)
	if len(items) != 2 || items[0].(map[string]any)["name"] != "alice" || pg["total"].(float64) != 3 || pg["next"] == nil {
		t.Fatalf("page 1: %v", page1)
	}
	next := pg["next"].(map[string]any)["url"].(string)
	_, page2 := get(t, srv, "GET", next, "root-token")
	items = page2["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["name"] != "root" || page2["_pagination"].(map[string]any)["next"] != nil {
		t.Fatalf("page 2: %v", page2)
	}
	if status, _ := get(t, srv, "GET", prefix+"api/v1/users?limit=-1", "root-token"); status != http.StatusBadRequest {
		t.Errorf("limit=-1: status %d", status)
	}
}
