// Package hubproc starts a real JupyterHub as a subprocess on loopback for tests and the local cluster.
//
// The Hub runs from a virtualenv (make venv-hub55 / venv-hub6) with configurable-http-proxy (make chp),
// a SQLite database and a private work dir, with either a generated jupyterhub_config.py (the Hub integration
// tests' SimpleSpawner Hubs) or, with Options.Z2JH, Zero-to-JupyterHub's own jupyterhub_config.py and z2jh.py
// fed by the chart's rendered ConfigMap and Secret, as z2jh's hub pod runs (z2jh.go). Stop shuts it down and
// makes sure nothing it started outlives it: every process the Hub starts (proxy, single-user servers,
// their kernels) carries a per-Hub marker in its environment, and Stop ends the ones that remain.
// Linux only (process groups, Pdeathsig, /proc).
package hubproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
	"github.com/gpuhub/gpuhub/e2e/internal/netport"
)

// Environment variables read by OptionsFromEnv; make integration sets them.
const (
	EnvVenv = "GPUHUB_HUB_VENV"
	EnvCHP  = "GPUHUB_CHP"
	// EnvKeep keeps the work dir (config, database, log) after Stop when set to a non-empty value.
	EnvKeep = "GPUHUB_HUB_KEEP"
	// MarkerEnv is set in the environment of the Hub and everything it starts.
	MarkerEnv = "GPUHUB_HUBPROC_ID"
)

// AdminService is the name of the service that holds AdminToken.
const AdminService = "hubproc-admin"

// adminScopes are broad enough to set up any test (users, groups, servers, tokens) and exist in
// JupyterHub 5.5 and 6.x alike: an unknown scope in load_roles stops the Hub at startup.
var adminScopes = []string{
	"admin:users", "admin:groups", "admin:servers", "tokens",
	"list:services", "read:services", "read:roles", "read:hub", "proxy",
}

// Service is an external service declared in c.JupyterHub.services.
type Service struct {
	Name string
	// Token is the service's API token (>= 8 characters); generated when empty.
	Token string
	// URL (optional) makes the Hub add a proxy route /services/<name>/ and an OAuth client.
	URL string
	// Scopes, when set, become a role "service-<name>" held by this service alone.
	Scopes []string
	// Roles names further roles (from Options.Roles or the Hub's defaults) the service holds.
	Roles []string
}

// Role is an entry of c.JupyterHub.load_roles.
type Role struct {
	Name        string
	Description string
	Scopes      []string
	Users       []string
	Groups      []string
	Services    []string
}

// Options configures a Hub. The zero value of every field except Venv and CHPPath works.
type Options struct {
	// Venv is the virtualenv holding jupyterhub and jupyterhub-singleuser (default $GPUHUB_HUB_VENV).
	Venv string
	// CHPPath is the configurable-http-proxy binary (default $GPUHUB_CHP).
	CHPPath string
	// Users are created at startup (allowed_users). Any name may log in either way (allow_all).
	Users []string
	// Admins are admin users (admin_users); they are created too.
	Admins []string
	// Groups maps group name to members, loaded at startup (load_groups).
	Groups map[string][]string
	// Services are external services; AdminService is always added.
	Services []Service
	// Roles are loaded at startup (load_roles) next to the generated service roles.
	Roles []Role
	// Password of the DummyAuthenticator; generated when empty.
	Password string
	// Spawner is c.JupyterHub.spawner_class (default "simple": SimpleLocalProcessSpawner running
	// jupyterhub-singleuser from Venv in a home under the work dir). With another spawner the
	// single-user settings are left to ExtraConfig.
	Spawner string
	// SingleUserArgs are added to c.Spawner.args of the local spawners ("--allow-root" is added
	// automatically when running as root, which jupyter_server otherwise refuses).
	SingleUserArgs []string
	// ExtraConfig is Python appended to the generated config, so it overrides it (not with Z2JH: use
	// hub.extraConfig there).
	ExtraConfig string
	// Z2JH, when set, runs z2jh's own config instead of the generated one, as z2jh's hub pod does; Users, Admins,
	// Groups, Services, Roles, Password, the ports and LogLevel become z2jh values (PodDifferences). Spawner,
	// SingleUserArgs and ExtraConfig do not apply. Needs root (a mount namespace).
	Z2JH *Z2JH
	// Env is added to the Hub's environment (KEY=value), e.g. KUBECONFIG for KubeSpawner.
	Env []string
	// ProxyPort, ProxyAPIPort and HubPort are picked free on 127.0.0.1 when zero.
	ProxyPort, ProxyAPIPort, HubPort int
	// LogLevel of the Hub (default "INFO").
	LogLevel string
	// WorkDir holds config, database, log and homes (default: a new temp dir, removed by Stop).
	WorkDir string
	// StartTimeout bounds the wait for GET /hub/api/ (default 90s).
	StartTimeout time.Duration
	// StopTimeout bounds the Hub's own cleanup after SIGTERM (default 30s).
	StopTimeout time.Duration
}

