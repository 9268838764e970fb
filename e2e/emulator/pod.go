package emulator

import (
	"context"
	"encoding/json"
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
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
)

// Environment variables that carry a process's pod identity (docs/architecture.md).
const (
	EnvNode         = "GPUHUB_SIM_NODE"
	EnvPodUID       = "GPUHUB_SIM_POD_UID"
	EnvPodNamespace = "GPUHUB_SIM_POD_NAMESPACE"
	EnvPodName      = "GPUHUB_SIM_POD_NAME"
)

// Waiting reasons the emulator reports.
const (
	ReasonNotAllowed   = "ProgramNotAllowed"
	ReasonConfigError  = "CreateContainerConfigError"
	ReasonCrashLoop    = "CrashLoopBackOff"
	ReasonContainerCfg = "ContainerCreating"
)

type container struct {
	spec     corev1.Container
	inv      invocation
	env      []string
	proc     *proc.Process
	started  time.Time
	ready    bool
	restarts int32
	last     *corev1.ContainerStateTerminated
	term     *corev1.ContainerStateTerminated
	waiting  *corev1.ContainerStateWaiting
	nextTry  time.Time
}

type podWorker struct {
	e       *Emulator
	pod     *corev1.Pod
	key     string
	nodeIdx int
	dir     string
	ip      string

	termOnce, killOnce sync.Once
	termCh, killCh     chan struct{}
	grace              time.Duration

	mu         sync.Mutex
	containers []*container
	// startTime is when the emulator first took the pod, as the kubelet sets status.startTime once.
	startTime metav1.Time
}

func (e *Emulator) newWorker(pod *corev1.Pod, idx int) *podWorker {
	return &podWorker{
		e: e, pod: pod.DeepCopy(), key: pod.Namespace + "/" + pod.Name, nodeIdx: idx,
		dir: podDir(e.opts.Dir, pod), termCh: make(chan struct{}), killCh: make(chan struct{}),
		startTime: metav1.NewTime(e.opts.Now()),
	}
}

// terminate starts a graceful stop (the pod was deleted with a grace period).
func (w *podWorker) terminate(pod *corev1.Pod) {
	w.termOnce.Do(func() {
		grace := 30 * time.Second
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		w.grace = min(grace, w.e.opts.MaxGrace)
		close(w.termCh)
	})
}

// kill stops the pod's processes at once (the pod object is gone, or the emulator stops).
func (w *podWorker) kill() { w.killOnce.Do(func() { close(w.killCh) }) }

func (w *podWorker) pids() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, c := range w.containers {
		if c.proc != nil {
			select {
			case <-c.proc.Done():
			default:
				out = append(out, c.proc.Pid())
			}
		}
	}
	return out
}

func (w *podWorker) logger() *slog.Logger {
	return w.e.log.With("pod", w.key, "node", w.pod.Spec.NodeName)
}

func (w *podWorker) run(ctx context.Context) {
	log := w.logger()
	if len(w.pod.Spec.InitContainers) > 0 {
		w.block(ctx, ReasonNotAllowed, "the node emulator does not run init containers")
		return
	}
	for _, c := range w.pod.Spec.Containers {
		inv, err := resolve(c, w.e.opts.Programs)
		if err != nil {
			w.block(ctx, ReasonNotAllowed, err.Error())
			return
		}
		w.containers = append(w.containers, &container{spec: c, inv: inv})
	}
	ip, err := w.e.ips.allocate(w.nodeIdx)
	if err != nil {
		w.block(ctx, ReasonConfigError, err.Error())
		return
	}
	w.ip = ip
	defer w.e.ips.release(ip)
	defer os.RemoveAll(w.dir)
	if err := os.MkdirAll(w.dir, 0o700); err != nil {
		w.block(ctx, ReasonConfigError, err.Error())
		return
	}
	for _, c := range w.containers {
		env, err := w.environment(ctx, c)
		if err != nil {
			w.block(ctx, ReasonConfigError, err.Error())
			return
		}
		c.env = env
	}
	for _, c := range w.containers {
		w.start(ctx, c)
	}
	w.patchStatus(ctx)
	log.Info("pod started", "ip", ip)

	exits := make(chan *container, len(w.containers))
	watch := func(c *container) {
		if c.proc == nil {
			return
		}
		p := c.proc
		go func() { <-p.Done(); exits <- c }()
	}
	for _, c := range w.containers {
		watch(c)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.stopAll(2 * time.Second)
			return
		case <-w.killCh:
			w.stopAll(2 * time.Second)
			return
		case <-w.termCh:
			w.e.event(ctx, w.pod, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping container(s) with grace %s", w.grace))
			w.stopAll(w.grace)
			w.e.finishDeletion(context.WithoutCancel(ctx), w.pod)
			log.Info("pod stopped and removed")
			return
		case c := <-exits:
			w.exited(ctx, c)
			w.patchStatus(ctx)
		case <-tick.C:
			changed := false
			for _, c := range w.containers {
				if c.proc == nil && c.waiting != nil && !c.nextTry.IsZero() && !w.e.opts.Now().Before(c.nextTry) {
					w.start(ctx, c)
					watch(c)
					changed = true
				}
				if r := w.probe(ctx, c); r != c.ready {
					c.ready, changed = r, true
				}
			}
			if changed {
				w.patchStatus(ctx)
			}
		}
	}
}

