//go:build integration

package profiles_test

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
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
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
	envProfilesBin = "GPUHUB_PROFILES_BIN" // gpu-profiles built from ./services/gpu-profiles
	envKubeBin     = "GPUHUB_KUBE_BIN"     // kube-apiserver and friends (make kube-binaries)
)

const (
	chartDir = "../../../chart/gpuhub"
	password = "hubint-profiles"
	// ns holds both Hubs' single-user pods and the pods that hold GPUs: what gpu-profiles counts.
	ns = "hubint-profiles"
	// metricsService holds read:metrics, to read the glue's counters from the Hub's /hub/metrics.
	metricsService = "metrics-reader"
	serviceName    = "gpu-profiles"
)

// scriptDescription is a static profile's description: the form must show it as text, never run it.
const scriptDescription = `<script>document.title="pwned"</script> & <b>bold</b> "quoted"`

// staticExtra is added to e2e/hub/values.yaml's profileList (the admin's static list, the fallback).
var staticExtra = map[string]any{
	"display_name":         "Static <i>notes</i> server",
	"slug":                 "static-notes",
	"description":          scriptDescription,
	"kubespawner_override": map[string]any{"extra_labels": map[string]any{"gpuhub.io/profile": "static-notes"}},
}

// z2jhSpawnSettings is what Zero-to-JupyterHub 4.4.0's jupyterhub_config.py sets for spawns.
const z2jhSpawnSettings = `c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
c.Spawner.consecutive_failure_limit = 5
`

var (
	cp    *cluster.ControlPlane
	admin kubernetes.Interface
	z2jh  *hubUnderTest
	plain *hubUnderTest
	// waiting has z2jh's spawn settings, GPUHUB_WAITLIST=1 and a fake gpu-quota (waitlist_test.go).
	waiting *hubUnderTest
	logger  = slog.New(slog.DiscardHandler)
)

// hubUnderTest is one Hub with its own gpu-profiles.
type hubUnderTest struct {
	name          string
	dir           string
	hub           *hubproc.Hub
	profiles      *proc.Process
	profilesSpec  proc.Spec
	profilesURL   string // base with prefix
	profilesToken string
	quota         *fakeQuota // the Hub's gpu-quota, when it has one
}

// hubExtras are what a Hub gets besides the glue and its gpu-profiles.
type hubExtras struct {
	env      []string
	services []hubproc.Service
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	for _, k := range []string{hubproc.EnvVenv, hubproc.EnvCHP, envProfilesBin, envKubeBin} {
		if os.Getenv(k) == "" {
			fmt.Fprintf(os.Stderr, "hubint/profiles: %s is not set; run `make integration`, which builds and installs what these tests need\n", k)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "gpuhub-hubint-profiles-")
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
			fmt.Fprintf(os.Stderr, "hubint/profiles: setup: %v\n", err)
			for _, h := range []*hubUnderTest{z2jh, plain, waiting} {
				if h != nil {
					h.dumpLogs()
				}
			}
			return
		}
		fmt.Printf("hubint/profiles: control plane, jupyterhub %s x3 and gpu-profiles x3 ready in %s\n",
			z2jh.hub.Version(), time.Since(start).Round(time.Millisecond))
		code = m.Run()
		if code != 0 {
			for _, h := range []*hubUnderTest{z2jh, plain, waiting} {
				h.dumpLogs()
			}
		}
	}()
	return code
}

func (h *hubUnderTest) dumpLogs() {
	if h.hub != nil {
		fmt.Fprintf(os.Stderr, "hubint/profiles: hub %q (jupyterhub %s) log tail:\n%s\n", h.name, h.hub.Version(), h.hub.LogTail(80))
	}
	if b, err := os.ReadFile(h.profilesSpec.LogFile); err == nil {
		fmt.Fprintf(os.Stderr, "hubint/profiles: gpu-profiles of %q log tail:\n%s\n", h.name, tail(string(b), 40))
	}
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
	// The GPU nodes as GPU Feature Discovery and the device plugin label them. Registered and Ready (the
	// control plane runs no node lifecycle controller); no pod ever runs.
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
	if err := namespace(ctx, ns); err != nil {
		return err
	}
	if err := hubRBAC(ctx, ns, "gpuhub:hub"); err != nil {
		return err
	}
	// carol holds both H100s and one A100 MIG 1g.5gb slice: the form must show H100 as none free.
	for i, hold := range []struct {
		node, resource string
		n              int64
	}{
		{"gpu-h100-0", "nvidia.com/gpu", 1},
		{"gpu-h100-0", "nvidia.com/gpu", 1},
		{"gpu-a100-0", "nvidia.com/mig-1g.5gb", 1},
	} {
		if err := holdGPU(ctx, fmt.Sprintf("carol-holds-%d", i), hold.node, hold.resource, hold.n); err != nil {
			return err
		}
	}
	if z2jh, err = startHub(ctx, dir, "z2jh", z2jhSpawnSettings, hubExtras{}); err != nil {
		return err
	}
	if plain, err = startHub(ctx, dir, "plain", "c.Spawner.consecutive_failure_limit = 5\n", hubExtras{}); err != nil {
		return err
	}
	// Before its Hub: JupyterHub 6 waits at startup until each service with a url answers.
	quota := newFakeQuota()
	if waiting, err = startHub(ctx, dir, "waitlist", z2jhSpawnSettings, hubExtras{
		env: []string{"GPUHUB_WAITLIST=1"}, services: []hubproc.Service{quota.service()},
	}); err != nil {
		quota.Close()
		return err
	}
	waiting.quota = quota
	return nil
}

