package agentclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// projectedVolume writes a token the way the kubelet's atomic writer does: <dir>/token is a symlink to
// ..data/token, and ..data is a symlink swapped atomically to a new timestamped directory on each rotation.
type projectedVolume struct {
	t   *testing.T
	dir string
	gen int
}

func newProjectedVolume(t *testing.T, token string) *projectedVolume {
	v := &projectedVolume{t: t, dir: t.TempDir()}
	v.rotate(token)
	if err := os.Symlink(filepath.Join("..data", "token"), filepath.Join(v.dir, "token")); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v *projectedVolume) path() string { return filepath.Join(v.dir, "token") }

func (v *projectedVolume) rotate(token string) {
	v.t.Helper()
	v.gen++
	ts := filepath.Join(v.dir, "..gen"+strings.Repeat("x", v.gen))
	if err := os.Mkdir(ts, 0o755); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "token"), []byte(token), 0o644); err != nil {
		v.t.Fatal(err)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
}

// recorder is a fake agent that records the Authorization header of each request.
type recorder struct {
	mu   sync.Mutex
	auth []string
	srv  *httptest.Server
}

func newRecorder(t *testing.T, h http.HandlerFunc) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auth = append(r.auth, req.Header.Get("Authorization"))
		r.mu.Unlock()
		if h != nil {
			h(w, req)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...)
}

func get(t *testing.T, c *http.Client, url string) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// TestTokenRotation: the client sends the projected token of the file, and the new one as soon as the kubelet
// rotates it (the old one expires within the hour).
func TestTokenRotation(t *testing.T) {
	vol := newProjectedVolume(t, "token-1\n")
	agent := newRecorder(t, nil)
	c := New(Options{TokenFile: vol.path()})
	for range 2 {
		if _, err := get(t, c, agent.srv.URL); err != nil {
			t.Fatal(err)
		}
	}
	vol.rotate("token-2")
	if _, err := get(t, c, agent.srv.URL); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Bearer token-1", "Bearer token-1", "Bearer token-2"}, agent.seen()); diff != "" {
		t.Errorf("Authorization headers (-want +got):\n%s", diff)
	}
}

// TestTokenRereadEveryMinute: a change the file's metadata does not show (same file, same size and mtime) is
// still picked up within a minute.
func TestTokenRereadEveryMinute(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("token-a"), 0o600); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	now := mtime
	agent := newRecorder(t, nil)
	c := New(Options{TokenFile: path, Now: func() time.Time { return now }})
	if _, err := get(t, c, agent.srv.URL); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("token-b"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Second)
	if _, err := get(t, c, agent.srv.URL); err != nil {
		t.Fatal(err)
	}
	now = now.Add(31 * time.Second)
	if _, err := get(t, c, agent.srv.URL); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Bearer token-a", "Bearer token-a", "Bearer token-b"}, agent.seen()); diff != "" {
		t.Errorf("Authorization headers (-want +got):\n%s", diff)
	}
}

// TestNoTokenNoRequest: a missing or empty token file fails the poll with an error that names the file; the
// agent is not asked without a token.
func TestNoTokenNoRequest(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"missing": filepath.Join(dir, "missing"),
		"empty":   empty,
	}
	for name, path := range cases {
		t.Run(name, func(t *testing.T) {
			agent := newRecorder(t, nil)
			_, err := get(t, New(Options{TokenFile: path}), agent.srv.URL)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v, want one naming %s", err, path)
			}
			if n := len(agent.seen()); n != 0 {
				t.Errorf("the agent got %d requests, want none", n)
			}
		})
	}
}

// TestNoTokenFileConfigured: agents run with --snapshot-auth=none get no Authorization header.
func TestNoTokenFileConfigured(t *testing.T) {
	agent := newRecorder(t, nil)
	if _, err := get(t, New(Options{}), agent.srv.URL); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{""}, agent.seen()); diff != "" {
		t.Errorf("Authorization headers (-want +got):\n%s", diff)
	}
}

// TestNoRedirects: the token is added to every request the client sends, so a redirect would carry it to any
// address the answering pod names; the client does not follow redirects.
func TestNoRedirects(t *testing.T) {
	vol := newProjectedVolume(t, "token-1")
	elsewhere := newRecorder(t, nil)
	agent := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.srv.URL+"/steal", http.StatusFound)
	})
	code, err := get(t, New(Options{TokenFile: vol.path()}), agent.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusFound {
		t.Errorf("status %d, want the redirect itself (%d)", code, http.StatusFound)
	}
	if n := len(elsewhere.seen()); n != 0 {
		t.Errorf("the redirect target got %d requests, want none", n)
	}
}

// TestCallerRequestUnchanged: the token goes on a copy of the request (http.RoundTripper's contract).
func TestCallerRequestUnchanged(t *testing.T) {
	vol := newProjectedVolume(t, "token-1")
	agent := newRecorder(t, nil)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, agent.srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := New(Options{TokenFile: vol.path()}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := req.Header.Get("Authorization"); got != "" {
		t.Errorf("the caller's request was changed: Authorization %q", got)
	}
}

// TestNoProxy: a proxy configured in the environment (for the Hub, say) never sees the agents' token. (Go never
// proxies loopback addresses, so this looks at the transport rather than sending through a proxy.)
func TestNoProxy(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	for name, c := range map[string]*http.Client{"with token": New(Options{TokenFile: "/nonexistent"}), "without": New(Options{})} {
		rt := c.Transport
		if b, ok := rt.(*bearer); ok {
			rt = b.next
		}
		tr, ok := rt.(*http.Transport)
		if !ok {
			t.Fatalf("%s: transport %T", name, rt)
		}
		if tr.Proxy != nil {
			t.Errorf("%s: the transport uses a proxy", name)
		}
	}
}
