// Package gpuhubstack wires gpuhub into the local cluster the way a real install does: the gpu-agent
// DaemonSet and the RBAC of both services come from chart/gpuhub (rendered with helm template), the
// usage API runs as a local process on 127.0.0.1 with a token of the chart's usage ServiceAccount and
// is registered with the Hub as service gpu-usage. `make demo` and the e2e tests both use it.
package gpuhubstack

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
)

// ServiceName is the usage API's Hub service name (chart value usage.serviceName).
const ServiceName = "gpu-usage"

// GPUNodeSelector is the label the agent DaemonSet selects (GPU Feature Discovery; the emulated
// GPU nodes carry it as real ones do).
var GPUNodeSelector = map[string]string{"nvidia.com/gpu.present": "true"}

// QuotaServiceName is gpu-quota's Hub service name (chart value quota.serviceName). The Hub glue finds its url
// and api_token under this name in c.JupyterHub.services.
const QuotaServiceName = "gpu-quota"

// QuotaScopes are what gpu-quota needs from the Hub: users with their groups (the directory behind its
// decisions), their servers (what runs where) and stopping servers over a budget. The usage API and the glue
// authenticate to it with their own tokens; hubauth resolves those with GET /user, which needs no scope.
// e2e/hubint/quota runs gpu-quota with exactly these; chart/README.md documents them (TestZ2JHValues).
var QuotaScopes = []string{"list:users", "read:users:name", "read:users:groups", "read:servers", "delete:servers"}

// QuotaHubService registers gpu-quota at http://127.0.0.1:<port> with token (>= 8 characters), as z2jh's
// hub.services.gpu-quota does: the url tells the glue where to ask, the token is what it presents.
func QuotaHubService(port int, token string) hubproc.Service {
	return hubproc.Service{Name: QuotaServiceName, Token: token, URL: "http://127.0.0.1:" + strconv.Itoa(port), Scopes: QuotaScopes}
}

// NewToken returns a random service token.
func NewToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	logscan.Register("service token from gpuhubstack.NewToken", tok) // renamed when given to a Hub service
	return tok
}

// Chart describes how to render chart/gpuhub for the local cluster.
type Chart struct {
	Helm      string // helm executable
	Dir       string // chart/gpuhub
	Release   string // release name (default gpuhub)
	Namespace string // release namespace
	// AgentInterval is the agents' sampling interval (default 1s: the demo should move quickly).
	AgentInterval string
	// KubeVersion is the cluster's version (the chart's kubeVersion constraint is checked against it;
	// helm template alone assumes an old default). See ServerVersion.
	KubeVersion string
	// PodNamespace is the single-user pods' namespace (chart value usage.podNamespace) when it is not
	// Namespace: the usage API may read pods only there and in Namespace.
	PodNamespace string
	// NoQuota renders the chart without gpu-quota (quota.enabled=false); by default its ServiceAccount and
	// RBAC are rendered and installed too, so the local gpu-quota process runs with the chart's rights.
	NoQuota bool
	// NoProfiles renders the chart without gpu-profiles (profiles.enabled=false); by default its ServiceAccount
	// and RBAC are rendered and installed too, so the local gpu-profiles process runs with the chart's rights.
	NoProfiles bool
	// NoCuller renders the chart without gpu-culler (culler.enabled=false); by default its ServiceAccount and RBAC
	// (pods in PodNamespace; its Lease and stops ConfigMap in Namespace) are rendered and installed too, so a local
	// gpu-culler process runs with the chart's rights.
	NoCuller bool
	// UsageReplicas, QuotaReplicas, ProfilesReplicas and CullerReplicas are the chart's replicas values (0: the
	// chart's default, 1). Above 1 the chart renders what the replicas need: the usage API's ledger Lease and its
	// Role (with a PostgreSQL ledger, usage.databaseURLSecret), gpu-quota's --advertise-url.
	UsageReplicas, QuotaReplicas, ProfilesReplicas, CullerReplicas int
}

// ledgerURLSecret is the Secret the chart's usage Deployment reads its PostgreSQL URL from when it runs replicas;
// the local usage API gets the URL as a flag, so the Secret itself is never made.
const ledgerURLSecret = "gpuhub-ledger-url"

// ServerVersion asks the API server for its version (e.g. v1.36.3).
func ServerVersion(c kubernetes.Interface) (string, error) {
	v, err := c.Discovery().ServerVersion()
	if err != nil {
		return "", fmt.Errorf("server version: %w", err)
	}
	return v.GitVersion, nil
}

