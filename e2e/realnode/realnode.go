// Package realnode runs a real Kubernetes node for the e2e tests: containerd (Debian's, with its CRI plugin),
// the CNI bridge plugin (Debian's containernetworking-plugins), a kubelet and kube-proxy (iptables mode) built
// from k8s.io/kubernetes (e2e/kubebuild) and CoreDNS (e2e/corednsbuild), next to the control plane of e2e/cluster. Pods run in real containers (runc) from the
// images `make images` built, imported into containerd; nothing is pulled.
//
// Everything runs in the network namespace of the calling process, which the caller made for the test
// (e2e/scripts/in-netns.sh): the node's address, the pod network and the API server's node-facing address
// exist only there, and nothing routes out of it.
//
// What this machine needs (checked here, 2026-11-29, Debian 12 VM with cgroup v1):
//   - the kubelet configuration's failCgroupV1: false (v1.35+ refuse cgroup v1 otherwise);
//   - containerd's restrict_oom_score_adj: the machine withholds CAP_SYS_RESOURCE, so the negative
//     oom_score_adj the CRI gives sandboxes fails in runc ("can't get final child's PID from pipe");
//   - the processes enter only the network namespace (nsenter --net), not `ip netns exec`, whose fresh /sys
//     hides the cgroup mounts from the kubelet ("failed to find cgroup mounts").
package realnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/internal/netport"
)

// Options configures a node.
type Options struct {
	// Kubelet, KubeProxy, CoreDNS and KubeRouter are the executables; Containerd and Ctr default to those on
	// PATH. Without KubeRouter, NetworkPolicies are not enforced.
	Kubelet, KubeProxy, CoreDNS, KubeRouter, Containerd, Ctr string
	// CNIBinDir holds the CNI plugins (default /usr/lib/cni, Debian's containernetworking-plugins).
	CNIBinDir string
	// Dir is the node's state directory (containerd's root and state, the kubelet's root, logs).
	Dir string
	// Name and IP of the node; IP must be an address of this network namespace.
	Name string
	IP   net.IP
	// PodCIDR is the bridge's pod subnet on this node (e.g. 10.244.0.0/24), inside ClusterCIDR (the
	// cluster's pod range, 10.244.0.0/16); ServiceCIDR is the API server's service range, which pods reach
	// through the node (kube-proxy).
	PodCIDR, ClusterCIDR, ServiceCIDR string
	// Kubeconfig is the kubelet's identity (system:node:<Name>, group system:nodes); ClientCAFile is the CA
	// whose client certificates may call the kubelet's API (the API server's kubelet client).
	Kubeconfig, ClientCAFile string
	// ProxyKubeconfig is kube-proxy's identity (system:kube-proxy, bound to system:node-proxier by the
	// API server's default policy); DNSKubeconfig is CoreDNS's (DNSUser, given read access to Services,
	// EndpointSlices, Pods and Namespaces by Start).
	ProxyKubeconfig, DNSKubeconfig, DNSUser string
	// RouterKubeconfig is kube-router's identity (RouterUser, given read access to what its firewall needs by
	// Start).
	RouterKubeconfig, RouterUser string
	// Images are OCI archives to import into containerd before the kubelet starts; SandboxImage is the
	// reference of the pause image among them.
	Images       []string
	SandboxImage string
	// Labels are the node's labels at registration (--node-labels): GPU Operator's for its GPUs.
	Labels map[string]string
	// GPUs are the node's emulated GPUs, served through the kubelet's device-plugin API (DevicePlugins).
	GPUs []GPUResource
	// Client watches the node become Ready.
	Client kubernetes.Interface
	Logger *slog.Logger
}

// Node is a running node.
type Node struct {
	opts       Options
	socket     string
	containerd *proc.Process
	kubelet    *proc.Process
	// netnsBefore are the network namespaces under /var/run/netns before the node started; those the CRI
	// makes for pods are removed at Stop if a pod's teardown left them.
	netnsBefore map[string]bool
	proxy       *proc.Process
	dns         *proc.Process
	router      *proc.Process
	plugins     *DevicePlugins
}