// OptionsFromEnv returns Options with Venv and CHPPath from GPUHUB_HUB_VENV and GPUHUB_CHP.
func OptionsFromEnv() Options {
	return Options{Venv: os.Getenv(EnvVenv), CHPPath: os.Getenv(EnvCHP)}
}

// Hub is a running JupyterHub.
type Hub struct {
	opts       Options
	workDir    string
	removeDir  bool
	logPath    string
	logFile    *os.File
	cmd        *exec.Cmd
	exited     chan struct{}
	waitErr    error
	marker     string
	adminToken string
	services   map[string]string
	version    string
	ports      [3]int
	asRoot     bool
	newSecret  func() string
	stopOnce   sync.Once
	// pod, proxy and proxyDone are set with Options.Z2JH: the rendered hub pod, and the proxy hubproc runs.
	pod       *podSpec
	proxy     *exec.Cmd
	proxyDone chan struct{}
	stopErr   error
	// mu guards cmd, exited and waitErr, which Relaunch replaces.
	mu sync.Mutex
}

// Start launches the Hub and waits until GET /hub/api/ answers through the proxy. On error nothing
// is left running; the error carries the tail of the Hub's log.
func Start(ctx context.Context, opts Options) (*Hub, error) {
	h, err := prepare(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := h.launch(ctx); err != nil {
		_ = h.Stop()
		return nil, err
	}
	if err := h.waitReady(ctx); err != nil {
		tail := h.LogTail(60)
		_ = h.Stop()
		return nil, fmt.Errorf("%w\n--- jupyterhub log (tail) ---\n%s", err, tail)
	}
	return h, nil
}

func prepare(ctx context.Context, opts Options) (*Hub, error) {
	if opts.Venv == "" {
		opts.Venv = os.Getenv(EnvVenv)
	}
	if opts.CHPPath == "" {
		opts.CHPPath = os.Getenv(EnvCHP)
	}
	if opts.Venv == "" || opts.CHPPath == "" {
		return nil, fmt.Errorf("hubproc: no JupyterHub venv or proxy: set %s and %s (make integration does; "+
			"or run make venv-hub55 chp and point them at $GPUHUB_CACHE/venv/hub55 and "+
			"$GPUHUB_CACHE/node/node_modules/.bin/configurable-http-proxy)", EnvVenv, EnvCHP)
	}
	for _, p := range []string{filepath.Join(opts.Venv, "bin", "jupyterhub"), opts.CHPPath} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("hubproc: %w (run make venv-hub55 venv-hub6 chp)", err)
		}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 90 * time.Second
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 30 * time.Second
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "INFO"
	}
	if opts.Spawner == "" {
		opts.Spawner = "simple"
	}
	if opts.Password == "" {
		opts.Password = randHex(12)
	}

	h := newHub(opts)
	if opts.WorkDir == "" {
		dir, err := os.MkdirTemp("", "gpuhub-hub-")
		if err != nil {
			return nil, fmt.Errorf("hubproc: %w", err)
		}
		h.workDir, h.removeDir = dir, os.Getenv(EnvKeep) == ""
	} else {
		if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
			return nil, fmt.Errorf("hubproc: %w", err)
		}
		h.workDir = opts.WorkDir
	}
	h.logPath = filepath.Join(h.workDir, "jupyterhub.log")

	ports, err := freePorts([3]int{opts.ProxyPort, opts.ProxyAPIPort, opts.HubPort})
	if err != nil {
		h.cleanupDir()
		return nil, err
	}
	h.ports = ports

	version, err := installedVersion(ctx, opts.Venv)
	if err != nil {
		h.cleanupDir()
		return nil, err
	}
	h.version = version

	data, err := h.configData()
	if err != nil {
		h.cleanupDir()
		return nil, err
	}
	if opts.Z2JH != nil {
		if err := h.preparePod(ctx, &data); err != nil {
			h.cleanupDir()
			return nil, err
		}
		return h, nil
	}
	cfg, err := renderConfig(data)
	if err != nil {
		h.cleanupDir()
		return nil, err
	}
	if err := os.WriteFile(h.ConfigPath(), cfg, 0o600); err != nil {
		h.cleanupDir()
		return nil, fmt.Errorf("hubproc: %w", err)
	}
	return h, nil
}

