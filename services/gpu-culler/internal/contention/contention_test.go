package contention

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
)

var t0 = time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)

// waitlist is a fake gpu-quota: it answers the contended classes with status and body, and checks the token.
type waitlist struct {
	mu     sync.Mutex
	status int
	body   string
	paths  []string
	tokens []string
}

func (w *waitlist) set(status int, body string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status, w.body = status, body
}

func (w *waitlist) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paths = append(w.paths, r.URL.Path)
	w.tokens = append(w.tokens, r.Header.Get("Authorization"))
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(w.status)
	_, _ = rw.Write([]byte(w.body))
}

const h100Waiting = `{"asOf": "2026-11-23T14:59:58Z", "classes": [
  {"class": "gpu H100-80GB-HBM3", "kind": "gpu", "waiting": 2},
  {"class": "mig A100-SXM4-40GB 3g.20gb", "kind": "mig", "waiting": 1},
  {"class": "shared T4", "kind": "shared", "waiting": 0}]}`

func TestPoll(t *testing.T) {
	const h100, a100, mig, t4 = "gpu H100-80GB-HBM3", "gpu A100-SXM4-40GB", "mig A100-SXM4-40GB 3g.20gb", "shared T4"
	type want struct {
		Err       bool
		Contended map[string]bool
		Classes   []string
	}
	cases := map[string]struct {
		status int
		body   string
		want   want
	}{
		"someone waits for an H100 and a MIG slice; nobody for the T4 share (0 waiting)": {
			status: 200, body: h100Waiting,
			want: want{Contended: map[string]bool{h100: true, a100: false, mig: true, t4: false}, Classes: []string{h100, mig}},
		},
		"nobody waits": {
			status: 200, body: `{"asOf": "2026-11-23T14:59:58Z", "classes": []}`,
			want: want{Contended: map[string]bool{h100: false, a100: false, mig: false, t4: false}},
		},
		"gpu-quota fails: nothing is contended": {
			status: 500, body: `{"status": 500, "message": "database is locked"}`,
			want: want{Err: true, Contended: map[string]bool{h100: false, a100: false, mig: false, t4: false}},
		},
		"no waitlist at that URL: nothing is contended": {
			status: 404, body: `{"status": 404, "message": "not found"}`,
			want: want{Err: true, Contended: map[string]bool{h100: false, a100: false, mig: false, t4: false}},
		},
		"an answer that is not the contract: nothing is contended": {
			status: 200, body: `<html>proxy error</html>`,
			want: want{Err: true, Contended: map[string]bool{h100: false, a100: false, mig: false, t4: false}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wl := &waitlist{}
			srv := httptest.NewServer(wl)
			defer srv.Close()
			p, err := New(Options{URL: srv.URL + "/services/gpu-quota", Token: "culler-token", Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			// First a good answer: a failure afterwards must drop it, not keep it.
			wl.set(200, h100Waiting)
			if err := p.Poll(context.Background()); err != nil {
				t.Fatal(err)
			}
			wl.set(tc.status, tc.body)
			err = p.Poll(context.Background())
			got := want{Err: err != nil, Contended: map[string]bool{}, Classes: p.Classes()}
			for c := range tc.want.Contended {
				got.Contended[c] = p.Contended(c)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"/services/gpu-quota/api/v1/waitlist/contended"}, wl.paths[1:]); diff != "" {
				t.Errorf("path (-want +got):\n%s", diff)
			}
			if wl.tokens[1] != "token culler-token" {
				t.Errorf("Authorization %q, want the culler's Hub token", wl.tokens[1])
			}
			if (err != nil) != (p.Err() != nil) {
				t.Errorf("Err() = %v after a poll that returned %v", p.Err(), err)
			}
		})
	}
}

// An answer older than three polls counts as nothing contended; the next good answer counts again.
func TestStale(t *testing.T) {
	wl := &waitlist{status: 200, body: h100Waiting}
	srv := httptest.NewServer(wl)
	defer srv.Close()
	clock := t0
	p, err := New(Options{URL: srv.URL + "/", Every: 10 * time.Second, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	const h100 = "gpu H100-80GB-HBM3"
	if p.Contended(h100) || p.Err() == nil {
		t.Fatalf("before any answer: contended %v, err %v", p.Contended(h100), p.Err())
	}
	if err := p.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {30 * time.Second, true}, {31 * time.Second, false}, {time.Hour, false}} {
		clock = t0.Add(step.after)
		if got := p.Contended(h100); got != step.want {
			t.Errorf("%s after the answer: contended %v, want %v", step.after, got, step.want)
		}
		if stale := p.Err() != nil; stale == step.want {
			t.Errorf("%s after the answer: Err() = %v", step.after, p.Err())
		}
	}
	if err := p.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !p.Contended(h100) {
		t.Error("a fresh answer after a stale one: not contended")
	}
}

// TestCanceledPollKeepsTheAnswer: a poll cut short because the culler stops says nothing about gpu-quota. Before,
// it cleared the contended classes and counted a failure, and under load TestMetricsAndLogs saw the gauge drop to
// 0 and a second "changed" line when its cancel met a poll in flight.
func TestCanceledPollKeepsTheAnswer(t *testing.T) {
	srv := httptest.NewServer(&waitlist{status: 200, body: h100Waiting})
	defer srv.Close()
	p, err := New(Options{URL: srv.URL + "/", Every: 10 * time.Second, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Poll(ctx); err == nil {
		t.Fatal("a poll with a canceled context answered")
	}
	if c, e, f := p.Contended("gpu H100-80GB-HBM3"), p.Err(), testutil.ToFloat64(p.failures); !c || e != nil || f != 0 {
		t.Errorf("after a canceled poll: contended %v, Err() %v, failures %v; want true, <nil>, 0", c, e, f)
	}
}

// Failures are counted every poll and logged once per change of state; the contended classes are a gauge.
func TestMetricsAndLogs(t *testing.T) {
	wl := &waitlist{status: 503, body: `{"status": 503, "message": "starting"}`}
	srv := httptest.NewServer(wl)
	defer srv.Close()
	reg := prometheus.NewRegistry()
	var logs logtest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	p, err := New(Options{URL: srv.URL + "/", Token: "secret-token", Every: 5 * time.Millisecond, Registerer: reg, Logger: logger,
		Now: func() time.Time { return t0 }}) // a fixed clock: the answer never goes stale here
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	waitFor(t, func() bool { return testutil.ToFloat64(p.failures) >= 4 })
	wl.set(200, h100Waiting)
	waitFor(t, func() bool { return p.Contended("gpu H100-80GB-HBM3") })
	cancel()
	<-done

	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gpuhub_culler_contended_classes GPU classes someone waits for, as the culler last heard from gpu-quota's waitlist (0 when it has no answer younger than 3 polls).
# TYPE gpuhub_culler_contended_classes gauge
gpuhub_culler_contended_classes 2
`), "gpuhub_culler_contended_classes"); err != nil {
		t.Error(err)
	}
	out := logs.String()
	for _, w := range []struct {
		line string
		n    int
	}{{"cannot read gpu-quota's waitlist", 1}, {"waitlist answers again", 1}, {"GPU classes someone waits for changed", 1}} {
		if got := strings.Count(out, w.line); got != w.n {
			t.Errorf("%q logged %d times, want %d:\n%s", w.line, got, w.n, out)
		}
	}
	if strings.Contains(out, "secret-token") {
		t.Error("the token was logged")
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