// Start starts containerd, imports the images, starts the kubelet and waits until the Node is Ready.
func Start(ctx context.Context, opts Options) (_ *Node, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CNIBinDir == "" {
		opts.CNIBinDir = "/usr/lib/cni"
	}
	for _, tool := range []*string{&opts.Containerd, &opts.Ctr} {
		name := map[*string]string{&opts.Containerd: "containerd", &opts.Ctr: "ctr"}[tool]
		if *tool == "" {
			p, err := exec.LookPath(name)
			if err != nil {
				return nil, fmt.Errorf("%s not found (apt-get install -y containerd): %w", name, err)
			}
			*tool = p
		}
	}
	if _, err := os.Stat(filepath.Join(opts.CNIBinDir, "bridge")); err != nil {
		return nil, fmt.Errorf("CNI bridge plugin missing (apt-get install -y containernetworking-plugins): %w", err)
	}
	n := &Node{opts: opts, socket: filepath.Join(opts.Dir, "containerd", "containerd.sock"), netnsBefore: podNetns()}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if err := n.writeConfig(); err != nil {
		return nil, err
	}
	if n.containerd, err = proc.Start(ctx, opts.Logger, proc.Spec{
		Name: "containerd", Path: opts.Containerd,
		Args:    []string{"--config", filepath.Join(opts.Dir, "containerd", "config.toml")},
		LogFile: filepath.Join(opts.Dir, "logs", "containerd.log"),
		Ready: func(ctx context.Context) error {
			return exec.CommandContext(ctx, opts.Ctr, "--address", n.socket, "version").Run()
		},
	}); err != nil {
		return nil, err
	}
	for _, img := range opts.Images {
		if out, err := n.ctr(ctx, "images", "import", img); err != nil {
			return nil, fmt.Errorf("import %s: %w: %s", img, err, out)
		}
	}
	if n.dns, err = n.startDNS(ctx); err != nil {
		return nil, err
	}
	labels := make([]string, 0, len(opts.Labels))
	for k, v := range opts.Labels {
		labels = append(labels, k+"="+v)
	}
	slices.Sort(labels)
	if n.kubelet, err = proc.Start(ctx, opts.Logger, proc.Spec{
		Name: "kubelet", Path: opts.Kubelet,
		Args: []string{
			"--config=" + filepath.Join(opts.Dir, "kubelet", "config.yaml"),
			"--kubeconfig=" + opts.Kubeconfig,
			"--hostname-override=" + opts.Name, "--node-ip=" + opts.IP.String(),
			"--root-dir=" + filepath.Join(opts.Dir, "kubelet", "root"),
			"--cert-dir=" + filepath.Join(opts.Dir, "kubelet", "pki"),
			"--node-labels=" + strings.Join(labels, ","),
			"--v=1",
		},
		LogFile:      filepath.Join(opts.Dir, "logs", "kubelet.log"),
		Ready:        n.nodeReady,
		ReadyTimeout: 2 * time.Minute,
	}); err != nil {
		return nil, err
	}
	if n.proxy, err = n.startProxy(ctx); err != nil {
		return nil, err
	}
	if opts.KubeRouter != "" {
		if n.router, err = n.startRouter(ctx); err != nil {
			return nil, err
		}
	}
	if len(opts.GPUs) > 0 {
		// The kubelet's device manager uses /var/lib/kubelet/device-plugins whatever --root-dir says, so one real
		// node runs on a machine at a time.
		if n.plugins, err = StartDevicePlugins(ctx, pluginapi.DevicePluginPath, opts.GPUs, opts.Logger); err != nil {
			return nil, err
		}
		if err := n.waitAllocatable(ctx); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// startDNS starts CoreDNS on the node's address, port 53, as the cluster's DNS (the kubelet's clusterDNS):
// Services and pods of cluster.local from the API server, and nothing else (no forward: a name outside the
// cluster is not found, and no query leaves the namespace).
func (n *Node) startDNS(ctx context.Context) (*proc.Process, error) {
	if err := n.grant(ctx, "e2e-realnode:coredns", n.opts.DNSUser, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}); err != nil {
		return nil, fmt.Errorf("coredns: %w", err)
	}
	ports, err := netport.Free(1)
	if err != nil {
		return nil, err
	}
	ready := ports[0]
	corefile := fmt.Sprintf(`.:53 {
    bind %s
    errors
    ready 127.0.0.1:%d
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
`, n.opts.IP, ready, n.opts.DNSKubeconfig)
	path := filepath.Join(n.opts.Dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return nil, err
	}
	return proc.Start(ctx, n.opts.Logger, proc.Spec{
		Name: "coredns", Path: n.opts.CoreDNS,
		Args:    []string{"-conf", path},
		LogFile: filepath.Join(n.opts.Dir, "logs", "coredns.log"),
		Ready:   httpOK(fmt.Sprintf("http://127.0.0.1:%d/ready", ready)),
	})
}

// grant gives user the rules through a ClusterRole and ClusterRoleBinding named role.
func (n *Node) grant(ctx context.Context, role, user string, rules []rbacv1.PolicyRule) error {
	if _, err := n.opts.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("role %s: %w", role, err)
	}
	if _, err := n.opts.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("role binding %s: %w", role, err)
	}
	return nil
}