func newHub(opts Options) *Hub {
	return &Hub{
		opts: opts, exited: make(chan struct{}), marker: randHex(16), services: map[string]string{},
		asRoot: os.Geteuid() == 0, newSecret: func() string { return randHex(24) },
	}
}

func (h *Hub) configData() (configData, error) {
	o := h.opts
	h.adminToken = h.newSecret()
	services := []serviceConfig{{Name: AdminService, APIToken: h.adminToken}}
	roles := []roleConfig{{
		Name: AdminService, Description: "hubproc: test setup", Scopes: adminScopes, Services: []string{AdminService},
	}}
	h.services[AdminService] = h.adminToken
	logscan.Register("Hub admin token (service "+AdminService+")", h.adminToken)
	for _, r := range o.Roles {
		roles = append(roles, roleConfig(r))
	}
	for _, s := range o.Services {
		if s.Name == "" || s.Name == AdminService {
			return configData{}, fmt.Errorf("hubproc: invalid service name %q", s.Name)
		}
		if _, dup := h.services[s.Name]; dup {
			return configData{}, fmt.Errorf("hubproc: duplicate service %q", s.Name)
		}
		tok := s.Token
		if tok == "" {
			tok = h.newSecret()
		}
		if len(tok) < 8 {
			return configData{}, fmt.Errorf("hubproc: service %q: the Hub needs tokens of at least 8 characters", s.Name)
		}
		h.services[s.Name] = tok
		logscan.Register("Hub token of service "+s.Name, tok)
		services = append(services, serviceConfig{Name: s.Name, APIToken: tok, URL: s.URL})
		if len(s.Scopes) > 0 {
			roles = append(roles, roleConfig{
				Name: "service-" + s.Name, Scopes: s.Scopes, Services: []string{s.Name},
			})
		}
		for _, rn := range s.Roles {
			i := roleIndex(roles, rn)
			if i < 0 {
				// A Hub default role (e.g. "admin"): listing it without scopes only adds members.
				roles = append(roles, roleConfig{Name: rn})
				i = len(roles) - 1
			}
			roles[i].Services = append(roles[i].Services, s.Name)
		}
	}

	groups := map[string]groupConfig{}
	for g, members := range o.Groups {
		groups[g] = groupConfig{Users: nonNil(members)}
	}
	args := append([]string{}, o.SingleUserArgs...)
	if h.asRoot {
		// jupyter_server refuses to run as root without it; the simple spawner does not switch users.
		args = append(args, "--allow-root")
	}
	local := o.Spawner == "simple" || o.Spawner == "localprocess" || strings.HasSuffix(o.Spawner, "LocalProcessSpawner")
	return configData{
		WorkDir:      h.workDir,
		DBURL:        "sqlite:///" + filepath.Join(h.workDir, "jupyterhub.sqlite"),
		ProxyPort:    h.ports[0],
		ProxyAPIPort: h.ports[1],
		HubPort:      h.ports[2],
		CHP:          h.opts.CHPPath,
		LogLevel:     o.LogLevel,
		Password:     o.Password,
		AllowAll:     true,
		Users:        nonNil(o.Users),
		Admins:       nonNil(o.Admins),
		Groups:       groups,
		Services:     services,
		Roles:        roles,
		Spawner:      o.Spawner,
		LocalSpawner: local,
		SingleUser:   []string{filepath.Join(o.Venv, "bin", "jupyterhub-singleuser")},
		SpawnerArgs:  args,
		SpawnerEnv: map[string]string{
			// The Hub passes single-user servers almost none of its environment (Spawner.env_keep).
			"PATH":    filepath.Join(o.Venv, "bin") + ":/usr/local/bin:/usr/bin:/bin",
			MarkerEnv: h.marker,
		},
		ExtraConfig: o.ExtraConfig,
	}, nil
}