// block reports the pod as not startable and waits for its deletion.
func (w *podWorker) block(ctx context.Context, reason, msg string) {
	w.e.log.Warn("pod not started", "pod", w.key, "reason", reason, "msg", msg)
	w.mu.Lock()
	w.containers = nil
	for _, c := range append(append([]corev1.Container{}, w.pod.Spec.InitContainers...), w.pod.Spec.Containers...) {
		w.containers = append(w.containers, &container{spec: c,
			waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}})
	}
	w.mu.Unlock()
	w.e.event(ctx, w.pod, corev1.EventTypeWarning, "Failed", msg)
	w.patchStatus(ctx)
	select {
	case <-ctx.Done():
	case <-w.killCh:
	case <-w.termCh:
		w.e.finishDeletion(context.WithoutCancel(ctx), w.pod)
	}
}

func (w *podWorker) start(ctx context.Context, c *container) {
	port := containerPort(c.spec, c.inv.program.Port)
	args := bindArgs(c.inv, w.ip, port)
	home := filepath.Join(w.e.opts.Dir, "home", homeName(w.pod))
	if err := os.MkdirAll(home, 0o755); err != nil {
		c.waiting = &corev1.ContainerStateWaiting{Reason: ReasonConfigError, Message: err.Error()}
		return
	}
	p, err := proc.Start(ctx, w.e.log, proc.Spec{
		Name: w.key + "/" + c.spec.Name, Path: c.inv.program.Path, Args: args, Env: c.env, Dir: home,
		LogFile: filepath.Join(w.e.opts.Dir, "logs", w.pod.Namespace+"_"+w.pod.Name+"_"+c.spec.Name+".log"),
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		c.waiting = &corev1.ContainerStateWaiting{Reason: "RunContainerError", Message: err.Error()}
		c.nextTry = time.Time{}
		w.e.event(ctx, w.pod, corev1.EventTypeWarning, "Failed", err.Error())
		return
	}
	c.proc, c.started, c.waiting, c.term, c.ready = p, w.e.opts.Now(), nil, nil, false
	w.e.event(ctx, w.pod, corev1.EventTypeNormal, "Started",
		fmt.Sprintf("Started container %s: %s (pid %d, pod IP %s)", c.spec.Name, c.inv.program.Name, p.Pid(), w.ip))
}

// exited records a container's exit and applies the pod's restart policy with back-off.
func (w *podWorker) exited(ctx context.Context, c *container) {
	w.mu.Lock()
	defer w.mu.Unlock()
	code := int32(0)
	if err := c.proc.Err(); err != nil {
		var ee *exec.ExitError
		code = 1
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int32(ws.Signal())
			} else {
				code = int32(ee.ExitCode())
			}
		}
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	c.term = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
		StartedAt: metav1.NewTime(c.started), FinishedAt: metav1.NewTime(w.e.opts.Now()),
		ContainerID: fmt.Sprintf("emulator://%d", c.proc.Pid())}
	c.proc, c.ready = nil, false
	w.e.log.Info("container exited", "pod", w.key, "container", c.spec.Name, "exitCode", code)
	policy := w.pod.Spec.RestartPolicy
	if policy == corev1.RestartPolicyAlways || (policy == corev1.RestartPolicyOnFailure && code != 0) {
		backoff := min(10*time.Second<<min(c.restarts, 5), 5*time.Minute)
		c.restarts++
		c.last, c.term = c.term, nil
		c.nextTry = w.e.opts.Now().Add(backoff)
		c.waiting = &corev1.ContainerStateWaiting{Reason: ReasonCrashLoop,
			Message: fmt.Sprintf("back-off %s restarting failed container %s", backoff, c.spec.Name)}
		w.e.event(ctx, w.pod, corev1.EventTypeWarning, "BackOff", c.waiting.Message)
	}
}

