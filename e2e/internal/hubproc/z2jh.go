package hubproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
)

// PodConfigDir is where z2jh's hub pod sees its ConfigMap and Secret, and where z2jh.py reads them.
const PodConfigDir = "/usr/local/etc/jupyterhub"

// Z2JH runs the Hub the way Zero-to-JupyterHub's hub pod runs it: z2jh's own jupyterhub_config.py and z2jh.py,
// fed by the hub ConfigMap and Secret that `helm template` of the z2jh chart renders from the values, laid out
// where the pod sees them (PodConfigDir, in a mount namespace of the Hub's own), with the hub container's args
// and environment from the rendered Deployment. What has to differ from the pod is PodDifferences, all of it.
type Z2JH struct {
	// Helm is the helm binary, Chart z2jh's chart directory (zero-to-jupyterhub-k8s chart/jupyterhub).
	Helm, Chart string
	// Release is the helm release name (default "jhub"), Namespace the release's and the single-user pods'
	// namespace (the pod's POD_NAMESPACE).
	Release, Namespace string
	// KubeVersion is the cluster's version for --kube-version (z2jh's chart requires 1.28 or newer).
	KubeVersion string
	// Values are values files' contents, in the order of helm's -f; PodDifferences' values go after them.
	Values [][]byte
}

// Difference is one way the local Hub differs from z2jh's hub pod.
type Difference struct {
	// What is a z2jh value (helm values path), an environment variable of the hub container, or a part of
	// the pod (the proxy, a volume, the image).
	What string
	// Local is what the local Hub has, Pod what z2jh's hub pod has, Why the reason.
	Local, Pod, Why string
	// value is the value set at What (a values path) for Hub h; nil leaves the value alone.
	value func(h *Hub, d *configData) any
}

