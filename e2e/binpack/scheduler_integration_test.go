//go:build integration

package binpack

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/emulator"
)

const (
	resGPU    = corev1.ResourceName("nvidia.com/gpu")
	resMIG1g  = corev1.ResourceName("nvidia.com/mig-1g.5gb")
	resMIG3g  = corev1.ResourceName("nvidia.com/mig-3g.20gb")
	poolLabel = "gpuhub.io/binpack-pool"
	namespace = "binpack"
)

func kubeBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("GPUHUB_KUBE_BIN")
	if bin == "" {
		t.Fatal("GPUHUB_KUBE_BIN is not set: run `make binpack-test`, which builds kube-scheduler")
	}
	return bin
}

// The three scorings side by side, each a profile of one kube-scheduler: kube-scheduler's defaults (what a stock
// scheduler does with GPU pods), z2jh 4.4.0's user-scheduler as it ships, and z2jh with gpuhub's fragment.
var profileNames = []string{"stock", "z2jh", "gpuhub"}

func profiles(t *testing.T) map[string]Values {
	t.Helper()
	z2jh, fragment := loadValues(t)
	def, err := UserSchedulerProfile(z2jh, "binpack-z2jh")
	if err != nil {
		t.Fatal(err)
	}
	gpuhub, err := UserSchedulerProfile(Merge(z2jh, fragment), "binpack-gpuhub")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Values{"stock": {"schedulerName": "binpack-stock"}, "z2jh": def, "gpuhub": gpuhub}
}

// TestSchedulerAcceptsFragment runs the real kube-scheduler on the configuration z2jh renders with the fragment,
// up to the point where it has built every profile's plugins (--write-config-to exits there, before it talks to
// any API server), and checks the scoring it completed is the fragment's. A weight out of range is refused, so
// the check is not vacuous.
func TestSchedulerAcceptsFragment(t *testing.T) {
	bin := filepath.Join(kubeBin(t), "kube-scheduler")
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	// Never contacted: --write-config-to exits before the scheduler connects.
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: unused}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	gpuhub := profiles(t)["gpuhub"]
	want, err := NodeResourcesFitScoring(gpuhub)
	if err != nil {
		t.Fatal(err)
	}
	run := func(profile Values) (Values, string, error) {
		cfg, err := SchedulerConfig(kc, profile)
		if err != nil {
			t.Fatal(err)
		}
		in, out := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "completed.yaml")
		_ = os.Remove(out)
		if err := os.WriteFile(in, cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		msg, err := exec.CommandContext(ctx, bin, "--config="+in, "--write-config-to="+out, "--secure-port=0").CombinedOutput()
		if err != nil {
			return nil, string(msg), err
		}
		completed, err := ReadValues(out)
		return completed, string(msg), err
	}

	completed, msg, err := run(gpuhub)
	if err != nil {
		t.Fatalf("kube-scheduler refuses the configuration z2jh renders with the fragment: %v\n%s", err, msg)
	}
	ps, _ := completed["profiles"].([]any)
	if len(ps) != 1 {
		t.Fatalf("completed configuration has %d profiles, want 1", len(ps))
	}
	got, err := NodeResourcesFitScoring(ps[0].(Values))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scoring kube-scheduler completed (-fragment +kube-scheduler):\n%s", diff)
	}

	// Out of range: refused, naming the resource.
	bad := Merge(Values{}, gpuhub)
	bad["pluginConfig"] = []any{Values{"name": "NodeResourcesFit", "args": Values{"scoringStrategy": Values{
		"type": "MostAllocated", "resources": []any{Values{"name": "nvidia.com/gpu", "weight": 101}}}}}}
	if _, msg, err := run(bad); err == nil || !strings.Contains(msg, "nvidia.com/gpu") {
		t.Errorf("kube-scheduler accepted weight 101 (err %v):\n%s", err, msg)
	}
}

// world is the control plane, the scheduler with the three profiles, and the nodes of every pool.
type world struct {
	t *testing.T // the running (sub)test: each scenario sets it

	ctx    context.Context
	client kubernetes.Interface
}