func stopAll() {
	for _, h := range []*hubUnderTest{z2jh, plain, waiting} {
		if h == nil {
			continue
		}
		if h.quota != nil {
			h.quota.Close()
		}
		if h.profiles != nil {
			h.profiles.Stop()
		}
		if h.hub != nil {
			if err := h.hub.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "hubint/profiles: stop hub %s: %v\n", h.name, err)
			}
		}
	}
	if cp != nil {
		cp.Stop()
	}
}

// startHub starts gpu-profiles and a Hub with KubeSpawner, the glue and the static profile list (plus
// staticExtra) in its values, gpu-profiles registered as the Hub's service gpu-profiles (and extra's services
// besides, extra's env in the Hub's environment). gpu-profiles' overrides give the time-sliced choice a
// description with markup and add a static profile with markup in its name.
func startHub(ctx context.Context, dir, name, extraConfig string, extra hubExtras) (*hubUnderTest, error) {
	h := &hubUnderTest{name: name, dir: filepath.Join(dir, name)}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return nil, err
	}
	profilesUser := "gpuhub:gpu-profiles-" + name
	if err := profilesRBAC(ctx, name, profilesUser); err != nil {
		return nil, err
	}
	profilesKC, err := cp.WriteKubeconfig("gpu-profiles-"+name, profilesUser, nil)
	if err != nil {
		return nil, err
	}
	hubKC, err := cp.WriteKubeconfig("hub-"+name, "gpuhub:hub", nil)
	if err != nil {
		return nil, err
	}
	overrides, err := yaml.Marshal(map[string]any{
		"kinds":          map[string]any{"shared": map[string]any{"description": scriptDescription}},
		"staticProfiles": []any{map[string]any{"slug": "static-live", "display_name": "Static <i>live</i>", "description": scriptDescription}},
	})
	if err != nil {
		return nil, err
	}
	overridesFile := filepath.Join(h.dir, "gpu-profiles.yaml")
	if err := os.WriteFile(overridesFile, overrides, 0o644); err != nil {
		return nil, err
	}
	values, err := hubValues(extraConfig)
	if err != nil {
		return nil, err
	}
	valuesFile := filepath.Join(h.dir, "values.yaml")
	if err := os.WriteFile(valuesFile, values, 0o644); err != nil {
		return nil, err
	}
	ports := cluster.FreePorts(2)
	profilesPort, hubPort := ports[0], ports[1]
	h.profilesToken = gpuhubstack.NewToken()
	h.profilesURL = fmt.Sprintf("http://127.0.0.1:%d/services/%s/", profilesPort, serviceName)
	h.profilesSpec = profilesSpec(profilesPort, profilesKC, overridesFile, fmt.Sprintf("http://127.0.0.1:%d/hub/api", hubPort), h.profilesToken)
	h.profilesSpec.LogFile = filepath.Join(h.dir, "gpu-profiles.log")
	// gpu-profiles first: JupyterHub 6 waits at startup until each service with a url answers; it is waited
	// for once the Hub runs (its readiness may need the Hub).
	if err := h.startProfiles(ctx, false); err != nil {
		return h, err
	}
	h.hub, err = hub.Start(ctx, hub.Options{
		Venv: os.Getenv(hubproc.EnvVenv), CHP: os.Getenv(hubproc.EnvCHP), Kubeconfig: hubKC, Namespace: ns,
		Dir: filepath.Join(h.dir, "hub"), Password: password, Values: valuesFile, HubPort: hubPort, Env: extra.env,
		Services: append([]hubproc.Service{
			{Name: serviceName, Token: h.profilesToken, URL: fmt.Sprintf("http://127.0.0.1:%d", profilesPort), Scopes: profilesScopes},
			{Name: metricsService, Scopes: []string{"read:metrics"}},
		}, extra.services...),
	})
	if err != nil {
		return h, err
	}
	if err := createUsers(ctx, h.hub, extraUsers); err != nil {
		return h, err
	}
	if err := h.waitProfilesReady(ctx); err != nil {
		return h, err
	}
	return h, nil
}

