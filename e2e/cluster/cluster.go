// Package cluster runs a real Kubernetes control plane on loopback: etcd, kube-apiserver (TLS,
// RBAC), kube-scheduler and kube-controller-manager, with state in a temporary directory.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/internal/netport"
)

// DefaultControllers are the kube-controller-manager controllers the harness needs: service
// accounts and namespaces (pods are refused without a default ServiceAccount), workloads
// (DaemonSet, Deployment, ReplicaSet for the chart's components), garbage collection and
// endpoint slices. nodelifecycle stays off: the node emulator owns node conditions and taints.
var DefaultControllers = []string{
	"serviceaccount-controller", "namespace-controller", "garbage-collector-controller",
	"daemonset-controller", "deployment-controller", "replicaset-controller", "job-controller",
	"endpointslice-controller", "root-ca-certificate-publisher-controller",
	"pod-garbage-collector-controller", "clusterrole-aggregation-controller",
}

// ServiceCIDR is the service cluster IP range: a setting only. Nothing routes or sends traffic
// to it (there is no kube-proxy); every address actually used is on 127.0.0.0/8.
const ServiceCIDR = "10.96.0.0/16"

// Options configures a control plane.
type Options struct {
	// BinDir holds kube-apiserver, kube-scheduler and kube-controller-manager.
	BinDir string
	// Etcd is the etcd executable (default: etcd on PATH).
	Etcd string
	// Dir is the state directory; empty means a new temporary directory removed by Stop.
	Dir string
	// Controllers overrides DefaultControllers; an empty list keeps the default.
	Controllers []string
	// NodeIP, when set, readies the API server for real kubelets (e2e/realnode): it is an address of the
	// network namespace the test made, the API server listens there too and advertises it, its serving
	// certificate names it, it reaches kubelets by their InternalIP with a client certificate of its own,
	// and nodes are authorized by the Node authorizer (kubeadm's Node,RBAC).
	NodeIP net.IP
	Logger *slog.Logger
	Now    func() time.Time
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	// Dir is the state directory (certificates, kubeconfigs, logs, etcd data).
	Dir string
	// Kubeconfig is the path of the admin kubeconfig (user "admin", group system:masters).
	Kubeconfig string
	// URL is the API server's address, https://127.0.0.1:<port>.
	URL string

	opts    Options
	pki     *pki
	tempDir bool
	etcdDir string
	caFile  string
	etcdURL string

	mu    sync.Mutex
	procs []*proc.Process
	// apiSpec and apiIdx let StartAPIServer bring the API server back on the same port, with the same
	// certificates, service-account key and etcd.
	apiSpec proc.Spec
	apiIdx  int
}

// Start starts etcd, the API server, the scheduler and the controller manager, in that order,
// each once the one before it is ready. It returns when the API server answers /readyz and the
// scheduler and controller manager answer /healthz.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if len(opts.Controllers) == 0 {
		opts.Controllers = DefaultControllers
	}
	if opts.Etcd == "" {
		p, err := exec.LookPath("etcd")
		if err != nil {
			return nil, fmt.Errorf("etcd not found (apt-get install -y etcd-server): %w", err)
		}
		opts.Etcd = p
	}
	for _, b := range []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%s missing in %q (run make kube-binaries): %w", b, opts.BinDir, err)
		}
	}
	cp := &ControlPlane{opts: opts, Dir: opts.Dir}
	if cp.Dir == "" {
		d, err := os.MkdirTemp("", "gpuhub-cluster-")
		if err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
		cp.Dir, cp.tempDir = d, true
	}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	for _, d := range []string{"pki", "logs"} {
		if err := os.MkdirAll(filepath.Join(cp.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
	}
	if err := cp.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx); err != nil {
		return nil, err
	}
	if err := cp.startScheduler(ctx); err != nil {
		return nil, err
	}
	if err := cp.startControllerManager(ctx); err != nil {
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) logFile(name string) string {
	return filepath.Join(cp.Dir, "logs", name+".log")
}

// etcdDataDir prefers tmpfs: etcd fsyncs every write and the state is thrown away anyway.
func (cp *ControlPlane) etcdDataDir() (string, error) {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "gpuhub-etcd-")
		if err == nil {
			cp.etcdDir = d
			return d, nil
		}
	}
	d := filepath.Join(cp.Dir, "etcd")
	return d, os.MkdirAll(d, 0o700)
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	pp := FreePorts(2)
	client, peer := pp[0], pp[1]
	data, err := cp.etcdDataDir()
	if err != nil {
		return fmt.Errorf("etcd data dir: %w", err)
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	p, err := proc.Start(ctx, cp.opts.Logger, proc.Spec{
		Name: "etcd",
		Path: cp.opts.Etcd,
		Args: []string{
			"--name=gpuhub", "--data-dir=" + data,
			"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=gpuhub=" + peerURL, "--log-level=warn", "--logger=zap",
		},
		LogFile: cp.logFile("etcd"),
		Ready:   httpReady(http.DefaultClient, clientURL+"/health"),
	})
	if err != nil {
		return err
	}
	cp.add(p)
	cp.etcdURL = clientURL
	return nil
}