// Render runs helm template with the values the local cluster needs: simulated GPUs, no
// RuntimeClass (no container runtime), agents on the emulated GPU nodes. The chart's image
// reference names gpu-agent, which the node emulator maps to bin/gpu-agent.
func (c Chart) Render(ctx context.Context) ([]runtime.Object, error) {
	out, err := c.renderYAML(ctx)
	if err != nil {
		return nil, err
	}
	return decode(out)
}

func (c Chart) renderYAML(ctx context.Context) ([]byte, error) {
	if c.Release == "" {
		c.Release = "gpuhub"
	}
	if c.AgentInterval == "" {
		c.AgentInterval = "1s"
	}
	if _, err := os.Stat(c.Helm); err != nil {
		return nil, fmt.Errorf("helm %q not found (run `make helm`): %w", c.Helm, err)
	}
	args := []string{"template", c.Release, c.Dir, "--namespace", c.Namespace,
		"--set", "agent.backend=simulated", "--set", "agent.runtimeClassName=",
		"--set", "agent.interval=" + c.AgentInterval, "--set", "logFormat=text"}
	if c.KubeVersion != "" {
		args = append(args, "--kube-version", c.KubeVersion)
	}
	if c.PodNamespace != "" && c.PodNamespace != c.Namespace {
		args = append(args, "--set", "usage.podNamespace="+c.PodNamespace)
	}
	if !c.NoQuota {
		args = append(args, "--set", "quota.enabled=true")
	}
	if !c.NoProfiles {
		args = append(args, "--set", "profiles.enabled=true")
	}
	if !c.NoCuller {
		args = append(args, "--set", "culler.enabled=true")
	}
	for value, n := range map[string]int{"usage.replicas": c.UsageReplicas, "quota.replicas": c.QuotaReplicas,
		"profiles.replicas": c.ProfilesReplicas, "culler.replicas": c.CullerReplicas} {
		if n > 1 {
			args = append(args, "--set", value+"="+strconv.Itoa(n))
		}
	}
	if c.UsageReplicas > 1 {
		args = append(args, "--set", "usage.databaseURLSecret="+ledgerURLSecret)
	}
	for k, v := range GPUNodeSelector {
		args = append(args, "--set-string", "agent.nodeSelector."+escapeKey(k)+"="+v)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Helm, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, stderr.String())
	}
	return out, nil
}

// escapeKey escapes dots in a label key for helm --set.
func escapeKey(k string) string {
	var b bytes.Buffer
	for _, r := range k {
		if r == '.' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Decode reads helm template output (several YAML documents) into typed objects.
func Decode(manifests []byte) ([]runtime.Object, error) { return decode(manifests) }

func decode(manifests []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	var objs []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read rendered chart: %w", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decode rendered chart: %w", err)
		}
		objs = append(objs, obj)
	}
}

// stripComments drops comment-only lines (helm's "# Source:" headers).
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// Installed is what Install created.
type Installed struct {
	Namespace string
	// UsageServiceAccount is the chart's usage ServiceAccount (the identity the agents admit).
	UsageServiceAccount string
	// QuotaServiceAccount is the chart's gpu-quota ServiceAccount (empty when the chart has no quota); QuotaArgs
	// are the rendered gpu-quota Deployment's --lease-name (the Lease its Role names).
	QuotaServiceAccount string
	QuotaArgs           []string
	// ProfilesServiceAccount and ProfilesArgs are the same for gpu-profiles.
	ProfilesServiceAccount string
	ProfilesArgs           []string
	// CullerServiceAccount is the chart's gpu-culler ServiceAccount (empty when the chart has no culler);
	// CullerArgs the rendered Deployment's --lease-name and --stops-configmap (the objects its Role names).
	CullerServiceAccount string
	CullerArgs           []string
	AgentSelector        string
	// AgentAudience is the audience of the projected token the chart mounts into the usage Deployment
	// (the agents admit no other).
	AgentAudience string
	// UsageAgentArgs are the rendered usage Deployment's --agent-* flags (which pods are agents), except
	// --agent-token-file (the chart's path is inside the container): pass them to the usage process.
	UsageAgentArgs []string
	// UsageLeaseArgs are the rendered usage Deployment's --ledger-lease-namespace and --ledger-lease-name (the
	// Lease its Role names; rendered with more than one replica only).
	UsageLeaseArgs  []string
	clusterRoles    []string
	clusterBindings []string
	// Roles and bindings outside Namespace (usage.podNamespace), as namespace/name.
	roles, roleBindings []string
}