// PodDifferences is everything a local Hub started with Options.Z2JH does differently from z2jh's hub pod: the
// values given to helm template last (they win over Z2JH.Values), the environment and how the process runs.
// e2e/README.md ("The Hub: z2jh's own configuration") has the same table; TestPodDifferencesDocumented keeps them
// together. Values the caller chooses as any z2jh admin would (profiles, the glue, named servers) are not here.
var PodDifferences = []Difference{
	{
		What: "hub.config.JupyterHub.hub_bind_url", Local: "http://127.0.0.1:<hub port>", Pod: "http://:8081",
		Why:   "the pod has a network namespace of its own; here every Hub shares loopback, each on a free port",
		value: func(h *Hub, _ *configData) any { return "http://127.0.0.1:" + strconv.Itoa(h.ports[2]) },
	},
	{
		What: "hub.config.JupyterHub.hub_connect_url", Local: "http://127.0.0.1:<hub port>", Pod: "http://hub:$(HUB_SERVICE_PORT)",
		Why:   "no cluster DNS or Service IPs: single-user servers (local processes of the node emulator) and gpuhub's services reach the Hub on loopback",
		value: func(h *Hub, _ *configData) any { return "http://127.0.0.1:" + strconv.Itoa(h.ports[2]) },
	},
	{
		What: "hub.config.ConfigurableHTTPProxy.api_url", Local: "http://127.0.0.1:<proxy API port>", Pod: "http://proxy-api:$(PROXY_API_SERVICE_PORT)",
		Why:   "no cluster DNS: the proxy's API on loopback",
		value: func(h *Hub, _ *configData) any { return "http://127.0.0.1:" + strconv.Itoa(h.ports[1]) },
	},
	{
		What: "hub.config.DummyAuthenticator.password", Local: "the demo password (Options.Password)", Pod: "unset (any password)",
		Why:   "the demo's and the tests' logins (z2jh's default authenticator is already dummy)",
		value: func(_ *Hub, d *configData) any { return d.Password },
	},
	{
		What: "hub.config.Authenticator.allowed_users", Local: "Options.Users (alice, bob, carol)", Pod: "unset",
		Why:   "the demo users exist from the start",
		value: func(_ *Hub, d *configData) any { return d.Users },
	},
	{
		What: "hub.config.Authenticator.admin_users", Local: "Options.Admins (admin)", Pod: "unset",
		Why:   "the demo's Hub admin",
		value: func(_ *Hub, d *configData) any { return d.Admins },
	},
	{
		What: "hub.config.Authenticator.allow_all", Local: "true", Pod: "unset (DummyAuthenticator allows any name)",
		Why:   "tests log in and create users besides the demo ones",
		value: func(_ *Hub, d *configData) any { return d.AllowAll },
	},
	{
		What: "hub.config.JupyterHub.load_groups", Local: "Options.Groups (students, researchers)", Pod: "unset",
		Why: "the demo's groups, which quota policies and profiles name",
		value: func(_ *Hub, d *configData) any {
			out := map[string]any{}
			for name, g := range d.Groups {
				out[name] = map[string]any{"users": g.Users}
			}
			return out
		},
	},
	{
		What: "hub.config.JupyterHub.log_level", Local: "Options.LogLevel when it is not INFO", Pod: "INFO (debug.enabled: DEBUG)",
		Why: "a test may ask for another level",
		value: func(_ *Hub, d *configData) any {
			if d.LogLevel == "" || d.LogLevel == "INFO" {
				return nil
			}
			return d.LogLevel
		},
	},
	{
		What: "hub.services", Local: "hubproc-admin and Options.Services, each with its apiToken (and url)", Pod: "the values' services, tokens generated into the hub Secret",
		Why: "the harness's admin token for test setup; the harness hands out every token so that it can use it and scan logs for it",
		value: func(_ *Hub, d *configData) any {
			out := map[string]any{}
			for _, s := range d.Services {
				e := map[string]any{"apiToken": s.APIToken}
				if s.URL != "" {
					e["url"] = s.URL
				}
				out[s.Name] = e
			}
			return out
		},
	},
	{
		What: "hub.loadRoles", Local: "hubproc-admin's role, Options.Roles and a role per service with Scopes", Pod: "the values' roles",
		Why: "the scopes the harness's services hold",
		value: func(_ *Hub, d *configData) any {
			out := map[string]any{}
			for _, r := range d.Roles {
				e := map[string]any{}
				for k, v := range map[string][]string{"scopes": r.Scopes, "users": r.Users, "groups": r.Groups, "services": r.Services} {
					if len(v) > 0 {
						e[k] = v
					}
				}
				if r.Description != "" {
					e["description"] = r.Description
				}
				out[r.Name] = e
			}
			return out
		},
	},
	{
		What: "singleuser.storage.type", Local: "none", Pod: "dynamic (a PVC per user)",
		Why:   "no storage provisioner on the emulated cluster; the emulator gives each user a home directory of its own",
		value: func(*Hub, *configData) any { return "none" },
	},
	{
		What: "singleuser.cloudMetadata.blockWithIptables", Local: "false", Pod: "true (an init container with iptables)",
		Why:   "the node emulator runs no init containers, and there is no metadata server on loopback",
		value: func(*Hub, *configData) any { return false },
	},
	{
		What: "scheduling.userScheduler.enabled", Local: "false", Pod: "true (gpuhub's z2jh values: the GPU bin-packing user-scheduler)",
		Why:   "no user-scheduler runs on the local cluster: pods go to the real kube-scheduler (e2e/binpack tests the user-scheduler's configuration)",
		value: func(*Hub, *configData) any { return false },
	},
	{
		What: "cull.enabled", Local: "false", Pod: "false with gpuhub's z2jh values (z2jh's default: true)",
		Why:   "z2jh's culler command names http://localhost:8081, the pod's fixed Hub port; gpu-culler culls instead",
		value: func(*Hub, *configData) any { return false },
	},
	{
		What: "env HUB_SERVICE_HOST/PORT, PROXY_API_SERVICE_HOST/PORT, PROXY_PUBLIC_SERVICE_HOST/PORT", Local: "127.0.0.1 and the loopback ports",
		Pod: "the Services' ClusterIPs and ports, set by the kubelet", Why: "no Services: z2jh.py's get_name_env reads these names",
	},
	{
		What: "env KUBECONFIG", Local: "a kubeconfig of the harness's Hub identity (z2jh's hub Role)",
		Pod: "KUBERNETES_SERVICE_HOST and the hub ServiceAccount's token", Why: "no ServiceAccount token mounted: KubeSpawner falls back from in-cluster credentials to KUBECONFIG",
	},
	{
		What: "env PATH, HOME, LANG", Local: "the venv's bin first, the Hub's work dir, C.UTF-8", Pod: "the hub image's",
		Why: "JupyterHub, KubeSpawner and pycurl from a venv (make venv-hub55 / venv-hub6: JupyterHub 5.5.4 or 6.1.1) instead of z2jh's hub image (JupyterHub 5.5, Python 3.12); the Hub runs as root, not uid 1000",
	},
	{
		What: "volumes config, secret", Local: "files laid out from the rendered hub ConfigMap and Secret, bind-mounted read-only on " + PodConfigDir + " in a mount namespace of the Hub's own",
		Pod: "configMap and secret volumes", Why: "z2jh.py reads fixed paths; the mount namespace gives parallel Hubs each their own files",
	},
	{
		What: "volume pvc (/srv/jupyterhub)", Local: "the Hub's work dir, its working directory (jupyterhub.sqlite)", Pod: "the hub-db-dir PVC",
		Why: "no storage provisioner",
	},
	{
		What: "proxy pod", Local: "configurable-http-proxy (make chp) started by hubproc with the proxy Deployment's flags on 127.0.0.1 and free ports, CONFIGPROXY_AUTH_TOKEN from the hub Secret",
		Pod: "the proxy Deployment (--ip= --api-ip= --api-port=8001 --port=8000)", Why: "no pods for it; it outlives a killed Hub as the proxy pod does",
	},
}

