package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/notice"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

func TestFleet(t *testing.T) {
	servers := DefaultFleet.List()
	states := map[State]int{}
	users := map[string]bool{}
	for _, s := range servers {
		states[s.State]++
		users[s.User] = true
		if s.Node == "" {
			t.Errorf("server of %s (%s) is not bound to a node", s.User, s.Profile.Slug)
		}
	}
	if diff := cmp.Diff(map[State]int{Busy: 1970, Idle: 20, Stale: 10}, states); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
	if len(users) != 2000 || servers[1].User != UserName(5) || servers[1999].User != UserName(9995) {
		t.Errorf("%d users, server 1 of %s, 1999 of %s; want 2000 users spread every 5th", len(users), servers[1].User, servers[1999].User)
	}
}

// TestPodObject: the pod carries what the culler's informer and gpu.PodResources read, and an idle server's
// pod the culler's notice.
func TestPodObject(t *testing.T) {
	at := time.Date(2026, 11, 23, 15, 10, 0, 0, time.UTC)
	s := Fleet{Users: 10, Servers: 10, IdleEvery: 10}.List()[1]
	p := s.PodObject(at)
	if p.Labels["component"] != "singleuser-server" || p.Annotations["hub.jupyter.org/username"] != s.User || p.Annotations["hub.jupyter.org/servername"] != "" {
		t.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
	}
	if diff := cmp.Diff(map[string]int64{"nvidia.com/mig-1g.5gb": 1}, gpu.PodResources(p)); diff != "" {
		t.Errorf("GPU resources (-want +got):\n%s", diff)
	}
	ns, errs := notice.Parse(p.Annotations)
	if len(errs) > 0 || len(ns) != 1 {
		t.Fatalf("notices %v, errors %v", ns, errs)
	}
	if diff := cmp.Diff(Notice(at), ns[0]); diff != "" {
		t.Errorf("notice (-want +got):\n%s", diff)
	}
	if busy := (Server{User: "u", Pod: "jupyter-u", Profile: benchkit.Profiles[0], State: Busy}).PodObject(at); len(busy.Annotations) != 2 {
		t.Errorf("a busy server's pod has annotations %v, want KubeSpawner's two", busy.Annotations)
	}
}

func TestUsage(t *testing.T) {
	at := time.Date(2026, 11, 23, 15, 10, 0, 123e6, time.UTC)
	u := &Usage{Servers: Fleet{Users: 8, Servers: 4, IdleEvery: 4, StaleEvery: 4}.List(), Token: "culler-token", Now: func() time.Time { return at }}
	get := func(path, auth string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		u.ServeHTTP(rec, req)
		return rec
	}
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{UsagePath, "token culler-token", 200},
		{UsagePath, "Bearer culler-token", 200},
		{UsagePath, "token someone-else", 403},
		{UsagePath, "", 403},
		{"/services/gpu-usage/api/v1/me", "token culler-token", 404},
	} {
		if rec := get(tc.path, tc.auth); rec.Code != tc.want {
			t.Errorf("GET %s with %q: %d, want %d", tc.path, tc.auth, rec.Code, tc.want)
		}
	}
	if u.Requests.Load() != 2 {
		t.Errorf("%d requests counted, want the 2 answered", u.Requests.Load())
	}
	rec := get(UsagePath, "token culler-token")
	var v any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	golden.Check(t, "servers.golden.json", append(b, '\n'))
}

func TestPolicyLoads(t *testing.T) {
	var p policy.Policy
	if err := ipolicy.Decode("bench.yaml", []byte(PolicyYAML(10*time.Second)), &p); err != nil {
		t.Fatal(err)
	}
	r := p.Rule(gpu.KindMIG, "")
	if p.EveryPeriod() != 10*time.Second || r.IdlePeriod != 5*time.Second || r.Warn != time.Second || r.MaxAge != 0 {
		t.Errorf("every %s, rule %+v", p.EveryPeriod(), r)
	}
}