// objectNamespace is o's namespace, or the release namespace when the template leaves it out.
func objectNamespace(o metav1.Object, ns string) string {
	if o.GetNamespace() != "" {
		return o.GetNamespace()
	}
	return ns
}

// Install creates what the local cluster can run: ServiceAccounts, ClusterRoles, Roles and their
// bindings, and the agent DaemonSet. Skipped: the usage Deployment (it runs as a local process; its
// agent flags and token audience are kept in Installed), its PVC (no storage provisioner), Services (no
// kube-proxy) and NetworkPolicies (no CNI enforces them).
func Install(ctx context.Context, c kubernetes.Interface, ns string, objs []runtime.Object) (*Installed, error) {
	in, err := install(ctx, c, ns, objs, true)
	if err != nil {
		return in, err
	}
	if in.UsageServiceAccount == "" || in.AgentSelector == "" || in.AgentAudience == "" {
		return in, errors.New("rendered chart has no usage ServiceAccount, no agent DaemonSet or no agent token volume in the usage Deployment")
	}
	return in, nil
}

// InstallRBAC creates only the chart's ServiceAccounts, ClusterRoles, Roles and their bindings: the rights of
// gpuhub's services, for tests that run one of them as a local process with a token of its ServiceAccount.
func InstallRBAC(ctx context.Context, c kubernetes.Interface, ns string, objs []runtime.Object) (*Installed, error) {
	return install(ctx, c, ns, objs, false)
}

func install(ctx context.Context, c kubernetes.Interface, ns string, objs []runtime.Object, workloads bool) (*Installed, error) {
	in := &Installed{Namespace: ns}
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			switch o.Labels["app.kubernetes.io/component"] {
			case "usage-api":
				in.UsageServiceAccount = o.Name
			case "gpu-quota":
				in.QuotaServiceAccount = o.Name
			case "gpu-profiles":
				in.ProfilesServiceAccount = o.Name
			case "gpu-culler":
				in.CullerServiceAccount = o.Name
			}
			_, err = c.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			in.clusterRoles = append(in.clusterRoles, o.Name)
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			in.clusterBindings = append(in.clusterBindings, o.Name)
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			rns := objectNamespace(o, ns)
			if rns != ns {
				in.roles = append(in.roles, rns+"/"+o.Name)
			}
			_, err = c.RbacV1().Roles(rns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			rns := objectNamespace(o, ns)
			if rns != ns {
				in.roleBindings = append(in.roleBindings, rns+"/"+o.Name)
			}
			_, err = c.RbacV1().RoleBindings(rns).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.DaemonSet:
			in.AgentSelector = metav1.FormatLabelSelector(o.Spec.Selector)
			if workloads {
				_, err = c.AppsV1().DaemonSets(ns).Create(ctx, o, metav1.CreateOptions{})
			}
		case *appsv1.Deployment:
			switch o.Labels["app.kubernetes.io/component"] {
			case "usage-api":
				in.readUsageDeployment(o)
			case "gpu-quota":
				in.QuotaArgs = leaseArgs(o)
			case "gpu-profiles":
				in.ProfilesArgs = leaseArgs(o)
			case "gpu-culler":
				for _, ctr := range o.Spec.Template.Spec.Containers {
					in.CullerArgs = append(in.CullerArgs, cullerArgs(ctr.Args)...)
				}
			}
		}
		if err != nil {
			return in, fmt.Errorf("apply %T: %w", o, err)
		}
	}
	return in, nil
}

// leaseArgs are a rendered Deployment's --lease-name flags (the Lease its Role names).
func leaseArgs(d *appsv1.Deployment) []string {
	var out []string
	for _, ctr := range d.Spec.Template.Spec.Containers {
		for _, a := range ctr.Args {
			if strings.HasPrefix(a, "--lease-name=") {
				out = append(out, a)
			}
		}
	}
	return out
}

// readUsageDeployment keeps what the usage process needs from the Deployment it replaces.
func (in *Installed) readUsageDeployment(d *appsv1.Deployment) {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				in.AgentAudience = src.ServiceAccountToken.Audience
			}
		}
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--agent-") && !strings.HasPrefix(a, "--agent-token-file=") {
				in.UsageAgentArgs = append(in.UsageAgentArgs, a)
			}
			if strings.HasPrefix(a, "--ledger-lease-") {
				in.UsageLeaseArgs = append(in.UsageLeaseArgs, a)
			}
		}
	}
}

