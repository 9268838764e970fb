package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// scriptWatch plays passes: the lines of each in turn, then none.
type scriptWatch struct {
	mu     sync.Mutex
	passes [][]admit.VerdictLine
	err    error // the first pass's
	closed bool
}

func (s *scriptWatch) Pass(_ context.Context, emit func(admit.VerdictLine) error) (string, error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return "", s.err
	}
	var lines []admit.VerdictLine
	if len(s.passes) > 0 {
		lines, s.passes = s.passes[0], s.passes[1:]
	}
	s.mu.Unlock()
	for _, l := range lines {
		if err := emit(l); err != nil {
			return "", err
		}
	}
	return admit.PassFull, nil
}

func (s *scriptWatch) Close() { s.mu.Lock(); s.closed = true; s.mu.Unlock() }

func (s *scriptWatch) wasClosed() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.closed }

const watchBody = `{"options":[{"id":"gpu-h100","resources":{"nvidia.com/gpu":1}},{"id":"cpu"}]}`

func openWatch(t *testing.T, url, token, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+prefix+"api/v1/assess/watch", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestWatchRefuses: only admins and reader services may watch; a bad body, an engine that cannot decide yet, a
// replica that does not decide or is stopping each answer at once, with a message.
func TestWatchRefuses(t *testing.T) {
	stopped := make(chan struct{})
	close(stopped)
	tests := map[string]struct {
		token, body string
		mod         func(*Options, *scriptWatch)
		wantCode    int
		wantMessage string
		wantHeader  string
	}{
		"a user":                 {token: "bob-token", body: watchBody, wantCode: 403, wantMessage: "only Hub admins and the services"},
		"a service not a reader": {token: "other-token", body: watchBody, wantCode: 403, wantMessage: "only Hub admins"},
		"no token":               {body: watchBody, wantCode: 401},
		"no options":             {token: "profiles-token", body: `{"options":[]}`, wantCode: 400, wantMessage: `"options" is empty`},
		"no body":                {token: "profiles-token", body: ``, wantCode: 400, wantMessage: "not a watch request"},
		"too many options": {token: "profiles-token", body: `{"options":[` + strings.Repeat(`{"id":"x"},`, 512) + `{"id":"y"}]}`,
			wantCode: 400, wantMessage: "513 options: at most 512"},
		"an id twice":          {token: "profiles-token", body: `{"options":[{"id":"a"},{"id":"a"}]}`, wantCode: 400, wantMessage: `the id "a" is given twice`},
		"a negative count":     {token: "profiles-token", body: `{"options":[{"id":"a","resources":{"nvidia.com/gpu":-1}}]}`, wantCode: 400, wantMessage: "0 or more"},
		"an option without id": {token: "profiles-token", body: `{"options":[{"resources":{}}]}`, wantCode: 400, wantMessage: `has no "id"`},
		"not synced yet": {token: "profiles-token", body: watchBody, mod: func(_ *Options, w *scriptWatch) { w.err = admit.ErrUnavailable },
			wantCode: 503, wantMessage: "cannot decide", wantHeader: "Retry-After"},
		"not the decider": {token: "profiles-token", body: watchBody, mod: func(o *Options, _ *scriptWatch) {
			o.Deciding = func() <-chan struct{} { return stopped }
		}, wantCode: 503, wantMessage: "does not decide", wantHeader: NotLeaderHeader},
		"stopping": {token: "profiles-token", body: watchBody, mod: func(o *Options, _ *scriptWatch) { o.Stopping = stopped },
			wantCode: 503, wantMessage: "stopping", wantHeader: "Retry-After"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := &scriptWatch{}
			srv, _ := newAPIWith(t, func(o *Options) {
				o.Verdicts = func([]admit.AssessOption) VerdictWatch { return w }
				if tc.mod != nil {
					tc.mod(o, w)
				}
			})
			resp := openWatch(t, srv.URL, tc.token, tc.body)
			defer func() { _ = resp.Body.Close() }()
			var e contract.Error
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tc.wantCode || !strings.Contains(e.Message, tc.wantMessage) {
				t.Errorf("%d %q, want %d with %q", resp.StatusCode, e.Message, tc.wantCode, tc.wantMessage)
			}
			if tc.wantHeader != "" && resp.Header.Get(tc.wantHeader) == "" {
				t.Errorf("no %s: %v", tc.wantHeader, resp.Header)
			}
		})
	}
}

