package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

const prefix = "/services/gpu-profiles/"

const goodConfig = `kinds:
  mig: {groups: [students, researchers]}
  gpu: {groups: [researchers], multiGPU: [2]}
`

func node(name string, labels map[string]string, res string, n int64) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func gpuPod(name, nodeName, res string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: name},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "notebook",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(1, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func objects() []runtime.Object {
	return []runtime.Object{
		node("gpu-h100", map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}, "nvidia.com/gpu", 2),
		node("gpu-a100", map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed"}, "nvidia.com/mig-1g.5gb", 7),
		gpuPod("jupyter-carol", "gpu-h100", "nvidia.com/gpu"),
	}
}

type running struct {
	url      string
	hub      *hubapitest.Hub
	registry *prometheus.Registry
	catalog  *catalog.Catalog
	kube     *fake.Clientset
	kubeOps  *atomic.Int64
	config   string
	reload   chan struct{}
	logs     *logtest.Buffer
}

func start(t *testing.T, opts ...func(*Options)) *running {
	t.Helper()
	hub := hubapitest.New(t)
	r := &running{hub: hub, kube: fake.NewClientset(objects()...), kubeOps: &atomic.Int64{}, reload: make(chan struct{}, 1), logs: &logtest.Buffer{}}
	r.kube.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		r.kubeOps.Add(1)
		return false, nil, nil
	})
	r.kube.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		r.kubeOps.Add(1)
		return false, nil, nil
	})
	hub.AddUser(hubapi.User{Name: "bob", Groups: []string{"students"}})
	hub.AddUser(hubapi.User{Name: "alice", Admin: true})
	hub.AddToken("bob-token", "bob")
	hub.AddToken("alice-token", "alice")
	hub.AddToken("profiles-token", "gpu-profiles")
	hub.AddToken("usage-token", "gpu-usage")
	r.config = filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(r.config, []byte(goodConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	r.url = "http://" + ln.Addr().String()
	served := make(chan struct{})
	o := Options{
		Logger: slog.New(slog.NewTextHandler(r.logs, nil)), Registry: prometheus.NewRegistry(), Listener: ln, Prefix: prefix,
		ConfigPath: r.config, ConfigPoll: 20 * time.Millisecond, Reload: r.reload,
		Kube: r.kube, Token: "profiles-token",
		Auth:      hubauth.New(hubauth.Options{Hub: hub.Client("profiles-token")}).Middleware,
		OnServing: func(_ *server.Server, c *catalog.Catalog) { r.catalog = c; close(served) },
	}
	for _, f := range opts {
		f(&o)
	}
	r.registry = o.Registry
	go func() { done <- Run(ctx, o) }()
	select {
	case <-served:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not serving after 10 s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(r.url + "/readyz") //nolint:noctx // a test
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 10 s: %d", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

type form struct {
	Profiles []struct {
		Slug    string `json:"slug"`
		Default bool   `json:"default"`
		GPUHub  struct {
			Free      int64  `json:"free"`
			Total     int64  `json:"total"`
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
		} `json:"gpuhub"`
	} `json:"profiles"`
	Note string `json:"note"`
}

// summary is slug:free/total:reason for each choice, the default starred.
func (f form) summary() []string {
	var out []string
	for _, p := range f.Profiles {
		s := p.Slug
		if p.Default {
			s += "*"
		}
		if p.GPUHub.Total > 0 || !p.GPUHub.Available {
			s += " " + strings.TrimSpace(
				strings.Join([]string{itoa(p.GPUHub.Free) + "/" + itoa(p.GPUHub.Total), p.GPUHub.Reason}, " "))
		}
		out = append(out, s)
	}
	return out
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func (r *running) profiles(t *testing.T, token, body string) (int, form) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, r.url+prefix+"api/v1/profiles", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var f form
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = json.Unmarshal(data, &f)
	}
	if err != nil {
		t.Fatalf("profiles answer %d: %v\n%s", resp.StatusCode, err, data)
	}
	return resp.StatusCode, f
}

func TestProfilesOverHTTP(t *testing.T) {
	r := start(t)
	cases := map[string]struct {
		token, body string
		wantCode    int
		want        []string
	}{
		"student: MIG, no whole GPU": {token: "profiles-token", body: `{"user":"bob","groups":["students"]}`, wantCode: 200,
			want: []string{"cpu*", "mig-a100-sxm4-40gb-1g-5gb 7/7"}},
		"researcher: whole H100s, one free, and 2 together on one node: none free": {token: "profiles-token",
			body: `{"user":"carol","groups":["researchers"]}`, wantCode: 200,
			want: []string{"cpu*", "gpu-h100-80gb-hbm3 1/2", "gpu-h100-80gb-hbm3-x2 0/1 none_free", "mig-a100-sxm4-40gb-1g-5gb 7/7"}},
		"no groups: CPU only": {token: "profiles-token", body: `{"user":"dave"}`, wantCode: 200, want: []string{"cpu*"}},
		"without the token":   {body: `{"user":"bob"}`, wantCode: 401},
		"a user's own token":  {token: "bob-token", body: `{"user":"bob"}`, wantCode: 401},
		"no user":             {token: "profiles-token", body: `{"groups":[]}`, wantCode: 400},
		"not JSON":            {token: "profiles-token", body: `user=bob`, wantCode: 400},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, f := r.profiles(t, tc.token, tc.body)
			if code != tc.wantCode {
				t.Fatalf("code %d, want %d", code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.want, f.summary()); diff != "" {
				t.Errorf("form (-want +got):\n%s", diff)
			}
		})
	}
	if err := testutil.GatherAndCompare(r.registry, strings.NewReader(`
# HELP gpuhub_profiles_renders_total Forms asked for by the Hub glue, by result: ok, unavailable (inventory not ready: the glue falls back), bad_request, unauthorized.
# TYPE gpuhub_profiles_renders_total counter
gpuhub_profiles_renders_total{result="bad_request"} 2
gpuhub_profiles_renders_total{result="ok"} 3
gpuhub_profiles_renders_total{result="unauthorized"} 2
gpuhub_profiles_renders_total{result="unavailable"} 0
`), "gpuhub_profiles_renders_total"); err != nil {
		t.Error(err)
	}
}

func (r *running) get(t *testing.T, path, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, r.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func TestInventoryOverHTTP(t *testing.T) {
	r := start(t, func(o *Options) { o.ReaderServices = []string{"gpu-usage"} })
	cases := map[string]struct {
		token    string
		wantCode int
	}{
		"admin":           {token: "alice-token", wantCode: 200},
		"reader service":  {token: "usage-token", wantCode: 200},
		"a user":          {token: "bob-token", wantCode: 403},
		"no token":        {wantCode: 401},
		"profiles' token": {token: "profiles-token", wantCode: 403},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, data := r.get(t, prefix+"api/v1/inventory", tc.token)
			if code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", code, tc.wantCode, data)
			}
			if code != 200 {
				return
			}
			var inv struct {
				Kinds []struct {
					Slug                    string
					Allocatable, Free       int64
					Nodes, SchedulableNodes int
				} `json:"kinds"`
				At time.Time `json:"at"`
			}
			if err := json.Unmarshal(data, &inv); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, k := range inv.Kinds {
				got = append(got, fmt.Sprintf("%s %d/%d on %d/%d", k.Slug, k.Free, k.Allocatable, k.SchedulableNodes, k.Nodes))
			}
			want := []string{"cpu 0/0 on 0/0", "gpu-h100-80gb-hbm3 1/2 on 1/1", "mig-a100-sxm4-40gb-1g-5gb 7/7 on 1/1"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("kinds (-want +got):\n%s", diff)
			}
			if inv.At.IsZero() {
				t.Error("no at")
			}
		})
	}
}