func (w *podWorker) stopAll(grace time.Duration) {
	var wg sync.WaitGroup
	w.mu.Lock()
	for _, c := range w.containers {
		if c.proc != nil {
			wg.Add(1)
			go func(p *proc.Process) { defer wg.Done(); p.StopWithGrace(grace) }(c.proc)
		}
	}
	w.mu.Unlock()
	wg.Wait()
}

// probe runs the container's readiness probe (httpGet or tcpSocket); without one a running
// container is ready, as in Kubernetes.
func (w *podWorker) probe(ctx context.Context, c *container) bool {
	w.mu.Lock()
	running, started := c.proc != nil, c.started
	w.mu.Unlock()
	if !running {
		return false
	}
	pr := c.spec.ReadinessProbe
	if pr == nil {
		return true
	}
	if w.e.opts.Now().Sub(started) < time.Duration(pr.InitialDelaySeconds)*time.Second {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	switch {
	case pr.HTTPGet != nil:
		port := resolvePort(pr.HTTPGet.Port, c.spec)
		url := fmt.Sprintf("http://%s%s", net.JoinHostPort(w.ip, strconv.Itoa(int(port))), pr.HTTPGet.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case pr.TCPSocket != nil:
		port := resolvePort(pr.TCPSocket.Port, c.spec)
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(w.ip, strconv.Itoa(int(port))))
		if err != nil {
			return false
		}
		conn.Close()
		return true
	default:
		return true // exec probes are not emulated
	}
}

func resolvePort(p intstr.IntOrString, c corev1.Container) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

func containerPort(c corev1.Container, def int32) int32 {
	if len(c.Ports) > 0 {
		return c.Ports[0].ContainerPort
	}
	if def == 0 {
		return 8888
	}
	return def
}

// homeName keeps one home directory per Hub user (like a per-user PVC), else per pod.
func homeName(pod *corev1.Pod) string {
	if u := pod.Annotations["hub.jupyter.org/username"]; u != "" {
		return "user-" + strings.NewReplacer("/", "_", "..", "_").Replace(u)
	}
	return pod.Namespace + "_" + pod.Name
}

// patchStatus reports the pod's phase, IP, conditions and container statuses.
func (w *podWorker) patchStatus(ctx context.Context) {
	w.mu.Lock()
	now := metav1.NewTime(w.e.opts.Now())
	st := corev1.PodStatus{Phase: corev1.PodPending, HostIP: w.e.ips.nodeIP(w.nodeIdx).String(),
		HostIPs: []corev1.HostIP{{IP: w.e.ips.nodeIP(w.nodeIdx).String()}}}
	if w.ip != "" {
		st.PodIP, st.PodIPs = w.ip, []corev1.PodIP{{IP: w.ip}}
	}
	st.StartTime = ptr.To(w.startTime)
	allReady := true
	var running, waiting, stopped, succeeded int
	for _, c := range w.containers {
		cs := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, RestartCount: c.restarts,
			ImageID: "emulator://" + c.inv.program.Path}
		switch {
		case c.proc != nil:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.started)}
			cs.ContainerID = fmt.Sprintf("emulator://%d", c.proc.Pid())
			cs.Ready, cs.Started = c.ready, ptr.To(true)
			running++
		case c.term != nil:
			cs.State.Terminated = c.term
			cs.ContainerID = c.term.ContainerID
			cs.Started = ptr.To(false)
			stopped++
			if c.term.ExitCode == 0 {
				succeeded++
			}
		default:
			w := c.waiting
			if w == nil {
				w = &corev1.ContainerStateWaiting{Reason: ReasonContainerCfg}
			}
			cs.State.Waiting = w
			cs.Started = ptr.To(false)
			if c.last != nil {
				stopped++ // waiting to be restarted (back-off): it has run, as the kubelet counts it
			} else {
				waiting++
			}
		}
		if c.last != nil {
			cs.LastTerminationState.Terminated = c.last
		}
		allReady = allReady && cs.Ready
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	st.Phase = podPhase(w.pod.Spec.RestartPolicy, running, waiting, stopped, succeeded)
	anyRunning := running > 0
	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s, reason = corev1.ConditionTrue, ""
		}
		return corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now}
	}
	ready := allReady && anyRunning
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, w.ip != "", ""),
		cond(corev1.PodInitialized, true, ""),
		cond(corev1.ContainersReady, ready, "ContainersNotReady"),
		cond(corev1.PodReady, ready, "ContainersNotReady"),
		cond(corev1.PodScheduled, true, ""),
	}
	w.mu.Unlock()
	body, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return
	}
	_, err = w.e.client.CoreV1().Pods(w.pod.Namespace).Patch(ctx, w.pod.Name, types.StrategicMergePatchType, body,
		metav1.PatchOptions{}, "status")
	if err != nil && !isGone(err) && ctx.Err() == nil {
		w.e.log.Warn("patch pod status", "pod", w.key, "err", err)
	}
}