func (h *Hub) launch(ctx context.Context) error {
	f, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("hubproc: %w", err)
	}
	h.logFile = f
	exited := h.exited
	var cmd *exec.Cmd
	if h.pod != nil {
		if cmd, err = h.launchPodHub(ctx); err != nil {
			close(exited)
			return err
		}
	} else {
		// The Hub outlives the context of Start (Stop ends it), so that context must not kill it.
		cmd = exec.CommandContext(context.WithoutCancel(ctx), filepath.Join(h.opts.Venv, "bin", "jupyterhub"), "-f", h.ConfigPath())
		cmd.Dir = h.workDir
		cmd.Stdout, cmd.Stderr = f, f
		cmd.Env = append(os.Environ(), h.opts.Env...)
		cmd.Env = append(cmd.Env,
			MarkerEnv+"="+h.marker,
			"PATH="+filepath.Join(h.opts.Venv, "bin")+":"+filepath.Dir(h.opts.CHPPath)+":"+os.Getenv("PATH"),
		)
		// Own process group, so a terminal's Ctrl-C reaches only the test binary; Pdeathsig gives the Hub
		// its SIGTERM (and so its cleanup of servers and proxy) when the test binary dies without Stop,
		// e.g. on a go test -timeout panic.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	}
	if err := cmd.Start(); err != nil {
		close(exited)
		return fmt.Errorf("hubproc: start jupyterhub: %w", err)
	}
	h.mu.Lock()
	h.cmd = cmd
	h.mu.Unlock()
	go func() {
		err := cmd.Wait()
		h.mu.Lock()
		h.waitErr = err
		h.mu.Unlock()
		close(exited)
	}()
	return nil
}