// TestNoReadsPerRender: once ready, forms read nothing from the API server; a change arrives by watch.
func TestNoReadsPerRender(t *testing.T) {
	r := start(t)
	before := r.kubeOps.Load()
	for range 50 {
		if code, _ := r.profiles(t, "profiles-token", `{"user":"carol","groups":["researchers"]}`); code != 200 {
			t.Fatal(code)
		}
	}
	if n := r.kubeOps.Load() - before; n != 0 {
		t.Errorf("%d API calls for 50 forms, want 0", n)
	}
	// carol's pod goes away: the H100s are free a moment later.
	if err := r.kube.CoreV1().Pods("jhub").Delete(context.Background(), "jupyter-carol", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, f := r.profiles(t, "profiles-token", `{"user":"carol","groups":["researchers"]}`)
		return slicesContain(f.summary(), "gpu-h100-80gb-hbm3-x2 1/1")
	})
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func eventually(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("not after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReload: a good change is in use at once; a bad one is refused and the last good one stays.
func TestReload(t *testing.T) {
	r := start(t)
	write := func(s string) {
		if err := os.WriteFile(r.config, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("note: Maintenance tonight.\nkinds:\n  mig: {hide: true}\n")
	eventually(t, func() bool {
		_, f := r.profiles(t, "profiles-token", `{"user":"bob","groups":["students"]}`)
		return f.Note == "Maintenance tonight." && len(f.Profiles) == 2 // cpu and the H100: no group limit now
	})
	write("kinds:\n  cpu: {hide: true}\n")
	r.reload <- struct{}{}
	eventually(t, func() bool { return strings.Contains(r.logs.String(), "nothing hides the CPU choice") })
	_, f := r.profiles(t, "profiles-token", `{"user":"bob","groups":["students"]}`)
	if f.Note != "Maintenance tonight." {
		t.Errorf("the last good configuration is not in use: %+v", f)
	}
	code, data := r.get(t, "/readyz", "")
	if code != 200 || !strings.Contains(string(data), "nothing hides the CPU choice") {
		t.Errorf("readyz %d %s", code, data)
	}
	if err := testutil.GatherAndCompare(r.registry, strings.NewReader(`
# HELP gpuhub_profiles_config_last_reload_success 1 when the last load or reload of the overrides file succeeded, 0 when it failed (the last good one stays in use; /readyz has the errors).
# TYPE gpuhub_profiles_config_last_reload_success gauge
gpuhub_profiles_config_last_reload_success 0
`), "gpuhub_profiles_config_last_reload_success"); err != nil {
		t.Error(err)
	}
}

// TestQuotaOverHTTP: gpu-quota's verdicts shape the form; kind_not_allowed leaves the kind out. This gpu-quota
// has no watch of verdicts (an older one): every form asks, as before it.
func TestQuotaOverHTTP(t *testing.T) {
	var asked atomic.Int64
	quota := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/watch") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		asked.Add(1)
		if r.Header.Get("Authorization") != "token profiles-token" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, `{"options":[{"id":"gpu-h100-80gb-hbm3","allow":false,"reason":"budget_exhausted","message":"You are over your daily GPU budget."},
			{"id":"gpu-h100-80gb-hbm3-x2","allow":false,"reason":"kind_not_allowed"},{"id":"mig-a100-sxm4-40gb-1g-5gb","allow":true}],"onUnavailable":"open"}`)
	}))
	defer quota.Close()
	var hooked atomic.Bool
	r := start(t, func(o *Options) {
		o.QuotaURL = quota.URL + "/services/gpu-quota/"
		o.Extra = func(ctx context.Context, h Hooks) {
			if h.Catalog != nil && h.Config() != nil && !h.Provisionable("gpu", "gpu-h100-80gb-hbm3") {
				hooked.Store(true)
			}
			<-ctx.Done()
		}
	})
	_, f := r.profiles(t, "profiles-token", `{"user":"carol","groups":["researchers"]}`)
	want := []string{"cpu*", "gpu-h100-80gb-hbm3 1/2 quota", "mig-a100-sxm4-40gb-1g-5gb 7/7"}
	if diff := cmp.Diff(want, f.summary()); diff != "" {
		t.Errorf("form (-want +got):\n%s", diff)
	}
	r.profiles(t, "profiles-token", `{"user":"carol","groups":["researchers"]}`)
	if asked.Load() != 1 {
		t.Errorf("gpu-quota asked %d times for two forms within the cache time", asked.Load())
	}
	if !hooked.Load() {
		t.Error("Extra did not get the catalog and the configuration")
	}
	if err := testutil.GatherAndCompare(r.registry, strings.NewReader(`
# HELP gpuhub_profiles_quota_assess_total How gpu-quota's part of each form went: pushed (from the verdicts gpu-quota pushes, held in memory), ok (asked), cached (asked within --quota-cache), unavailable_open, unavailable_closed (gpu-quota could not answer; its onUnavailable applied), not_configured, nothing_to_ask.
# TYPE gpuhub_profiles_quota_assess_total counter
gpuhub_profiles_quota_assess_total{result="cached"} 1
gpuhub_profiles_quota_assess_total{result="not_configured"} 0
gpuhub_profiles_quota_assess_total{result="nothing_to_ask"} 0
gpuhub_profiles_quota_assess_total{result="ok"} 1
gpuhub_profiles_quota_assess_total{result="pushed"} 0
gpuhub_profiles_quota_assess_total{result="unavailable_closed"} 0
gpuhub_profiles_quota_assess_total{result="unavailable_open"} 0
`), "gpuhub_profiles_quota_assess_total"); err != nil {
		t.Error(err)
	}
}

