// Package emulator is the node emulator of the local cluster: it registers the nodes of a GPU
// topology and keeps them Ready, and plays the kubelet for pods the real scheduler binds to them.
// A pod's containers run as local processes bound to a loopback pod IP; only allow-listed
// programs (jupyterhub-singleuser, gpuhub's gpu-agent) are ever run.
package emulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Options configures an Emulator.
type Options struct {
	Client   kubernetes.Interface
	Topology *Topology
	// Programs is the allow-list.
	Programs []Program
	// Dir holds per-user home directories, per-pod kubeconfigs and process logs.
	Dir string
	// APIServer and CAData go into the kubeconfigs handed to Service programs.
	APIServer string
	CAData    []byte
	// BaseEnv is the environment every process starts from (PATH etc.); the pod's env is added.
	BaseEnv []string
	// HeartbeatInterval is how often node conditions and leases are renewed (default 10 s).
	HeartbeatInterval time.Duration
	// MaxGrace caps a deleted pod's termination grace period (default 30 s).
	MaxGrace time.Duration
	// AddressBlock is the second octet of every node and pod address, 127.<block>.<node>.<host>. 0 picks one
	// at random among those no socket on this machine is bound in, so that stacks running side by side on one
	// machine (several engineers, or a demo beside the tests) never share a pod IP and port.
	AddressBlock byte
	Logger       *slog.Logger
	Now          func() time.Time
}

// Emulator plays the kubelet of every node in a topology.
type Emulator struct {
	opts    Options
	client  kubernetes.Interface
	log     *slog.Logger
	bootID  string
	started metav1.Time
	nodes   map[string]int // name -> index in the topology

	mu   sync.Mutex
	pods map[types.UID]*podWorker
	ips  *ipam
	wg   sync.WaitGroup
}

// New returns an emulator; Run registers the nodes and starts serving pods.
func New(opts Options) (*Emulator, error) {
	if opts.Client == nil || opts.Topology == nil {
		return nil, fmt.Errorf("emulator needs a client and a topology")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 10 * time.Second
	}
	if opts.MaxGrace == 0 {
		opts.MaxGrace = 30 * time.Second
	}
	if opts.Dir == "" {
		return nil, fmt.Errorf("emulator needs a state directory")
	}
	if opts.AddressBlock == 0 {
		opts.AddressBlock = freeBlock()
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	e := &Emulator{
		opts: opts, client: opts.Client, log: opts.Logger.With("component", "node-emulator"),
		bootID: hex.EncodeToString(b), started: metav1.NewTime(opts.Now()),
		nodes: map[string]int{}, pods: map[types.UID]*podWorker{}, ips: newIPAM(opts.AddressBlock, len(opts.Topology.Nodes)),
	}
	for i, n := range opts.Topology.Nodes {
		e.nodes[n.Name] = i
	}
	return e, nil
}

// Register creates the nodes and reports them Ready. Run calls it; it is separate so a caller
// can wait for the nodes before starting anything that schedules pods.
func (e *Emulator) Register(ctx context.Context) error {
	for i, n := range e.opts.Topology.Nodes {
		if err := e.registerNode(ctx, i, n); err != nil {
			return err
		}
		if err := e.heartbeat(ctx, n.Name); err != nil {
			return err
		}
	}
	return nil
}

// Run serves pods until ctx ends, then stops every process it started (grace, then kill) and
// returns. Call Register first.
func (e *Emulator) Run(ctx context.Context) error {
	if err := os.MkdirAll(e.opts.Dir, 0o755); err != nil {
		return fmt.Errorf("emulator dir: %w", err)
	}
	hbCtx, hbCancel := context.WithCancel(ctx)
	defer hbCancel()
	go e.heartbeats(hbCtx)

	factory := informers.NewSharedInformerFactoryWithOptions(e.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.observe(ctx, obj, false) },
		UpdateFunc: func(_, obj any) { e.observe(ctx, obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			e.observe(ctx, obj, true)
		},
	})
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod informer did not sync: %w", ctx.Err())
	}
	e.log.Info("node emulator running", "nodes", len(e.opts.Topology.Nodes))
	<-ctx.Done()
	factory.Shutdown()
	e.mu.Lock()
	for _, w := range e.pods {
		w.kill()
	}
	e.mu.Unlock()
	e.wg.Wait()
	return nil
}