// podSpec is what the Hub process gets from the rendered chart.
type podSpec struct {
	root       string   // laid out as PodConfigDir
	args       []string // the hub container's args, args[0] "jupyterhub"
	env        []string // the hub container's environment, resolved
	proxyToken string   // CONFIGPROXY_AUTH_TOKEN
	// serviceNames are the full names of the Services hub, proxy-api and proxy-public (the ConfigMap's name
	// templates, as z2jh.py's get_name returns them).
	serviceNames map[string]string
}

// localValues are PodDifferences' values as a values tree.
func (h *Hub) localValues(d *configData) (map[string]any, error) {
	tree := map[string]any{}
	for _, diff := range PodDifferences {
		if diff.value == nil {
			continue
		}
		v := diff.value(h, d)
		if v == nil {
			continue
		}
		if err := setPath(tree, strings.Split(diff.What, "."), v); err != nil {
			return nil, err
		}
	}
	return tree, nil
}

func setPath(tree map[string]any, path []string, v any) error {
	for _, k := range path[:len(path)-1] {
		next, ok := tree[k].(map[string]any)
		if !ok {
			if _, taken := tree[k]; taken {
				return fmt.Errorf("hubproc: values path %s: %q is not a map", strings.Join(path, "."), k)
			}
			next = map[string]any{}
			tree[k] = next
		}
		tree = next
	}
	tree[path[len(path)-1]] = v
	return nil
}

// preparePod renders z2jh's chart with the caller's values and PodDifferences' into dir/pod and lays out
// what the hub pod sees under PodConfigDir.
func (h *Hub) preparePod(ctx context.Context, d *configData) error {
	z := h.opts.Z2JH
	if os.Geteuid() != 0 {
		return errors.New("hubproc: z2jh's hub runs in a mount namespace of its own (" + PodConfigDir + "), which needs root")
	}
	if h.opts.ExtraConfig != "" {
		return errors.New("hubproc: Options.ExtraConfig does not apply to z2jh's config: use hub.extraConfig in Z2JH.Values")
	}
	local, err := h.localValues(d)
	if err != nil {
		return err
	}
	dir := filepath.Join(h.workDir, "pod")
	rendered, err := renderZ2JH(ctx, z, local, dir)
	if err != nil {
		return err
	}
	spec, err := layoutPod(rendered, z.Namespace, filepath.Join(dir, strings.TrimPrefix(PodConfigDir, "/")))
	if err != nil {
		return err
	}
	logscan.Register("the proxy's auth token (CONFIGPROXY_AUTH_TOKEN)", spec.proxyToken)
	// The mount point; empty on the machine, each Hub's own files are mounted on it in its namespace only.
	if err := os.MkdirAll(PodConfigDir, 0o755); err != nil {
		return fmt.Errorf("hubproc: mount point: %w", err)
	}
	h.pod = spec
	return nil
}

