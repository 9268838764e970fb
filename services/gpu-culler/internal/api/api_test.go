package api

import (
	"bytes"
	"context"
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

	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/snooze"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/stops"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

var t0 = time.Date(2026, 11, 23, 15, 10, 0, 0, time.UTC)

const ownToken = "culler-secret-token"

// identities are the Hub tokens the fake authenticator knows.
var identities = map[string]*hubauth.Identity{
	"alice-token":  {Kind: "user", Name: "alice"},
	"bob-token":    {Kind: "user", Name: "bob"},
	"admin-token":  {Kind: "user", Name: "root", Admin: true},
	"reader-token": {Kind: "service", Name: "gpu-admin-view"},
	"other-svc":    {Kind: "service", Name: "someone"},
}

type fakeAuth struct {
	mu    sync.Mutex
	calls int
}

func (f *fakeAuth) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls++
		f.mu.Unlock()
		id, ok := identities[hubauth.TokenFromRequest(r)]
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(hubauth.NewContext(r.Context(), id)))
	})
}

type fakeStops map[string]stops.Stop

func (f fakeStops) Last(user string) (stops.Stop, bool) { s, ok := f[user]; return s, ok }

type call struct{ Actor, User, Server string }

type fakeSnoozer struct {
	mu    sync.Mutex
	calls []call
	err   error
}

func (f *fakeSnoozer) Snooze(_ context.Context, actor, user, server string) (notice.Notice, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{actor, user, server})
	if f.err != nil {
		return notice.Notice{}, f.err
	}
	return notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle", Deadline: t0.Add(75 * time.Minute), Snoozable: true,
		Snoozes: 1, MaxSnoozes: 2, Message: "Snoozed: this server now stops at 16:25 UTC unless you use it (1 snooze left)."}, nil
}

