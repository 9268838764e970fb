// Package stack starts the whole local GPU cluster: the control plane, the node emulator with
// the GPU topology, JupyterHub with KubeSpawner, and any further components (gpuhub's services),
// and stops it all again. `make demo` (e2e/cmd/localcluster) and the e2e tests both use it.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/emulator"
	"github.com/gpuhub/gpuhub/e2e/hub"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
)

// Identities of the harness's own clients (RBAC subjects).
const (
	EmulatorUser = "system:node:gpuhub-emulator"
	HubUser      = "gpuhub:hub"
)

// Options configures the stack.
type Options struct {
	KubeBinDir string // kube-apiserver, kube-scheduler, kube-controller-manager
	Etcd       string // etcd executable; empty: from PATH
	Topology   string // e2e/topology.yaml
	Venv       string // JupyterHub + KubeSpawner + JupyterLab venv (make venv-hub55)
	CHP        string // configurable-http-proxy
	GPUAgent   string // bin/gpu-agent; empty or missing: gpu-agent pods are reported as not runnable
	// Dir holds all state; empty means a new temp dir removed by Stop.
	Dir       string
	Namespace string // single-user namespace (default jhub)
	Password  string // demo users' password
	ProxyPort int    // public Hub port (0: a free one)
	// HubValues replaces e2e/hub/values.yaml; HubExtraConfigDir adds *.py hook files.
	HubValues, HubExtraConfigDir string
	HubServices                  []hubproc.Service
	HubRoles                     []hubproc.Role
	// Components start after the Hub, in order, and stop before it.
	Components []Component
	Logger     *slog.Logger
	// Progress, when set, is told about each step (make demo prints it).
	Progress func(step string, took time.Duration)
}

// Component is an extra process of the stack (e.g. the usage API). Spec builds its process
// description once the stack is up, so it can use the kubeconfig, the Hub URL and tokens.
type Component struct {
	Name string
	Spec func(s *Stack) (proc.Spec, error)
}

// Stack is a running local cluster.
type Stack struct {
	Opts         Options
	ControlPlane *cluster.ControlPlane
	Client       kubernetes.Interface // admin
	Emulator     *emulator.Emulator
	Hub          *hubproc.Hub
	Dir          string

	// LogLeaks are the log lines with a token in them that Stop found (file, line and which token, never the
	// token itself).
	LogLeaks []logscan.Finding

	emuCancel  context.CancelFunc
	emuDone    chan error
	components []*proc.Process
	specs      []proc.Spec // of components, for StartComponent
	tempDir    bool
	// logsChecked is set by the first Stop that scanned the logs.
	logsChecked bool
}