// TestSideBySide schedules the same sequences of GPU pods with the three scorings, each onto its own identical
// set of emulated GPU nodes (a pool: a node label and the pods' nodeSelector), with the real kube-scheduler. No
// kubelet is needed: the scheduler binds, and the test reads spec.nodeName.
func TestSideBySide(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: kubeBin(t), Controllers: []string{"serviceaccount-controller"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ctx: ctx, client: client}

	// Nodes first, so the scheduler starts with all of them.
	h100 := func(name, pool string) emulator.NodeSpec {
		return emulator.NodeSpec{Name: name, Labels: map[string]string{poolLabel: pool,
			"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "4"},
			Resources: map[string]string{"cpu": "64", "memory": "512Gi", "pods": "110", string(resGPU): "4"}}
	}
	// The local topology's gpu-a100-0: two A100 40GB, MIG mixed, each 1x 3g.20gb + 4x 1g.5gb.
	a100 := func(name, pool string) emulator.NodeSpec {
		return emulator.NodeSpec{Name: name, Labels: map[string]string{poolLabel: pool,
			"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "2",
			"nvidia.com/mig.strategy": "mixed"},
			Resources: map[string]string{"cpu": "64", "memory": "512Gi", "pods": "110", string(resGPU): "0",
				string(resMIG3g): "2", string(resMIG1g): "8"}}
	}
	scenarios := []struct {
		name  string
		nodes int
		spec  func(name, pool string) emulator.NodeSpec
	}{{"whole", 4, h100}, {"neighbours", 3, h100}, {"mig", 3, a100}}
	var topo emulator.Topology
	for _, s := range scenarios {
		for _, p := range profileNames {
			for i := range s.nodes {
				topo.Nodes = append(topo.Nodes, s.spec(fmt.Sprintf("%s-%s-%d", s.name, p, i), s.name+"-"+p))
			}
		}
	}
	em, err := emulator.New(emulator.Options{Client: client, Topology: &topo, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := em.Register(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startScheduler(ctx, t, cp)
	w.waitServiceAccount()
	t.Logf("control plane, %d nodes and the scheduler ready in %.1fs", len(topo.Nodes), time.Since(start).Seconds())

	t.Run("whole GPUs", w.wholeGPUs)
	t.Run("CPU neighbours", w.cpuNeighbours)
	t.Run("MIG mixed", w.migMixed)
	t.Logf("side by side done in %.1fs", time.Since(start).Seconds())
}

// startScheduler runs a second kube-scheduler, with the three profiles, beside the control plane's default one
// (which leaves pods of other scheduler names alone).
func startScheduler(ctx context.Context, t *testing.T, cp *cluster.ControlPlane) {
	t.Helper()
	kc, err := cp.WriteKubeconfig("binpack-scheduler", "system:kube-scheduler", nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := profiles(t)
	cfg, err := SchedulerConfig(kc, ps["stock"], ps["z2jh"], ps["gpuhub"])
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(cp.Dir, "binpack-scheduler.yaml")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(cluster.FreePort())
	logFile := filepath.Join(cp.Dir, "logs", "binpack-scheduler.log")
	insecure := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed, loopback only
	}}
	p, err := proc.Start(ctx, slog.New(slog.DiscardHandler), proc.Spec{
		Name: "binpack-scheduler",
		Path: filepath.Join(kubeBin(t), "kube-scheduler"),
		Args: []string{"--config=" + cfgFile, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1", "--secure-port=" + port, "--profiling=false", "--v=1"},
		LogFile: logFile,
		Ready: func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+port+"/healthz", nil)
			if err != nil {
				return err
			}
			resp, err := insecure.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("healthz: %s", resp.Status)
			}
			return nil
		},
	})
	if err != nil {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("kube-scheduler with the three profiles: %v\n%s", err, b)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("--- binpack-scheduler log ---\n%s", tail(string(b), 40))
		}
		p.Stop()
	})
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (w *world) waitServiceAccount() {
	for w.ctx.Err() == nil {
		if _, err := w.client.CoreV1().ServiceAccounts(namespace).Get(w.ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.t.Fatal("no default ServiceAccount in namespace binpack")
}

// request is what one pod asks for: cpu and memory, plus extended resources (as limits, as KubeSpawner's
// extra_resource_limits do).
type request struct {
	cpu, mem string
	ext      map[corev1.ResourceName]int64
}

func gpus(n int64) request {
	return request{cpu: "4", mem: "32Gi", ext: map[corev1.ResourceName]int64{resGPU: n}}
}

func (r request) pod(name, profile, pool, nodeName string) *corev1.Pod {
	limits := corev1.ResourceList{}
	for k, v := range r.ext {
		limits[k] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{poolLabel: pool}},
		Spec: corev1.PodSpec{
			SchedulerName:                 "binpack-" + profile,
			NodeName:                      nodeName,
			NodeSelector:                  map[string]string{poolLabel: pool},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "notebook", Image: "gpuhub.invalid/never-pulled",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(r.cpu), corev1.ResourceMemory: resource.MustParse(r.mem)},
					Limits:   limits,
				}}},
		},
	}
}

