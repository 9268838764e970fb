package hubtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/emulator"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
	"github.com/gpuhub/gpuhub/hubapi"
)

// Main is the TestMain of a package whose Hubs spawn on a control plane (e2e/hubint/quota, profiles): it checks
// that need is set (else says to run `make integration`), makes a work dir (kept when hubproc.EnvKeep is set) and
// gives setup 4 minutes in it; setup says what it got ready. Then the tests run. dump shows the logs after a failed
// setup or failed tests; stop runs last in any case.
func Main(m *testing.M, name string, need []string, setup func(ctx context.Context, dir string) (string, error), dump, stop func()) int {
	for _, k := range need {
		if os.Getenv(k) == "" {
			fmt.Fprintf(os.Stderr, "%s: %s is not set; run `make integration`, which builds and installs what these tests need\n", name, k)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "gpuhub-"+strings.ReplaceAll(name, "/", "-")+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if os.Getenv(hubproc.EnvKeep) == "" {
			_ = os.RemoveAll(dir)
		}
	}()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	ready, err := setup(ctx, dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: setup: %v\n", name, err)
		dump()
		return 1
	}
	fmt.Printf("%s: %s ready in %s\n", name, ready, time.Since(start).Round(time.Millisecond))
	code := m.Run()
	if code != 0 {
		dump()
	}
	return code
}

// StartCluster starts a control plane in dir/cluster (etcd from GPUHUB_ETCD, else PATH) and registers the GPU nodes
// of e2e/topology.yaml as GPU Feature Discovery and the device plugin label them, Ready (the control plane runs no
// node lifecycle controller). No pod ever runs: nothing plays the kubelet. It returns an admin client.
func StartCluster(ctx context.Context, kubeBin, dir string, logger *slog.Logger) (*cluster.ControlPlane, kubernetes.Interface, error) {
	cp, err := cluster.Start(ctx, cluster.Options{
		BinDir: kubeBin, Etcd: os.Getenv("GPUHUB_ETCD"), Dir: filepath.Join(dir, "cluster"), Logger: logger,
	})
	if err != nil {
		return nil, nil, err
	}
	cfg, err := cp.RESTConfig("admin", []string{"system:masters"})
	if err != nil {
		return cp, nil, err
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return cp, nil, err
	}
	topo, err := emulator.LoadTopology("../../topology.yaml")
	if err != nil {
		return cp, nil, err
	}
	emu, err := emulator.New(emulator.Options{Client: admin, Topology: topo, Dir: filepath.Join(dir, "nodes"), Logger: logger})
	if err != nil {
		return cp, nil, err
	}
	return cp, admin, emu.Register(ctx)
}

// HubRBAC gives the Hub's identity user what z2jh's hub Role grants in the single-user namespace ns, and waits for
// the namespace's default ServiceAccount (pods are refused without it; the controller manager creates it).
func HubRBAC(ctx context.Context, admin kubernetes.Interface, ns, user string) error {
	_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "hub"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "persistentvolumeclaims", "secrets", "services"},
				Verbs: []string{"get", "watch", "list", "create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "watch", "list"}},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "hub"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "hub"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("default serviceaccount in %s: %w", ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// CreateUsers creates Hub users (none in a group) through the REST API.
func CreateUsers(ctx context.Context, h *hubproc.Hub, names []string) error {
	body, _ := json.Marshal(map[string][]string{"usernames": names})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.APIURL()+"/users", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "token "+h.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("create users: %s %s", resp.Status, b)
	}
	return nil
}

// Service is a gpuhub service of a test Hub as a process of its own.
type Service struct {
	Spec   proc.Spec // with its LogFile
	Proc   *proc.Process
	Logger *slog.Logger
}

// Start starts the service, and waits until it is ready when wait is set. The first start does not wait:
// JupyterHub 6 waits at its own start until each service with a url answers, and a service may be ready only once
// the Hub answers it; WaitReady waits for it once the Hub runs.
func (s *Service) Start(ctx context.Context, wait bool) error {
	spec := s.Spec
	if !wait {
		spec.Ready = nil
	}
	p, err := proc.Start(ctx, s.Logger, spec)
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", s.Spec.Name, err, s.LogTail(30))
	}
	s.Proc = p
	return nil
}