// lines reads the stream's lines as "kind user" until n are read.
func readLines(t *testing.T, sc *bufio.Scanner, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n && sc.Scan() {
		var l contract.VerdictLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, strings.TrimSpace(l.Kind+" "+l.User))
	}
	return out
}

// TestWatchStream: the first pass's lines, synced, each later pass's lines, a keepalive while nothing changes;
// the stream ends when the replica stops deciding, and when it stops.
func TestWatchStream(t *testing.T) {
	user := func(name string) admit.VerdictLine { return admit.VerdictLine{Kind: contract.WatchUser, User: name} }
	for _, end := range []string{"step-down", "stop"} {
		t.Run(end, func(t *testing.T) {
			w := &scriptWatch{passes: [][]admit.VerdictLine{{user("alice"), user("bob")}, {user("bob")}, nil, {{Kind: contract.WatchLeft, User: "alice"}}}}
			deciding, stopping := make(chan struct{}), make(chan struct{})
			var asked []admit.AssessOption
			srv, _ := newAPIWith(t, func(o *Options) {
				o.Verdicts = func(opts []admit.AssessOption) VerdictWatch { asked = opts; return w }
				o.Deciding = func() <-chan struct{} { return deciding }
				o.Stopping = stopping
				o.VerdictInterval, o.Keepalive = 20*time.Millisecond, 150*time.Millisecond
			})
			resp := openWatch(t, srv.URL, "profiles-token", watchBody)
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
				t.Fatalf("%d %v", resp.StatusCode, resp.Header)
			}
			sc := bufio.NewScanner(resp.Body)
			got := readLines(t, sc, 6)
			want := []string{"user alice", "user bob", "synced", "user bob", "left alice", "keepalive"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
			if len(asked) != 2 || asked[0].ID != "gpu-h100" || asked[0].Resources["nvidia.com/gpu"] != 1 {
				t.Errorf("watched %+v", asked)
			}
			if end == "stop" {
				close(stopping)
			} else {
				close(deciding)
			}
			done := make(chan []string)
			go func() { done <- readLines(t, sc, 100) }()
			select {
			case rest := <-done:
				if len(rest) > 1 {
					t.Errorf("after the %s: %v", end, rest)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the stream did not end within 5 s of the %s", end)
			}
			eventuallyTrue(t, w.wasClosed)
		})
	}
}

// TestWatchBrokenMidTable: a pass that fails after its first line ends the stream without a synced line: the
// reader never takes the part of a table for the whole.
func TestWatchBrokenMidTable(t *testing.T) {
	w := &failingWatch{}
	srv, _ := newAPIWith(t, func(o *Options) { o.Verdicts = func([]admit.AssessOption) VerdictWatch { return w } })
	resp := openWatch(t, srv.URL, "alice-token", watchBody)
	defer func() { _ = resp.Body.Close() }()
	got := readLines(t, bufio.NewScanner(resp.Body), 10)
	if slices.Contains(got, "synced") || resp.StatusCode != 200 {
		t.Errorf("%d, lines %v, want 200 and no synced line", resp.StatusCode, got)
	}
}

type failingWatch struct{}

func (failingWatch) Pass(_ context.Context, emit func(admit.VerdictLine) error) (string, error) {
	if err := emit(admit.VerdictLine{Kind: contract.WatchUser, User: "alice"}); err != nil {
		return "", err
	}
	return "", errors.New("the engine broke")
}

func (failingWatch) Close() {}

func eventuallyTrue(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not within 5 s")
		}
	}
}