func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	now := cp.opts.Now()
	ca, err := newCA(now)
	if err != nil {
		return err
	}
	cp.pki = ca
	dir := filepath.Join(cp.Dir, "pki")
	cp.caFile = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(cp.caFile, ca.ca.CertPEM, 0o644); err != nil {
		return fmt.Errorf("write ca: %w", err)
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP("10.96.0.1")}
	if cp.opts.NodeIP != nil {
		ips = append(ips, cp.opts.NodeIP)
	}
	serving, err := ca.issue(now, "kube-apiserver", nil, ips,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"}, true)
	if err != nil {
		return err
	}
	certFile, keyFile, err := writePair(dir, "apiserver", serving)
	if err != nil {
		return err
	}
	saKey, err := writeServiceAccountKey(dir)
	if err != nil {
		return err
	}
	port := freePort()
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	if cp.Kubeconfig, err = cp.WriteKubeconfig("admin", "admin", []string{"system:masters"}); err != nil {
		return err
	}
	adminClient, err := cp.httpClient("admin")
	if err != nil {
		return err
	}
	listen := []string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--authorization-mode=RBAC"}
	if ip := cp.opts.NodeIP; ip != nil {
		// 0.0.0.0 is the test's own network namespace: nothing outside it can connect.
		kubeletClient, err := ca.issue(now, "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil, false)
		if err != nil {
			return err
		}
		kcCert, kcKey, err := writePair(dir, "apiserver-kubelet-client", kubeletClient)
		if err != nil {
			return err
		}
		listen = []string{
			"--bind-address=0.0.0.0", "--advertise-address=" + ip.String(), "--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction", "--kubelet-preferred-address-types=InternalIP",
			"--kubelet-client-certificate=" + kcCert, "--kubelet-client-key=" + kcKey,
		}
	}
	cp.apiSpec = proc.Spec{
		Name: "kube-apiserver",
		Path: filepath.Join(cp.opts.BinDir, "kube-apiserver"),
		Args: append(listen,
			"--etcd-servers="+cp.etcdURL,
			"--secure-port="+strconv.Itoa(port),
			"--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile,
			"--client-ca-file="+cp.caFile,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file="+saKey, "--service-account-signing-key-file="+saKey,
			"--service-cluster-ip-range="+ServiceCIDR,
			"--allow-privileged=true",
			"--profiling=false",
			"--event-ttl=30m",
			"--v=1",
		),
		LogFile:      cp.logFile("kube-apiserver"),
		Ready:        httpReady(adminClient, cp.URL+"/readyz"),
		ReadyTimeout: 90 * time.Second,
	}
	p, err := proc.Start(ctx, cp.opts.Logger, cp.apiSpec)
	if err != nil {
		return err
	}
	cp.apiIdx = cp.add(p)
	return nil
}

// StopAPIServer stops the API server (SIGTERM, then SIGKILL after grace; grace 0 is a crash) and leaves
// etcd, the scheduler and the controller manager running: an API server outage as during an upgrade or a
// crash. It stops listening at SIGTERM (v1.36 then lingers ~10 s in its shutdown before it exits, hence the
// grace parameter); clients see refused connections until StartAPIServer.
func (cp *ControlPlane) StopAPIServer(grace time.Duration) {
	if p := cp.apiServer(); p != nil {
		p.StopWithGrace(grace)
	}
}

// StartAPIServer starts a stopped API server again on the same port with the same certificates,
// service-account signing key and etcd, so every kubeconfig and token stays valid, and waits for /readyz.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	old := cp.apiServer()
	if old == nil {
		return errors.New("control plane stopped")
	}
	select {
	case <-old.Done():
	default:
		return errors.New("kube-apiserver is still running; StopAPIServer first")
	}
	p, err := proc.Start(ctx, cp.opts.Logger, cp.apiSpec)
	if err != nil {
		return fmt.Errorf("restart kube-apiserver on %s: %w", cp.URL, err)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.procs == nil { // Stop ran meanwhile
		p.Stop()
		return errors.New("control plane stopped")
	}
	cp.procs[cp.apiIdx] = p
	return nil
}

func (cp *ControlPlane) apiServer() *proc.Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiIdx >= len(cp.procs) {
		return nil
	}
	return cp.procs[cp.apiIdx]
}

