package bench

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/app"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// small is the benchmark's cluster shape at a size a unit test can hold.
var small = benchkit.Synth{Users: 200, Pods: 400, GPUNodes: 12, CPUNodes: 4, CordonEvery: 5, GPUPodEvery: 2}

func objects() []runtime.Object {
	var objs []runtime.Object
	for _, n := range small.Nodes() {
		objs = append(objs, n)
	}
	for _, p := range small.PodObjects(namespace) {
		objs = append(objs, p)
	}
	return objs
}

// TestBaselineAnswersLikeTheService: the anchor's LIST-per-render answer is gpu-profiles' informer-fed one
// (the real app.Run), request for request: the benchmark compares like with like.
func TestBaselineAnswersLikeTheService(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(ConfigYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, app.Options{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), Listener: ln,
			Prefix: ProfilesPrefix, ConfigPath: cfgPath, Kube: fake.NewClientset(objects()...), Token: ProfilesToken,
			Auth: func(h http.Handler) http.Handler { return h }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := benchkit.WaitReady(wctx, "http://"+ln.Addr().String()+"/readyz"); err != nil {
		t.Fatal(err)
	}

	var cfg profiles.Config
	if err := policy.Decode("config.yaml", []byte(ConfigYAML), &cfg); err != nil {
		t.Fatal(err)
	}
	base := httptest.NewServer((&Baseline{Client: fake.NewClientset(objects()...), Config: &cfg}).Handler(ProfilesPrefix))
	t.Cleanup(base.Close)

	var bodies [][]byte
	for _, r := range requests(small.Users, 20, 1) {
		b, _ := json.Marshal(r)
		bodies = append(bodies, b)
	}
	same, first := compare(context.Background(), http.DefaultClient, "http://"+ln.Addr().String()+ProfilesPrefix+"api/v1/profiles",
		base.URL+ProfilesPrefix+"api/v1/profiles", bodies)
	if same != len(bodies) {
		t.Errorf("%d of %d answers the same; first difference (-service +baseline):\n%s", same, len(bodies), first)
	}

	// The answers are real forms: researchers get the whole-GPU choices, students do not.
	var res profiles.Response
	body, _ := json.Marshal(profiles.Request{User: benchkit.UserName(0), Groups: []string{"researchers"}})
	if err := render(context.Background(), http.DefaultClient, base.URL+ProfilesPrefix+"api/v1/profiles", body, &res); err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for _, p := range res.Profiles {
		slugs = append(slugs, p.Slug)
	}
	if len(slugs) < 5 || slugs[0] != "cpu" || res.Note == "" {
		t.Errorf("a researcher's form: %v, note %q", slugs, res.Note)
	}
}

// TestHub: the services' Hub client reads the stub's users page by page and resolves the tokens.
func TestHub(t *testing.T) {
	srv := httptest.NewServer(Hub{Users: 450, Tokens: map[string]string{QuotaToken: "gpu-quota", ProfilesToken: "gpu-profiles"}}.Handler())
	t.Cleanup(srv.Close)
	hub, err := hubapi.New(hubapi.Config{URL: srv.URL + "/hub/api", Token: QuotaToken})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	users, err := hub.ListUsers(ctx, hubapi.ListUsersOptions{PageSize: 200})
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 450 || users[449].Name != benchkit.UserName(449) || users[10].Groups[0] != "researchers" {
		t.Errorf("%d users, last %+v", len(users), users[len(users)-1])
	}
	who, err := hub.WhoAmIWithToken(ctx, ProfilesToken)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(hubapi.User{Kind: "service", Name: "gpu-profiles", Scopes: []string{}}, *who); diff != "" {
		t.Errorf("whoami (-want +got):\n%s", diff)
	}
	if _, err := hub.WhoAmIWithToken(ctx, "nope"); err == nil {
		t.Error("an unknown token: no error")
	}
	if v, err := hub.Version(ctx); err != nil || v != "5.5.0" {
		t.Errorf("version %q, %v", v, err)
	}
}

// BenchmarkRender is one form from memory at B7's scale (1,000 nodes, 10,000 pods), answer encoded: the CPU
// a render costs the service, without HTTP. 64 renders at once on one core queue behind each other, so the
// 10 ms p99 of B7 needs well under 150 µs here.
func BenchmarkRender(b *testing.B) {
	s := benchkit.Synth{Users: 10_000, Pods: 10_000, GPUNodes: 600, CPUNodes: 400, CordonEvery: 50, GPUPodEvery: 4}
	var cfg profiles.Config
	if err := policy.Decode("config.yaml", []byte(ConfigYAML), &cfg); err != nil {
		b.Fatal(err)
	}
	cat := catalog.FromObjects(s.Nodes(), s.PodObjects(namespace), catalog.Options{Tolerations: cfg.TolerationsOrDefault()})
	r := &profiles.Renderer{Catalog: cat, Config: func() *profiles.Config { return &cfg }}
	reqs := requests(s.Users, 1024, 1)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		res, err := r.Render(ctx, reqs[i%len(reqs)])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(res); err != nil {
			b.Fatal(err)
		}
	}
}
