package quotaclient

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
)

// fakeQuota2 is gpu-quota's assess (every option allowed, reason "asked") and assess/watch, whose streams the
// test writes line by line.
type fakeQuota2 struct {
	assessCalls atomic.Int64
	watchStatus int // answered to a watch instead of a stream when set
	conns       chan *stream
}

// stream is one watch connection.
type stream struct {
	req   contract.VerdictWatchRequest
	lines chan contract.VerdictLine // closed: the stream ends
	done  chan struct{}             // the handler returned
}

func newFakeQuota2(t *testing.T) (*fakeQuota2, string) {
	t.Helper()
	f := &fakeQuota2{conns: make(chan *stream, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /services/gpu-quota/api/v1/assess", func(w http.ResponseWriter, r *http.Request) {
		f.assessCalls.Add(1)
		var req contract.AssessRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		out := contract.Assessment{OnUnavailable: contract.Open}
		for _, o := range req.Options {
			out.Options = append(out.Options, contract.Verdict{ID: o.ID, Allow: true, Reason: "asked"})
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /services/gpu-quota/api/v1/assess/watch", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token profiles-token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if f.watchStatus != 0 {
			w.WriteHeader(f.watchStatus)
			_, _ = w.Write([]byte(`{"status":403,"message":"only Hub admins and the services gpu-usage may watch"}`))
			return
		}
		s := &stream{lines: make(chan contract.VerdictLine, 100), done: make(chan struct{})}
		defer close(s.done)
		if err := json.NewDecoder(r.Body).Decode(&s.req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		f.conns <- s
		rc := http.NewResponseController(w)
		enc := json.NewEncoder(w)
		for {
			select {
			case <-r.Context().Done():
				return
			case l, ok := <-s.lines:
				if !ok {
					return
				}
				_ = enc.Encode(l)
				_ = rc.Flush()
			}
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL + "/services/gpu-quota/"
}

// next is the next watch connection, within 5 s.
func (f *fakeQuota2) next(t *testing.T) *stream {
	t.Helper()
	select {
	case s := <-f.conns:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no watch connection within 5 s")
		return nil
	}
}

// table sends a line for each user (verdicts allowed, reason "pushed-" and the user) and synced.
func (s *stream) table(users map[string][]string) {
	for user, groups := range users {
		l := contract.VerdictLine{Kind: contract.WatchUser, User: user, Groups: groups, OnUnavailable: contract.Closed}
		for _, o := range s.req.Options {
			l.Options = append(l.Options, contract.Verdict{ID: o.ID, Allow: true, Reason: "pushed-" + user})
		}
		s.lines <- l
	}
	s.lines <- contract.VerdictLine{Kind: contract.WatchSynced}
}

var (
	h100 = contract.AssessOption{ID: "gpu-h100", Resources: map[string]int64{"nvidia.com/gpu": 1},
		NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
	t4  = contract.AssessOption{ID: "shared-t4", Resources: map[string]int64{"nvidia.com/gpu.shared": 1}}
	mig = contract.AssessOption{ID: "mig-1g", Resources: map[string]int64{"nvidia.com/mig-1g.5gb": 1}}
)

// fakeClock is a settable clock.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// watching starts c's watch of the options opts returns, until the test ends.
func watching(t *testing.T, c *Client, opts func() ([]contract.AssessOption, bool)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Watch(ctx, opts) }()
	t.Cleanup(func() { cancel(); <-done })
}

func fixed(opts ...contract.AssessOption) func() ([]contract.AssessOption, bool) {
	return func() ([]contract.AssessOption, bool) { return opts, true }
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

// TestPushedOrAsked: a render is answered from the watched table only when the table says exactly what assess
// would; everything else makes the round trip, as before the watch.
func TestPushedOrAsked(t *testing.T) {
	type ask struct {
		user, server string
		groups       []string
		opts         []contract.AssessOption
	}
	bob := ask{user: "bob", groups: []string{"students", "night"}, opts: []contract.AssessOption{h100, t4}}
	tests := map[string]struct {
		ask    ask
		before func(t *testing.T, c *Client, clk *fakeClock, s *stream)
		want   Result
		reason string
	}{
		"the default server, the line's groups":   {ask: bob, want: Pushed, reason: "pushed-bob"},
		"the groups in another order":             {ask: ask{user: "bob", groups: []string{"night", "students"}, opts: bob.opts}, want: Pushed, reason: "pushed-bob"},
		"no groups: gpu-quota's copy, the line's": {ask: ask{user: "bob", opts: bob.opts}, want: Pushed, reason: "pushed-bob"},
		"a subset of the options":                 {ask: ask{user: "bob", groups: bob.groups, opts: []contract.AssessOption{t4}}, want: Pushed, reason: "pushed-bob"},
		"a named server":                          {ask: ask{user: "bob", server: "lab", groups: bob.groups, opts: bob.opts}, want: "ok", reason: "asked"},
		"other groups":                            {ask: ask{user: "bob", groups: []string{"students"}, opts: bob.opts}, want: "ok", reason: "asked"},
		"a user without a line":                   {ask: ask{user: "zoe", groups: []string{}, opts: bob.opts}, want: "ok", reason: "asked"},
		"an option defined otherwise": {ask: ask{user: "bob", groups: bob.groups, opts: []contract.AssessOption{h100,
			{ID: "shared-t4", Resources: map[string]int64{"nvidia.com/gpu.shared": 2}}}}, want: "ok", reason: "asked"},
		"an option not watched": {ask: ask{user: "bob", groups: bob.groups, opts: []contract.AssessOption{h100, mig}}, want: "ok", reason: "asked"},
		"a stream silent for 30 s": {ask: bob, before: func(_ *testing.T, _ *Client, clk *fakeClock, _ *stream) { clk.Add(DefaultStale) },
			want: "ok", reason: "asked"},
		"a user who left": {ask: bob, before: func(t *testing.T, c *Client, _ *fakeClock, s *stream) {
			s.lines <- contract.VerdictLine{Kind: contract.WatchLeft, User: "bob"}
			eventually(t, "bob gone", func() bool { _, ok := c.pushed("bob", "", nil, bob.opts); return !ok })
		}, want: "ok", reason: "asked"},
		"the stream ended": {ask: bob, before: func(t *testing.T, c *Client, _ *fakeClock, s *stream) {
			close(s.lines)
			eventually(t, "the table ended", func() bool { return !c.Watching() })
		}, want: "ok", reason: "asked"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, url := newFakeQuota2(t)
			clk := &fakeClock{}
			clk.ns.Store(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC).UnixNano())
			c, err := New(Options{URL: url, Token: "profiles-token", Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			watching(t, c, fixed(t4, h100))
			s := f.next(t)
			if diff := cmp.Diff([]contract.AssessOption{h100, t4}, s.req.Options); diff != "" {
				t.Errorf("watched (-want +got):\n%s", diff)
			}
			s.table(map[string][]string{"bob": {"students", "night"}, "carol": {}})
			eventually(t, "in sync", c.Watching)
			if tc.before != nil {
				tc.before(t, c, clk, s)
			}
			got, res, err := c.Assess(context.Background(), tc.ask.user, tc.ask.server, tc.ask.groups, tc.ask.opts)
			if err != nil {
				t.Fatal(err)
			}
			wantCalls := int64(1)
			if tc.want == Pushed {
				wantCalls = 0
			}
			if res != tc.want || f.assessCalls.Load() != wantCalls {
				t.Errorf("%s after %d assess calls, want %s after %d", res, f.assessCalls.Load(), tc.want, wantCalls)
			}
			want := map[string]contract.Verdict{}
			for _, o := range tc.ask.opts {
				want[o.ID] = contract.Verdict{ID: o.ID, Allow: true, Reason: tc.reason}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("verdicts (-want +got):\n%s", diff)
			}
			if tc.want == Pushed && c.OnUnavailable() != contract.Closed {
				t.Errorf("onUnavailable %s, want the lines' closed", c.OnUnavailable())
			}
		})
	}
}

// TestWatchReconnects: a stream that ends (a handover in gpu-quota) is made again at once, and its new table
// answers once in sync; a watch refused is retried with backoff, logged without the token.
func TestWatchReconnects(t *testing.T) {
	f, url := newFakeQuota2(t)
	logs := &logtest.Buffer{}
	c, err := New(Options{URL: url, Token: "profiles-token", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	watching(t, c, fixed(h100))
	s := f.next(t)
	s.table(map[string][]string{"bob": {}})
	eventually(t, "in sync", c.Watching)
	close(s.lines)
	again := f.next(t)
	if c.Watching() {
		t.Error("the ended stream's table still answers")
	}
	if _, res, _ := c.Assess(context.Background(), "bob", "", nil, []contract.AssessOption{h100}); res != "ok" {
		t.Errorf("between the streams: %s, want asked", res)
	}
	again.table(map[string][]string{"bob": {}})
	eventually(t, "in sync again", c.Watching)
	if _, res, _ := c.Assess(context.Background(), "bob", "", nil, []contract.AssessOption{h100}); res != Pushed {
		t.Errorf("after the new table: %s, want pushed", res)
	}
	if !strings.Contains(logs.String(), "watching again") || strings.Contains(logs.String(), "profiles-token") {
		t.Errorf("logs:\n%s", logs)
	}
}

// TestWatchRefusedLogged: a watch gpu-quota refuses (gpu-profiles not among its reader services) is logged
// with gpu-quota's message, never the token, and forms keep asking.
func TestWatchRefusedLogged(t *testing.T) {
	f, url := newFakeQuota2(t)
	f.watchStatus = http.StatusForbidden
	logs := &logtest.Buffer{}
	c, err := New(Options{URL: url, Token: "profiles-token", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	watching(t, c, fixed(h100))
	eventually(t, "logged", func() bool { return strings.Contains(logs.String(), "only Hub admins") })
	if strings.Contains(logs.String(), "profiles-token") {
		t.Errorf("the token is in the logs:\n%s", logs)
	}
	if _, res, _ := c.Assess(context.Background(), "bob", "", nil, []contract.AssessOption{h100}); res != "ok" {
		t.Errorf("%s, want asked", res)
	}
}

// TestWatchNewOptions: when the catalog's choices change, a new watch starts; the old table answers the
// choices it holds unchanged until the new one is in sync, then its stream is closed.
func TestWatchNewOptions(t *testing.T) {
	f, url := newFakeQuota2(t)
	c, err := New(Options{URL: url, Token: "profiles-token"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	opts := []contract.AssessOption{h100, t4}
	watching(t, c, func() ([]contract.AssessOption, bool) { mu.Lock(); defer mu.Unlock(); return opts, true })
	old := f.next(t)
	old.table(map[string][]string{"bob": {}})
	eventually(t, "in sync", c.Watching)

	mu.Lock()
	opts = []contract.AssessOption{h100, t4, mig} // a MIG kind appeared
	mu.Unlock()
	next := f.next(t)
	if len(next.req.Options) != 3 {
		t.Fatalf("the new watch asks %+v", next.req.Options)
	}
	ask := func(o ...contract.AssessOption) Result {
		_, res, err := c.Assess(context.Background(), "bob", "", nil, o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if got := []Result{ask(h100, t4), ask(mig)}; !cmp.Equal(got, []Result{Pushed, "ok"}) {
		t.Errorf("before the new table: %v, want the old table's answer for its own choices, asked for the new one", got)
	}
	next.table(map[string][]string{"bob": {}})
	eventually(t, "the new table answers", func() bool { _, ok := c.pushed("bob", "", nil, []contract.AssessOption{mig}); return ok })
	select {
	case <-old.done:
	case <-time.After(5 * time.Second):
		t.Error("the old stream is still open")
	}
	if got := ask(h100, t4, mig); got != Pushed {
		t.Errorf("after: %s", got)
	}
}

// TestSharedEntries: users with the same line share one entry in memory; a new line for one of them changes
// only theirs.
func TestSharedEntries(t *testing.T) {
	f, url := newFakeQuota2(t)
	c, err := New(Options{URL: url, Token: "profiles-token"})
	if err != nil {
		t.Fatal(err)
	}
	watching(t, c, fixed(h100))
	s := f.next(t)
	line := func(user, reason string) contract.VerdictLine {
		return contract.VerdictLine{Kind: contract.WatchUser, User: user, Groups: []string{"students"},
			Options: []contract.Verdict{{ID: h100.ID, Reason: reason}}}
	}
	s.lines <- line("bob", "kind_not_allowed")
	s.lines <- line("erin", "kind_not_allowed")
	s.lines <- contract.VerdictLine{Kind: contract.WatchSynced}
	eventually(t, "in sync", c.Watching)
	entries := func() (bob, erin *entry) {
		tb := c.table.Load()
		tb.mu.RLock()
		defer tb.mu.RUnlock()
		return tb.users["bob"], tb.users["erin"]
	}
	if bob, erin := entries(); bob != erin {
		t.Errorf("bob's and erin's lines are alike, their entries are not one: %p %p", bob, erin)
	}
	s.lines <- line("bob", "max_gpus")
	eventually(t, "bob's new line", func() bool { bob, _ := entries(); return bob.verdicts[h100.ID].Reason == "max_gpus" })
	if _, erin := entries(); erin.verdicts[h100.ID].Reason != "kind_not_allowed" {
		t.Errorf("erin's verdict changed with bob's: %+v", erin.verdicts)
	}
}

// TestWatchOptionsChangeTwice: the choices change again before the second watch is in sync: that watch is
// closed at once, the first one answers until the third is in sync, and then it is closed too; only the third's
// table answers after, whatever the others do.
func TestWatchOptionsChangeTwice(t *testing.T) {
	f, url := newFakeQuota2(t)
	c, err := New(Options{URL: url, Token: "profiles-token"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	opts := []contract.AssessOption{h100}
	set := func(o ...contract.AssessOption) { mu.Lock(); opts = o; mu.Unlock() }
	watching(t, c, func() ([]contract.AssessOption, bool) { mu.Lock(); defer mu.Unlock(); return opts, true })
	first := f.next(t)
	first.table(map[string][]string{"bob": {}})
	eventually(t, "in sync", c.Watching)

	set(h100, t4)
	second := f.next(t)
	set(h100, t4, mig)
	third := f.next(t)
	select {
	case <-second.done:
	case <-time.After(5 * time.Second):
		t.Error("the second watch, never in sync, is still open")
	}
	if _, ok := c.pushed("bob", "", nil, []contract.AssessOption{h100}); !ok {
		t.Error("the first table stopped answering before the third is in sync")
	}
	third.table(map[string][]string{"bob": {}})
	eventually(t, "the third table answers", func() bool { _, ok := c.pushed("bob", "", nil, []contract.AssessOption{mig}); return ok })
	select {
	case <-first.done:
	case <-time.After(5 * time.Second):
		t.Error("the first watch is still open")
	}
}

// TestInstallSuperseded: a watcher that a later one took over from never puts its table in use again, even when
// its stream comes to sync after the takeover (a race between the two).
func TestInstallSuperseded(t *testing.T) {
	c, err := New(Options{URL: "http://gpu-quota/"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	old := &watcher{ctx: ctx, cancel: func() {}}
	superseded, stop := context.WithCancel(ctx)
	stop()
	late := &watcher{ctx: superseded, cancel: func() {}}
	current := newTable([]contract.AssessOption{h100})
	if !c.install(old, current) || c.table.Load() != current {
		t.Fatal("a live watcher's table is not in use")
	}
	if c.install(late, newTable(nil)) || c.table.Load() != current {
		t.Error("a superseded watcher's table was put in use")
	}
}