// startRouter starts kube-router with only its firewall (--run-firewall): it enforces NetworkPolicies with
// iptables and ipsets on the pods of this node; kube-proxy keeps the Services and the CNI bridge the pod
// network. Bridged pod-to-pod traffic reaches its rules through bridge-nf-call-iptables (startProxy).
func (n *Node) startRouter(ctx context.Context) (*proc.Process, error) {
	if err := n.grant(ctx, "e2e-realnode:kube-router", n.opts.RouterUser, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces", "pods", "services", "nodes", "endpoints"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
	}); err != nil {
		return nil, fmt.Errorf("kube-router: %w", err)
	}
	if _, err := exec.LookPath("ipset"); err != nil {
		return nil, fmt.Errorf("kube-router needs ipset (apt-get install -y ipset): %w", err)
	}
	ports, err := netport.Free(1)
	if err != nil {
		return nil, err
	}
	health := ports[0]
	return proc.Start(ctx, n.opts.Logger, proc.Spec{
		Name: "kube-router", Path: n.opts.KubeRouter,
		Args: []string{
			"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
			"--kubeconfig=" + n.opts.RouterKubeconfig, "--hostname-override=" + n.opts.Name,
			"--service-cluster-ip-range=" + n.opts.ServiceCIDR,
			fmt.Sprintf("--health-port=%d", health), "--metrics-port=0", "--v=1",
		},
		LogFile: filepath.Join(n.opts.Dir, "logs", "kube-router.log"),
		Ready:   httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", health)),
	})
}