// renderZ2JH runs helm template of z2jh's chart with values (then local) and returns the hub's ConfigMap,
// Secret and Deployment. The values files are written to dir.
func renderZ2JH(ctx context.Context, z *Z2JH, local map[string]any, dir string) ([]byte, error) {
	if z.Helm == "" || z.Chart == "" || z.Namespace == "" {
		return nil, errors.New("hubproc: Z2JH needs Helm, Chart and Namespace")
	}
	if _, err := os.Stat(filepath.Join(z.Chart, "files", "hub", "jupyterhub_config.py")); err != nil {
		return nil, fmt.Errorf("hubproc: z2jh chart: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hubproc: %w", err)
	}
	release := z.Release
	if release == "" {
		release = "jhub"
	}
	args := []string{"template", release, z.Chart, "--namespace", z.Namespace,
		"--show-only", "templates/hub/configmap.yaml", "--show-only", "templates/hub/secret.yaml",
		"--show-only", "templates/hub/deployment.yaml"}
	if z.KubeVersion != "" {
		args = append(args, "--kube-version", z.KubeVersion)
	}
	localYAML, err := yaml.Marshal(local)
	if err != nil {
		return nil, fmt.Errorf("hubproc: %w", err)
	}
	for i, v := range append(slices.Clone(z.Values), localYAML) {
		name := fmt.Sprintf("values-%d.yaml", i)
		if i == len(z.Values) {
			name = "values-local.yaml" // PodDifferences
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, v, 0o600); err != nil {
			return nil, fmt.Errorf("hubproc: %w", err)
		}
		args = append(args, "-f", p)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, z.Helm, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hubproc: helm template z2jh: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := os.WriteFile(filepath.Join(dir, "rendered.yaml"), out, 0o600); err != nil {
		return nil, fmt.Errorf("hubproc: %w", err)
	}
	return out, nil
}

// layoutPod writes the files the hub container mounts under PodConfigDir into root, from the rendered
// ConfigMap, Secret and Deployment, and returns the container's args and environment.
func layoutPod(rendered []byte, namespace, root string) (*podSpec, error) {
	var (
		cm     *corev1.ConfigMap
		secret *corev1.Secret
		deploy *appsv1.Deployment
	)
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(rendered)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("hubproc: rendered z2jh: %w", err)
		}
		if len(bytes.TrimSpace(dropComments(doc))) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("hubproc: rendered z2jh: %w", err)
		}
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			cm = o
		case *corev1.Secret:
			secret = o
		case *appsv1.Deployment:
			deploy = o
		}
	}
	if cm == nil || secret == nil || deploy == nil {
		return nil, errors.New("hubproc: rendered z2jh has no hub ConfigMap, Secret or Deployment")
	}
	secretData := maps.Clone(secret.Data)
	if secretData == nil {
		secretData = map[string][]byte{}
	}
	for k, v := range secret.StringData {
		secretData[k] = []byte(v)
	}
	var hub *corev1.Container
	for i, c := range deploy.Spec.Template.Spec.Containers {
		if c.Name == "hub" {
			hub = &deploy.Spec.Template.Spec.Containers[i]
		}
	}
	if hub == nil {
		return nil, errors.New("hubproc: rendered hub Deployment has no container hub")
	}

	// Volumes: the ConfigMap and the Secret as files where the container mounts them; the database PVC
	// (/srv/jupyterhub) is the Hub's work dir. Anything else (hub.extraFiles, extraVolumes, existingSecret) has
	// no stand-in here.
	volumes := map[string]corev1.Volume{}
	for _, v := range deploy.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("hubproc: %w", err)
	}
	for _, m := range hub.VolumeMounts {
		v := volumes[m.Name]
		var files map[string][]byte
		mode := os.FileMode(0o644)
		switch {
		case v.PersistentVolumeClaim != nil && m.MountPath == "/srv/jupyterhub":
			continue
		case v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && len(v.ConfigMap.Items) == 0:
			files = map[string][]byte{}
			for k, s := range cm.Data {
				files[k] = []byte(s)
			}
		case v.Secret != nil && v.Secret.SecretName == secret.Name && len(v.Secret.Items) == 0:
			files, mode = secretData, 0o600
		default:
			return nil, fmt.Errorf("hubproc: the hub's volume %q at %s has no stand-in on the local cluster", m.Name, m.MountPath)
		}
		rel, ok := strings.CutPrefix(strings.TrimSuffix(m.MountPath, "/"), PodConfigDir)
		if !ok {
			return nil, fmt.Errorf("hubproc: the hub's volume %q is mounted at %s, outside %s", m.Name, m.MountPath, PodConfigDir)
		}
		if m.SubPath != "" {
			b, ok := files[m.SubPath]
			if !ok {
				return nil, fmt.Errorf("hubproc: volume %q has no key %q", m.Name, m.SubPath)
			}
			files = map[string][]byte{"": b}
		}
		for k, b := range files {
			p := filepath.Join(root, rel, k)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, fmt.Errorf("hubproc: %w", err)
			}
			if err := os.WriteFile(p, b, mode); err != nil {
				return nil, fmt.Errorf("hubproc: %w", err)
			}
		}
	}

	env, err := containerEnv(hub, namespace, cm, secret.Name, secretData)
	if err != nil {
		return nil, err
	}
	args := slices.Clone(hub.Args)
	if len(hub.Command) > 0 || len(args) == 0 || args[0] != "jupyterhub" {
		return nil, fmt.Errorf("hubproc: the hub container runs %q %q, not jupyterhub", hub.Command, hub.Args)
	}
	names := map[string]string{}
	for _, short := range []string{"hub", "proxy-api", "proxy-public"} {
		if names[short] = cm.Data[short]; names[short] == "" {
			return nil, fmt.Errorf("hubproc: the hub ConfigMap names no %s Service", short)
		}
	}
	return &podSpec{
		root: root, args: args, env: env, serviceNames: names,
		proxyToken: string(secretData["hub.config.ConfigurableHTTPProxy.auth_token"]),
	}, nil
}