// place creates the same pod in every profile's pool of a scenario and returns the node each was bound to, ""
// where the scheduler found it unschedulable.
func (w *world) place(scenario, name string, r request) map[string]string {
	w.t.Helper()
	for _, p := range profileNames {
		pod := r.pod(scenario+"-"+p+"-"+name, p, scenario+"-"+p, "")
		if _, err := w.client.CoreV1().Pods(namespace).Create(w.ctx, pod, metav1.CreateOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
	out := map[string]string{}
	for _, p := range profileNames {
		out[p] = w.waitScheduled(scenario + "-" + p + "-" + name)
	}
	return out
}

// pin binds the same pod directly to node <index> of every pool (the scheduler only counts it): the state of
// the cluster before the scenario starts.
func (w *world) pin(scenario, name string, node int, r request) {
	w.t.Helper()
	for _, p := range profileNames {
		pool := scenario + "-" + p
		pod := r.pod(pool+"-"+name, p, pool, fmt.Sprintf("%s-%d", pool, node))
		if _, err := w.client.CoreV1().Pods(namespace).Create(w.ctx, pod, metav1.CreateOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
}

func (w *world) waitScheduled(name string) string {
	w.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		pod, err := w.client.CoreV1().Pods(namespace).Get(w.ctx, name, metav1.GetOptions{})
		if err != nil {
			w.t.Fatal(err)
		}
		if pod.Spec.NodeName != "" {
			return pod.Spec.NodeName
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return ""
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("pod %s neither bound nor unschedulable after 20s", name)
	return ""
}

// remove deletes a probe pod from every pool at once (no kubelet to wait for) and waits until it is gone.
func (w *world) remove(scenario, name string) {
	w.t.Helper()
	for _, p := range profileNames {
		n := scenario + "-" + p + "-" + name
		err := w.client.CoreV1().Pods(namespace).Delete(w.ctx, n, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil {
			w.t.Fatal(err)
		}
		for {
			_, err := w.client.CoreV1().Pods(namespace).Get(w.ctx, n, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if w.ctx.Err() != nil {
				w.t.Fatalf("pod %s not deleted", n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// summaries measures every pool of a scenario.
func (w *world) summaries(scenario string, counted []corev1.ResourceName, size map[corev1.ResourceName]int64) map[string]Summary {
	w.t.Helper()
	out := map[string]Summary{}
	for _, p := range profileNames {
		sel := metav1.ListOptions{LabelSelector: poolLabel + "=" + scenario + "-" + p}
		nodes, err := w.client.CoreV1().Nodes().List(w.ctx, sel)
		if err != nil {
			w.t.Fatal(err)
		}
		pods, err := w.client.CoreV1().Pods(namespace).List(w.ctx, sel)
		if err != nil {
			w.t.Fatal(err)
		}
		out[p] = Summarize(Occupancy(nodes.Items, pods.Items, counted), size)
	}
	return out
}

// table logs the side-by-side table: one row per profile, then the probes' outcomes.
func (w *world) table(title, unit string, s map[string]Summary, probes []string, placed []map[string]string) {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scoring\tnodes used\tfragmented\tfully free\tlargest free block (%s)", unit)
	for _, p := range probes {
		fmt.Fprintf(tw, "\t%s", p)
	}
	fmt.Fprintln(tw)
	for _, p := range profileNames {
		v := s[p]
		fmt.Fprintf(tw, "%s\t%d of %d\t%d\t%d\t%d", p, v.Used, v.Nodes, v.Fragmented, v.Free, v.LargestFree)
		for i := range probes {
			outcome := "fits"
			if placed[i][p] == "" {
				outcome = "Unschedulable"
			}
			fmt.Fprintf(tw, "\t%s", outcome)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	w.t.Logf("%s\n%s", title, b.String())
}

func (w *world) expect(what string, got, want any) {
	w.t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		w.t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

var wholeGPU = []corev1.ResourceName{resGPU}

// wholeGPUs: one-GPU notebooks arrive one after the other on 4 nodes of 4 H100. Stock scoring spreads them, so
// a 4-GPU (after 6) and then a 2-GPU request (after 12) no longer fit anywhere; gpuhub's packs them.
func (w *world) wholeGPUs(t *testing.T) {
	w.t = t
	const sc = "whole"
	for i := range 6 {
		w.place(sc, fmt.Sprintf("a%d", i), gpus(1))
	}
	s := w.summaries(sc, wholeGPU, nil)
	four := w.place(sc, "probe-4", gpus(4))
	w.table("4 nodes x 4 H100, after 6 one-GPU pods; then a 4-GPU pod:", "GPUs", s, []string{"4-GPU pod"}, []map[string]string{four})
	w.expect("stock after 6", s["stock"], Summary{Nodes: 4, Used: 4, Fragmented: 4, Free: 0, LargestFree: 3})
	w.expect("gpuhub after 6", s["gpuhub"], Summary{Nodes: 4, Used: 2, Fragmented: 1, Free: 2, LargestFree: 4})
	w.expect("4-GPU pod placed (stock, gpuhub)", []bool{four["stock"] != "", four["gpuhub"] != ""}, []bool{false, true})
	w.remove(sc, "probe-4")

	for i := 6; i < 12; i++ {
		w.place(sc, fmt.Sprintf("a%d", i), gpus(1))
	}
	s = w.summaries(sc, wholeGPU, nil)
	two := w.place(sc, "probe-2", gpus(2))
	w.remove(sc, "probe-2")
	four = w.place(sc, "probe-4", gpus(4))
	w.remove(sc, "probe-4")
	w.table("4 nodes x 4 H100, after 12 one-GPU pods; then a 2-GPU pod, or a 4-GPU pod:", "GPUs", s,
		[]string{"2-GPU pod", "4-GPU pod"}, []map[string]string{two, four})
	w.expect("stock after 12", s["stock"], Summary{Nodes: 4, Used: 4, Fragmented: 4, Free: 0, LargestFree: 1})
	w.expect("gpuhub after 12", s["gpuhub"], Summary{Nodes: 4, Used: 3, Fragmented: 0, Free: 1, LargestFree: 4})
	w.expect("2-GPU pod placed (stock, gpuhub)", []bool{two["stock"] != "", two["gpuhub"] != ""}, []bool{false, true})
	w.expect("4-GPU pod placed (stock, gpuhub)", []bool{four["stock"] != "", four["gpuhub"] != ""}, []bool{false, true})
	// With identical pods, z2jh's cpu/memory packing follows the GPUs too: the next scenario is where it does not.
	w.expect("z2jh after 12 packs like gpuhub", s["z2jh"], s["gpuhub"])
}

// cpuNeighbours: GPU nodes also hold CPU-only notebooks (z2jh's single user pool). z2jh's default sends GPU pods
// to the node with the most CPU in use, breaking into the one node with all 4 GPUs free; gpuhub's fills the nodes
// whose GPUs are already in use.
func (w *world) cpuNeighbours(t *testing.T) {
	w.t = t
	const sc = "neighbours"
	cpuOnly := request{cpu: "16", mem: "64Gi"}
	w.pin(sc, "cpu0", 0, cpuOnly)
	w.pin(sc, "cpu1", 0, cpuOnly)
	w.pin(sc, "g0", 1, gpus(1))
	w.pin(sc, "g1", 1, gpus(1))
	w.pin(sc, "g2", 2, gpus(1))
	w.pin(sc, "g3", 2, gpus(1))
	w.pin(sc, "g4", 2, gpus(1))
	for i := range 3 {
		w.place(sc, fmt.Sprintf("a%d", i), gpus(1))
	}
	s := w.summaries(sc, wholeGPU, nil)
	four := w.place(sc, "probe-4", gpus(4))
	w.table("3 nodes x 4 H100; node 0 holds two CPU-only pods (32 CPUs), node 1 2 GPU pods, node 2 3 GPU pods;\n"+
		"after 3 more one-GPU pods, a 4-GPU pod:", "GPUs", s, []string{"4-GPU pod"}, []map[string]string{four})
	w.expect("z2jh", s["z2jh"], Summary{Nodes: 3, Used: 3, Fragmented: 3, Free: 0, LargestFree: 2})
	w.expect("gpuhub", s["gpuhub"], Summary{Nodes: 3, Used: 2, Fragmented: 0, Free: 1, LargestFree: 4})
	w.expect("4-GPU pod placed (z2jh, gpuhub)", []bool{four["z2jh"] != "", four["gpuhub"] != ""}, []bool{false, true})
}

// migMixed: 1g.5gb and 3g.20gb pods on 3 A100 nodes with MIG mixed. gpuhub's packs them onto one node and leaves
// two with no MIG device in use (free to be re-partitioned or scaled down); stock scoring touches all three.
func (w *world) migMixed(t *testing.T) {
	w.t = t
	const sc = "mig"
	mig := func(r corev1.ResourceName) request {
		return request{cpu: "2", mem: "16Gi", ext: map[corev1.ResourceName]int64{r: 1}}
	}
	for i, r := range []corev1.ResourceName{resMIG1g, resMIG1g, resMIG3g, resMIG1g, resMIG1g, resMIG1g} {
		w.place(sc, fmt.Sprintf("a%d", i), mig(r))
	}
	s := w.summaries(sc, []corev1.ResourceName{resMIG1g, resMIG3g}, map[corev1.ResourceName]int64{resMIG3g: 3})
	w.table("3 nodes x 2 A100 40GB MIG mixed (each 2x 3g.20gb + 8x 1g.5gb), after 5 1g.5gb pods and 1 3g.20gb pod:",
		"compute slices", s, nil, nil)
	w.expect("stock", s["stock"].Free, 0)
	w.expect("gpuhub", s["gpuhub"], Summary{Nodes: 3, Used: 1, Fragmented: 1, Free: 2, LargestFree: 14})
}
