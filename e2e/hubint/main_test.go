//go:build integration

package hubint_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
	"github.com/gpuhub/gpuhub/hubapi"
)

// Services of the test Hub, each with the least privilege its test needs.
const (
	svcLister  = "lister"         // list:users, read:users
	svcGroups  = "group-reader"   // list:groups, read:groups
	svcServers = "server-manager" // servers!user=alice, read:users:activity
	svcWeak    = "weak"           // list:users only
	svcMinter  = "minter"         // tokens!user=alice
	svcAuth    = "auth-checker"   // no scopes: validating someone else's token needs none
	svcPages   = "oauth-pages"    // no scopes; a url: an OAuth client whose pages alice may open
)

// bulkUsers are created besides the named users, enough for several pages of GET /users
// (the Hub caps a page at api_page_max_limit, 200).
const bulkUsers = 450

var (
	hub       *hubproc.Hub
	userNames []string // every user the Hub was started with
	groups    = map[string][]string{"gpu-team": {"alice", "bob"}, "students": {"carol"}}
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	opts := hubproc.OptionsFromEnv()
	userNames = []string{"alice", "bob", "carol"}
	for i := range bulkUsers {
		userNames = append(userNames, fmt.Sprintf("user-%03d", i))
	}
	opts.Users = userNames
	opts.Groups = groups
	pages, err := startOAuthPages()
	if err != nil {
		fmt.Fprintf(os.Stderr, "hubint: %v\n", err)
		return 1
	}
	defer pages.close()
	oauthService = pages
	opts.Roles = append(opts.Roles, hubproc.Role{Name: "oauth-pages-users", Scopes: []string{"access:services!service=" + svcPages}, Users: []string{"alice"}})
	opts.Services = []hubproc.Service{
		{Name: svcPages, URL: pages.url},
		{Name: svcLister, Scopes: []string{"list:users", "read:users"}},
		{Name: svcGroups, Scopes: []string{"list:groups", "read:groups"}},
		{Name: svcServers, Scopes: []string{"servers!user=alice", "read:users:activity"}},
		{Name: svcWeak, Scopes: []string{"list:users"}},
		{Name: svcMinter, Scopes: []string{"tokens!user=alice"}},
		{Name: svcAuth},
	}
	// A start or stop that takes longer than these is answered 202 and goes on in the background.
	// A local server needs seconds for either, so the pending paths of StartServer and StopServer
	// are certain. They are tornado settings, not config traits (c.JupyterHub.slow_stop_timeout is
	// ignored); the default of 10s is what a client's timeout for POST/DELETE .../server must exceed.
	opts.ExtraConfig = `c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0.1, "slow_stop_timeout": 0.1}`

	start := time.Now()
	h, err := hubproc.Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hubint: %v\n", err)
		return 1
	}
	hub = h
	fmt.Printf("hubint: jupyterhub %s (%s) with %d users ready in %s\n",
		h.Version(), opts.Venv, len(userNames), time.Since(start).Round(time.Millisecond))

	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "hubint: jupyterhub %s log %s (tail):\n%s\n", h.Version(), h.LogPath(), h.LogTail(100))
		saveLog(h)
	}
	if err := h.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "hubint: stop: %v\n", err)
		code = 1
	}
	return code
}

// saveLog keeps the whole Hub log in e2e/artifacts (git-ignored) for CI, since Stop removes the work dir.
func saveLog(h *hubproc.Hub) {
	dir := filepath.Join("..", "artifacts")
	path := filepath.Join(dir, "hubint-jupyterhub-"+h.Version()+".log")
	if err := writeLog(h, dir, path); err != nil {
		fmt.Fprintf(os.Stderr, "hubint: save log: %v\n", err)
		return
	}
	fmt.Fprintf(os.Stderr, "hubint: full log in %s\n", path)
}

func writeLog(h *hubproc.Hub, dir, path string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := h.WriteLog(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// client returns a hubapi client holding the token of service svc.
func client(t *testing.T, svc string) *hubapi.Client {
	t.Helper()
	return clientWith(t, svc, nil)
}

func clientWith(t *testing.T, svc string, rt http.RoundTripper) *hubapi.Client {
	t.Helper()
	cfg := hubapi.Config{URL: hub.APIURL(), Token: hub.ServiceToken(svc), UserAgent: "gpuhub-hubint"}
	if rt != nil {
		cfg.HTTPClient = &http.Client{Transport: rt}
	}
	c, err := hubapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// countingTransport records the requests a client sends.
type countingTransport struct {
	mu      sync.Mutex
	next    http.RoundTripper
	gets    map[string]int // GET requests by path
	accepts map[string]int // Accept headers sent
}

func newCountingTransport() *countingTransport {
	return &countingTransport{next: http.DefaultTransport, gets: map[string]int{}, accepts: map[string]int{}}
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	if r.Method == http.MethodGet {
		c.gets[strings.TrimPrefix(r.URL.Path, "/hub/api")]++
	}
	c.accepts[r.Header.Get("Accept")]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets[path]
}

func (c *countingTransport) acceptsContaining(mediaType string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for accept, k := range c.accepts {
		if strings.Contains(accept, mediaType) {
			n += k
		}
	}
	return n
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