type fixture struct {
	h       http.Handler
	auth    *fakeAuth
	snoozer *fakeSnoozer
	logs    *bytes.Buffer
	log     *decision.Log
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{auth: &fakeAuth{}, snoozer: &fakeSnoozer{}, logs: &bytes.Buffer{}}
	var err error
	f.log, err = decision.NewLog(decision.Options{Service: "gpu-culler", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	f.log.Record(decision.Record{User: "alice", Action: decision.ActionStop, Reason: "idle", Message: "Stopped at 15:10 UTC: GPU idle for 1 h 7 min.",
		Numbers: map[string]float64{"idle_seconds": 4020}})
	f.h = New(Options{
		Prefix: "/services/gpu-culler/", Auth: f.auth.middleware, OwnToken: ownToken, Decisions: f.log,
		Stops: fakeStops{
			"alice":          {User: "alice", Server: "", At: t0, Reason: "idle", Message: "Stopped at 15:10 UTC: GPU idle for 1 h 7 min."},
			"jo@example.org": {User: "jo@example.org", Server: "train", At: t0, Reason: "max_age", Message: "Stopped at 15:10 UTC: the server ran for 7 days, the longest a GPU server may run."},
		},
		Snoozer: f.snoozer,
		Notices: func(user string) []notices.OnServer {
			if user != "alice" {
				return nil
			}
			return []notices.OnServer{{Server: "big", Notice: notice.Notice{Service: "gpu-culler", Kind: "idle", Reason: "idle",
				Deadline: t0.Add(15 * time.Minute), Snoozable: true, MaxSnoozes: 2, Stops: true, StopsSince: t0,
				Message: "Your GPU has been idle for 52 min; this server stops at 15:25 UTC unless you use it or snooze."}}}
		},
		ReaderServices: []string{"gpu-admin-view"},
		Logger:         slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	return f
}

func (f *fixture) do(method, path, token, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(context.Background(), method, "/services/gpu-culler/api/v1/"+path, strings.NewReader(body))
	if token != "" {
		r.Header.Set("Authorization", "token "+token)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

func TestAnswers(t *testing.T) {
	tests := map[string]struct {
		method, path, token, body string
		snoozeErr                 error
		wantStatus                int
		wantCalls                 []call
	}{
		"me":                            {method: "GET", path: "me", token: "alice-token", wantStatus: 200},
		"me_nothing":                    {method: "GET", path: "me", token: "bob-token", wantStatus: 200},
		"me_admin_for_alice":            {method: "GET", path: "me?user=alice", token: "admin-token", wantStatus: 200},
		"me_bob_for_alice":              {method: "GET", path: "me?user=alice", token: "bob-token", wantStatus: 403},
		"me_service_without_user":       {method: "GET", path: "me", token: "other-svc", wantStatus: 400},
		"me_no_token":                   {method: "GET", path: "me", wantStatus: 401},
		"snooze":                        {method: "POST", path: "snooze", token: "alice-token", body: `{"server":"big"}`, wantStatus: 200, wantCalls: []call{{"alice", "alice", "big"}}},
		"snooze_own_user_named":         {method: "POST", path: "snooze", token: "alice-token", body: `{"server":"","user":"alice"}`, wantStatus: 200, wantCalls: []call{{"alice", "alice", ""}}},
		"snooze_admin_for_alice":        {method: "POST", path: "snooze", token: "admin-token", body: `{"server":"big","user":"alice"}`, wantStatus: 200, wantCalls: []call{{"root", "alice", "big"}}},
		"snooze_bob_for_alice":          {method: "POST", path: "snooze", token: "bob-token", body: `{"server":"big","user":"alice"}`, wantStatus: 403},
		"snooze_reader_for_alice":       {method: "POST", path: "snooze", token: "reader-token", body: `{"server":"big","user":"alice"}`, wantStatus: 403},
		"snooze_bad_body":               {method: "POST", path: "snooze", token: "alice-token", body: `{"srv":"big"}`, wantStatus: 400},
		"snooze_no_server":              {method: "POST", path: "snooze", token: "alice-token", body: `{"server":"x"}`, snoozeErr: fmt.Errorf("%w: alice's server \"x\" is not running; start it from the Hub home", snooze.ErrNoServer), wantStatus: 404, wantCalls: []call{{"alice", "alice", "x"}}},
		"snooze_none_left":              {method: "POST", path: "snooze", token: "alice-token", body: `{"server":""}`, snoozeErr: fmt.Errorf("%w: the stop of alice's default server was snoozed 2 times already, the most allowed; use the server to keep it", snooze.ErrNothing), wantStatus: 409, wantCalls: []call{{"alice", "alice", ""}}},
		"snooze_busy":                   {method: "POST", path: "snooze", token: "alice-token", body: `{"server":""}`, snoozeErr: snooze.ErrBusy, wantStatus: 409, wantCalls: []call{{"alice", "alice", ""}}},
		"snooze_no_policy":              {method: "POST", path: "snooze", token: "alice-token", body: `{"server":""}`, snoozeErr: snooze.ErrNoPolicy, wantStatus: 503, wantCalls: []call{{"alice", "alice", ""}}},
		"snooze_write_failed":           {method: "POST", path: "snooze", token: "alice-token", body: `{"server":""}`, snoozeErr: errors.New("patch pod jhub/jupyter-alice: the server is currently unable to handle the request"), wantStatus: 500, wantCalls: []call{{"alice", "alice", ""}}},
		"stops_hub_glue":                {method: "GET", path: "stops/alice", token: ownToken, wantStatus: 200},
		"stops_hub_glue_nothing":        {method: "GET", path: "stops/bob", token: ownToken, wantStatus: 200},
		"stops_alice_herself":           {method: "GET", path: "stops/alice", token: "alice-token", wantStatus: 200},
		"stops_bob_for_alice":           {method: "GET", path: "stops/alice", token: "bob-token", wantStatus: 403},
		"stops_admin":                   {method: "GET", path: "stops/alice", token: "admin-token", wantStatus: 200},
		"stops_wrong_token":             {method: "GET", path: "stops/alice", token: "culler-secret-tokem", wantStatus: 401},
		"decisions_admin":               {method: "GET", path: "decisions", token: "admin-token", wantStatus: 200},
		"decisions_reader_service":      {method: "GET", path: "decisions?action=stop", token: "reader-token", wantStatus: 200},
		"decisions_user":                {method: "GET", path: "decisions", token: "alice-token", wantStatus: 403},
		"decisions_other_service":       {method: "GET", path: "decisions", token: "other-svc", wantStatus: 403},
		"unknown":                       {method: "GET", path: "nope", token: "alice-token", wantStatus: 404},
		"snooze_get_is_not_an_endpoint": {method: "GET", path: "snooze", token: "alice-token", wantStatus: 404},
		"stops_hub_glue_escaped_name":   {method: "GET", path: "stops/jo%40example.org", token: ownToken, wantStatus: 200},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.snoozer.err = tc.snoozeErr
			w := f.do(tc.method, tc.path, tc.token, tc.body)
			if w.Code != tc.wantStatus {
				t.Errorf("status %d, want %d: %s", w.Code, tc.wantStatus, w.Body)
			}
			if diff := cmp.Diff(tc.wantCalls, f.snoozer.calls); diff != "" {
				t.Errorf("snoozes (-want +got):\n%s", diff)
			}
			if tc.wantStatus != 401 && tc.wantStatus != 405 {
				golden.Check(t, name+".json", w.Body.Bytes())
			}
			for tok := range identities {
				if strings.Contains(f.logs.String(), tok) {
					t.Errorf("a token is in the logs:\n%s", f.logs)
				}
			}
			if strings.Contains(f.logs.String(), ownToken) {
				t.Errorf("the culler's token is in the logs:\n%s", f.logs)
			}
		})
	}
}

// TestOwnTokenSkipsHubAuth: the Hub glue's requests never reach hubauth (which would ask the Hub about the
// culler's own token on every Hub home page).
func TestOwnTokenSkipsHubAuth(t *testing.T) {
	f := newFixture(t)
	if w := f.do("GET", "stops/alice", ownToken, ""); w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	if f.auth.calls != 0 {
		t.Errorf("hubauth asked %d times for the own token", f.auth.calls)
	}
	// Only stops takes the own token.
	if w := f.do("GET", "decisions", ownToken, ""); w.Code != 401 {
		t.Errorf("decisions with the own token: %d, want 401", w.Code)
	}
}

func TestNoOwnTokenConfigured(t *testing.T) {
	h := New(Options{Prefix: "/services/gpu-culler/", Auth: (&fakeAuth{}).middleware})
	r := httptest.NewRequestWithContext(context.Background(), "GET", "/services/gpu-culler/api/v1/stops/alice", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r) // no token at all: not the empty own token
	if w.Code != 401 {
		t.Errorf("status %d, want 401", w.Code)
	}
}
