//go:build integration

package quota_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/emulator"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/hub"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
)

// Environment the tests need; make integration sets all of it.
const (
	envQuotaBin = "GPUHUB_QUOTA_BIN" // gpu-quota built from ./services/gpu-quota
	envKubeBin  = "GPUHUB_KUBE_BIN"  // kube-apiserver and friends (make kube-binaries)
	envHelm     = "GPUHUB_HELM"      // renders chart/gpuhub for gpu-quota's RBAC
)

const (
	chartDir = "../../../chart/gpuhub"
	password = "hubint-quota"
	// metricsService holds read:metrics, to read the glue's counters from the Hub's /hub/metrics.
	metricsService = "metrics-reader"
)

// The refusing policy: whole GPUs for nobody, time-sliced shares for everyone. onUnavailable differs per Hub.
const policyTemplate = `# e2e/hubint/quota: refuse whole GPUs, admit time-sliced shares.
onUnavailable: %s
default:
  allowedKinds: [shared]
`

// z2jhSpawnSettings is what Zero-to-JupyterHub 4.4.0's jupyterhub_config.py sets for spawns.
const z2jhSpawnSettings = `c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
c.Spawner.consecutive_failure_limit = 5
`

var (
	cp     *cluster.ControlPlane
	admin  kubernetes.Interface
	z2jh   *hubUnderTest // slow_spawn_timeout 0, onUnavailable closed
	plain  *hubUnderTest // JupyterHub's defaults, onUnavailable open
	logger = slog.New(slog.DiscardHandler)
)