// observe routes a pod event to the pod's worker, creating it for new pods on our nodes.
func (e *Emulator) observe(ctx context.Context, obj any, gone bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	idx, ours := e.nodes[pod.Spec.NodeName]
	if !ours {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	w, known := e.pods[pod.UID]
	if gone {
		if known {
			w.kill()
		}
		return
	}
	if !known {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			if pod.DeletionTimestamp != nil {
				// Nothing runs for it here (e.g. left from an earlier emulator): finish the deletion.
				go e.finishDeletion(context.WithoutCancel(ctx), pod)
			}
			return
		}
		w = e.newWorker(pod, idx)
		e.pods[pod.UID] = w
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			w.run(ctx)
			e.mu.Lock()
			delete(e.pods, pod.UID)
			e.mu.Unlock()
		}()
	}
	if pod.DeletionTimestamp != nil {
		w.terminate(pod)
	}
}

func (e *Emulator) finishDeletion(ctx context.Context, pod *corev1.Pod) {
	err := e.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64), Preconditions: metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !isGone(err) {
		e.log.Warn("delete pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// Processes returns the pids of the processes running for each pod, keyed by namespace/name.
func (e *Emulator) Processes() map[string][]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string][]int{}
	for _, w := range e.pods {
		out[w.key] = w.pids()
	}
	return out
}

// KillContainer sends sig to the process group of the running container `container` of pod namespace/name, as
// a container runtime does when a container is killed (kill -9, OOM). Only processes this emulator started
// for that pod are touched. The container's exit is then handled like any other: its restart policy applies,
// with the kubelet's back-off (10 s before the first restart). It returns the pid that was signalled.
func (e *Emulator) KillContainer(namespace, pod, container string, sig syscall.Signal) (int, error) {
	key := namespace + "/" + pod
	e.mu.Lock()
	var w *podWorker
	for _, pw := range e.pods {
		if pw.key == key {
			w = pw
			break
		}
	}
	e.mu.Unlock()
	if w == nil {
		return 0, fmt.Errorf("pod %s does not run on the emulated nodes", key)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.containers {
		if c.spec.Name != container {
			continue
		}
		if c.proc == nil {
			return 0, fmt.Errorf("container %s of pod %s is not running", container, key)
		}
		pid := c.proc.Pid()
		// proc starts each container in its own process group (pgid = pid).
		if err := syscall.Kill(-pid, sig); err != nil {
			return 0, fmt.Errorf("signal %s to container %s of pod %s (pid %d): %w", sig, container, key, pid, err)
		}
		return pid, nil
	}
	return 0, fmt.Errorf("pod %s has no container %s", key, container)
}

// AddressPrefix is what every node and pod address of this emulator starts with: "127.<block>.".
func (e *Emulator) AddressPrefix() string { return fmt.Sprintf("127.%d.", e.ips.block) }

// ipam hands out unique loopback pod IPs: node i (0-based) owns 127.<block>.<i+1>.2-254.
type ipam struct {
	block byte
	mu    sync.Mutex
	used  map[string]bool
	next  []int
}

func newIPAM(block byte, nodes int) *ipam {
	return &ipam{block: block, used: map[string]bool{}, next: make([]int, nodes)}
}

// nodeIP is the loopback InternalIP of the i-th node (0-based): 127.<block>.<i+1>.1.
func (a *ipam) nodeIP(i int) net.IP { return net.IPv4(127, a.block, byte(i+1), 1) }

// freeBlock picks a second octet in 10-249, starting at a random one, in which no TCP socket of this machine
// is bound (/proc/net/tcp); 10 when /proc cannot be read.
func freeBlock() byte {
	used := map[byte]bool{}
	if b, err := os.ReadFile("/proc/net/tcp"); err == nil {
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			// local_address is the IPv4 address as little-endian hex, then :port.
			hexIP, _, _ := strings.Cut(f[1], ":")
			if v, err := strconv.ParseUint(hexIP, 16, 32); err == nil && byte(v) == 127 {
				used[byte(v>>8)] = true
			}
		}
	} else {
		return 10
	}
	start := mathrand.IntN(240)
	for i := range 240 {
		if b := byte(10 + (start+i)%240); !used[b] {
			return b
		}
	}
	return byte(10 + start)
}

func (a *ipam) allocate(node int) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for range 253 {
		host := 2 + a.next[node]%253
		a.next[node]++
		ip := net.IPv4(127, a.block, byte(node+1), byte(host)).String()
		if !a.used[ip] {
			a.used[ip] = true
			return ip, nil
		}
	}
	return "", fmt.Errorf("no free pod IP on node %d", node)
}

func (a *ipam) release(ip string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, ip)
}

func podDir(root string, pod *corev1.Pod) string {
	return filepath.Join(root, "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)[:8])
}
