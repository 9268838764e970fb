package hubapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
)

const adminToken = "admin-token-0123456789abcdef"

// sleeper records retry waits instead of sleeping.
type sleeper struct {
	mu    sync.Mutex
	waits []time.Duration
	hook  func()
}

func (s *sleeper) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return ctx.Err()
}

func (s *sleeper) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

func newHub(t *testing.T) *hubapitest.Hub {
	t.Helper()
	h := hubapitest.New(t)
	h.AddUser(hubapi.User{Name: "root", Admin: true})
	h.AddToken(adminToken, "root")
	return h
}

func addUsers(h *hubapitest.Hub, n int, name func(i int) string) []string {
	var names []string
	for i := range n {
		h.AddUser(hubapi.User{Name: name(i)})
		names = append(names, name(i))
	}
	return names
}

func userNames(us []hubapi.User) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.Name)
	}
	return out
}

func TestListUsersPagination(t *testing.T) {
	cases := map[string]struct {
		bare         bool
		pageSize     int
		users        int
		wantRequests int
	}{
		"paginated, default page size":          {users: 449, wantRequests: 3},
		"paginated, small pages":                {users: 449, pageSize: 100, wantRequests: 5},
		"paginated, exact multiple":             {users: 399, wantRequests: 2},
		"bare list fallback":                    {bare: true, users: 449, wantRequests: 3},
		"bare list fallback, exact multiple":    {bare: true, users: 399, wantRequests: 3},
		"bare list fallback, single short page": {bare: true, users: 9, wantRequests: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHub(t)
			h.SetBareLists(tc.bare)
			want := append([]string{"root"}, addUsers(h, tc.users, func(i int) string { return fmt.Sprintf("user%04d", i) })...)
			c := h.Client(adminToken)

			got, err := c.ListUsers(t.Context(), hubapi.ListUsersOptions{PageSize: tc.pageSize})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, userNames(got)); diff != "" {
				t.Errorf("users (-want +got):\n%s", diff)
			}
			if n := h.Requests("GET /users"); n != tc.wantRequests {
				t.Errorf("GET /users requests = %d, want %d", n, tc.wantRequests)
			}
		})
	}
}

func TestUsersDeduplicatesShiftedPages(t *testing.T) {
	h := newHub(t)
	addUsers(h, 299, func(i int) string { return fmt.Sprintf("u%03d", i) })
	c := h.Client(adminToken)

	seen := map[string]int{}
	i := 0
	for u, err := range c.Users(t.Context(), hubapi.ListUsersOptions{PageSize: 100, Sort: "name"}) {
		if err != nil {
			t.Fatal(err)
		}
		seen[u.Name]++
		i++
		if i == 100 {
			// sorts first by name: every later user moves one place, so the
			// next page starts with a user already seen
			h.AddUser(hubapi.User{Name: "a-newcomer"})
		}
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("user %s yielded %d times", name, n)
		}
	}
	if len(seen) != 300 {
		t.Errorf("yielded %d distinct users, want 300", len(seen))
	}
}

func TestUsersReadyFollowsNextThroughEmptyPages(t *testing.T) {
	h := newHub(t)
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for i := range 30 {
		ready := i >= 25 // only the last page has ready servers
		h.AddUser(hubapi.User{Name: fmt.Sprintf("u%02d", i), Servers: map[string]hubapi.Server{
			"": {Ready: ready, Pending: map[bool]string{true: "", false: "spawn"}[ready], Started: &now},
		}})
	}
	c := h.Client(adminToken)
	got, err := c.ListUsers(t.Context(), hubapi.ListUsersOptions{State: "ready", PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"u25", "u26", "u27", "u28", "u29"}
	if diff := cmp.Diff(want, userNames(got)); diff != "" {
		t.Errorf("ready users (-want +got):\n%s", diff)
	}
	if n := h.Requests("GET /users"); n != 3 {
		t.Errorf("GET /users requests = %d, want 3 (empty first pages still followed)", n)
	}
}

func TestUsersStopsOnBreak(t *testing.T) {
	h := newHub(t)
	addUsers(h, 450, func(i int) string { return fmt.Sprintf("u%03d", i) })
	c := h.Client(adminToken)
	n := 0
	for _, err := range c.Users(t.Context(), hubapi.ListUsersOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 5 {
			break
		}
	}
	if got := h.Requests("GET /users"); got != 1 {
		t.Errorf("GET /users requests = %d, want 1", got)
	}
}

func TestListGroupsPagination(t *testing.T) {
	h := newHub(t)
	var want []string
	for i := range 250 {
		name := fmt.Sprintf("g%03d", i)
		h.AddGroup(hubapi.Group{Name: name, Users: []string{"root"}})
		want = append(want, name)
	}
	c := h.Client(adminToken)
	got, err := c.ListGroups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range got {
		names = append(names, g.Name)
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"root"}, got[0].Users); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
}

