package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/apicheck"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// target runs the culler as main does (Hub-token auth, its own token for the Hub glue, --reader-services
// gpu-usage) with the callers its Hub knows: root (a Hub admin), alice (the subject of per-user requests), bob,
// the Hub glue with gpu-culler's own token, gpu-usage (the reader service) and a service nobody named.
func target(t *testing.T) *apicheck.Target {
	t.Helper()
	doc, err := apicheck.Load("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(testPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	hub := hubapitest.New(t)
	hub.AddToken("culler-token", "gpu-culler", "list:users", "read:users:activity", "read:servers", "delete:servers")
	for _, u := range []hubapi.User{{Name: "alice"}, {Name: "bob"}, {Name: "root", Admin: true}} {
		hub.AddUser(u)
		hub.AddToken(u.Name+"-token", u.Name)
	}
	hub.AddToken("usage-token", "gpu-usage")
	hub.AddToken("intruder-token", "intruder")
	hub.AddToken("revoked-token", "alice")
	hub.ExpireToken("revoked-token")
	usage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintf(w, `{"sampledAt":%q,"servers":[]}`, time.Now().UTC().Format(time.RFC3339Nano))
	}))
	t.Cleanup(usage.Close)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), Listener: ln, Prefix: "/services/gpu-culler/",
			PolicyPath: path, Kube: fake.NewClientset(), Namespace: "jhub",
			HubConfig: hubapi.Config{URL: hub.URL(), Token: "culler-token"}, Token: "culler-token",
			Auth: hubauth.New(hubauth.Options{Hub: hub.Client("culler-token")}).Middleware, ReaderServices: []string{"gpu-usage"},
			UsageURL: usage.URL + "/services/gpu-usage/", SampleEvery: time.Second, StopsNamespace: "gpuhub", StopsConfigMap: "gpu-culler-stops",
			OnServing: func(*server.Server) { close(served) },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-served:
	case err := <-done:
		t.Fatalf("Run ended before serving: %v", err)
	}
	return &apicheck.Target{
		Doc: doc, URL: "http://" + ln.Addr().String(), Subject: "alice",
		Callers: []apicheck.Caller{
			{Name: "gpu-culler", Kind: "service", Token: "culler-token", Own: true},
			{Name: "root", Kind: "user", Admin: true, Token: "root-token"},
			{Name: "alice", Kind: "user", Token: "alice-token"},
			{Name: "bob", Kind: "user", Token: "bob-token"},
			{Name: "gpu-usage", Kind: "service", Token: "usage-token"},
			{Name: "intruder", Kind: "service", Token: "intruder-token"},
		},
		Bad:      apicheck.TokenBad("revoked-token", "root-token"),
		CatchAll: []string{"no such endpoint"},
	}
}

// TestOpenAPIRoutes: every route api.New registers is documented, and every documented one is registered.
func TestOpenAPIRoutes(t *testing.T) {
	doc, err := apicheck.Load("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	apicheck.Routes(t, doc, apicheck.SourceRoutes(t, map[string]string{"p": "/api/v1/"}, "../api/api.go"))
}

// TestSecurity: every operation refuses what its x-gpuhub-access does not allow (issue 15, security suite).
func TestSecurity(t *testing.T) { apicheck.Security(t, target(t)) }

// TestBadInput: malformed input answers 4xx with a message, never a server error (issue 15, bad input).
func TestBadInput(t *testing.T) { apicheck.BadInput(t, target(t)) }