// Kill ends the jupyterhub process with SIGKILL, as an OOM kill or a node failure would, and waits until it has
// exited. The proxy and the single-user servers run on (they are in sessions of their own, or the proxy is
// hubproc's with Z2JH), as a z2jh Hub pod's crash leaves the proxy pod and the users' pods running. Relaunch
// brings the Hub back.
func (h *Hub) Kill() {
	cmd, exited := h.current()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Relaunch starts a killed Hub again with the same configuration, ports, database and cookie secret (what a
// Deployment's restart of the hub pod keeps: every token and login stays valid) and waits until it answers
// through the proxy. The Hub takes over the proxy it finds and the servers its database knows.
func (h *Hub) Relaunch(ctx context.Context) error {
	_, old := h.current()
	select {
	case <-old:
	default:
		return errors.New("hubproc: jupyterhub is still running; Kill it first")
	}
	if h.logFile != nil {
		_ = h.logFile.Close()
	}
	h.mu.Lock()
	h.exited = make(chan struct{})
	h.mu.Unlock()
	if err := h.launch(ctx); err != nil {
		return err
	}
	if err := h.waitReady(ctx); err != nil {
		return fmt.Errorf("%w\n--- jupyterhub log (tail) ---\n%s", err, h.LogTail(60))
	}
	return nil
}

func (h *Hub) waitReady(ctx context.Context) error {
	_, exited := h.current()
	ctx, cancel := context.WithTimeout(ctx, h.opts.StartTimeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	// The Hub binds its own port only after the proxy is up, and adds its proxy route right after:
	// asking the Hub first keeps the proxy's log free of a 404 per poll.
	direct, url := h.APIURL()+"/", h.BaseURL()+"hub/api/"
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if probe(ctx, client, direct) && probe(ctx, client, url) {
			return nil
		}
		select {
		case <-exited:
			h.mu.Lock()
			werr := h.waitErr
			h.mu.Unlock()
			return fmt.Errorf("hubproc: jupyterhub exited before it was ready: %w", werr)
		case <-ctx.Done():
			return fmt.Errorf("hubproc: jupyterhub not ready at %s: %w", url, ctx.Err())
		case <-tick.C:
		}
	}
}

func probe(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct {
		Version string `json:"version"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&body) == nil && body.Version != ""
}

// Stop shuts the Hub down (SIGTERM, then SIGKILL to its process group after StopTimeout), ends any
// process the Hub started that is still running, and removes the work dir unless it was given or
// GPUHUB_HUB_KEEP is set. It is safe to call more than once.
func (h *Hub) Stop() error {
	h.stopOnce.Do(func() { h.stopErr = h.stop() })
	return h.stopErr
}

func (h *Hub) stop() error {
	var errs []error
	if cmd, exited := h.current(); cmd != nil {
		// The Hub's cleanup stops the single-user servers and the proxy it started.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(h.opts.StopTimeout):
			errs = append(errs, fmt.Errorf("hubproc: jupyterhub did not exit %s after SIGTERM", h.opts.StopTimeout))
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	// With Z2JH the proxy is hubproc's, as the proxy pod is no part of the hub pod.
	h.stopProxy(5 * time.Second)
	// The proxy and single-user servers run in sessions of their own, so the process group does not
	// reach them; the marker does.
	if left := killMarked(h.marker, 5*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("hubproc: processes still running after SIGKILL: %v", left))
	}
	if h.logFile != nil {
		_ = h.logFile.Close()
	}
	// Before the log goes with the work dir: no token the harness handed out may be in it.
	if err := logscan.Default.CheckFile(h.logPath); err != nil {
		errs = append(errs, fmt.Errorf("hubproc: %w", err))
	}
	h.cleanupDir()
	return errors.Join(errs...)
}

func (h *Hub) cleanupDir() {
	if h.removeDir {
		_ = os.RemoveAll(h.workDir)
	}
}

// Exited is closed when the jupyterhub process has exited.
func (h *Hub) Exited() <-chan struct{} {
	_, exited := h.current()
	return exited
}

// current is the jupyterhub process now (nil before launch) and the channel closed when it exits.
func (h *Hub) current() (*exec.Cmd, chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cmd, h.exited
}

// BaseURL is the public URL through the proxy, with a trailing slash: http://127.0.0.1:<port>/.
func (h *Hub) BaseURL() string { return "http://127.0.0.1:" + strconv.Itoa(h.ports[0]) + "/" }

// APIURL is the Hub's API reached directly, as services see it (JUPYTERHUB_API_URL):
// http://127.0.0.1:<hub port>/hub/api.
func (h *Hub) APIURL() string { return "http://127.0.0.1:" + strconv.Itoa(h.ports[2]) + "/hub/api" }

// ProxyAPIURL is the configurable-http-proxy REST API.
func (h *Hub) ProxyAPIURL() string { return "http://127.0.0.1:" + strconv.Itoa(h.ports[1]) }

// Ports returns the proxy, proxy API and Hub ports.
func (h *Hub) Ports() (proxy, proxyAPI, hub int) { return h.ports[0], h.ports[1], h.ports[2] }

// AdminToken is the token of service AdminService, whose role has broad scopes for test setup.
func (h *Hub) AdminToken() string { return h.adminToken }

// ServiceToken returns the API token of a declared service.
func (h *Hub) ServiceToken(name string) string { return h.services[name] }

// Password is the DummyAuthenticator password.
func (h *Hub) Password() string { return h.opts.Password }

// Version is the jupyterhub version installed in the venv, e.g. "5.5.4".
func (h *Hub) Version() string { return h.version }

// Marker is the value of MarkerEnv in the environment of every process this Hub started.
func (h *Hub) Marker() string { return h.marker }

// WorkDir holds the config, the database, the log and the single-user homes.
func (h *Hub) WorkDir() string { return h.workDir }

// ConfigPath is the generated jupyterhub_config.py, or with Z2JH z2jh's, as laid out for PodConfigDir.
func (h *Hub) ConfigPath() string {
	if h.pod != nil {
		return filepath.Join(h.pod.root, "jupyterhub_config.py")
	}
	return filepath.Join(h.workDir, "jupyterhub_config.py")
}

// LogPath is the file holding the output of the Hub, the proxy and local single-user servers.
func (h *Hub) LogPath() string { return h.logPath }

// LogTail returns the last n lines of the log.
func (h *Hub) LogTail(n int) string {
	b, err := os.ReadFile(h.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// WriteLog copies the whole log to w.
func (h *Hub) WriteLog(w io.Writer) error {
	f, err := os.Open(h.logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// installedVersion asks the venv's Python rather than the Hub, so it works before the Hub is up.
func installedVersion(ctx context.Context, venv string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), "-c",
		"import jupyterhub; print(jupyterhub.__version__)").Output()
	if err != nil {
		return "", fmt.Errorf("hubproc: jupyterhub version in %s: %w", venv, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// freePorts picks free loopback ports (netport.Free) for the zero entries. Another process could
// still take one before the Hub binds it; that is rare and shows up as a startup error naming the port.
func freePorts(want [3]int) ([3]int, error) {
	got := want
	picked, err := netport.Free(3)
	if err != nil {
		return got, fmt.Errorf("hubproc: free port: %w", err)
	}
	for i, p := range got {
		if p == 0 {
			got[i] = picked[i]
		}
	}
	return got, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func roleIndex(roles []roleConfig, name string) int {
	for i, r := range roles {
		if r.Name == name {
			return i
		}
	}
	return -1
}