// Start brings the stack up; on error everything started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Namespace == "" {
		opts.Namespace = "jhub"
	}
	if opts.Progress == nil {
		opts.Progress = func(string, time.Duration) {}
	}
	topo, err := emulator.LoadTopology(opts.Topology)
	if err != nil {
		return nil, err
	}
	s := &Stack{Opts: opts, Dir: opts.Dir}
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "gpuhub-localcluster-"); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
		s.tempDir = true
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()

	t0 := time.Now()
	// Ports are picked free on 127.0.0.1 just before use; on a busy machine another process can take
	// one in between, so a failed start is retried in a fresh directory.
	err = retry(ctx, opts.Logger, "control plane", func(attempt int) error {
		var err error
		s.ControlPlane, err = cluster.Start(ctx, cluster.Options{
			BinDir: opts.KubeBinDir, Etcd: opts.Etcd, Dir: filepath.Join(s.Dir, attemptDir("cluster", attempt)), Logger: opts.Logger,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	opts.Progress("control plane ready (etcd, kube-apiserver, kube-scheduler, kube-controller-manager)", time.Since(t0))

	t0 = time.Now()
	admin, err := s.ControlPlane.RESTConfig("admin", []string{"system:masters"})
	if err != nil {
		return nil, err
	}
	if s.Client, err = kubernetes.NewForConfig(admin); err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	if err := s.setupRBAC(ctx); err != nil {
		return nil, err
	}
	emuCfg, err := s.ControlPlane.RESTConfig(EmulatorUser, []string{"system:nodes"})
	if err != nil {
		return nil, err
	}
	emuClient, err := kubernetes.NewForConfig(emuCfg)
	if err != nil {
		return nil, fmt.Errorf("emulator client: %w", err)
	}
	// JupyterLab would fetch its news feed and check PyPI for updates: keep it on loopback.
	singleuserArgs := []string{"--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"}
	if os.Geteuid() == 0 {
		singleuserArgs = append(singleuserArgs, "--allow-root") // jupyter-server refuses root otherwise
	}
	programs := []emulator.Program{
		{Name: "jupyterhub-singleuser", Aliases: []string{"start-singleuser.sh"},
			Path: filepath.Join(opts.Venv, "bin", "jupyterhub-singleuser"), Kind: emulator.Singleuser, Args: singleuserArgs, Port: 8888},
		{Name: "gpu-agent", Path: existing(opts.GPUAgent), Kind: emulator.Service, Port: 9400},
	}
	s.Emulator, err = emulator.New(emulator.Options{
		Client: emuClient, Topology: topo, Programs: programs, Dir: filepath.Join(s.Dir, "nodes"),
		APIServer: s.ControlPlane.URL, CAData: s.ControlPlane.CAData(),
		BaseEnv: []string{
			"PATH=" + filepath.Join(opts.Venv, "bin") + ":/usr/local/bin:/usr/bin:/bin",
			"LANG=C.UTF-8",
		},
		Logger: opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	if err := s.Emulator.Register(ctx); err != nil {
		return nil, err
	}
	emuCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.emuCancel, s.emuDone = cancel, make(chan error, 1)
	go func() { s.emuDone <- s.Emulator.Run(emuCtx) }()
	if err := s.waitServiceAccount(ctx); err != nil {
		return nil, err
	}
	opts.Progress(fmt.Sprintf("%d emulated nodes Ready (%s)", len(topo.Nodes), opts.Topology), time.Since(t0))

	t0 = time.Now()
	hubKC, err := s.ControlPlane.WriteKubeconfig("hub", HubUser, nil)
	if err != nil {
		return nil, err
	}
	err = retry(ctx, opts.Logger, "jupyterhub", func(attempt int) error {
		var err error
		s.Hub, err = hub.Start(ctx, hub.Options{
			Venv: opts.Venv, CHP: opts.CHP, Kubeconfig: hubKC, Namespace: opts.Namespace,
			Dir: filepath.Join(s.Dir, attemptDir("hub", attempt)), Password: opts.Password, Values: opts.HubValues,
			ExtraConfigDir: opts.HubExtraConfigDir, ProxyPort: opts.ProxyPort,
			Services: opts.HubServices, Roles: opts.HubRoles,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("jupyterhub: %w", err)
	}
	opts.Progress("JupyterHub "+s.Hub.Version()+" + KubeSpawner + configurable-http-proxy ready", time.Since(t0))

	for _, c := range opts.Components {
		t0 = time.Now()
		spec, err := c.Spec(s)
		if err != nil {
			return nil, fmt.Errorf("component %s: %w", c.Name, err)
		}
		if spec.Name == "" {
			spec.Name = c.Name
		}
		if spec.LogFile == "" {
			spec.LogFile = filepath.Join(s.Dir, "logs", c.Name+".log")
		}
		p, err := proc.Start(ctx, opts.Logger, spec)
		if err != nil {
			return nil, fmt.Errorf("component %s: %w", c.Name, err)
		}
		s.components = append(s.components, p)
		s.specs = append(s.specs, spec)
		opts.Progress(c.Name+" ready", time.Since(t0))
	}
	return s, nil
}

// retry runs start up to three times; start must leave nothing running when it fails.
func retry(ctx context.Context, logger *slog.Logger, what string, start func(attempt int) error) error {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = start(attempt); err == nil || ctx.Err() != nil {
			return err
		}
		logger.Warn("start failed, retrying", "what", what, "attempt", attempt, "err", err)
	}
	return err
}

func attemptDir(name string, attempt int) string {
	if attempt == 1 {
		return name
	}
	return fmt.Sprintf("%s-%d", name, attempt)
}

func existing(path string) string {
	if path == "" {
		return ""
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return ""
	}
	return path
}

// setupRBAC creates the single-user namespace and grants the harness's identities what their real
// counterparts get: the emulator the kubelet's ClusterRole system:node, the Hub z2jh's hub Role.
func (s *Stack) setupRBAC(ctx context.Context) error {
	ns := s.Opts.Namespace
	objs := []func() error{
		func() error {
			_, err := s.Client.CoreV1().Namespaces().Create(ctx,
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := s.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "gpuhub:node-emulator"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: EmulatorUser}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := s.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Name: "hub"},
				Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"pods", "persistentvolumeclaims", "secrets", "services"},
						Verbs: []string{"get", "watch", "list", "create", "delete"}},
					{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "watch", "list"}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := s.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "hub"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "hub"},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: HubUser}},
			}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objs {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("rbac setup: %w", err)
		}
	}
	return nil
}

// waitServiceAccount waits for the controller manager to create the namespace's default
// ServiceAccount: the API server refuses pods without it.
func (s *Stack) waitServiceAccount(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := s.Client.CoreV1().ServiceAccounts(s.Opts.Namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("default serviceaccount in %s: %w", s.Opts.Namespace, err)
	}
	return nil
}

// HubURL is the public URL of the Hub (through the proxy), with a trailing slash.
func (s *Stack) HubURL() string { return s.Hub.BaseURL() }

// StopComponent stops the named component (an outage in a test); StartComponent brings it back.
func (s *Stack) StopComponent(name string) error {
	for _, p := range s.components {
		if p.Name() == name {
			p.Stop()
			return nil
		}
	}
	return fmt.Errorf("no component %q", name)
}

// Process is the named component's process (a test kills it with SIGKILL, as a node failure would), or nil.
func (s *Stack) Process(name string) *proc.Process {
	for _, p := range s.components {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// StartComponent starts the named component again from its spec and waits until it is ready. Its log file
// starts over.
func (s *Stack) StartComponent(ctx context.Context, name string) error {
	for i, p := range s.components {
		if p.Name() != name {
			continue
		}
		p.Stop()
		np, err := proc.Start(ctx, s.Opts.Logger, s.specs[i])
		if err != nil {
			return fmt.Errorf("component %s: %w", name, err)
		}
		s.components[i] = np
		return nil
	}
	return fmt.Errorf("no component %q", name)
}

// Stop stops components, the Hub (which stops its servers), the emulator (which ends every process
// it started) and the control plane, in that order, then scans every log of the stack for a token the harness
// handed out (logscan) and removes a temporary state dir. Leaks are in LogLeaks; in a test binary a leak also
// fails the run: Stop prints each file and line (never the token) and exits with status 1.
func (s *Stack) Stop() {
	for i := len(s.components) - 1; i >= 0; i-- {
		s.components[i].Stop()
	}
	s.components = nil
	if s.Hub != nil {
		// A leak in the Hub's log is found again by the scan of the whole state dir below.
		if err := s.Hub.Stop(); err != nil && !isOnlyLeak(err) {
			s.Opts.Logger.Warn("stop hub", "err", err)
		}
		s.Hub = nil
	}
	if s.emuCancel != nil {
		s.emuCancel()
		select {
		case err := <-s.emuDone:
			if err != nil && !errors.Is(err, context.Canceled) {
				s.Opts.Logger.Warn("node emulator", "err", err)
			}
		case <-time.After(60 * time.Second):
			s.Opts.Logger.Warn("node emulator did not stop in 60s")
		}
		s.emuCancel = nil
	}
	if s.ControlPlane != nil {
		s.ControlPlane.Stop()
		s.ControlPlane = nil
	}
	leakErr := s.checkLogs()
	if s.tempDir {
		_ = os.RemoveAll(s.Dir)
	}
	if leakErr != nil && testing.Testing() {
		// Stop runs last in a TestMain (deferred), after m.Run has decided the exit code: exiting is the one
		// way to fail the run from here, and every e2e package gets the check without code of its own.
		fmt.Fprintf(os.Stderr, "FAIL: local cluster logs: %v\n", leakErr)
		os.Exit(1)
	}
}

// checkLogs scans every log under the state dir (the components', the Hub's, the control plane's, every
// emulated pod's) for the secrets registered with logscan.Default, once: a second Stop finds nothing to scan.
func (s *Stack) checkLogs() error {
	if s.Dir == "" || s.logsChecked {
		return nil
	}
	s.logsChecked = true
	sum, err := logscan.Default.CheckDir(s.Dir)
	if testing.Testing() {
		fmt.Fprintf(os.Stderr, "local cluster logs: %s\n", sum) // shows the check looked at something
	}
	var le *logscan.LeakError
	if errors.As(err, &le) {
		s.LogLeaks = le.Findings
		s.Opts.Logger.Error("token in a log of the local cluster", "lines", len(le.Findings), "first", le.Findings[0].String())
	} else if err != nil {
		s.Opts.Logger.Warn("scan logs for tokens", "err", err)
	}
	return err
}

func isOnlyLeak(err error) bool {
	var le *logscan.LeakError
	if !errors.As(err, &le) {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap()) == 1
	}
	return true
}