func TestOp(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/hub/api/", "GET /"},
		{"GET", "/hub/api/users", "GET /users"},
		{"GET", "/hub/api/user", "GET /user"},
		{"DELETE", "/hub/api/users/user00005/server", "DELETE /users/{name}/server"},
		{"DELETE", "/hub/api/users/a/servers/gpu", "DELETE /users/{name}/servers/{server}"},
		{"GET", "/hub/api/users/user00005", "GET /users/{name}"},
	} {
		if got := Op(tc.method, tc.path); got != tc.want {
			t.Errorf("Op(%s %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

// TestCounterBursts: requests close together are one burst (a pass) with the Hub's CPU from its first request
// to its last answer; a quiet gap starts the next.
func TestCounterBursts(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cpu := time.Duration(0)
	c := &Counter{gap: time.Second, now: func() time.Time { return now }, cpu: func(int) time.Duration { return cpu }, ops: map[string]int{}}
	req := func(op string, took, cost time.Duration) {
		c.begin(op)
		now, cpu = now.Add(took), cpu+cost
		c.end()
	}
	req("GET /users", 100*time.Millisecond, 80*time.Millisecond)
	now = now.Add(200 * time.Millisecond)
	req("GET /users", 100*time.Millisecond, 70*time.Millisecond)
	req("DELETE /users/{name}/server", 50*time.Millisecond, 10*time.Millisecond)
	if c.Completed() != 0 {
		t.Errorf("completed %d while the pass may go on", c.Completed())
	}
	now = now.Add(5 * time.Second)
	cpu += 300 * time.Millisecond // the Hub's own work between passes is not the pass's
	if c.Completed() != 1 {
		t.Errorf("completed %d after the gap, want 1", c.Completed())
	}
	req("GET /", 10*time.Millisecond, 10*time.Millisecond)
	ops, bursts := c.Take()
	if diff := cmp.Diff(map[string]int{"GET /users": 2, "DELETE /users/{name}/server": 1, "GET /": 1}, ops); diff != "" {
		t.Errorf("ops (-want +got):\n%s", diff)
	}
	if len(bursts) != 2 || bursts[0].Requests != 3 || bursts[0].HubCPU != 160*time.Millisecond ||
		bursts[0].End.Sub(bursts[0].Start) != 450*time.Millisecond || bursts[1].HubCPU != 10*time.Millisecond {
		t.Errorf("bursts %+v", bursts)
	}
	if ops, bursts := c.Take(); len(ops) != 0 || len(bursts) != 0 {
		t.Errorf("after Take: %v %v", ops, bursts)
	}
}

func TestCounterProxies(t *testing.T) {
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(r.URL.RequestURI()))
	}))
	defer hub.Close()
	c, err := NewCounter(hub.URL, os.Getpid(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(c)
	defer front.Close()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, front.URL+"/hub/api/users?state=ready&limit=200", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "/hub/api/users?state=ready&limit=200" {
		t.Errorf("the Hub got %q", body)
	}
	if ops, _ := c.Take(); ops["GET /users"] != 1 {
		t.Errorf("ops %v", ops)
	}
	// /proc counts CPU time in clock ticks (10 ms): a test that has run less than one reads 0, so spend one.
	for deadline := time.Now().Add(5 * time.Second); benchkit.ProcessCPU(os.Getpid()) <= 0; {
		if time.Now().After(deadline) {
			t.Fatal("this process's CPU time still reads as 0 after 5 s of work")
		}
		spin(time.Millisecond)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP gpuhub_culler_pass_duration_seconds x
gpuhub_culler_pass_duration_seconds_bucket{le="0.5"} 2
gpuhub_culler_pass_duration_seconds_sum 0.75
gpuhub_culler_pass_duration_seconds_count 3
gpuhub_culler_passes_total{result="ok"} 3
gpuhub_culler_passes_total{result="error"} 1
gpuhub_culler_hub_requests_total{op="users_list"} 30
gpuhub_culler_decisions_total{action="stop",reason="idle"} 2
gpuhub_other 5
`
	m, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{PassCount: 3, PassSum: 0.75, Passes: map[string]float64{"ok": 3, "error": 1},
		HubRequests: map[string]float64{"users_list": 30}, Decisions: map[string]float64{"stop/idle": 2}}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestPassWatcher(t *testing.T) {
	count, sum := 0, 0.0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		count++
		sum += 0.25 // every scrape sees one more pass of 250 ms
		_, _ = w.Write([]byte("gpuhub_culler_pass_duration_seconds_sum " + jsonNum(sum) + "\ngpuhub_culler_pass_duration_seconds_count " + jsonNum(float64(count)) + "\n"))
	}))
	defer srv.Close()
	w := &PassWatcher{URL: srv.URL, Client: srv.Client(), Every: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	for {
		if ps, _, _ := w.Passes(); len(ps) >= 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	ps, _, err := w.Passes()
	if err != nil || ps[0].Duration != 250*time.Millisecond || ps[2].Duration != 250*time.Millisecond {
		t.Errorf("passes %+v, %v", ps, err)
	}
}

func jsonNum(f float64) string { b, _ := json.Marshal(f); return string(b) }

// TestSummarize: the table's numbers are per pass, medians over runs, ratios idle-culler over gpu-culler, and
// the targets judged on each run: the median of the runs' CPU ratios (10x) meets 1/5, run 2's (4x) does not.
func TestSummarize(t *testing.T) {
	run := func(ourCPU, theirCPU time.Duration, idleP99, ourP99 time.Duration) RunResult {
		return RunResult{IdleProbeP99: idleP99,
			Ours: PhaseResult{Passes: 5, PassTimes: []time.Duration{300 * time.Millisecond}, Requests: 55, Stopped: 5,
				Ops: map[string]int{"GET /users": 50, "DELETE /users/{name}/server": 5}, HubCPUWindow: 5 * ourCPU, ProbeP99: ourP99},
			Theirs: PhaseResult{Passes: 5, Requests: 205, Ops: map[string]int{"GET /": 5, "GET /users": 200}, HubCPUWindow: 5 * theirCPU, ProbeP99: 3 * idleP99}}
	}
	runs := []RunResult{
		run(100*time.Millisecond, 1000*time.Millisecond, 10*time.Millisecond, 11*time.Millisecond),
		run(120*time.Millisecond, 480*time.Millisecond, 10*time.Millisecond, 13*time.Millisecond),
		run(90*time.Millisecond, 1100*time.Millisecond, 10*time.Millisecond, 11*time.Millisecond),
	}
	tab := Summarize(runs, 0, 10)
	got := map[string]string{}
	for _, r := range tab.Rows {
		met := "-"
		if r.Verdict != nil {
			met = r.Verdict.String()
		}
		got[r.Name] = r.Ours.String() + " | " + r.Theirs.String() + " | " + r.Ratio.format("%.1fx") + " | " + met
	}
	want := map[string]string{
		"pass time (culler's metric)":              "300 | - | - | met (3 of 3 runs)",
		"pass time at the Hub":                     "- | - | - | -",
		"Hub requests per pass":                    "11 | 41 | 3.7x | met (3 of 3 runs)",
		"Hub CPU per pass (window less idle)":      "100 (90–120) | 1000 (480–1100) | 10.0x (4.0x–12.2x) | NOT met (met in 2 of 3 runs)",
		"Hub CPU per pass (in its requests)":       "0 | 0 | - | -",
		"Hub probe p99, no culler":                 "10 | 10 | - | -",
		"Hub probe p99 during passes":              "11 (11–13) | 30 | 2.7x (2.3x–2.7x) | NOT met (met in 0 of 3 runs)",
		"  degradation vs no culler":               "10 (10–30) | 200 | - | -",
		"idle servers stopped per run":             "5 | 0 | - | -",
		"busy or stale servers stopped (all runs)": "0 | 0 | - | met (1 of 1 runs)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestSeedPods: the fleet's nodes and pods go into the API server with benchkit.Create and keep their binding.
func TestSeedPods(t *testing.T) {
	f := Fleet{Users: 100, Servers: 20, IdleEvery: 10}
	c := fake.NewClientset()
	ctx := context.Background()
	now := time.Now()
	servers := f.List()
	pods := make([]*corev1.Pod, 0, len(servers))
	for _, s := range servers {
		pods = append(pods, s.PodObject(now))
	}
	if err := benchkit.Create(ctx, c, Namespace, f.Nodes(), pods, 4, nil); err != nil {
		t.Fatal(err)
	}
	list, _ := c.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "component=singleuser-server"})
	if len(list.Items) != 20 {
		t.Errorf("%d pods, want 20", len(list.Items))
	}
	for _, p := range list.Items {
		if p.Spec.NodeName == "" {
			t.Errorf("pod %s unbound", p.Name)
		}
	}
}

// spin keeps a CPU busy for d of wall time.
func spin(d time.Duration) {
	x := 0
	for end := time.Now().Add(d); time.Now().Before(end); x++ {
	}
	_ = x
}

func TestIdleStopped(t *testing.T) {
	tests := map[string]struct {
		runs    []RunResult
		idle    int
		wantErr string
	}{
		"every idle server stopped":          {runs: []RunResult{{Ours: PhaseResult{Passes: 1, Stopped: 4}}}, idle: 4},
		"more stops than idle (next passes)": {runs: []RunResult{{Ours: PhaseResult{Passes: 6, Stopped: 9}}}, idle: 4},
		"nothing stopped":                    {runs: []RunResult{{Ours: PhaseResult{Passes: 1, Stopped: 0}}}, idle: 4, wantErr: "run 1: gpu-culler stopped 0 servers, but 4 are idle"},
		"second run short":                   {runs: []RunResult{{Ours: PhaseResult{Passes: 1, Stopped: 4}}, {Ours: PhaseResult{Passes: 1, Stopped: 3}}}, idle: 4, wantErr: "run 2: gpu-culler stopped 3"},
		"gpu-culler not measured":            {runs: []RunResult{{Ours: PhaseResult{}}}, idle: 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := idleStopped(tc.runs, tc.idle)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("idleStopped: %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("idleStopped: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}