// Uninstall removes what Install created (the namespace takes its objects with it).
func (in *Installed) Uninstall(ctx context.Context, c kubernetes.Interface) {
	_ = c.CoreV1().Namespaces().Delete(ctx, in.Namespace, metav1.DeleteOptions{})
	for _, n := range in.clusterBindings {
		_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, n, metav1.DeleteOptions{})
	}
	for _, n := range in.clusterRoles {
		_ = c.RbacV1().ClusterRoles().Delete(ctx, n, metav1.DeleteOptions{})
	}
	for _, n := range in.roleBindings {
		ns, name, _ := strings.Cut(n, "/")
		_ = c.RbacV1().RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
	for _, n := range in.roles {
		ns, name, _ := strings.Cut(n, "/")
		_ = c.RbacV1().Roles(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// WaitAgents waits until every GPU node runs a ready agent pod.
func (in *Installed) WaitAgents(ctx context.Context, c kubernetes.Interface, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: GPUNodeSelector})})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		pods, err := c.CoreV1().Pods(in.Namespace).List(ctx, metav1.ListOptions{LabelSelector: in.AgentSelector})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		last = fmt.Sprintf("%d of %d GPU nodes have a ready agent", ready, len(nodes.Items))
		return len(nodes.Items) > 0 && ready == len(nodes.Items), nil
	})
	if err != nil {
		return fmt.Errorf("gpu-agents: %w (%s)", err, last)
	}
	return nil
}

// WriteAgentToken writes at path what the chart's projected volume gives the usage API: a TokenRequest
// token of the usage ServiceAccount for the agents' audience (the only token they admit). Nothing here
// rotates it as the kubelet would, so it lives a day, like the kubeconfig's.
func (in *Installed) WriteAgentToken(ctx context.Context, c kubernetes.Interface, path string) error {
	tr, err := c.CoreV1().ServiceAccounts(in.Namespace).CreateToken(ctx, in.UsageServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{in.AgentAudience}, ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("agent token for serviceaccount %s/%s: %w", in.Namespace, in.UsageServiceAccount, err)
	}
	logscan.Register("agent-audience token of ServiceAccount "+in.UsageServiceAccount, tr.Status.Token)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("agent token dir: %w", err)
	}
	if err := os.WriteFile(path, []byte(tr.Status.Token), 0o600); err != nil {
		return fmt.Errorf("write agent token: %w", err)
	}
	return nil
}

// WriteUsageKubeconfig writes a kubeconfig at path with a TokenRequest token of the usage
// ServiceAccount (the API server's audience): the usage API gets the chart's RBAC. The agents refuse
// this token; the usage API sends them the one of WriteAgentToken.
func (in *Installed) WriteUsageKubeconfig(ctx context.Context, c kubernetes.Interface, server string, ca []byte, path string) error {
	return in.WriteKubeconfig(ctx, c, in.UsageServiceAccount, server, ca, path)
}

// WriteKubeconfig writes a kubeconfig at path with a TokenRequest token (a day long) of ServiceAccount sa in the
// release namespace: a local process using it has exactly the chart's rights for that service.
func (in *Installed) WriteKubeconfig(ctx context.Context, c kubernetes.Interface, sa, server string, ca []byte, path string) error {
	if sa == "" {
		return errors.New("kubeconfig: the rendered chart has no such ServiceAccount")
	}
	tr, err := c.CoreV1().ServiceAccounts(in.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for serviceaccount %s/%s: %w", in.Namespace, sa, err)
	}
	logscan.Register("token of ServiceAccount "+sa, tr.Status.Token)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: sa, Namespace: in.Namespace}
	cfg.CurrentContext = "local"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("kubeconfig dir: %w", err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig for %s: %w", sa, err)
	}
	return os.Chmod(path, 0o600)
}

