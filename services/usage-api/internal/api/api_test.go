package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/profile"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

const prefix = "/services/gpu-usage/"

// now is the sampling time of the test view and the API's clock: half past ten, so the current hour bucket is
// half full.
var now = time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC)

var aliceMIG = ledger.Key{User: "alice", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}

// testLedger is a real ledger on a temporary SQLite file, written with known increments (GPU-hours per UTC hour
// bucket, alice only):
//
//	2026-11-21 20:00 .. 2026-11-22 01:00  6 buckets   allocated 0.5  used 0.25  (utilization known)
//	2026-11-22 02:00 .. 2026-11-22 09:00  8 buckets   allocated 0.5  usedUnknown 0.5
//	2026-11-22 10:00 (current, to 10:30)  1 bucket    allocated 0.25 usedUnknown 0.25
//
// Hours calls are counted and can be made to fail; the whole ledger can be made unavailable.
type testLedger struct {
	*ledger.Ledger
	hoursCalls atomic.Int64
	hoursErr   atomic.Pointer[error]
	down       atomic.Pointer[error]
}

func (l *testLedger) Available() error {
	if e := l.down.Load(); e != nil {
		return *e
	}
	return nil
}

func (l *testLedger) Hours(ctx context.Context, q ledger.Query) ([]ledger.Row, error) {
	l.hoursCalls.Add(1)
	if e := l.hoursErr.Load(); e != nil {
		return nil, *e
	}
	return l.Ledger.Hours(ctx, q)
}

func newTestLedger(t testing.TB) *testLedger {
	t.Helper()
	ctx := t.Context()
	store, err := ledger.OpenSQLite(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	start := time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC)
	// One-hour ticks with a large gap limit: each Record charges exactly the time since the previous one.
	led, err := ledger.New(ctx, store, ledger.Options{Interval: time.Hour, MaxGap: 1000 * time.Hour}, start)
	if err != nil {
		t.Fatal(err)
	}
	ticks := []struct {
		at      time.Time
		samples []ledger.Sample
	}{
		{start, nil},
		{time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC), []ledger.Sample{{Key: aliceMIG, Allocated: 0.5, Used: 0.25, UsedKnown: true}}},
		{now, []ledger.Sample{{Key: aliceMIG, Allocated: 0.5}}},
	}
	for _, tk := range ticks {
		if _, err := led.Record(ctx, tk.at, tk.samples); err != nil {
			t.Fatal(err)
		}
	}
	return &testLedger{Ledger: led}
}

func f(v float64) *float64 { return &v }

var approx = cmpopts.EquateApprox(0, 1e-9)

func testServer(t *testing.T) *httptest.Server {
	srv, _ := testServerWithLedger(t)
	return srv
}

func testServerWithLedger(t testing.TB) (*httptest.Server, *testLedger) {
	t.Helper()
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "alice", Groups: []string{"physics"}})
	hub.AddUser(hubapi.User{Name: "bob"})
	hub.AddUser(hubapi.User{Name: "root", Admin: true})
	hub.AddToken("alice-token", "alice")
	hub.AddToken("bob-token", "bob")
	hub.AddToken("root-token", "root")
	hub.AddToken("quota-token", "gpu-quota")       // a service listed in ReaderServices
	hub.AddToken("culler-token", "gpu-culler")     // a service that is not
	hub.AddToken("profiles-token", "gpu-profiles") // a service listed in AdviceReaders
	hub.AddToken("alice-scoped-token", "alice", "read:users!user=alice")
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
		Notices: map[string][]usage.Notice{"alice": {aliceNotice}},
		Offers:  a100Offers,
		Free:    a100Free,
	}
	state.Publish(v)
	led := newTestLedger(t)
	h := New(Options{Prefix: prefix, State: state, Ledger: led, Auth: auth.Middleware, Now: func() time.Time { return now },
		Budget: fakeBudget{}, ReaderServices: []string{"gpu-quota"}, AdviceReaders: []string{"gpu-profiles"}, Waitlist: led, WaitlistServices: []string{"gpu-quota"}, Profiles: profile.NewReader(led, 10*time.Minute)})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, led
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
		// Found by the generated security suite (issue 15): a service has no me, and is refused like any caller.
		"me with a service token": {"GET", "api/v1/me", "quota-token", http.StatusForbidden},
		// Found by the generated bad-input suite: history took anything but "false" as true.
		"history neither true nor false": {"GET", "api/v1/me?history=maybe", "alice-token", http.StatusBadRequest},
		"history true":                   {"GET", "api/v1/me?history=true", "alice-token", http.StatusOK},
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
		Hours                           map[string]any
		Simulated                       bool
	}
	// GPU-hours from the ledger's increments (see testLedger): today (UTC) is the buckets 00:00 .. 10:00.
	want := summary{User: "alice", Kind: "mig", Num: 3, Den: 7, Util: 70, Allocated: 3.0 / 7, Used: 0.3,
		Hours: map[string]any{
			"today": map[string]any{"allocated": 5.25, "used": 0.5, "usedUnknown": 4.25},
			"7d":    map[string]any{"allocated": 7.25, "used": 1.5, "usedUnknown": 4.25},
			"30d":   map[string]any{"allocated": 7.25, "used": 1.5, "usedUnknown": 4.25},
		}, Simulated: true}
	share := got["share"].(map[string]any)
	gotS := summary{User: got["user"].(string), Kind: gpu["kind"].(string), Num: gpu["shareNumerator"].(float64), Den: gpu["shareDenominator"].(float64),
		Util: gpu["smUtilPercent"].(float64), Allocated: share["allocatedGPUs"].(float64), Used: share["usedGPUs"].(float64),
		Hours: got["gpuHours"].(map[string]any), Simulated: got["simulated"].(bool)}
	if diff := cmp.Diff(want, gotS, approx); diff != "" {
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
	if status, _ := get(t, srv, "GET", prefix+"api/v1/me?from=yesterday", "alice-token"); status != http.StatusBadRequest {
		t.Errorf("bad from: status %d, want 400", status)
	}
}