// podPhase is the kubelet's rule (getPhase in pkg/kubelet/kubelet_pods.go, without init containers): a
// container that never started keeps the pod Pending; one that runs makes it Running; when none runs, a pod
// whose containers are being restarted (restartPolicy Always, or OnFailure after a failure) stays Running,
// so a crash-looping agent keeps its pod IP and stays a Running pod to its readers, as on a real node.
func podPhase(policy corev1.RestartPolicy, running, waiting, stopped, succeeded int) corev1.PodPhase {
	switch {
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped > 0:
		switch {
		case policy == corev1.RestartPolicyAlways || policy == "":
			return corev1.PodRunning
		case stopped == succeeded:
			return corev1.PodSucceeded
		case policy == corev1.RestartPolicyNever:
			return corev1.PodFailed
		default:
			return corev1.PodRunning // OnFailure, restarting a failed container
		}
	}
	return corev1.PodPending
}

// environment builds a container's process environment: the base environment, HOME, the pod's
// env and envFrom (valueFrom resolved), the pod identity, and for Service programs a kubeconfig.
func (w *podWorker) environment(ctx context.Context, c *container) ([]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range w.e.opts.BaseEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set(k, v)
		}
	}
	set("HOME", filepath.Join(w.e.opts.Dir, "home", homeName(w.pod)))
	for _, ef := range c.spec.EnvFrom {
		data, err := w.envFromSource(ctx, ef)
		if err != nil {
			return nil, err
		}
		for k, v := range data {
			if envAllowed(ef.Prefix + k) {
				set(ef.Prefix+k, v)
			}
		}
	}
	for _, ev := range c.spec.Env {
		if !envAllowed(ev.Name) {
			continue
		}
		v, err := w.envValue(ctx, ev)
		if err != nil {
			return nil, err
		}
		set(ev.Name, v)
	}
	// KubeSpawner gives each server its own Hub token in the environment.
	for _, k := range []string{"JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN"} {
		logscan.Register(k+" of pod "+w.key, vars[k])
	}
	set(EnvNode, w.pod.Spec.NodeName)
	set(EnvPodUID, string(w.pod.UID))
	set(EnvPodNamespace, w.pod.Namespace)
	set(EnvPodName, w.pod.Name)
	switch c.inv.program.Kind {
	case Singleuser:
		// KubeSpawner advertises http://0.0.0.0:<port>/...; the process binds its pod IP.
		if u, ok := vars["JUPYTERHUB_SERVICE_URL"]; ok {
			set("JUPYTERHUB_SERVICE_URL", strings.Replace(u, "0.0.0.0", w.ip, 1))
		}
	case Service:
		kc, err := w.serviceAccountKubeconfig(ctx)
		if err != nil {
			return nil, err
		}
		set("KUBECONFIG", kc)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

func (w *podWorker) envValue(ctx context.Context, ev corev1.EnvVar) (string, error) {
	src := ev.ValueFrom
	if src == nil {
		return ev.Value, nil
	}
	switch {
	case src.FieldRef != nil:
		switch p := src.FieldRef.FieldPath; {
		case p == "metadata.name":
			return w.pod.Name, nil
		case p == "metadata.namespace":
			return w.pod.Namespace, nil
		case p == "metadata.uid":
			return string(w.pod.UID), nil
		case p == "spec.nodeName":
			return w.pod.Spec.NodeName, nil
		case p == "spec.serviceAccountName":
			return w.pod.Spec.ServiceAccountName, nil
		case p == "status.podIP" || p == "status.podIPs":
			return w.ip, nil
		case p == "status.hostIP" || p == "status.hostIPs":
			return w.e.ips.nodeIP(w.nodeIdx).String(), nil
		case strings.HasPrefix(p, "metadata.labels['"):
			return w.pod.Labels[strings.TrimSuffix(strings.TrimPrefix(p, "metadata.labels['"), "']")], nil
		case strings.HasPrefix(p, "metadata.annotations['"):
			return w.pod.Annotations[strings.TrimSuffix(strings.TrimPrefix(p, "metadata.annotations['"), "']")], nil
		default:
			return "", fmt.Errorf("env %s: fieldRef %q is not supported by the node emulator", ev.Name, p)
		}
	case src.SecretKeyRef != nil:
		s, err := w.e.client.CoreV1().Secrets(w.pod.Namespace).Get(ctx, src.SecretKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			if optional(src.SecretKeyRef.Optional) && apierrors.IsNotFound(err) {
				return "", nil
			}
			return "", fmt.Errorf("env %s: secret %s: %w", ev.Name, src.SecretKeyRef.Name, err)
		}
		return string(s.Data[src.SecretKeyRef.Key]), nil
	case src.ConfigMapKeyRef != nil:
		cm, err := w.e.client.CoreV1().ConfigMaps(w.pod.Namespace).Get(ctx, src.ConfigMapKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			if optional(src.ConfigMapKeyRef.Optional) && apierrors.IsNotFound(err) {
				return "", nil
			}
			return "", fmt.Errorf("env %s: configmap %s: %w", ev.Name, src.ConfigMapKeyRef.Name, err)
		}
		return cm.Data[src.ConfigMapKeyRef.Key], nil
	case src.ResourceFieldRef != nil:
		return "", nil // resource limits are not enforced by the emulator
	}
	return "", nil
}

func (w *podWorker) envFromSource(ctx context.Context, ef corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case ef.ConfigMapRef != nil:
		cm, err := w.e.client.CoreV1().ConfigMaps(w.pod.Namespace).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if optional(ef.ConfigMapRef.Optional) && apierrors.IsNotFound(err) {
				return out, nil
			}
			return nil, fmt.Errorf("envFrom configmap %s: %w", ef.ConfigMapRef.Name, err)
		}
		return cm.Data, nil
	case ef.SecretRef != nil:
		s, err := w.e.client.CoreV1().Secrets(w.pod.Namespace).Get(ctx, ef.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if optional(ef.SecretRef.Optional) && apierrors.IsNotFound(err) {
				return out, nil
			}
			return nil, fmt.Errorf("envFrom secret %s: %w", ef.SecretRef.Name, err)
		}
		for k, v := range s.Data {
			out[k] = string(v)
		}
	}
	return out, nil
}