// Usage describes the usage API process.
type Usage struct {
	Binary         string // usage-api executable
	Port           int    // on 127.0.0.1 (the Hub service URL names it)
	Kubeconfig     string
	Database       string // SQLite ledger
	Namespace      string // single-user pods
	AgentNamespace string
	// AgentTokenFile holds the token for the agents (WriteAgentToken); AgentArgs are the chart's
	// --agent-* flags (Installed.UsageAgentArgs; they name AgentNamespace too and win over it).
	AgentTokenFile string
	AgentArgs      []string
	HubAPIURL      string
	Token          string // the service's Hub token
	// QuotaURL is gpu-quota's base URL with its prefix (Quota.URL); set, the usage API gets --quota-url and
	// lets gpu-quota's token read GPU-hours (--reader-services).
	QuotaURL string
	// CullerURL is gpu-culler's base URL with its prefix (Culler.URL); set, the admin view reads its decisions.
	CullerURL string
	// SessionTTL is --session-ttl (the admin view's sessions); empty: the usage API's default.
	SessionTTL string
	// Readers are further Hub services whose own token may read every user's data (--reader-services):
	// gpu-culler reads every GPU server's telemetry (api/v1/servers).
	Readers []string
	// AdviceReaders are the Hub services whose own token may read any user's right-size advice and nothing else
	// of other users (--advice-readers): gpu-profiles marks the spawn form's recommended choice with it.
	AdviceReaders []string
	Interval      string // default 1s
	HubRefresh    string // default 10s
	LogLevel      string // default info
	// LeaseArgs are the chart's --ledger-lease-* flags (Installed.UsageLeaseArgs): with several replicas on one
	// PostgreSQL ledger, the Lease holder writes it and the others follow. SessionKeyFile is --session-key-file,
	// the admin view's key that every replica shares (the chart's session Secret).
	LeaseArgs       []string
	SessionKeyFile  string
	ExtraEnvForTest []string
}

// URL is the API's base URL on loopback (direct, not through the proxy).
func (u Usage) URL() string { return u.BaseURL() + "api/v1/" }

// BaseURL is the service's URL on loopback with its prefix (gpu-quota's --usage-url).
func (u Usage) BaseURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/services/%s/", u.Port, ServiceName)
}

// serviceProcess is what every gpuhub Hub service's process gets: the Hub's API address, its own token and
// service name in the environment (as the Hub gives a managed service), and its listen address, URL prefix and
// log level (default info) as flags.
func serviceProcess(name, hubAPIURL, token string, port int, logLevel string) (env, args []string) {
	env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
		"JUPYTERHUB_API_URL=" + hubAPIURL, "JUPYTERHUB_API_TOKEN=" + token, "JUPYTERHUB_SERVICE_NAME=" + name,
	}
	args = []string{
		"--listen=127.0.0.1:" + strconv.Itoa(port), "--prefix=/services/" + name + "/",
		"--log-level=" + cmp.Or(logLevel, "info"),
	}
	return env, args
}

// Spec is the process description for proc.Start (readiness: /readyz).
func (u Usage) Spec() proc.Spec {
	env, args := serviceProcess(ServiceName, u.HubAPIURL, u.Token, u.Port, u.LogLevel)
	env = append(env, u.ExtraEnvForTest...)
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", u.Port)
	args = append(args,
		"--interval="+cmp.Or(u.Interval, "1s"), "--hub-refresh="+cmp.Or(u.HubRefresh, "10s"),
		"--namespace="+u.Namespace, "--agent-namespace="+u.AgentNamespace, "--agent-token-file="+u.AgentTokenFile,
		"--database="+u.Database, "--kubeconfig="+u.Kubeconfig,
	)
	readers := u.Readers
	if u.QuotaURL != "" {
		args = append(args, "--quota-url="+u.QuotaURL)
		readers = append([]string{QuotaServiceName}, readers...)
	}
	if u.CullerURL != "" {
		args = append(args, "--culler-url="+u.CullerURL)
	}
	if u.SessionTTL != "" {
		args = append(args, "--session-ttl="+u.SessionTTL)
	}
	if len(readers) > 0 {
		args = append(args, "--reader-services="+strings.Join(readers, ","))
	}
	if len(u.AdviceReaders) > 0 {
		args = append(args, "--advice-readers="+strings.Join(u.AdviceReaders, ","))
	}
	if u.SessionKeyFile != "" {
		args = append(args, "--session-key-file="+u.SessionKeyFile)
	}
	args = append(args, u.LeaseArgs...)
	return proc.Spec{
		Name: "usage-api",
		Path: u.Binary,
		Args: append(args, u.AgentArgs...),
		Env:  env,
		Ready: func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, ready, nil)
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
		StopGrace:    20 * time.Second,
	}
}