// hubUnderTest is one Hub with its gpu-quota, in a namespace of its own.
type hubUnderTest struct {
	name       string
	ns         string
	dir        string
	hub        *hubproc.Hub
	quota      *proc.Process
	quotaSpec  proc.Spec
	quotaURL   string // base with prefix
	quotaToken string
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	for _, k := range []string{hubproc.EnvVenv, hubproc.EnvCHP, envQuotaBin, envKubeBin, envHelm} {
		if os.Getenv(k) == "" {
			fmt.Fprintf(os.Stderr, "hubint/quota: %s is not set; run `make integration`, which builds and installs what these tests need\n", k)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "gpuhub-hubint-quota-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if os.Getenv(hubproc.EnvKeep) == "" {
			_ = os.RemoveAll(dir)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	code := 1
	func() {
		defer stopAll()
		if err := setup(ctx, dir); err != nil {
			fmt.Fprintf(os.Stderr, "hubint/quota: setup: %v\n", err)
			return
		}
		fmt.Printf("hubint/quota: control plane, jupyterhub %s x2 and gpu-quota x2 ready in %s\n",
			z2jh.hub.Version(), time.Since(start).Round(time.Millisecond))
		code = m.Run()
		if code != 0 {
			for _, h := range []*hubUnderTest{z2jh, plain} {
				fmt.Fprintf(os.Stderr, "hubint/quota: hub %q (jupyterhub %s) log tail:\n%s\n", h.name, h.hub.Version(), h.hub.LogTail(80))
				if b, err := os.ReadFile(h.quotaSpec.LogFile); err == nil {
					fmt.Fprintf(os.Stderr, "hubint/quota: gpu-quota of %q log tail:\n%s\n", h.name, tail(string(b), 40))
				}
			}
		}
	}()
	return code
}

func setup(ctx context.Context, dir string) error {
	var err error
	cp, err = cluster.Start(ctx, cluster.Options{
		BinDir: os.Getenv(envKubeBin), Etcd: os.Getenv("GPUHUB_ETCD"), Dir: filepath.Join(dir, "cluster"), Logger: logger,
	})
	if err != nil {
		return err
	}
	cfg, err := cp.RESTConfig("admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	if admin, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	// The GPU nodes as GPU Feature Discovery and the device plugin label them: what gpu-quota classifies a
	// request by. Registered only; no pod ever runs (nothing here plays the kubelet).
	topo, err := emulator.LoadTopology("../../topology.yaml")
	if err != nil {
		return err
	}
	emu, err := emulator.New(emulator.Options{Client: admin, Topology: topo, Dir: filepath.Join(dir, "nodes"), Logger: logger})
	if err != nil {
		return err
	}
	if err := emu.Register(ctx); err != nil {
		return err
	}
	if z2jh, err = startHub(ctx, dir, "z2jh", "closed", z2jhSpawnSettings); err != nil {
		return err
	}
	if plain, err = startHub(ctx, dir, "plain", "open", "c.Spawner.consecutive_failure_limit = 5\n"); err != nil {
		return err
	}
	// KubeSpawner starts its pod and event watches at a Hub's first spawn: a refusal now keeps that out of
	// the timings below, and has each glue learn its gpu-quota's onUnavailable.
	for _, h := range []*hubUnderTest{z2jh, plain} {
		if err := h.warmUp(ctx); err != nil {
			return fmt.Errorf("hub %s: warm-up spawn: %w", h.name, err)
		}
	}
	return nil
}

func stopAll() {
	for _, h := range []*hubUnderTest{z2jh, plain} {
		if h == nil {
			continue
		}
		if h.quota != nil {
			h.quota.Stop()
		}
		if h.hub != nil {
			if err := h.hub.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "hubint/quota: stop hub %s: %v\n", h.name, err)
			}
		}
	}
	if cp != nil {
		cp.Stop()
	}
}

// startHub starts a Hub with KubeSpawner in namespace hubint-<name> and the glue (plus extraConfig) in its
// values, then gpu-quota with the chart's RBAC for that namespace, registered as the Hub's service gpu-quota.
func startHub(ctx context.Context, dir, name, onUnavailable, extraConfig string) (*hubUnderTest, error) {
	h := &hubUnderTest{name: name, ns: "hubint-" + name, dir: filepath.Join(dir, name)}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return nil, err
	}
	version, err := gpuhubstack.ServerVersion(admin)
	if err != nil {
		return nil, err
	}
	// A release per Hub: the chart's cluster-scoped names (ClusterRoles) carry the release name.
	objs, err := gpuhubstack.Chart{Helm: os.Getenv(envHelm), Dir: chartDir, Release: "gpuhub-" + name, Namespace: h.ns, KubeVersion: version}.Render(ctx)
	if err != nil {
		return nil, err
	}
	in, err := gpuhubstack.InstallRBAC(ctx, admin, h.ns, objs)
	if err != nil {
		return nil, err
	}
	quotaKC := filepath.Join(h.dir, "gpu-quota.kubeconfig")
	if err := in.WriteKubeconfig(ctx, admin, in.QuotaServiceAccount, cp.URL, cp.CAData(), quotaKC); err != nil {
		return nil, err
	}
	hubUser := "gpuhub:hub-" + name
	if err := hubRBAC(ctx, h.ns, hubUser); err != nil {
		return nil, err
	}
	hubKC, err := cp.WriteKubeconfig("hub-"+name, hubUser, nil)
	if err != nil {
		return nil, err
	}
	values, err := gpuhubstack.HubValues(chartDir, map[string]string{"00-z2jh": extraConfig})
	if err != nil {
		return nil, err
	}
	valuesFile := filepath.Join(h.dir, "values.yaml")
	policyFile := filepath.Join(h.dir, "policy.yaml")
	if err := os.WriteFile(valuesFile, values, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(policyFile, fmt.Appendf(nil, policyTemplate, onUnavailable), 0o644); err != nil {
		return nil, err
	}
	ports := cluster.FreePorts(2)
	quotaPort, hubPort := ports[0], ports[1]
	h.quotaToken = gpuhubstack.NewToken()
	q := gpuhubstack.Quota{
		Binary: os.Getenv(envQuotaBin), Port: quotaPort, Kubeconfig: quotaKC, Policy: policyFile, Namespace: h.ns,
		LeaseNamespace: h.ns, LeaseArgs: in.QuotaArgs, HubAPIURL: fmt.Sprintf("http://127.0.0.1:%d/hub/api", hubPort),
		Token: h.quotaToken,
	}
	h.quotaURL = q.URL()
	h.quotaSpec = q.Spec()
	h.quotaSpec.LogFile = filepath.Join(h.dir, "gpu-quota.log")
	// gpu-quota first: JupyterHub 6 waits at startup (service timeout, 30 s) until each service with a url
	// answers; gpu-quota is ready only once the Hub answers it, so it is waited for after the Hub.
	if err := h.startQuota(ctx, false); err != nil {
		return h, err
	}
	h.hub, err = hub.Start(ctx, hub.Options{
		Venv: os.Getenv(hubproc.EnvVenv), CHP: os.Getenv(hubproc.EnvCHP), Kubeconfig: hubKC, Namespace: h.ns,
		Dir: filepath.Join(h.dir, "hub"), Password: password, Values: valuesFile, HubPort: hubPort,
		Services: []hubproc.Service{
			gpuhubstack.QuotaHubService(quotaPort, h.quotaToken),
			{Name: metricsService, Scopes: []string{"read:metrics"}},
		},
	})
	if err != nil {
		return h, err
	}
	if err := createUsers(ctx, h.hub, extraUsers); err != nil {
		return h, err
	}
	if err := h.waitQuotaReady(ctx); err != nil {
		return h, err
	}
	return h, nil
}

// startQuota starts gpu-quota, and waits until it is ready when wait is set.
func (h *hubUnderTest) startQuota(ctx context.Context, wait bool) error {
	spec := h.quotaSpec
	if !wait {
		spec.Ready = nil
	}
	p, err := proc.Start(ctx, logger, spec)
	if err != nil {
		b, _ := os.ReadFile(h.quotaSpec.LogFile)
		return fmt.Errorf("gpu-quota: %w\n%s", err, tail(string(b), 30))
	}
	h.quota = p
	return nil
}

func (h *hubUnderTest) waitQuotaReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.quotaSpec.ReadyTimeout)
	defer cancel()
	for {
		err := h.quotaSpec.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-h.quota.Done():
			b, _ := os.ReadFile(h.quotaSpec.LogFile)
			return fmt.Errorf("gpu-quota exited: %w\n%s", h.quota.Err(), tail(string(b), 30))
		case <-ctx.Done():
			return fmt.Errorf("gpu-quota not ready: %w (last: %w)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// extraUsers are created besides e2e/hub's alice, bob (students) and carol (researchers); none is in a group.
var extraUsers = []string{"dave", "erin", "user-00", "user-01", "user-02", "user-03", "user-04", "user-05", "user-06", "user-07", "user-08", "user-09"}

func createUsers(ctx context.Context, h *hubproc.Hub, names []string) error {
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

// hubRBAC gives the Hub's identity what z2jh's hub Role grants in the single-user namespace.
func hubRBAC(ctx context.Context, ns, user string) error {
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
	// Pods need the namespace's default ServiceAccount; the controller manager creates it.
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

// warmUp runs one refused spawn through the REST API and waits until the Hub has finished with it.
func (h *hubUnderTest) warmUp(ctx context.Context) error {
	code, _, err := h.startServer(ctx, h.hub.AdminToken(), "bob", "", "h100")
	if err != nil {
		return err
	}
	if code != 202 && code != 403 {
		return fmt.Errorf("POST bob's server: status %d", code)
	}
	return h.waitStopped(ctx, "bob", "")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pods lists the single-user pods of user in the Hub's namespace (there must be none after a refusal).
func (h *hubUnderTest) pods(ctx context.Context, user string) ([]corev1.Pod, error) {
	list, err := admin.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "component=singleuser-server"})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Annotations["hub.jupyter.org/username"] == user {
			out = append(out, p)
		}
	}
	return out, nil
}
