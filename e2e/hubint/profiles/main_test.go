//go:build integration

package profiles_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/hub"
	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
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

// jupyterhubSpawnDefaults gives the plain Hub JupyterHub's own slow_spawn_timeout (10 s) back: every local Hub runs
// z2jh's jupyterhub_config.py, which sets it to 0. consecutive_failure_limit stays 5, as there.
const jupyterhubSpawnDefaults = `c.JupyterHub.tornado_settings.pop("slow_spawn_timeout", None)
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
	*hubtest.Hub  // Proc is the Hub
	dir           string
	profiles      hubtest.Service
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
	os.Exit(hubtest.Main(m, "hubint/profiles", []string{hubproc.EnvVenv, hubproc.EnvCHP, envProfilesBin, envKubeBin}, setup, dumpLogs, stopAll))
}

func dumpLogs() {
	for _, h := range []*hubUnderTest{z2jh, plain, waiting} {
		if h != nil && h.Proc != nil {
			fmt.Fprintf(os.Stderr, "hubint/profiles: hub %q (jupyterhub %s) log tail:\n%s\n", h.Name, h.Proc.Version(), h.Proc.LogTail(80))
			fmt.Fprintf(os.Stderr, "hubint/profiles: gpu-profiles of %q log tail:\n%s\n", h.Name, h.profiles.LogTail(40))
		}
	}
}

func setup(ctx context.Context, dir string) (string, error) {
	var err error
	if cp, admin, err = hubtest.StartCluster(ctx, os.Getenv(envKubeBin), dir, logger); err != nil {
		return "", err
	}
	if err := namespace(ctx, ns); err != nil {
		return "", err
	}
	if err := hubtest.HubRBAC(ctx, admin, ns, "gpuhub:hub"); err != nil {
		return "", err
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
			return "", err
		}
	}
	if z2jh, err = startHub(ctx, dir, "z2jh", z2jhSpawnSettings, hubExtras{}); err != nil {
		return "", err
	}
	if plain, err = startHub(ctx, dir, "plain", jupyterhubSpawnDefaults, hubExtras{}); err != nil {
		return "", err
	}
	// Before its Hub: JupyterHub 6 waits at startup until each service with a url answers.
	quota := newFakeQuota()
	if waiting, err = startHub(ctx, dir, "waitlist", z2jhSpawnSettings, hubExtras{
		env: []string{"GPUHUB_WAITLIST=1"}, services: []hubproc.Service{quota.service()},
	}); err != nil {
		quota.Close()
		return "", err
	}
	waiting.quota = quota
	return fmt.Sprintf("control plane, jupyterhub %s x3 and gpu-profiles x3", z2jh.Proc.Version()), nil
}

func stopAll() {
	for _, h := range []*hubUnderTest{z2jh, plain, waiting} {
		if h == nil {
			continue
		}
		if h.quota != nil {
			h.quota.Close()
		}
		h.profiles.Stop()
		if h.Proc != nil {
			if err := h.Proc.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "hubint/profiles: stop hub %s: %v\n", h.Name, err)
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
	h := &hubUnderTest{dir: filepath.Join(dir, name), Hub: &hubtest.Hub{
		Name: name, Password: password, MetricsService: metricsService, TokenNote: "hubint/profiles", Kube: admin, Namespace: ns,
	}}
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
	h.profiles = hubtest.Service{Logger: logger,
		Spec: profilesSpec(profilesPort, profilesKC, overridesFile, fmt.Sprintf("http://127.0.0.1:%d/hub/api", hubPort), h.profilesToken)}
	h.profiles.Spec.LogFile = filepath.Join(h.dir, "gpu-profiles.log")
	if err := h.profiles.Start(ctx, false); err != nil {
		return h, err
	}
	h.Proc, err = hub.Start(ctx, hub.Options{
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
	if err := hubtest.CreateUsers(ctx, h.Proc, extraUsers); err != nil {
		return h, err
	}
	return h, h.profiles.WaitReady(ctx)
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

// extraUsers are created besides e2e/hub's alice, bob (students) and carol (researchers); none is in a group.
var extraUsers = []string{"dave", "erin", "frank"}

func namespace(ctx context.Context, name string) error {
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
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