func TestRetries(t *testing.T) {
	now := time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)
	type call func(ctx context.Context, c *hubapi.Client) error
	getUser := func(ctx context.Context, c *hubapi.Client) error { _, err := c.GetUser(ctx, "alice"); return err }
	startServer := func(ctx context.Context, c *hubapi.Client) error {
		_, err := c.StartServer(ctx, "alice", "", nil)
		return err
	}
	stopServer := func(ctx context.Context, c *hubapi.Client) error {
		_, err := c.StopServer(ctx, "alice", "", false)
		return err
	}
	cases := map[string]struct {
		failures     []hubapitest.Failure
		maxRetries   int
		call         call
		path         string
		wantErr      bool
		wantStatus   int
		wantRequests int
		wantWaits    []time.Duration // nil: don't compare exactly, only count
		wantNWaits   int
	}{
		"429 with Retry-After seconds": {
			failures:     []hubapitest.Failure{{Path: "/users/alice", Status: 429, RetryAfter: "3"}},
			call:         getUser,
			path:         "GET /users/alice",
			wantRequests: 2,
			wantWaits:    []time.Duration{3 * time.Second},
		},
		"429 with Retry-After date": {
			failures: []hubapitest.Failure{{Path: "/users/alice", Status: 429,
				RetryAfter: now.Add(7 * time.Second).Format(http.TimeFormat)}},
			call:         getUser,
			path:         "GET /users/alice",
			wantRequests: 2,
			wantWaits:    []time.Duration{7 * time.Second},
		},
		"503 then success": {
			failures:     []hubapitest.Failure{{Path: "/users/alice", Status: 503, Times: 2}},
			call:         getUser,
			path:         "GET /users/alice",
			wantRequests: 3,
			wantNWaits:   2,
		},
		"500 on GET is retried": {
			failures:     []hubapitest.Failure{{Path: "/users/alice", Status: 500}},
			call:         getUser,
			path:         "GET /users/alice",
			wantRequests: 2,
			wantNWaits:   1,
		},
		"dropped connection is retried": {
			failures:     []hubapitest.Failure{{Path: "/users/alice", Status: 0}},
			call:         getUser,
			path:         "GET /users/alice",
			wantRequests: 2,
			wantNWaits:   1,
		},
		"no retry on 400": {
			failures: []hubapitest.Failure{{Path: "/users/alice", Status: 400}},
			call:     getUser, path: "GET /users/alice", wantErr: true, wantStatus: 400, wantRequests: 1,
		},
		"no retry on 403": {
			failures: []hubapitest.Failure{{Path: "/users/alice", Status: 403}},
			call:     getUser, path: "GET /users/alice", wantErr: true, wantStatus: 403, wantRequests: 1,
		},
		"no retry on 404": {
			failures: []hubapitest.Failure{{Path: "/users/alice", Status: 404}},
			call:     getUser, path: "GET /users/alice", wantErr: true, wantStatus: 404, wantRequests: 1,
		},
		"gives up after MaxRetries": {
			failures:   []hubapitest.Failure{{Path: "/users/alice", Status: 503, Times: -1}},
			maxRetries: 2,
			call:       getUser, path: "GET /users/alice", wantErr: true, wantStatus: 503,
			wantRequests: 3, wantNWaits: 2,
		},
		"Retry-After beyond the cap is returned": {
			failures: []hubapitest.Failure{{Path: "/users/alice", Status: 429, RetryAfter: "3600"}},
			call:     getUser, path: "GET /users/alice", wantErr: true, wantStatus: 429, wantRequests: 1,
		},
		"start not retried on 503": {
			failures: []hubapitest.Failure{{Method: "POST", Path: "/users/alice/server", Status: 503}},
			call:     startServer, path: "POST /users/alice/server", wantErr: true, wantStatus: 503, wantRequests: 1,
		},
		"start not retried on 429 without Retry-After": {
			failures: []hubapitest.Failure{{Method: "POST", Path: "/users/alice/server", Status: 429}},
			call:     startServer, path: "POST /users/alice/server", wantErr: true, wantStatus: 429, wantRequests: 1,
		},
		"start retried on 429 with Retry-After": {
			failures: []hubapitest.Failure{{Method: "POST", Path: "/users/alice/server", Status: 429, RetryAfter: "2"}},
			call:     startServer, path: "POST /users/alice/server", wantRequests: 2,
			wantWaits: []time.Duration{2 * time.Second},
		},
		"stop retried on 502": {
			failures: []hubapitest.Failure{{Method: "DELETE", Path: "/users/alice/server", Status: 502}},
			call:     stopServer, path: "DELETE /users/alice/server", wantRequests: 2, wantNWaits: 1,
		},
		"stop not retried on 500": {
			failures: []hubapitest.Failure{{Method: "DELETE", Path: "/users/alice/server", Status: 500}},
			call:     stopServer, path: "DELETE /users/alice/server", wantErr: true, wantStatus: 500, wantRequests: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHub(t)
			h.AddUser(hubapi.User{Name: "alice"})
			for _, f := range tc.failures {
				h.Fail(f)
			}
			s := &sleeper{}
			c := h.Client(adminToken, hubapi.Config{
				MaxRetries: tc.maxRetries, Sleep: s.sleep, Now: func() time.Time { return now },
			})
			err := tc.call(t.Context(), c)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			if tc.wantStatus != 0 {
				var ae *hubapi.APIError
				if !errors.As(err, &ae) || ae.StatusCode != tc.wantStatus {
					t.Errorf("err = %v, want APIError with status %d", err, tc.wantStatus)
				}
			}
			if n := h.Requests(tc.path); n != tc.wantRequests {
				t.Errorf("%s requests = %d, want %d", tc.path, n, tc.wantRequests)
			}
			waits := s.got()
			if tc.wantWaits != nil {
				if diff := cmp.Diff(tc.wantWaits, waits); diff != "" {
					t.Errorf("waits (-want +got):\n%s", diff)
				}
			} else if len(waits) != tc.wantNWaits {
				t.Errorf("waits = %v, want %d of them", waits, tc.wantNWaits)
			}
		})
	}
}