// containerEnv resolves the hub container's env as the kubelet would: values, the namespace, keys of the
// hub Secret and ConfigMap.
func containerEnv(c *corev1.Container, namespace string, cm *corev1.ConfigMap, secretName string, secret map[string][]byte) ([]string, error) {
	if len(c.EnvFrom) > 0 {
		return nil, errors.New("hubproc: the hub container's envFrom has no stand-in on the local cluster")
	}
	var env []string
	for _, e := range c.Env {
		var v string
		switch f := e.ValueFrom; {
		case f == nil:
			v = e.Value
		case f.FieldRef != nil && f.FieldRef.FieldPath == "metadata.namespace":
			v = namespace
		case f.SecretKeyRef != nil && f.SecretKeyRef.Name == secretName:
			b, ok := secret[f.SecretKeyRef.Key]
			if !ok {
				return nil, fmt.Errorf("hubproc: env %s: the hub Secret has no key %q", e.Name, f.SecretKeyRef.Key)
			}
			v = string(b)
		case f.ConfigMapKeyRef != nil && f.ConfigMapKeyRef.Name == cm.Name:
			s, ok := cm.Data[f.ConfigMapKeyRef.Key]
			if !ok {
				return nil, fmt.Errorf("hubproc: env %s: the hub ConfigMap has no key %q", e.Name, f.ConfigMapKeyRef.Key)
			}
			v = s
		default:
			return nil, fmt.Errorf("hubproc: env %s: valueFrom has no stand-in on the local cluster", e.Name)
		}
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

// serviceEnv is what the kubelet puts in a pod for the Services hub, proxy-api and proxy-public of its
// namespace: their host and port, here on loopback.
func (h *Hub) serviceEnv() []string {
	var env []string
	for _, s := range []struct {
		short string
		port  int
	}{{"hub", h.ports[2]}, {"proxy-api", h.ports[1]}, {"proxy-public", h.ports[0]}} {
		prefix := strings.ToUpper(strings.ReplaceAll(h.pod.serviceNames[s.short], "-", "_"))
		env = append(env, prefix+"_SERVICE_HOST=127.0.0.1", prefix+"_SERVICE_PORT="+strconv.Itoa(s.port))
	}
	return env
}

// podEnv is the hub container's environment: a base (the venv instead of the image), the rendered
// container env, the Services' variables, Options.Env and the marker.
func (h *Hub) podEnv() []string {
	env := []string{
		"PATH=" + filepath.Join(h.opts.Venv, "bin") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + h.workDir,
		"LANG=C.UTF-8",
	}
	env = append(env, h.pod.env...)
	env = append(env, h.serviceEnv()...)
	env = append(env, h.opts.Env...)
	return append(env, MarkerEnv+"="+h.marker)
}

// launchPodHub starts jupyterhub with the hub container's args in a mount namespace of its own where
// PodConfigDir holds this Hub's files (read-only, as the pod's volumes are).
func (h *Hub) launchPodHub(ctx context.Context) (*exec.Cmd, error) {
	if err := h.ensureProxy(ctx); err != nil {
		return nil, err
	}
	const script = `mount --bind -o ro "$1" ` + PodConfigDir + ` && shift && exec "$@"`
	args := append([]string{"-c", script, "sh", h.pod.root, filepath.Join(h.opts.Venv, "bin", "jupyterhub")}, h.pod.args[1:]...)
	cmd := exec.CommandContext(context.WithoutCancel(ctx), "/bin/sh", args...)
	cmd.Dir = h.workDir // /srv/jupyterhub
	cmd.Stdout, cmd.Stderr = h.logFile, h.logFile
	cmd.Env = h.podEnv()
	// Unshareflags CLONE_NEWNS: Go makes every mount private in the child before the exec, so the bind mount
	// stays in the Hub's namespace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Unshareflags: syscall.CLONE_NEWNS}
	return cmd, nil
}

// ensureProxy starts configurable-http-proxy as z2jh's proxy pod runs it, unless it runs already (a Relaunch
// finds the proxy of the killed Hub, as a restarted hub pod finds the proxy pod), and waits for its API.
func (h *Hub) ensureProxy(ctx context.Context) error {
	if h.proxy != nil {
		select {
		case <-h.proxyDone:
		default:
			return nil
		}
	}
	hubURL := "http://127.0.0.1:" + strconv.Itoa(h.ports[2])
	cmd := exec.CommandContext(context.WithoutCancel(ctx), h.opts.CHPPath,
		"--ip=127.0.0.1", "--api-ip=127.0.0.1", "--api-port="+strconv.Itoa(h.ports[1]),
		"--default-target="+hubURL, "--error-target="+hubURL+"/hub/error", "--port="+strconv.Itoa(h.ports[0]))
	cmd.Dir = h.workDir
	cmd.Stdout, cmd.Stderr = h.logFile, h.logFile
	cmd.Env = []string{
		"PATH=" + filepath.Dir(h.opts.CHPPath) + ":" + os.Getenv("PATH"),
		"CONFIGPROXY_AUTH_TOKEN=" + h.pod.proxyToken,
		MarkerEnv + "=" + h.marker,
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("hubproc: start configurable-http-proxy: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	h.proxy, h.proxyDone = cmd, done
	api := net.JoinHostPort("127.0.0.1", strconv.Itoa(h.ports[1]))
	deadline := time.Now().Add(30 * time.Second)
	for {
		var dialer net.Dialer
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := dialer.DialContext(dctx, "tcp", api)
		cancel()
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("hubproc: configurable-http-proxy exited before its API answered on %s", api)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hubproc: configurable-http-proxy's API not up on %s after 30s", api)
		}
	}
}

// stopProxy ends the proxy hubproc started: SIGTERM, then SIGKILL after grace.
func (h *Hub) stopProxy(grace time.Duration) {
	if h.proxy == nil {
		return
	}
	_ = syscall.Kill(-h.proxy.Process.Pid, syscall.SIGTERM)
	select {
	case <-h.proxyDone:
	case <-time.After(grace):
		_ = syscall.Kill(-h.proxy.Process.Pid, syscall.SIGKILL)
		<-h.proxyDone
	}
}

// dropComments drops comment-only lines (helm's "# Source:" headers).
func dropComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