// httpOK is a readiness check: GET url answers 200.
func httpOK(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// startProxy starts kube-proxy in iptables mode: Services' cluster IPs reach their endpoints from pods and
// from the namespace. It forwards between the pods' bridge and the node inside the namespace only.
func (n *Node) startProxy(ctx context.Context) (*proc.Process, error) {
	for path, value := range map[string]string{
		"/proc/sys/net/ipv4/ip_forward": "1",
		// A pod reaching a Service whose endpoint is on the same bridge goes through iptables only with this.
		"/proc/sys/net/bridge/bridge-nf-call-iptables": "1",
	} {
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return nil, fmt.Errorf("sysctl %s (in the test's network namespace): %w", path, err)
		}
	}
	ports, err := netport.Free(2)
	if err != nil {
		return nil, err
	}
	healthz, metrics := ports[0], ports[1]
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
# The conntrack table size is the machine's, not the namespace's: leave it.
conntrack: {maxPerCore: 0}
# No NodePorts on 127.0.0.1 (that needs route_localnet).
iptables: {localhostNodePorts: false}
`, n.opts.ProxyKubeconfig, n.opts.Name, n.opts.ClusterCIDR, healthz, metrics)
	path := filepath.Join(n.opts.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	return proc.Start(ctx, n.opts.Logger, proc.Spec{
		Name: "kube-proxy", Path: n.opts.KubeProxy,
		Args:    []string{"--config=" + path, "--v=1"},
		LogFile: filepath.Join(n.opts.Dir, "logs", "kube-proxy.log"),
		Ready:   httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz)),
	})
}

// waitAllocatable waits until the Node's allocatable has every emulated GPU resource with its count.
func (n *Node) waitAllocatable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var missing []string
	for ctx.Err() == nil {
		missing = missing[:0]
		node, err := n.opts.Client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
		if err == nil {
			for _, g := range n.opts.GPUs {
				if q, ok := node.Status.Allocatable[corev1.ResourceName(g.Name)]; !ok || q.Value() != int64(len(g.Devices)) {
					missing = append(missing, fmt.Sprintf("%s=%d", g.Name, len(g.Devices)))
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("node %s: allocatable never showed %s", n.opts.Name, strings.Join(missing, ", "))
}

func (n *Node) nodeReady(ctx context.Context) error {
	node, err := n.opts.Client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node %s not Ready yet", n.opts.Name)
}

// TagImage gives the imported image ref the further reference tag (ctr images tag), as pushing the same image
// under a new tag to a registry would: a pod naming tag runs it with no pull (IfNotPresent).
func (n *Node) TagImage(ctx context.Context, ref, tag string) error {
	if out, err := n.ctr(ctx, "images", "tag", "--force", ref, tag); err != nil {
		return fmt.Errorf("tag %s as %s: %w: %s", ref, tag, err, out)
	}
	return nil
}

func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, n.opts.Ctr, append([]string{"--address", n.socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
}

func (n *Node) writeConfig() error {
	dir := n.opts.Dir
	for _, d := range []string{"containerd/root", "containerd/state", "cni", "kubelet/root", "kubelet/pki", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	containerd := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # This machine withholds CAP_SYS_RESOURCE, so no process may lower its oom_score_adj: clamp the values
  # the CRI asks for to containerd's own, as rootless setups do.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"), n.socket, n.opts.SandboxImage,
		n.opts.CNIBinDir, filepath.Join(dir, "cni"))
	// Pods on a bridge with the node as their gateway; no masquerade: nothing leaves the namespace. The
	// address allocations stay in the node's directory (host-local's default is /var/lib/cni).
	cni := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"gpuhub-pods","plugins":[
 {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":%q},{"dst":"%s/32"}],"dataDir":%q}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
`, n.opts.PodCIDR, n.opts.ServiceCIDR, n.opts.IP, filepath.Join(dir, "cni", "ipam"))
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are v1 (see the package comment).
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
address: %s
readOnlyPort: 0
# Only holders of a client certificate of the cluster CA (the API server) may call the kubelet.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
failSwapOn: false
# Pods resolve cluster names through CoreDNS on the node; the node itself resolves nothing outside.
resolvConf: %q
clusterDNS: [%s]
clusterDomain: cluster.local
imageGCHighThresholdPercent: 100
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%%", "imagefs.available": "1%%"}
`, n.socket, n.opts.IP, n.opts.ClientCAFile, filepath.Join(dir, "kubelet", "resolv.conf"), n.opts.IP)
	for path, data := range map[string]string{
		"containerd/config.toml":      containerd,
		"cni/10-gpuhub-pods.conflist": cni,
		"kubelet/config.yaml":         kubelet,
		"kubelet/resolv.conf":         "nameserver 127.0.0.1\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, path), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the node: every pod's containers (killed), the kubelet, containerd and their shims; then it
// unmounts what they left mounted under Dir.
func (n *Node) Stop() {
	if n.plugins != nil {
		n.plugins.Stop()
	}
	if n.kubelet != nil {
		n.drain()
		n.kubelet.Stop()
	}
	if n.router != nil {
		n.router.Stop()
	}
	if n.proxy != nil {
		n.proxy.Stop()
	}
	if n.dns != nil {
		n.dns.Stop()
	}
	if n.containerd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Containers outlive containerd (their shims are their parents): kill and remove them first.
		if out, err := n.ctr(ctx, "tasks", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(string(out)) {
				_, _ = n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
			}
			deadline := time.Now().Add(10 * time.Second)
			for _, id := range strings.Fields(string(out)) {
				for time.Now().Before(deadline) {
					if _, err := n.ctr(ctx, "tasks", "rm", "--force", id); err == nil {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		}
		// A pod's shim lives until its sandbox container is removed, not only its tasks.
		if out, err := n.ctr(ctx, "containers", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(string(out)) {
				_, _ = n.ctr(ctx, "containers", "rm", id)
			}
		}
		n.containerd.Stop()
	}
	n.unmountAll()
	for name := range podNetns() {
		if !n.netnsBefore[name] {
			p := filepath.Join("/var/run/netns", name)
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			_ = os.Remove(p)
		}
	}
}

// drain deletes the node's pods and waits (30 s at most) until the kubelet has torn down their sandboxes:
// the CNI plugin gives back their addresses and removes their network namespaces, which killing the
// containers alone would leave behind.
func (n *Node) drain() {
	if n.opts.Client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Cordoned first: the pods of Deployments come back otherwise, faster than they are torn down.
	if node, err := n.opts.Client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{}); err == nil {
		node.Spec.Unschedulable = true
		_, _ = n.opts.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	}
	pods, err := n.opts.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.opts.Name})
	if err != nil {
		return
	}
	zero := int64(0)
	for _, p := range pods.Items {
		_ = n.opts.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	for ctx.Err() == nil {
		out, err := n.ctr(ctx, "tasks", "ls", "-q")
		if err != nil || len(strings.Fields(string(out))) == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// unmountAll unmounts everything mounted under the node's directory, deepest first (overlay roots, shm,
// the pods' volumes, network namespace files).
func (n *Node) unmountAll() {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == n.opts.Dir || strings.HasPrefix(f[4], n.opts.Dir+"/")) {
			mounts = append(mounts, f[4])
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			n.opts.Logger.Warn("unmount", "path", m, "err", err)
		}
	}
}

// podNetns lists the pod network namespaces the CRI keeps under /var/run/netns (cni-<id>).
func podNetns() map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "cni-") {
			out[e.Name()] = true
		}
	}
	return out
}

// PodResourcesDir is where the kubelet serves its pod-resources API (kubelet.sock), under its root directory.
func (n *Node) PodResourcesDir() string {
	return filepath.Join(n.opts.Dir, "kubelet", "root", "pod-resources")
}

// Logs returns the node's containerd and kubelet log paths, for a failing test to print.
func (n *Node) Logs() []string {
	var out []string
	for _, name := range []string{"containerd", "kubelet", "kube-proxy", "coredns", "kube-router"} {
		out = append(out, filepath.Join(n.opts.Dir, "logs", name+".log"))
	}
	return out
}