func TestBackoffGrowsWithJitter(t *testing.T) {
	h := newHub(t)
	h.Fail(hubapitest.Failure{Path: "/users/root", Status: 503, Times: -1})
	s := &sleeper{}
	// not h.Client: it sets tiny delays
	c, err := hubapi.New(hubapi.Config{
		URL: h.URL(), Token: adminToken, MaxRetries: 5, Sleep: s.sleep,
		RetryBaseDelay: 100 * time.Millisecond, RetryMaxDelay: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetUser(t.Context(), "root"); err == nil {
		t.Fatal("want error")
	}
	waits := s.got()
	ceilings := []time.Duration{100, 200, 400, 800, 1000}
	if len(waits) != len(ceilings) {
		t.Fatalf("waits = %v, want %d", waits, len(ceilings))
	}
	for i, w := range waits {
		hi := ceilings[i] * time.Millisecond
		if w < hi/2 || w > hi {
			t.Errorf("wait %d = %v, want in [%v, %v]", i, w, hi/2, hi)
		}
	}
}

func TestContextCancelStopsRetries(t *testing.T) {
	h := newHub(t)
	h.Fail(hubapitest.Failure{Path: "/users/root", Status: 503, Times: -1})
	ctx, cancel := context.WithCancel(t.Context())
	s := &sleeper{hook: cancel}
	c := h.Client(adminToken, hubapi.Config{MaxRetries: 10, Sleep: s.sleep})
	_, err := c.GetUser(ctx, "root")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if hubapi.IsNotFound(err) || statusOf(err) != 503 {
		t.Errorf("err = %v, want it to still carry the 503", err)
	}
	if n := h.Requests("GET /users/root"); n != 1 {
		t.Errorf("requests = %d, want 1", n)
	}
}

func TestDeadlineShorterThanRetryAfter(t *testing.T) {
	h := newHub(t)
	h.Fail(hubapitest.Failure{Path: "/users/root", Status: 429, RetryAfter: "30"})
	s := &sleeper{}
	c := h.Client(adminToken, hubapi.Config{Sleep: s.sleep})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := c.GetUser(ctx, "root")
	if !hubapi.IsTooManyRequests(err) {
		t.Fatalf("err = %v, want 429", err)
	}
	var ae *hubapi.APIError
	if errors.As(err, &ae); ae.RetryAfter != 30*time.Second {
		t.Errorf("RetryAfter = %v, want 30s", ae.RetryAfter)
	}
	if len(s.got()) != 0 {
		t.Errorf("waited %v, want no wait past the deadline", s.got())
	}
}

func statusOf(err error) int {
	var ae *hubapi.APIError
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

func TestErrorMapping(t *testing.T) {
	h := newHub(t)
	h.AddUser(hubapi.User{Name: "alice", Servers: map[string]hubapi.Server{"": {Ready: true}}})
	h.AddUser(hubapi.User{Name: "bob"})
	h.AddToken("alice-token", "alice")
	h.AddToken("reader-token", "svc", "read:users")
	admin := h.Client(adminToken, hubapi.Config{MaxRetries: -1})
	alice := h.Client("alice-token", hubapi.Config{MaxRetries: -1})
	reader := h.Client("reader-token", hubapi.Config{MaxRetries: -1})
	bad := h.Client("no-such-token", hubapi.Config{MaxRetries: -1})
	h.Fail(hubapitest.Failure{Path: "/users/carol", Status: 401, Message: "token expired"})

	cases := map[string]struct {
		call    func(ctx context.Context) error
		is      func(error) bool
		wantErr string
	}{
		"unknown user": {
			call:    func(ctx context.Context) error { _, err := admin.GetUser(ctx, "nobody"); return err },
			is:      hubapi.IsNotFound,
			wantErr: "hub api: GET /users/nobody: 404 Not Found",
		},
		"unknown group": {
			call:    func(ctx context.Context) error { _, err := admin.GetGroup(ctx, "nogroup"); return err },
			is:      hubapi.IsNotFound,
			wantErr: "hub api: GET /groups/nogroup: 404 Not Found: No such group: nogroup",
		},
		"other user's data with self scopes": {
			call:    func(ctx context.Context) error { _, err := alice.GetUser(ctx, "bob"); return err },
			is:      hubapi.IsNotFound,
			wantErr: "hub api: GET /users/bob: 404 Not Found: No access to resources or resources not found",
		},
		"missing scope": {
			call:    func(ctx context.Context) error { _, err := reader.StopServer(ctx, "alice", "", false); return err },
			is:      hubapi.IsForbidden,
			wantErr: "hub api: DELETE /users/alice/server: 403 Forbidden: Action is not authorized with current scopes; requires any of [delete:servers]",
		},
		"invalid token": {
			call:    func(ctx context.Context) error { _, err := bad.WhoAmI(ctx); return err },
			is:      hubapi.IsForbidden,
			wantErr: "hub api: GET /user: 403 Forbidden: Missing or invalid credentials.",
		},
		"unauthorized": {
			call:    func(ctx context.Context) error { _, err := admin.GetUser(ctx, "carol"); return err },
			is:      hubapi.IsUnauthorized,
			wantErr: "hub api: GET /users/carol: 401 Unauthorized: token expired",
		},
		"already running": {
			call: func(ctx context.Context) error {
				_, err := admin.StartServer(ctx, "alice", "", nil)
				return err
			},
			is:      hubapi.IsConflict,
			wantErr: "hub api: POST /users/alice/server: 400 Bad Request: alice is already running",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.call(t.Context())
			if err == nil {
				t.Fatal("want error")
			}
			if !tc.is(err) {
				t.Errorf("predicate false for %v", err)
			}
			if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsPredicates(t *testing.T) {
	cases := map[string]struct {
		err  error
		want [5]bool // notFound, forbidden, unauthorized, conflict, tooMany
	}{
		"404":             {err: &hubapi.APIError{StatusCode: 404}, want: [5]bool{true}},
		"wrapped 403":     {err: fmt.Errorf("x: %w", &hubapi.APIError{StatusCode: 403}), want: [5]bool{1: true}},
		"401":             {err: &hubapi.APIError{StatusCode: 401}, want: [5]bool{2: true}},
		"409":             {err: &hubapi.APIError{StatusCode: 409}, want: [5]bool{3: true}},
		"400 pending":     {err: &hubapi.APIError{StatusCode: 400, Message: "alice is pending stop"}, want: [5]bool{3: true}},
		"400 other":       {err: &hubapi.APIError{StatusCode: 400, Message: "Invalid JSON"}, want: [5]bool{}},
		"429":             {err: &hubapi.APIError{StatusCode: 429}, want: [5]bool{4: true}},
		"not an APIError": {err: errors.New("boom"), want: [5]bool{}},
		"nil":             {err: nil, want: [5]bool{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := [5]bool{hubapi.IsNotFound(tc.err), hubapi.IsForbidden(tc.err), hubapi.IsUnauthorized(tc.err),
				hubapi.IsConflict(tc.err), hubapi.IsTooManyRequests(tc.err)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestTokenRedaction(t *testing.T) {
	const secret = "SECRET-hub-token-4f1d9c"
	const other = "OTHER-user-token-77aa01"
	h := newHub(t)
	h.AddUser(hubapi.User{Name: "alice"})
	h.AddToken(secret, "svc", "list:users", "read:users")
	h.Fail(hubapitest.Failure{Path: "/users/alice", Status: 503, Times: 2})
	h.Fail(hubapitest.Failure{Path: "/users", Status: 0})

	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := hubapi.Config{URL: h.URL(), Token: secret, Logger: logger, MaxRetries: 1,
		Sleep: (&sleeper{}).sleep}
	c, err := hubapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("config", "config", cfg, "client", c)

	var texts []string
	collect := func(err error) {
		if err != nil {
			texts = append(texts, err.Error(), fmt.Sprintf("%v %+v %#v", err, err, err))
		}
	}
	_, err = c.GetUser(t.Context(), "alice") // 503 twice: retried, then given up
	collect(err)
	_, err = c.ListUsers(t.Context(), hubapi.ListUsersOptions{}) // dropped connection: transport error
	collect(err)
	_, err = c.WhoAmIWithToken(t.Context(), other) // unknown token: 403
	collect(err)
	_, err = c.WhoAmIWithToken(t.Context(), "bad\ntoken-"+other)
	collect(err)
	_, err = hubapi.New(hubapi.Config{URL: h.URL(), Token: secret + "\r\n"})
	collect(err)
	_, err = hubapi.New(hubapi.Config{URL: "ftp://x", Token: secret})
	collect(err)
	if len(texts) < 6 {
		t.Fatalf("expected errors, got %q", texts)
	}
	texts = append(texts,
		fmt.Sprintf("%v|%+v|%#v|%s", cfg, cfg, cfg, cfg),
		fmt.Sprintf("%v|%+v|%#v|%s", c, c, c, c),
		fmt.Sprintf("%v|%+v|%#v", &cfg, &cfg, &cfg),
		logs.String(),
	)
	if !strings.Contains(logs.String(), "retrying hub api request") {
		t.Errorf("want retry logs to check, got %s", logs.String())
	}
	for _, s := range texts {
		for _, tok := range []string{secret, other} {
			if strings.Contains(s, tok) {
				t.Errorf("token %q leaked in %q", tok, s)
			}
		}
	}
	if !strings.Contains(texts[len(texts)-4], "<redacted>") {
		t.Errorf("config print %q does not say <redacted>", texts[len(texts)-4])
	}
}

func TestConcurrencyCap(t *testing.T) {
	h := newHub(t)
	h.SetLatency(40 * time.Millisecond)
	c := h.Client(adminToken, hubapi.Config{MaxConcurrent: 3})
	var wg sync.WaitGroup
	for range 15 {
		wg.Go(func() {
			if _, err := c.GetUser(t.Context(), "root"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := h.MaxInFlight(); got > 3 || got < 2 {
		t.Errorf("max in flight = %d, want 3 (at most 3)", got)
	}
}

func TestPerAttemptTimeout(t *testing.T) {
	h := newHub(t)
	h.SetLatency(300 * time.Millisecond)
	s := &sleeper{}
	c := h.Client(adminToken, hubapi.Config{Timeout: 20 * time.Millisecond, MaxRetries: 2, Sleep: s.sleep})
	_, err := c.GetUser(t.Context(), "root")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline exceeded", err)
	}
	if n := len(s.got()); n != 2 {
		t.Errorf("retries = %d, want 2 (timeouts are retried)", n)
	}
}

func TestSpawnTimeoutForStartAndStop(t *testing.T) {
	h := newHub(t)
	h.AddUser(hubapi.User{Name: "alice"})
	h.SetLatency(100 * time.Millisecond) // the Hub holds start/stop answers up to slow_spawn_timeout
	c := h.Client(adminToken, hubapi.Config{Timeout: 20 * time.Millisecond, SpawnTimeout: 2 * time.Second, MaxRetries: -1})
	if _, err := c.StartServer(t.Context(), "alice", "", nil); err != nil {
		t.Errorf("start: %v", err)
	}
	if _, err := c.StopServer(t.Context(), "alice", "", false); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := c.GetUser(t.Context(), "alice"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("get: err = %v, want the short Timeout to apply", err)
	}
}

func TestMetrics(t *testing.T) {
	h := newHub(t)
	h.Fail(hubapitest.Failure{Path: "/users/root", Status: 503})
	reg := prometheus.NewRegistry()
	c := h.Client(adminToken, hubapi.Config{Registerer: reg, Sleep: (&sleeper{}).sleep})
	if _, err := c.GetUser(t.Context(), "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetUser(t.Context(), "nobody"); !hubapi.IsNotFound(err) {
		t.Fatal(err)
	}
	// a second client on the same registry shares the metrics
	c2 := h.Client(adminToken, hubapi.Config{Registerer: reg})
	if _, err := c2.Version(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP gpuhub_hubapi_requests_total JupyterHub API request attempts by operation and HTTP status code ("error" when no answer came).
# TYPE gpuhub_hubapi_requests_total counter
gpuhub_hubapi_requests_total{code="200",op="user_get"} 1
gpuhub_hubapi_requests_total{code="200",op="version"} 1
gpuhub_hubapi_requests_total{code="404",op="user_get"} 1
gpuhub_hubapi_requests_total{code="503",op="user_get"} 1
# HELP gpuhub_hubapi_retries_total JupyterHub API request retries by operation.
# TYPE gpuhub_hubapi_retries_total counter
gpuhub_hubapi_retries_total{op="user_get"} 1
# HELP gpuhub_hubapi_in_flight_requests JupyterHub API requests being sent now (capped by MaxConcurrent).
# TYPE gpuhub_hubapi_in_flight_requests gauge
gpuhub_hubapi_in_flight_requests 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"gpuhub_hubapi_requests_total", "gpuhub_hubapi_retries_total", "gpuhub_hubapi_in_flight_requests"); err != nil {
		t.Error(err)
	}
}