// add records a started component and returns its index.
func (cp *ControlPlane) add(p *proc.Process) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.procs = append(cp.procs, p)
	return len(cp.procs) - 1
}

func (cp *ControlPlane) startScheduler(ctx context.Context) error {
	kc, err := cp.WriteKubeconfig("kube-scheduler", "system:kube-scheduler", nil)
	if err != nil {
		return err
	}
	port := freePort()
	p, err := proc.Start(ctx, cp.opts.Logger, proc.Spec{
		Name: "kube-scheduler",
		Path: filepath.Join(cp.opts.BinDir, "kube-scheduler"),
		Args: []string{
			"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
			"--leader-elect=false", "--profiling=false", "--v=1",
		},
		LogFile: cp.logFile("kube-scheduler"),
		Ready:   httpReady(insecureLoopbackClient(), "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz"),
	})
	if err != nil {
		return err
	}
	cp.add(p)
	return nil
}

func (cp *ControlPlane) startControllerManager(ctx context.Context) error {
	kc, err := cp.WriteKubeconfig("kube-controller-manager", "system:kube-controller-manager", nil)
	if err != nil {
		return err
	}
	port := freePort()
	p, err := proc.Start(ctx, cp.opts.Logger, proc.Spec{
		Name: "kube-controller-manager",
		Path: filepath.Join(cp.opts.BinDir, "kube-controller-manager"),
		Args: []string{
			"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
			"--leader-elect=false", "--profiling=false",
			"--controllers=" + strings.Join(cp.opts.Controllers, ","),
			"--root-ca-file=" + cp.caFile,
			"--use-service-account-credentials=true", // each controller with its own RBAC role, as kubeadm runs it
			"--v=1",
		},
		LogFile: cp.logFile("kube-controller-manager"),
		Ready:   httpReady(insecureLoopbackClient(), "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz"),
	})
	if err != nil {
		return err
	}
	cp.add(p)
	return nil
}

// Stop stops the components in reverse order, waits for each to exit (no stray processes, ports
// released), and removes the state directory if Start created it.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	procs := cp.procs
	cp.procs = nil
	cp.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
	if cp.etcdDir != "" {
		_ = os.RemoveAll(cp.etcdDir)
	}
	if cp.tempDir {
		_ = os.RemoveAll(cp.Dir)
	}
}

// Pids returns the process ids of the running components.
func (cp *ControlPlane) Pids() map[string]int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	m := map[string]int{}
	for _, p := range cp.procs {
		m[p.Name()] = p.Pid()
	}
	return m
}

// RESTConfig returns a client configuration for a user authenticated by a client certificate
// with the given common name and groups (RBAC decides what it may do).
func (cp *ControlPlane) RESTConfig(user string, groups []string) (*rest.Config, error) {
	kp, err := cp.pki.issue(cp.opts.Now(), user, groups, nil, nil, false)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: cp.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: cp.pki.ca.CertPEM, CertData: kp.CertPEM, KeyData: kp.KeyPEM,
		},
		QPS: 100, Burst: 200,
	}, nil
}

// WriteKubeconfig writes <Dir>/<name>.kubeconfig for the given identity and returns its path.
func (cp *ControlPlane) WriteKubeconfig(name, user string, groups []string) (string, error) {
	kp, err := cp.pki.issue(cp.opts.Now(), user, groups, nil, nil, false)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.pki.ca.CertPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = "local"
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// CAData returns the cluster CA certificate (PEM).
func (cp *ControlPlane) CAData() []byte { return cp.pki.ca.CertPEM }

func (cp *ControlPlane) httpClient(user string) (*http.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(cp.Dir, user+".kubeconfig"))
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", user, err)
	}
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		return nil, fmt.Errorf("client cert %s: %w", user, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.CAData)
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}, nil
}

// insecureLoopbackClient checks the health of the scheduler and controller manager, which serve
// self-signed certificates on 127.0.0.1 only.
func insecureLoopbackClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed, loopback only
	}}
}

func httpReady(c *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

func freePort() int {
	return FreePorts(1)[0]
}

// FreePorts returns n distinct free loopback ports (netport.Free); it panics when none are left.
func FreePorts(n int) []int {
	ports, err := netport.Free(n)
	if err != nil {
		panic(err)
	}
	return ports
}

// FreePort returns one port from FreePorts.
func FreePort() int { return freePort() }
