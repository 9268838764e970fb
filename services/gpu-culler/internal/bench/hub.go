package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

//go:embed hubfixture/b3_fixtures.py
var fixturesPy []byte

//go:embed hubfixture/b3_prefill.py
var prefillPy []byte

// Hub is a real JupyterHub whose servers run no process (hubfixture/b3_fixtures.py): the Hub's database, API and
// scheduling are real, the single-user servers are not.
type Hub struct {
	// URL is the Hub's own address, http://127.0.0.1:<port>; the API is URL + "/hub/api".
	URL string
	Pid int
	// Tokens of the Hub services: bench (admin of users and servers), gpu-culler and idle-culler (the four
	// scopes of the issue each: list:users, read:users:activity, read:servers, delete:servers).
	BenchToken, CullerToken, IdleCullerToken string
	Dir                                      string

	cmd    *exec.Cmd
	args   []string
	client *http.Client
}

// HubOptions configure the Hub.
type HubOptions struct {
	Venv string // the JupyterHub venv (hub55)
	CPUs string // taskset CPU list the Hub runs on ("" unpinned)
	// StubURL is every server's URL (Stub()).
	StubURL string
	// Users (UserName 0..Users-1) and the users with a running default server are written into the Hub's
	// database between a first start (which creates it) and the second (which checks every running server).
	Users   int
	Running []string
}

func token() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// hubConfig is the Hub's configuration: loopback, SQLite (z2jh's default database), the fixtures, the three
// services. The Hub's periodic pull of activity from the proxy is pushed out of the measurement (its cost would
// land on whichever culler happens to run then); the spawners' poll keeps KubeSpawner's default period.
func hubConfig(dir string, port, public int, stubURL, bench, culler, idle string) string {
	return fmt.Sprintf(`import sys
sys.path.insert(0, %[1]q)
from b3_fixtures import MemoryProxy, NoProcessSpawner

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = %[2]d
c.JupyterHub.port = %[7]d
c.JupyterHub.db_url = "sqlite:///%[1]s/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "%[1]s/cookie_secret"
c.JupyterHub.proxy_class = MemoryProxy
c.JupyterHub.spawner_class = NoProcessSpawner
c.NoProcessSpawner.stub_url = %[3]q
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.log_level = "WARN"
c.JupyterHub.last_activity_interval = 86400
c.JupyterHub.concurrent_spawn_limit = 200
c.JupyterHub.services = [
    {"name": "bench", "api_token": %[4]q},
    {"name": "gpu-culler", "api_token": %[5]q},
    {"name": "idle-culler", "api_token": %[6]q},
]
culler_scopes = ["list:users", "read:users:activity", "read:servers", "delete:servers"]
c.JupyterHub.load_roles = [
    {"name": "bench", "scopes": ["admin:users", "admin:servers", "list:users", "read:users"], "services": ["bench"]},
    {"name": "gpu-culler", "scopes": culler_scopes, "services": ["gpu-culler"]},
    {"name": "idle-culler", "scopes": culler_scopes, "services": ["idle-culler"]},
]
`, dir, port, stubURL, bench, culler, idle, public)
}

// StartHub starts JupyterHub from o.Venv on loopback, fills its database with o.Users and o.Running, and
// waits until its API answers.
func StartHub(ctx context.Context, o HubOptions) (*Hub, error) {
	dir, err := os.MkdirTemp("", "gpuhub-b3-hub-")
	if err != nil {
		return nil, err
	}
	h := &Hub{Dir: dir, BenchToken: token(), CullerToken: token(), IdleCullerToken: token(),
		client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	ports := benchkit.FreePorts(2)
	h.URL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	cfg := hubConfig(dir, ports[0], ports[1], o.StubURL, h.BenchToken, h.CullerToken, h.IdleCullerToken)
	for name, b := range map[string][]byte{"jupyterhub_config.py": []byte(cfg), "b3_fixtures.py": fixturesPy, "b3_prefill.py": prefillPy} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	h.args = benchkit.Pinned(o.CPUs, []string{filepath.Join(o.Venv, "bin", "jupyterhub"), "-f", filepath.Join(dir, "jupyterhub_config.py")})
	if err := h.start(ctx); err != nil {
		h.Stop()
		return nil, err
	}
	if o.Users == 0 && len(o.Running) == 0 {
		return h, nil
	}
	h.stopProcess()
	names := make([]string, o.Users)
	for i := range names {
		names[i] = UserName(i)
	}
	spec, _ := json.Marshal(map[string]any{"users": names, "running": o.Running, "url": o.StubURL})
	specPath := filepath.Join(dir, "prefill.json")
	if err := os.WriteFile(specPath, spec, 0o600); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, filepath.Join(o.Venv, "bin", "python"), filepath.Join(dir, "b3_prefill.py"),
		"sqlite:///"+filepath.Join(dir, "jupyterhub.sqlite"), specPath).CombinedOutput()
	if err != nil {
		h.Stop()
		return nil, fmt.Errorf("fill the Hub's database: %w: %s", err, out)
	}
	if err := h.start(ctx); err != nil {
		h.Stop()
		return nil, err
	}
	return h, nil
}