// WaitReady waits until the started service is ready, failing at once when it exits.
func (s *Service) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.Spec.ReadyTimeout)
	defer cancel()
	for {
		err := s.Spec.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-s.Proc.Done():
			return fmt.Errorf("%s exited: %w\n%s", s.Spec.Name, s.Proc.Err(), s.LogTail(30))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %w)", s.Spec.Name, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops the service when it runs.
func (s *Service) Stop() {
	if s.Proc != nil {
		s.Proc.Stop()
	}
}

// LogTail is the last n lines of the service's log ("" when there is none).
func (s *Service) LogTail(n int) string {
	b, err := os.ReadFile(s.Spec.LogFile)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// GlueUnit runs the test package's glue_test.py with the Hub's own Python (hubproc.EnvVenv) against the chart's
// glue in chartDir.
func GlueUnit(t *testing.T, chartDir string) {
	t.Helper()
	cmd := exec.CommandContext(CtxT(t, time.Minute), hubproc.OptionsFromEnv().Venv+"/bin/python", "-m", "unittest", "-v", "glue_test")
	// gluekit.py, in this package, is what the glue_test.py of e2e/hubint's packages (the tests' directories) share.
	kit, err := filepath.Abs("../hubtest")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Environ(), "GPUHUB_GLUE="+chartDir+"/files/gpuhub_hub_config.py", "PYTHONPATH="+kit)
	out, err := cmd.CombinedOutput()
	if err != nil {
		// The failed tests and their errors come first: CI's summary keeps a failure's first line.
		t.Fatalf("python -m unittest glue_test: %v: %s\n%s", err, unittestFailures(out), out)
	}
	t.Logf("%s", out)
}

// unittestFailures picks from Python unittest's verbose output the failed or erroring tests and the
// exception lines ("AssertionError: 4.02 not less than 3.2 : ..."), joined on one line.
func unittestFailures(out []byte) string {
	var picked []string
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, ":")
		if strings.HasPrefix(line, "FAIL: ") || strings.HasPrefix(line, "ERROR: ") ||
			(strings.HasSuffix(name, "Error") || strings.HasSuffix(name, "Exception")) && !strings.ContainsAny(name, " \t") {
			picked = append(picked, strings.TrimSpace(line))
		}
	}
	if len(picked) == 0 {
		return "no failed test named in its output"
	}
	return strings.Join(picked, "; ")
}

// Pods lists user's single-user pods in the Hub's namespace.
func (h *Hub) Pods(ctx context.Context, user string) ([]corev1.Pod, error) {
	list, err := h.Kube.CoreV1().Pods(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "component=singleuser-server"})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.Annotations["hub.jupyter.org/username"] != user }), nil
}

// NoServerNoPod checks that user's refused spawn left neither a server nor a pod.
func (h *Hub) NoServerNoPod(t *testing.T, user string) {
	t.Helper()
	ctx := CtxT(t, time.Minute)
	if err := h.WaitStopped(ctx, user, ""); err != nil {
		t.Error(err)
	}
	pods, err := h.Pods(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		t.Errorf("refused spawn left pod %s", p.Name)
	}
}

// WaitPod waits for user's pod, created by an admitted spawn.
func (h *Hub) WaitPod(t *testing.T, user string) corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pods, err := h.Pods(CtxT(t, 10*time.Second), user)
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) > 0 {
			return pods[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pod for %s 30s after an admitted spawn", user)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// StopAndClean stops user's pending server and removes its pod for good: nothing here plays the kubelet, so a pod
// bound to a node would stay Terminating.
func (h *Hub) StopAndClean(t *testing.T, user string) {
	t.Helper()
	ctx := CtxT(t, time.Minute)
	c, err := hubapi.New(hubapi.Config{URL: h.Proc.APIURL(), Token: h.Proc.AdminToken()})
	if err != nil {
		t.Fatal(err)
	}
	// The Hub waits for the pod to go while it answers; the pod goes when this loop deletes it.
	stopped := make(chan error, 1)
	go func() {
		_, err := c.StopServer(ctx, user, "", false)
		if err == nil {
			err = h.WaitStopped(ctx, user, "")
		}
		stopped <- err
	}()
	for {
		pods, err := h.Pods(ctx, user)
		if err == nil {
			for _, p := range pods {
				_ = h.Kube.CoreV1().Pods(h.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
		}
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("stop %s's server: %v", user, err)
			}
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// LogText is the Hub's whole log.
func (h *Hub) LogText(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	if err := h.Proc.WriteLog(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
