package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Hub is a real JupyterHub started for the anchor measurement.
type Hub struct {
	APIURL string // http://127.0.0.1:<hub port>/hub/api
	Token  string // a service token with read:users
	Pid    int
	cmd    *exec.Cmd
	dir    string
}

func freePort() (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// StartHub starts JupyterHub from venv on loopback (pinned to cpus with taskset when cpus != ""), with
// configurable-http-proxy chp, and creates users user00000..; the API is reached directly on the Hub's port.
func StartHub(ctx context.Context, venv, chp, cpus string, users int) (*Hub, error) {
	dir, err := os.MkdirTemp("", "gpuhub-bench-hub")
	if err != nil {
		return nil, err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	cfg := fmt.Sprintf(`
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = %d
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = %d
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:%d"
c.ConfigurableHTTPProxy.command = [%q]
c.JupyterHub.db_url = "sqlite:///%s/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "%s/cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.log_level = "WARN"
c.JupyterHub.services = [{"name": "bench", "api_token": %q}]
c.JupyterHub.load_roles = [{"name": "bench", "scopes": ["admin:users", "read:users", "read:servers"], "services": ["bench"]}]
`, ports[0], ports[1], ports[2], chp, dir, dir, token)
	if err := os.WriteFile(filepath.Join(dir, "jupyterhub_config.py"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	args := []string{filepath.Join(venv, "bin", "jupyterhub"), "-f", filepath.Join(dir, "jupyterhub_config.py")}
	if cpus != "" {
		args = append([]string{"taskset", "-c", cpus}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "hub.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start jupyterhub: %w", err)
	}
	h := &Hub{APIURL: "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/hub/api", Token: token, Pid: cmd.Process.Pid, cmd: cmd, dir: dir}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if code, _ := h.do(ctx, http.MethodGet, "/", nil); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			h.Stop()
			return nil, fmt.Errorf("jupyterhub did not answer in 90 s; log in %s", dir)
		}
		time.Sleep(300 * time.Millisecond)
	}
	names := make([]string, users)
	for i := range names {
		names[i] = UserName(i)
	}
	for start := 0; start < users; start += 1000 {
		body, _ := json.Marshal(map[string]any{"usernames": names[start:min(start+1000, users)]})
		code, err := h.do(ctx, http.MethodPost, "/users", body)
		if err != nil {
			h.Stop()
			return nil, fmt.Errorf("create hub users: %w", err)
		}
		if code != http.StatusCreated {
			h.Stop()
			return nil, fmt.Errorf("create hub users: status %d, want 201", code)
		}
	}
	return h, nil
}

func (h *Hub) do(ctx context.Context, method, path string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, h.APIURL+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "token "+h.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Stop ends the Hub and its proxy and removes its directory.
func (h *Hub) Stop() {
	// The Hub starts the proxy in its own session; if the Hub dies before stopping it, end it by its pid file.
	defer func() {
		if b, err := os.ReadFile(filepath.Join(h.dir, "jupyterhub-proxy.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
		_ = os.RemoveAll(h.dir)
	}()
	if h.cmd.Process != nil {
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = h.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}