// TestCustomWindow sums the ledger's hour buckets: the answer's from and to are the effective bounds (from
// rounded down to its hour, to rounded up to the end of its hour but never past now).
func TestCustomWindow(t *testing.T) {
	cases := map[string]struct {
		query string
		want  map[string]any
	}{
		"inside whole hours": {
			query: "from=2026-11-21T22:30:00Z&to=2026-11-22T01:10:00Z",
			want: map[string]any{"from": "2026-11-21T22:00:00Z", "to": "2026-11-22T02:00:00Z",
				"allocated": 2.0, "used": 1.0, "usedUnknown": 0.0,
				"byClass": []any{map[string]any{"kind": "mig", "class": aliceMIG.Class, "allocated": 2.0, "used": 1.0, "usedUnknown": 0.0}}},
		},
		"on hour boundaries": {
			query: "from=2026-11-22T01:00:00Z&to=2026-11-22T03:00:00Z",
			want: map[string]any{"from": "2026-11-22T01:00:00Z", "to": "2026-11-22T03:00:00Z",
				"allocated": 1.0, "used": 0.25, "usedUnknown": 0.5,
				"byClass": []any{map[string]any{"kind": "mig", "class": aliceMIG.Class, "allocated": 1.0, "used": 0.25, "usedUnknown": 0.5}}},
		},
		"to defaults to now, inside the current hour": {
			query: "from=2026-11-22T09:15:00Z",
			want: map[string]any{"from": "2026-11-22T09:00:00Z", "to": "2026-11-22T10:30:00Z",
				"allocated": 0.75, "used": 0.0, "usedUnknown": 0.75,
				"byClass": []any{map[string]any{"kind": "mig", "class": aliceMIG.Class, "allocated": 0.75, "used": 0.0, "usedUnknown": 0.75}}},
		},
		"to in the future ends now": {
			query: "from=2026-11-22T10:00:00Z&to=2026-11-23T00:00:00Z",
			want: map[string]any{"from": "2026-11-22T10:00:00Z", "to": "2026-11-22T10:30:00Z",
				"allocated": 0.25, "used": 0.0, "usedUnknown": 0.25,
				"byClass": []any{map[string]any{"kind": "mig", "class": aliceMIG.Class, "allocated": 0.25, "used": 0.0, "usedUnknown": 0.25}}},
		},
		"from defaults to 24 h before to": {
			query: "to=2026-11-20T05:00:00Z",
			want: map[string]any{"from": "2026-11-19T05:00:00Z", "to": "2026-11-20T05:00:00Z",
				"allocated": 0.0, "used": 0.0, "usedUnknown": 0.0},
		},
		"before any usage": {
			query: "from=2026-11-01T00:00:00Z&to=2026-11-02T00:00:00Z",
			want: map[string]any{"from": "2026-11-01T00:00:00Z", "to": "2026-11-02T00:00:00Z",
				"allocated": 0.0, "used": 0.0, "usedUnknown": 0.0},
		},
	}
	srv := testServer(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status, got := get(t, srv, "GET", prefix+"api/v1/me?"+tc.query, "alice-token")
			if status != http.StatusOK {
				t.Fatalf("status %d: %v", status, got)
			}
			if diff := cmp.Diff(tc.want, got["gpuHours"].(map[string]any)["custom"], approx); diff != "" {
				t.Errorf("custom window (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCustomWindowLedgerFailure: a store that cannot answer is the server's trouble, not the caller's: 503 with
// Retry-After and a message that says to retry.
func TestCustomWindowLedgerFailure(t *testing.T) {
	srv, led := testServerWithLedger(t)
	e := errors.New("database is locked")
	led.hoursErr.Store(&e)
	resp := do(t, srv, prefix+"api/v1/me?from=2026-11-21T00:00:00Z", "alice-token")
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "retry") {
		t.Errorf("ledger failure: %d Retry-After=%q %s, want 503 with Retry-After and a retry hint", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if strings.Contains(string(body), "database is locked") {
		t.Errorf("the store's error reached the caller: %s", body)
	}
}

func do(t *testing.T, srv *httptest.Server, path, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
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

// TestUsersQueryBounds: huge or overflowing offset/limit answer 400 with a message naming the parameter, never a
// page with a negative next offset.
func TestUsersQueryBounds(t *testing.T) {
	cases := map[string]struct {
		query       string
		wantStatus  int
		wantMessage string // substring
		wantLimit   float64
		wantItems   int
	}{
		"offset beyond int64":             {query: "offset=99999999999999999999", wantStatus: 400, wantMessage: `offset "99999999999999999999"`},
		"offset+limit overflows":          {query: "offset=9223372036854775000&limit=1000", wantStatus: 400, wantMessage: `offset "9223372036854775000"`},
		"limit beyond int64":              {query: "limit=99999999999999999999", wantStatus: 400, wantMessage: `limit "99999999999999999999"`},
		"negative offset":                 {query: "offset=-1", wantStatus: 400, wantMessage: `offset "-1"`},
		"zero limit":                      {query: "limit=0", wantStatus: 400, wantMessage: `limit "0"`},
		"not a number":                    {query: "offset=ten", wantStatus: 400, wantMessage: `offset "ten"`},
		"large limit is capped":           {query: "limit=5000", wantStatus: 200, wantLimit: 1000, wantItems: 3},
		"offset past the end: empty page": {query: "offset=10", wantStatus: 200, wantLimit: 200},
	}
	srv := testServer(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status, body := get(t, srv, "GET", prefix+"api/v1/users?"+tc.query, "root-token")
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %v", status, tc.wantStatus, body)
			}
			if tc.wantStatus != http.StatusOK {
				if msg, _ := body["message"].(string); !strings.Contains(msg, tc.wantMessage) {
					t.Errorf("message %q does not name %s", msg, tc.wantMessage)
				}
				return
			}
			pg := body["_pagination"].(map[string]any)
			if pg["limit"].(float64) != tc.wantLimit || len(body["items"].([]any)) != tc.wantItems || pg["next"] != nil {
				t.Errorf("page: %v", body)
			}
		})
	}
}

// TestTimeZone: tz sets where "today" starts (local midnight, rounded down to its UTC hour bucket); 7d and 30d do
// not depend on it. The numbers follow testLedger's increments.
func TestTimeZone(t *testing.T) {
	utcToday := map[string]any{"allocated": 5.25, "used": 0.5, "usedUnknown": 4.25}
	everything := map[string]any{"allocated": 7.25, "used": 1.5, "usedUnknown": 4.25}
	cases := map[string]struct {
		path, token string
		wantToday   map[string]any
	}{
		"no tz: UTC": {path: "api/v1/me", token: "alice-token", wantToday: utcToday},
		"UTC":        {path: "api/v1/me?tz=UTC", token: "alice-token", wantToday: utcToday},
		// 05:30 local: the day began at 05:00 UTC.
		"New York": {path: "api/v1/me?tz=America/New_York", token: "alice-token",
			wantToday: map[string]any{"allocated": 2.75, "used": 0.0, "usedUnknown": 2.75}},
		// 19:30 local: the day began at 15:00 UTC the day before, before any usage.
		"Tokyo": {path: "api/v1/me?tz=Asia/Tokyo", token: "alice-token", wantToday: everything},
		// 16:00 local: midnight was 18:30 UTC, counted from its bucket at 18:00.
		"Kolkata, half-hour offset": {path: "api/v1/me?tz=Asia/Kolkata", token: "alice-token", wantToday: everything},
		"admin reads alice in New York": {path: "api/v1/users/alice?tz=America/New_York", token: "root-token",
			wantToday: map[string]any{"allocated": 2.75, "used": 0.0, "usedUnknown": 2.75}},
	}
	srv := testServer(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status, got := get(t, srv, "GET", prefix+tc.path, tc.token)
			if status != http.StatusOK {
				t.Fatalf("status %d: %v", status, got)
			}
			hours := got["gpuHours"].(map[string]any)
			if diff := cmp.Diff(tc.wantToday, hours["today"], approx); diff != "" {
				t.Errorf("today (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(everything, hours["7d"], approx); diff != "" {
				t.Errorf("7d (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTimeZoneInvalid(t *testing.T) {
	srv := testServer(t)
	for _, tz := range []string{"Mars/Base", "Local", "../../etc/passwd", "America/New_York%00"} {
		status, body := get(t, srv, "GET", prefix+"api/v1/me?tz="+tz, "alice-token")
		msg, _ := body["message"].(string)
		if status != http.StatusBadRequest || !strings.Contains(msg, "tz") || !strings.Contains(msg, "IANA") {
			t.Errorf("tz=%s: %d %q, want 400 naming the value and what to send", tz, status, msg)
		}
	}
}

// TestTimeZoneCached: a panel polling every few seconds with its tz costs one store query per user, zone and
// hour, not one per poll.
func TestTimeZoneCached(t *testing.T) {
	srv, led := testServerWithLedger(t)
	for range 5 {
		if status, body := get(t, srv, "GET", prefix+"api/v1/me?tz=America/New_York", "alice-token"); status != http.StatusOK {
			t.Fatalf("status %d: %v", status, body)
		}
	}
	if n := led.hoursCalls.Load(); n != 1 {
		t.Errorf("5 polls made %d store queries, want 1", n)
	}
	get(t, srv, "GET", prefix+"api/v1/me?tz=Asia/Tokyo", "alice-token")
	get(t, srv, "GET", prefix+"api/v1/me?tz=America/New_York", "bob-token")
	if n := led.hoursCalls.Load(); n != 3 {
		t.Errorf("another zone and another user: %d store queries in all, want 3", n)
	}
}

// TestLedgerUnavailable (contract 5): while the ledger cannot answer, me, users/{name} and users still serve the
// live share; every GPU-hours window is null, with gpuHoursStatus "unavailable" and a reason in plain words.
func TestLedgerUnavailable(t *testing.T) {
	srv, led := testServerWithLedger(t)
	down := errors.New("the ledger database cannot be reached (retrying every 30 s)")
	led.down.Store(&down)
	const reason = "GPU-hours are unavailable: the ledger database cannot be reached (retrying every 30 s); live numbers are current."
	for _, path := range []string{"api/v1/me", "api/v1/me?tz=America/New_York", "api/v1/me?from=2026-11-21T00:00:00Z"} {
		status, got := get(t, srv, "GET", prefix+path, "alice-token")
		if status != http.StatusOK {
			t.Fatalf("%s: status %d: %v", path, status, got)
		}
		want := map[string]any{"today": nil, "7d": nil, "30d": nil}
		if strings.Contains(path, "from=") {
			want["custom"] = nil
		}
		if diff := cmp.Diff(want, got["gpuHours"]); diff != "" {
			t.Errorf("%s: gpuHours (-want +got):\n%s", path, diff)
		}
		if got["gpuHoursStatus"] != "unavailable" || got["gpuHoursReason"] != reason {
			t.Errorf("%s: status %v, reason %v", path, got["gpuHoursStatus"], got["gpuHoursReason"])
		}
		if a := got["share"].(map[string]any)["allocatedGPUs"].(float64); math.Abs(a-3.0/7) > 1e-9 {
			t.Errorf("%s: live share %v, want 3/7", path, a)
		}
	}
	_, users := get(t, srv, "GET", prefix+"api/v1/users", "root-token")
	for _, it := range users["items"].([]any) {
		u := it.(map[string]any)
		if u["gpuHoursStatus"] != "unavailable" || u["gpuHoursReason"] != reason || u["gpuHours"].(map[string]any)["today"] != nil {
			t.Errorf("users item while unavailable: %v", u)
		}
	}

	led.down.Store(nil)
	_, got := get(t, srv, "GET", prefix+"api/v1/me", "alice-token")
	if got["gpuHoursStatus"] != "ok" || got["gpuHoursReason"] != nil || got["gpuHours"].(map[string]any)["today"] == nil {
		t.Errorf("back: status %v, reason %v, hours %v", got["gpuHoursStatus"], got["gpuHoursReason"], got["gpuHours"])
	}
}

// TestTimeZoneQueryFailure: a store query for tz that fails degrades to "unavailable" (the live share is still
// served), not to an error answer.
func TestTimeZoneQueryFailure(t *testing.T) {
	srv, led := testServerWithLedger(t)
	e := errors.New("database is locked")
	led.hoursErr.Store(&e)
	status, got := get(t, srv, "GET", prefix+"api/v1/me?tz=Asia/Tokyo", "alice-token")
	if status != http.StatusOK || got["gpuHoursStatus"] != "unavailable" || got["gpuHours"].(map[string]any)["today"] != nil {
		t.Errorf("status %d, gpuHoursStatus %v, gpuHours %v", status, got["gpuHoursStatus"], got["gpuHours"])
	}
	if reason, _ := got["gpuHoursReason"].(string); !strings.Contains(reason, "retry") || strings.Contains(reason, "locked") {
		t.Errorf("reason %q: want a retry hint and no store error", reason)
	}
}