// TestQuotaPushedOverHTTP: gpu-profiles watches gpu-quota's verdicts on every GPU choice of its catalog, and a
// form that the table answers makes no round trip ("pushed"); a form for other groups than gpu-quota's
// directory has asks, as before.
func TestQuotaPushedOverHTTP(t *testing.T) {
	var asked atomic.Int64
	watched := make(chan contract.VerdictWatchRequest, 4)
	quota := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token profiles-token" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if !strings.HasSuffix(r.URL.Path, "/watch") {
			asked.Add(1)
			_, _ = io.WriteString(w, `{"options":[{"id":"gpu-h100-80gb-hbm3","allow":true},{"id":"gpu-h100-80gb-hbm3-x2","allow":true},
				{"id":"mig-a100-sxm4-40gb-1g-5gb","allow":true}],"onUnavailable":"open"}`)
			return
		}
		var req contract.VerdictWatchRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		watched <- req
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, `{"kind":"user","user":"carol","groups":["researchers"],"options":[`+
			`{"id":"gpu-h100-80gb-hbm3","allow":false,"reason":"budget_exhausted","message":"You are over your daily GPU budget."},`+
			`{"id":"gpu-h100-80gb-hbm3-x2","allow":false,"reason":"kind_not_allowed"},{"id":"mig-a100-sxm4-40gb-1g-5gb","allow":true}],"onUnavailable":"open"}`+"\n")
		_, _ = io.WriteString(w, `{"kind":"synced"}`+"\n")
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(quota.Close) // after gpu-profiles' stop (cleanups run last first): its watch holds a handler
	r := start(t, func(o *Options) { o.QuotaURL = quota.URL + "/services/gpu-quota/" })
	var req contract.VerdictWatchRequest
	select {
	case req = <-watched:
	case <-time.After(10 * time.Second):
		t.Fatal("gpu-profiles did not watch within 10 s")
	}
	var ids []string
	for _, o := range req.Options {
		ids = append(ids, o.ID)
	}
	// Every GPU choice, whoever may see it (the whole GPUs are the researchers' only).
	if diff := cmp.Diff([]string{"gpu-h100-80gb-hbm3", "gpu-h100-80gb-hbm3-x2", "mig-a100-sxm4-40gb-1g-5gb"}, ids); diff != "" {
		t.Errorf("watched (-want +got):\n%s", diff)
	}
	pushed := func() float64 {
		mfs, err := r.registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "gpuhub_profiles_quota_assess_total" && m.GetLabel()[0].GetValue() == "pushed" {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	// The first form may come before the table: wait for one answered from it.
	var f form
	eventually(t, func() bool {
		_, f = r.profiles(t, "profiles-token", `{"user":"carol","groups":["researchers"]}`)
		return pushed() > 0
	})
	want := []string{"cpu*", "gpu-h100-80gb-hbm3 1/2 quota", "mig-a100-sxm4-40gb-1g-5gb 7/7"}
	if diff := cmp.Diff(want, f.summary()); diff != "" {
		t.Errorf("form (-want +got):\n%s", diff)
	}
	before := asked.Load()
	for range 5 {
		r.profiles(t, "profiles-token", `{"user":"carol","groups":["researchers"]}`)
	}
	if n := asked.Load() - before; n != 0 {
		t.Errorf("gpu-quota asked %d times for 5 forms the table answers", n)
	}
	if err := testutil.GatherAndCompare(r.registry, strings.NewReader(`
# HELP gpuhub_profiles_quota_watch_in_sync 1 while the verdicts gpu-quota pushes are in sync and its watch is alive: forms are answered from memory (pushed); 0 otherwise (forms ask gpu-quota).
# TYPE gpuhub_profiles_quota_watch_in_sync gauge
gpuhub_profiles_quota_watch_in_sync 1
`), "gpuhub_profiles_quota_watch_in_sync"); err != nil {
		t.Error(err)
	}
	// Groups the directory does not have yet (the Hub's are fresher): asked.
	r.profiles(t, "profiles-token", `{"user":"carol","groups":["researchers","students"]}`)
	if n := asked.Load() - before; n != 1 {
		t.Errorf("gpu-quota asked %d times for a form of other groups, want 1", n)
	}
}

func TestStartOverHTTP(t *testing.T) {
	r := start(t)
	cases := map[string]struct {
		token, body string
		wantCode    int
		want        string
	}{
		"one H100 free": {token: "profiles-token", wantCode: 200, want: "{}",
			body: `{"user":"carol","groups":["researchers"],"profile":"gpu-h100-80gb-hbm3","live":true}`},
		"two H100s on one node: none free": {token: "profiles-token", wantCode: 200,
			body: `{"user":"carol","groups":["researchers"],"profile":"gpu-h100-80gb-hbm3-x2","live":true}`,
			want: `{"refusal":{"reason":"none_free","message":"2x NVIDIA H100 80GB HBM3 (2 whole GPUs) is not available. None free right now: no node has 2 free together. Free now: NVIDIA H100 80GB HBM3 (whole GPU) (1 free); NVIDIA A100 SXM4 40GB, MIG 1g.5gb slice (1/7 GPU, 5 GB) (7 free)."}}`},
		"a static choice judged by the pod": {token: "profiles-token", wantCode: 200, want: "{}",
			body: `{"user":"bob","groups":["students"],"profile":"mine","displayName":"Mine","pod":{"containers":[{"name":"notebook","resources":{"limits":{"nvidia.com/mig-1g.5gb":"1"}}}]}}`},
		"without the token": {body: `{"user":"bob"}`, wantCode: 401},
		"no user":           {token: "profiles-token", body: `{"profile":"cpu"}`, wantCode: 400},
		"a bad quantity":    {token: "profiles-token", body: `{"user":"bob","pod":{"containers":[{"name":"n","resources":{"limits":{"nvidia.com/gpu":"x"}}}]}}`, wantCode: 400},
		"too big":           {token: "profiles-token", body: `{"user":"bob","displayName":"` + strings.Repeat("x", 64<<10) + `"}`, wantCode: 400},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, r.url+prefix+"api/v1/start", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "token "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", resp.StatusCode, tc.wantCode, data)
			}
			if tc.want != "" {
				if diff := cmp.Diff(tc.want, strings.TrimSpace(string(data))); diff != "" {
					t.Errorf("answer (-want +got):\n%s", diff)
				}
			}
		})
	}
	if err := testutil.GatherAndCompare(r.registry, strings.NewReader(`
# HELP gpuhub_profiles_start_checks_total Starts the Hub glue asked about before creating the pod, by result: ok, refused (the choice is unavailable), unavailable (inventory not ready: gpu-quota decides alone), bad_request, unauthorized.
# TYPE gpuhub_profiles_start_checks_total counter
gpuhub_profiles_start_checks_total{result="bad_request"} 3
gpuhub_profiles_start_checks_total{result="ok"} 2
gpuhub_profiles_start_checks_total{result="refused"} 1
gpuhub_profiles_start_checks_total{result="unauthorized"} 1
gpuhub_profiles_start_checks_total{result="unavailable"} 0
`), "gpuhub_profiles_start_checks_total"); err != nil {
		t.Error(err)
	}
}