func optional(b *bool) bool { return b != nil && *b }

// serviceAccountKubeconfig asks the TokenRequest API for a token of the pod's ServiceAccount,
// bound to the pod, and writes a kubeconfig with it: the process gets exactly the RBAC the
// chart grants that ServiceAccount.
func (w *podWorker) serviceAccountKubeconfig(ctx context.Context) (string, error) {
	sa := w.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := w.e.client.CoreV1().ServiceAccounts(w.pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](24 * 3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: w.pod.Name, UID: w.pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for serviceaccount %s/%s: %w", w.pod.Namespace, sa, err)
	}
	logscan.Register("ServiceAccount token of pod "+w.key, tr.Status.Token)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: w.e.opts.APIServer, CertificateAuthorityData: w.e.opts.CAData}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: sa, Namespace: w.pod.Namespace}
	cfg.CurrentContext = "local"
	path := filepath.Join(w.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write pod kubeconfig: %w", err)
	}
	return path, os.Chmod(path, 0o600)
}

// event records a core/v1 Event for the pod, as the kubelet does (KubeSpawner shows them).
func (e *Emulator) event(ctx context.Context, pod *corev1.Pod, typ, reason, msg string) {
	now := metav1.NewTime(e.opts.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace,
			Name: pod.Name, UID: pod.UID},
		Reason: reason, Message: msg, Type: typ, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		Source: corev1.EventSource{Component: "kubelet", Host: pod.Spec.NodeName},
	}
	if _, err := e.client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		e.log.Debug("event", "err", err)
	}
}

func isGone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}