// start starts the Hub process and waits until its API answers (it checks every running server first).
func (h *Hub) start(ctx context.Context) error {
	h.cmd = exec.CommandContext(ctx, h.args[0], h.args[1:]...)
	h.cmd.Dir = h.Dir
	logf, err := os.OpenFile(filepath.Join(h.Dir, "hub.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		return fmt.Errorf("start jupyterhub %s (make venv-hub55): %w", h.args, err)
	}
	h.Pid = h.cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if code, _, _ := h.do(ctx, http.MethodGet, "/", nil); code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("jupyterhub did not answer in 5 min; its log ends:\n%s", h.LogTail())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// LogTail is the end of the Hub's log.
func (h *Hub) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(h.Dir, "hub.log"))
	return string(b[max(0, len(b)-3000):])
}

// APIURL is the Hub's REST API root.
func (h *Hub) APIURL() string { return h.URL + "/hub/api" }

func (h *Hub) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.APIURL()+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "token "+h.BenchToken)
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// CreateUsers creates users 0..n-1 (UserName) in batches of 1,000.
func (h *Hub) CreateUsers(ctx context.Context, n int) error {
	names := make([]string, n)
	for i := range names {
		names[i] = UserName(i)
	}
	for start := 0; start < n; start += 1000 {
		code, b, err := h.do(ctx, http.MethodPost, "/users", map[string]any{"usernames": names[start:min(start+1000, n)]})
		if err != nil {
			return fmt.Errorf("create hub users: %w", err)
		}
		if code != http.StatusCreated {
			return fmt.Errorf("create hub users: status %d, want 201: %s", code, b)
		}
	}
	return nil
}

// StartServers starts the default server of each user, `parallel` at a time; a server that runs already is
// left alone. progress (if set) is called after every 500.
func (h *Hub) StartServers(ctx context.Context, users []string, parallel int, progress func(done, total int)) error {
	work := make(chan string)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		done  int
	)
	for range max(1, parallel) {
		wg.Go(func() {
			for u := range work {
				err := h.startServer(ctx, u)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				done++
				if progress != nil && done%500 == 0 {
					progress(done, len(users))
				}
				mu.Unlock()
			}
		})
	}
	for _, u := range users {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		work <- u
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

func (h *Hub) startServer(ctx context.Context, user string) error {
	code, b, err := h.do(ctx, http.MethodPost, "/users/"+url.PathEscape(user)+"/server", nil)
	switch {
	case err != nil:
		return fmt.Errorf("start %s's server: %w", user, err)
	case code == http.StatusCreated || code == http.StatusBadRequest && bytes.Contains(b, []byte("already running")):
		return nil
	case code == http.StatusAccepted:
		// The spawn goes on in the Hub; wait for it to be ready.
		for range 100 {
			ready, err := h.ServerReady(ctx, user)
			if err != nil || ready {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("start %s's server: not ready 10 s after 202", user)
	default:
		return fmt.Errorf("start %s's server: status %d: %s", user, code, b)
	}
}

// ServerReady says whether user's default server is ready.
func (h *Hub) ServerReady(ctx context.Context, user string) (bool, error) {
	code, b, err := h.do(ctx, http.MethodGet, "/users/"+url.PathEscape(user), nil)
	if err != nil {
		return false, fmt.Errorf("read hub user %s: %w", user, err)
	}
	if code != http.StatusOK {
		return false, fmt.Errorf("read hub user %s: status %d: %s", user, code, b)
	}
	var u struct {
		Servers map[string]struct {
			Ready bool `json:"ready"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(b, &u); err != nil {
		return false, err
	}
	return u.Servers[""].Ready, nil
}

// ReadyUsers lists the users with a ready server (GET /users?state=ready, all pages).
func (h *Hub) ReadyUsers(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	for offset := 0; ; {
		code, b, err := h.do(ctx, http.MethodGet, "/users?state=ready&limit=200&offset="+strconv.Itoa(offset), nil)
		if err != nil {
			return nil, fmt.Errorf("list ready hub users: %w", err)
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("list ready hub users: status %d: %s", code, b)
		}
		var page []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, fmt.Errorf("list ready hub users: %w", err)
		}
		for _, u := range page {
			out[u.Name] = true
		}
		if len(page) == 0 {
			return out, nil
		}
		offset += len(page)
	}
}

// Stop ends the Hub and removes its directory.
func (h *Hub) Stop() {
	h.stopProcess()
	_ = os.RemoveAll(h.Dir)
}

func (h *Hub) stopProcess() {
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	h.cmd = nil
}