// profilesScopes are what gpu-profiles needs from the Hub (users and groups; servers, to end a spawn that
// cannot succeed).
var profilesScopes = []string{"list:users", "read:users:name", "read:users:groups", "read:servers", "delete:servers"}

// profilesSpec is the gpu-profiles process, flags as the chart sets them.
func profilesSpec(port int, kubeconfig, overrides, hubAPI, token string) proc.Spec {
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	return proc.Spec{
		Name: serviceName,
		Path: os.Getenv(envProfilesBin),
		Args: []string{
			"--listen=127.0.0.1:" + strconv.Itoa(port), "--prefix=/services/" + serviceName + "/",
			"--kubeconfig=" + kubeconfig, "--config=" + overrides, "--log-level=debug",
		},
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
			"JUPYTERHUB_API_URL=" + hubAPI, "JUPYTERHUB_API_TOKEN=" + token, "JUPYTERHUB_SERVICE_NAME=" + serviceName,
		},
		Ready: func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, ready, http.NoBody)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("readyz: %s", resp.Status)
			}
			return nil
		},
		ReadyTimeout: 90 * time.Second,
		StopGrace:    10 * time.Second,
	}
}

// hubValues are e2e/hub/values.yaml with the glue as hub.extraConfig.gpuhub, extraConfig as
// hub.extraConfig.00-z2jh and staticExtra appended to singleuser.profileList.
func hubValues(extraConfig string) ([]byte, error) {
	values, err := gpuhubstack.HubValues(chartDir, map[string]string{"00-z2jh": extraConfig})
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := yaml.Unmarshal(values, &v); err != nil {
		return nil, err
	}
	su, _ := v["singleuser"].(map[string]any)
	if su == nil {
		return nil, fmt.Errorf("values have no singleuser")
	}
	list, _ := su["profileList"].([]any)
	su["profileList"] = append(list, staticExtra)
	return yaml.Marshal(v)
}

// startProfiles starts gpu-profiles, and waits until it is ready when wait is set.
func (h *hubUnderTest) startProfiles(ctx context.Context, wait bool) error {
	spec := h.profilesSpec
	if !wait {
		spec.Ready = nil
	}
	p, err := proc.Start(ctx, logger, spec)
	if err != nil {
		b, _ := os.ReadFile(h.profilesSpec.LogFile)
		return fmt.Errorf("gpu-profiles: %w\n%s", err, tail(string(b), 30))
	}
	h.profiles = p
	return nil
}

func (h *hubUnderTest) waitProfilesReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.profilesSpec.ReadyTimeout)
	defer cancel()
	for {
		err := h.profilesSpec.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-h.profiles.Done():
			b, _ := os.ReadFile(h.profilesSpec.LogFile)
			return fmt.Errorf("gpu-profiles exited: %w\n%s", h.profiles.Err(), tail(string(b), 30))
		case <-ctx.Done():
			return fmt.Errorf("gpu-profiles not ready: %w (last: %w)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// extraUsers are created besides e2e/hub's alice, bob (students) and carol (researchers); none is in a group.
var extraUsers = []string{"dave", "erin", "frank"}

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

func namespace(ctx context.Context, name string) error {
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// hubRBAC gives the Hub's identity what z2jh's hub Role grants in the single-user namespace, and waits for the
// namespace's default ServiceAccount (pods are refused without it; the controller manager creates it).
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

// profilesRBAC lets gpu-profiles read nodes and pods (its inventory) and write Events on pods (its Pending
// explanations): read-only on everything else.
func profilesRBAC(ctx context.Context, name, user string) error {
	role := "gpuhub-hubint-gpu-profiles-" + name
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update", "get", "list", "watch"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update", "get", "list", "watch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// holdGPU places a pod using n of resource on node (bound directly; nothing runs it): a GPU in use.
func holdGPU(ctx context.Context, name, node, res string, n int64) error {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	_, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "gpu-holder"}},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: "work", Image: "registry.invalid/gpu-holder:1",
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceName(res): q},
					Requests: corev1.ResourceList{corev1.ResourceName(res): q},
				},
			}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
