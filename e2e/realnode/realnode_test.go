//go:build realnode

package realnode_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/realnode"
)

const nodeName = "real-node-0"

// TestRealNode: the control plane and a real node (containerd, CNI bridge, kubelet) in the test's own
// network namespace; pods from the images `make images` built run in real containers: a service's binary,
// the single-user image with the GPU panel, and a server in a pod that the test reaches at the pod's IP.
func TestRealNode(t *testing.T) {
	ip := net.ParseIP(os.Getenv("GPUHUB_NODE_IP"))
	kubeBin, images := os.Getenv("GPUHUB_KUBE_BIN"), os.Getenv("GPUHUB_IMAGES")
	if ip == nil || kubeBin == "" || images == "" {
		t.Fatal("GPUHUB_NODE_IP, GPUHUB_KUBE_BIN and GPUHUB_IMAGES must be set: run `make realnode-test` (it makes the network namespace)")
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if host, _ := os.Readlink("/proc/1/ns/net"); self == host {
		t.Fatal("the test runs in the machine's own network namespace: run it through e2e/scripts/in-netns.sh (make realnode-test)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Minute)
	if os.Getenv("GPUHUB_REALNODE_KEEP") != "" {
		ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
	}
	defer cancel()
	// An interrupted run (Ctrl-C, a CI job's SIGTERM) ends like a failed one: the signal cancels ctx, the step in
	// progress fails and the cleanups stop the node (its containers killed, its mounts and the pods' network
	// namespaces removed) and the control plane. Go's default would end the process at once and leave them
	// running. A second signal ends it at once.
	ctx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		select {
		case sig := <-signals:
			signal.Stop(signals)
			fmt.Fprintf(os.Stderr, "TestRealNode: %v: stopping the node and the control plane (a second signal ends the test at once)\n", sig)
			interrupt()
		case <-ctx.Done():
		}
	}()

	// The node lifecycle controller takes the not-ready taint off a real node once its kubelet reports Ready
	// (the emulated nodes of the other suites manage their own conditions and run without it).
	// The volume controllers bind the claims of z2jh and gpuhub to the node's local volumes and release them.
	controllers := append(slices.Clone(cluster.DefaultControllers), "node-lifecycle-controller",
		"persistentvolume-binder-controller", "persistentvolume-protection-controller", "persistentvolumeclaim-protection-controller")
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: kubeBin, NodeIP: ip, Controllers: controllers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	kubeletKubeconfig, err := cp.WriteKubeconfig("kubelet-"+nodeName, "system:node:"+nodeName, []string{"system:nodes"})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(cp.Dir, "kubelet-client-ca.crt")
	if err := os.WriteFile(caFile, cp.CAData(), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := func(name string) string { return filepath.Join(images, name+".tar") }
	proxyKubeconfig, err := cp.WriteKubeconfig("kube-proxy", "system:kube-proxy", nil)
	if err != nil {
		t.Fatal(err)
	}
	dnsKubeconfig, err := cp.WriteKubeconfig("coredns", "e2e-realnode:coredns", nil)
	if err != nil {
		t.Fatal(err)
	}
	routerKubeconfig, err := cp.WriteKubeconfig("kube-router", "e2e-realnode:kube-router", nil)
	if err != nil {
		t.Fatal(err)
	}
	coredns, kubeRouter := os.Getenv("GPUHUB_COREDNS"), os.Getenv("GPUHUB_KUBE_ROUTER")
	if coredns == "" || kubeRouter == "" {
		t.Fatal("GPUHUB_COREDNS and GPUHUB_KUBE_ROUTER (CoreDNS and kube-router executables) must be set: run `make realnode-test`")
	}
	node, err := realnode.Start(ctx, realnode.Options{
		Kubelet: filepath.Join(kubeBin, "kubelet"), KubeProxy: filepath.Join(kubeBin, "kube-proxy"), CoreDNS: coredns,
		DNSKubeconfig: dnsKubeconfig, DNSUser: "e2e-realnode:coredns",
		KubeRouter: kubeRouter, RouterKubeconfig: routerKubeconfig, RouterUser: "e2e-realnode:kube-router",
		Dir:  filepath.Join(t.TempDir(), "node"),
		Name: nodeName, IP: ip, PodCIDR: "10.244.0.0/24", ClusterCIDR: "10.244.0.0/16", ServiceCIDR: cluster.ServiceCIDR,
		Kubeconfig: kubeletKubeconfig, ClientCAFile: caFile, ProxyKubeconfig: proxyKubeconfig,
		Images: []string{archive("pause"), archive("singleuser"), archive("k8s-hub"), archive("configurable-http-proxy"),
			archive("gpu-agent"), archive("usage-api"), archive("gpu-quota"), archive("gpu-profiles"), archive("gpu-culler"),
			archive("kube-scheduler"), archive("network-tools"), archive("k8s-image-awaiter")},
		SandboxImage: "ghcr.io/gpuhub/pause:0.1.0",
		// GPU Operator's labels and resources of a node with two whole H100s and one A100 split into
		// four MIG 1g.5gb slices (mixed strategy), served by the emulated device plugins.
		Labels: map[string]string{
			"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
			"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.5gb.count": "4",
		},
		GPUs: []realnode.GPUResource{
			{Name: "nvidia.com/gpu", Devices: []string{"GPU-2d5c9a4e-0000-4000-8000-000000000001", "GPU-2d5c9a4e-0000-4000-8000-000000000002"}},
			{Name: "nvidia.com/mig-1g.5gb", Devices: []string{"MIG-7f3e0000-0000-4000-8000-000000000001", "MIG-7f3e0000-0000-4000-8000-000000000002", "MIG-7f3e0000-0000-4000-8000-000000000003", "MIG-7f3e0000-0000-4000-8000-000000000004"}},
		},
		Client: client,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range node.Logs() {
				data, _ := os.ReadFile(l)
				t.Logf("--- %s (last 4 KiB)\n%s", l, tailBytes(data, 4096))
			}
		}
		node.Stop()
	})

	pods := []*corev1.Pod{
		pod("quota-help", "ghcr.io/gpuhub/gpu-quota:0.1.0", nil, []string{"-h"}),
		pod("panel", "ghcr.io/gpuhub/singleuser:0.1.0", []string{"jupyter", "labextension", "list"}, nil),
		pod("web", "ghcr.io/gpuhub/singleuser:0.1.0", []string{"python3", "-m", "http.server", "8888", "--bind", "0.0.0.0"}, nil),
	}
	for _, p := range pods {
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A service's image: its binary runs as 65532 in the container and prints its usage.
	waitPhase(ctx, t, client, "quota-help", corev1.PodSucceeded)
	wantLogs(ctx, t, client, "quota-help", "Usage of gpu-quota")
	// The single-user image: JupyterLab lists the GPU panel, enabled.
	waitPhase(ctx, t, client, "panel", corev1.PodSucceeded)
	wantLogs(ctx, t, client, "panel", "@gpuhub/jupyterlab-gpu-panel v0.1.0")
	// Pod networking: a server in a pod, reached at the pod's IP on the CNI bridge.
	web := waitPhase(ctx, t, client, "web", corev1.PodRunning)
	if !strings.HasPrefix(web.Status.PodIP, "10.244.0.") {
		t.Fatalf("web pod IP %q is not in the node's pod CIDR 10.244.0.0/24", web.Status.PodIP)
	}
	url := fmt.Sprintf("http://%s:8888/", web.Status.PodIP)
	var status int
	for i := 0; i < 60 && status != http.StatusOK; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			status = resp.StatusCode
			resp.Body.Close()
		} else {
			time.Sleep(time.Second)
		}
	}
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d, want 200", url, status)
	}
	t.Logf("node %s Ready; quota-help and panel Succeeded with their output; web answered 200 at %s", nodeName, url)

	// Services through kube-proxy: a pod reaches the web pod by its Service's cluster IP, and the API
	// server by the kubernetes Service (what the Hub and gpuhub's services use in a cluster).
	web.Labels = map[string]string{"app": "web"}
	if _, err := client.CoreV1().Pods("default").Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8888)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf(`import ssl, urllib.request, urllib.error, time
def status(url):
    for _ in range(30):
        try:
            return urllib.request.urlopen(url, timeout=2, context=ssl._create_unverified_context()).status
        except urllib.error.HTTPError as e:
            return e.code
        except Exception:
            time.sleep(1)
    return "unreachable"
import socket
print("service", status("http://%s/"))
print("apiserver", status("https://10.96.0.1/version"))
print("dns web", socket.gethostbyname("web"))
print("dns kubernetes", socket.gethostbyname("kubernetes.default.svc.cluster.local"))
try:
    print("dns outside", socket.gethostbyname("pypi.org"))
except OSError as e:
    print("dns outside not found")
`, svc.Spec.ClusterIP)
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod("svc-probe", "ghcr.io/gpuhub/singleuser:0.1.0", []string{"python3", "-c", probe}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(ctx, t, client, "svc-probe", corev1.PodSucceeded)
	got := logs(ctx, t, client, "svc-probe")
	for _, want := range []string{"service 200", "apiserver 200", "dns web " + svc.Spec.ClusterIP, "dns kubernetes 10.96.0.1", "dns outside not found"} {
		if !strings.Contains(got, want) {
			t.Fatalf("svc-probe from a pod printed no %q:\n%s", want, got)
		}
	}
	t.Logf("a pod reached the web Service by its name (%s) and the API server at 10.96.0.1 (kube-proxy, CoreDNS); names outside the cluster are not found", svc.Spec.ClusterIP)

	// GPUs through the device-plugin API, placed by the real scheduler: two pods take the two whole GPUs and
	// see each its own UUID; a third cannot be placed; a MIG slice is a resource of its own.
	seen := map[string]string{}
	for _, name := range []string{"gpu-a", "gpu-b"} {
		p := gpuPod(name, "nvidia.com/gpu")
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"gpu-a", "gpu-b"} {
		waitPhase(ctx, t, client, name, corev1.PodSucceeded)
		uuid := strings.TrimSpace(logs(ctx, t, client, name))
		if !strings.HasPrefix(uuid, "GPU-2d5c9a4e-") {
			t.Fatalf("%s: NVIDIA_VISIBLE_DEVICES=%q, want one of the node's GPU UUIDs", name, uuid)
		}
		if other, dup := seen[uuid]; dup {
			t.Fatalf("%s and %s both got %s", other, name, uuid)
		}
		seen[uuid] = name
	}
	// Succeeded pods no longer hold their GPUs: keep two running ones to fill the node.
	for _, name := range []string{"gpu-hold-1", "gpu-hold-2", "gpu-over"} {
		p := gpuPod(name, "nvidia.com/gpu")
		p.Spec.Containers[0].Command = []string{"sleep", "600"}
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPhase(ctx, t, client, "gpu-hold-1", corev1.PodRunning)
	waitPhase(ctx, t, client, "gpu-hold-2", corev1.PodRunning)
	waitUnschedulable(ctx, t, client, "gpu-over", "Insufficient nvidia.com/gpu")
	mig := gpuPod("mig", "nvidia.com/mig-1g.5gb")
	if _, err := client.CoreV1().Pods("default").Create(ctx, mig, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(ctx, t, client, "mig", corev1.PodSucceeded)
	if got := strings.TrimSpace(logs(ctx, t, client, "mig")); !strings.HasPrefix(got, "MIG-7f3e0000-") {
		t.Fatalf("mig: NVIDIA_VISIBLE_DEVICES=%q, want a MIG slice's UUID", got)
	}
	t.Logf("GPUs: gpu-a and gpu-b got %v; a third whole-GPU pod is Unschedulable while two hold both; the MIG pod got a slice", seen)
	for _, name := range []string{"gpu-hold-1", "gpu-hold-2", "gpu-over"} {
		if err := client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}

	localStorage(ctx, t, client, filepath.Join(t.TempDir(), "volumes"), 3)
	z2jh(ctx, t, cfg, client, cp.Kubeconfig, node)

	// A debugging aid: GPUHUB_REALNODE_KEEP=FILE keeps the cluster running after the checks, with the admin
	// kubeconfig's path written to FILE, until FILE is removed (reach it with nsenter --net=/var/run/netns/<ns>).
	if keep := os.Getenv("GPUHUB_REALNODE_KEEP"); keep != "" {
		if err := os.WriteFile(keep, []byte(cp.Kubeconfig), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("kept running until %s is removed; admin kubeconfig %s", keep, cp.Kubeconfig)
		for {
			if _, err := os.Stat(keep); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	}
}

// z2jh installs z2jh 4.4.0's own chart with helm (the hub image from z2jh's own recipe runs z2jh's own
// jupyterhub_config.py and z2jh.py), then does what a user does: logs in through the proxy's Service, starts a
// server (KubeSpawner makes a pod, the kubelet runs it) and opens JupyterLab with the GPU panel in it.
func z2jh(ctx context.Context, t *testing.T, cfg *rest.Config, client kubernetes.Interface, kubeconfig string, node *realnode.Node) {
	t.Helper()
	helm, chart := os.Getenv("GPUHUB_HELM"), os.Getenv("GPUHUB_Z2JH_CHART")
	if helm == "" || chart == "" {
		t.Fatal("GPUHUB_HELM and GPUHUB_Z2JH_CHART must be set: run `make realnode-test`")
	}
	out, err := exec.CommandContext(ctx, helm, "install", "jhub", chart, "--kubeconfig", kubeconfig,
		"--namespace", "jhub", "--create-namespace", "-f", "testdata/z2jh-values.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("helm install z2jh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// The Hub's own words on what failed, and gpuhub's services': without the routine lines (xsrf cookies,
		// requests answered 2xx/3xx), which a test polling a page fills the tail with.
		for _, sel := range []string{"component=hub", "app.kubernetes.io/part-of=gpuhub"} {
			pods, _ := client.CoreV1().Pods("jhub").List(context.Background(), metav1.ListOptions{LabelSelector: sel})
			for _, p := range pods.Items {
				tail := int64(2000)
				data, _ := client.CoreV1().Pods("jhub").GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(context.Background())
				t.Logf("--- pod %s (its last 60 lines that are not routine)\n%s", p.Name, notRoutine(string(data), 60))
			}
		}
	})
	for _, d := range []string{"hub", "proxy"} {
		waitDeployment(ctx, t, client, "jhub", d)
	}
	hubDB := waitBound(ctx, t, client, "jhub", "hub-db-dir")
	svc, err := client.CoreV1().Services("jhub").Get(ctx, "proxy-public", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + svc.Spec.ClusterIP
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	get := func(path string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	_, login := get("/hub/login")
	m := regexp.MustCompile(`name="_xsrf" value="([^"]+)"`).FindStringSubmatch(login)
	if m == nil {
		t.Fatalf("z2jh's login page has no _xsrf field:\n%s", tailBytes([]byte(login), 1024))
	}
	form := url.Values{"_xsrf": {m[1]}, "username": {"alice"}, "password": {"any"}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/hub/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := browser.Do(req) // the Hub redirects to /hub/spawn, which starts the server
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitPhaseIn(ctx, t, client, "jhub", "jupyter-alice", corev1.PodRunning)
	var status int
	var lab string
	for i := 0; i < 60; i++ {
		if status, lab = get("/user/alice/lab"); status == http.StatusOK && strings.Contains(lab, "<title>JupyterLab</title>") {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if !strings.Contains(lab, "<title>JupyterLab</title>") || !strings.Contains(lab, "@gpuhub/jupyterlab-gpu-panel") {
		t.Fatalf("/user/alice/lab: status %d, want JupyterLab with the GPU panel:\n%s", status, tailBytes([]byte(lab), 1024))
	}
	t.Logf("z2jh 4.4.0 installed by helm, the Hub's database on local volume %s; alice logged in at %s, her server ran in pod jupyter-alice and served JupyterLab with the GPU panel", hubDB, base)

	// gpuhub next to it, as the README's install section says: the chart with every service on, then z2jh
	// again with gpuhub's values and the Hub glue. What differs, each for a reason of this node: the simulated
	// GPU backend and no RuntimeClass (no GPU), the kubelet's pod-resources API under its root directory (this
	// node's, not /var/lib/kubelet).
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gpuhubCmd, z2jhCmd := readmeInstall(t, repo, chart)
	gpuhubCmd = append(gpuhubCmd, "--set", "agent.backend=simulated", "--set", "agent.runtimeClassName=", "--set", "agent.podResourcesDir="+node.PodResourcesDir())
	for _, args := range [][]string{gpuhubCmd, z2jhCmd} {
		t.Logf("helm %s", strings.Join(args, " "))
		out, err := exec.CommandContext(ctx, helm, append(args, "--kubeconfig", kubeconfig)...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, d := range []string{"gpuhub-usage", "gpuhub-quota", "gpuhub-profiles", "gpuhub-culler", "hub", "proxy"} {
		waitDeployment(ctx, t, client, "jhub", d)
	}
	// bob's spawn form, generated by gpu-profiles from the node's GPUs, through the Hub glue.
	jar, _ = cookiejar.New(nil)
	browser.Jar = jar
	var spawnPage string
	for i := 0; i < 60; i++ {
		_, login = get("/hub/login")
		if m = regexp.MustCompile(`name="_xsrf" value="([^"]+)"`).FindStringSubmatch(login); m != nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/hub/login", strings.NewReader(url.Values{"_xsrf": {m[1]}, "username": {"bob"}, "password": {"any"}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			browser.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			if resp, err := browser.Do(req); err == nil {
				resp.Body.Close()
			}
			browser.CheckRedirect = nil
			if _, spawnPage = get("/hub/spawn"); strings.Contains(spawnPage, "MIG 1g.5gb slice") {
				break
			}
		}
		time.Sleep(2 * time.Second) // the Hub restarts with the new values
	}
	for _, want := range []string{"H100 80GB HBM3 (whole GPU)", "MIG 1g.5gb slice", "free of"} {
		if !strings.Contains(spawnPage, want) {
			t.Fatalf("bob's spawn form has no %q (gpu-profiles' choices from the node's GPUs):\n%s", want, tailBytes([]byte(spawnPage), 2048))
		}
	}
	t.Logf("gpuhub installed next to z2jh by helm; bob's spawn form offers the node's whole H100 and MIG 1g.5gb slices with free counts")
	ledger := waitBound(ctx, t, client, "jhub", "gpuhub-usage-ledger")
	t.Logf("the usage API's ledger is on local volume %s", ledger)

	networkPolicies(ctx, t, cfg, client)

	// The story in Chromium, through a loopback port of the namespace forwarded to the proxy's Service.
	hubURL := forward(ctx, t, svc.Spec.ClusterIP+":80")
	admin := signIn(ctx, t, base, "admin")
	signIn(ctx, t, base, "alice").stop(ctx, t) // her CPU server of the first install
	formAndPanel(ctx, t, hubURL, admin, client, cfg)
	mig, whole := upgradePolicy(ctx, t, base, helm, kubeconfig, gpuhubCmd)
	refusalAdminAndCLI(ctx, t, hubURL, admin, whole)
	rolled := rollingUpgrade(ctx, t, client, node, base, helm, kubeconfig, gpuhubCmd, mig, whole)
	cullerStory(ctx, t, hubURL, base, helm, kubeconfig, rolled, mig)

	// helm uninstall removes every object of the release, and the services leave none of their own behind.
	out, err = exec.CommandContext(ctx, helm, "uninstall", "gpuhub", "--namespace", "jhub", "--wait", "--kubeconfig", kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("helm uninstall gpuhub: %v\n%s", err, out)
	}
	// What the services made at run time goes with their Deployments (the garbage collector, by ownerReference).
	var left []string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if left = leftovers(ctx, t, cfg, "jhub", "gpuhub", "gpuhub"); len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		t.Fatalf("after helm uninstall gpuhub, these remain: %s", strings.Join(left, ", "))
	}
	t.Logf("helm uninstall gpuhub left no object of the release or named gpuhub-* in jhub or cluster-wide")
}

// networkPolicies probes from inside the pods, with kube-router enforcing gpuhub's and z2jh's NetworkPolicies:
// a single-user server reaches none of gpuhub's services directly (gpu-quota's admission endpoint, the agent's
// snapshot port, the usage API), and through the proxy only what its user may see; the Hub and the proxy reach
// what they must.
func networkPolicies(ctx context.Context, t *testing.T, cfg *rest.Config, client kubernetes.Interface) {
	t.Helper()
	agent, err := client.CoreV1().Pods("jhub").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=gpu-agent"})
	if err != nil || len(agent.Items) == 0 || agent.Items[0].Status.PodIP == "" {
		t.Fatalf("no gpu-agent pod with an IP: %v", err)
	}
	svc := func(name string) string { return name + ".jhub.svc.cluster.local" }
	targets := map[string]probe{
		"quota":    {"quota", svc("gpuhub-quota"), "8000"},
		"usage":    {"usage", svc("gpuhub-usage"), "8000"},
		"profiles": {"profiles", svc("gpuhub-profiles"), "8000"},
		"culler":   {"culler", svc("gpuhub-culler"), "8000"},
		"agent":    {"agent", agent.Items[0].Status.PodIP, "9400"},
		"hub":      {"hub", svc("hub"), "8081"},
	}
	pick := func(names ...string) []probe {
		var out []probe
		for _, n := range names {
			out = append(out, targets[n])
		}
		return out
	}
	cases := []struct {
		who, selector string
		js            bool
		want          map[string]string
	}{
		{"single-user server (alice)", "component=singleuser-server", false, map[string]string{
			"quota": "blocked", "usage": "blocked", "profiles": "blocked", "culler": "blocked", "agent": "blocked", "hub": "open"}},
		{"hub", "component=hub", false, map[string]string{
			"quota": "open", "usage": "open", "profiles": "open", "culler": "open", "agent": "blocked"}},
		{"proxy", "component=proxy", true, map[string]string{
			"quota": "open", "usage": "open", "profiles": "blocked", "culler": "open", "agent": "blocked"}},
	}
	for _, c := range cases {
		pod := firstPod(ctx, t, client, "jhub", c.selector)
		probes := pick(slices.Sorted(maps.Keys(c.want))...)
		var out string
		if c.js {
			out = execIn(ctx, t, cfg, client, "jhub", pod, "node", "-e", jsProbes(probes))
		} else {
			out = execIn(ctx, t, cfg, client, "jhub", pod, "python3", "-c", pyProbes(probes))
		}
		if diff := cmp.Diff(c.want, verdicts(out)); diff != "" {
			t.Errorf("from the %s (pod %s), connections (-want +got):\n%s", c.who, pod, diff)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// Through the proxy, alice's own server token reads her own usage and not the admin routes.
	user := firstPod(ctx, t, client, "jhub", "component=singleuser-server")
	out := execIn(ctx, t, cfg, client, "jhub", user, "python3", "-c", `import os, urllib.request, urllib.error
class Stay(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None
opener = urllib.request.build_opener(Stay)
def get(path):
    req = urllib.request.Request("http://proxy-public.jhub.svc.cluster.local" + path, headers={"Authorization": "token " + os.environ["JUPYTERHUB_API_TOKEN"]})
    try:
        return opener.open(req, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
print("me", get("/services/gpu-usage/api/v1/me"))
print("users", get("/services/gpu-usage/api/v1/users"))
print("holders", get("/services/gpu-usage/holders"))
`)
	t.Logf("alice's server through the proxy: %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", ", "))
	got := verdicts(out)
	// The admin view's pages take the Hub's OAuth cookie, not a token: a token gets the login redirect.
	if got["me"] != "200" || got["users"] != "403" || (got["holders"] != "403" && got["holders"] != "302") {
		t.Fatalf("alice's server token through the proxy: want her own usage (200) and no admin route (403, or the login redirect), got %v", got)
	}
	t.Logf("NetworkPolicies enforced (kube-router): alice's server reaches the Hub but none of gpuhub's services or the agent; the Hub and the proxy reach theirs")
}

// readmeInstall returns the two helm commands of the README's install section ("How it fits z2jh"), as the
// e2e runs them: the namespace and release are "jhub", z2jh's chart is the local copy of 4.4.0 (the README's
// --version 4.4.0 is checked, then dropped: helm takes a local chart as it is), config.yaml is this node's
// values, paths are from the repository. Anything else in the README's commands is run as written.
func readmeInstall(t *testing.T, repo, z2jhChart string) (gpuhub, z2jh []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## How it fits z2jh")
	_, block, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md: no ```sh block under \"## How it fits z2jh\"")
	}
	var cmds [][]string
	for _, line := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			cmds = append(cmds, f)
		}
	}
	if len(cmds) != 2 || cmds[0][0] != "helm" || cmds[1][0] != "helm" {
		t.Fatalf("README.md's install section: want two helm commands (gpuhub, then z2jh), got %q", cmds)
	}
	fix := func(args []string) []string {
		var out []string
		for i := 0; i < len(args); i++ {
			a := args[i]
			switch {
			case a == "<z2jh namespace>" || a == "<z2jh" || a == "namespace>" || a == "release>":
				// "<z2jh namespace>" and "<z2jh release>" were split into two words.
				if a == "<z2jh" {
					out = append(out, "jhub")
				}
			case a == "jupyterhub/jupyterhub":
				out = append(out, z2jhChart)
			case a == "--version":
				if args[i+1] != "4.4.0" {
					t.Fatalf("README.md installs z2jh %s; the e2e has z2jh 4.4.0", args[i+1])
				}
				i++
			case a == "config.yaml":
				out = append(out, "testdata/z2jh-values.yaml")
			case strings.HasPrefix(a, "chart/"):
				out = append(out, filepath.Join(repo, a))
			case strings.Contains(a, "=chart/"):
				k, v, _ := strings.Cut(a, "=")
				out = append(out, k+"="+filepath.Join(repo, v))
			default:
				out = append(out, a)
			}
		}
		return out
	}
	return fix(cmds[0][1:]), fix(cmds[1][1:])
}

func waitDeployment(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && d.Status.ReadyReplicas >= 1 {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("deployment %s/%s not ready within 3 minutes", ns, name)
}

// gpuPod asks the scheduler (no nodeName) for one device of resource and prints what the kubelet's
// allocation gave the container.
func gpuPod(name, resource string) *corev1.Pod {
	p := pod(name, "ghcr.io/gpuhub/singleuser:0.1.0", []string{"sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES"}, nil)
	p.Spec.NodeName = ""
	one := resourceQuantity(1)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(resource): one}
	return p
}

func waitUnschedulable(ctx context.Context, t *testing.T, client kubernetes.Interface, name, reason string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, reason) {
					return
				}
			}
			if p.Spec.NodeName != "" {
				t.Fatalf("%s was placed on %s; want it Unschedulable (%s)", name, p.Spec.NodeName, reason)
			}
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s: not Unschedulable with %q within a minute", name, reason)
}

func logs(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	data, err := client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	return string(data)
}

func pod(name, image string, command, args []string) *corev1.Pod {
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                     nodeName,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: name, Image: image, ImagePullPolicy: corev1.PullNever, Command: command, Args: args,
			}},
		},
	}
}

func waitPhase(ctx context.Context, t *testing.T, client kubernetes.Interface, name string, want corev1.PodPhase) *corev1.Pod {
	t.Helper()
	return waitPhaseIn(ctx, t, client, "default", name, want)
}

func waitPhaseIn(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, want corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	// Three minutes: a pod here waits for the kubelet, containerd and the CNI on 2 cores that make test shares
	// with two other lanes; a pod that never starts fails with its conditions and events below.
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			if p.Status.Phase == want {
				return p
			}
			if p.Status.Phase == corev1.PodFailed {
				break
			}
		}
		time.Sleep(time.Second)
	}
	events, _ := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	var msgs []string
	if events != nil {
		for _, e := range events.Items {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
	}
	phase, state := corev1.PodPhase("unknown"), ""
	if last != nil {
		phase = last.Status.Phase
		state = podState(last)
	}
	t.Fatalf("pod %s: phase %s after %s, want %s; %s\nevents:\n%s", name, phase, time.Since(start).Round(time.Second), want, state, strings.Join(msgs, "\n"))
	return nil
}

// podState is what the kubelet last said of a pod: its node, its conditions that are not true and why, and
// each container's waiting or terminated reason.
func podState(p *corev1.Pod) string {
	node := p.Spec.NodeName
	if node == "" {
		node = "(none)"
	}
	parts := []string{"node " + node}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s=%s %s %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("container %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message))
		case c.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("container %s terminated: exit %d %s", c.Name, c.State.Terminated.ExitCode, c.State.Terminated.Reason))
		}
	}
	return strings.Join(parts, "; ")
}

// wantLogs reads the container's log through the API server, which asks the kubelet (its client
// certificate against the kubelet's x509 authentication).
func wantLogs(ctx context.Context, t *testing.T, client kubernetes.Interface, name, want string) {
	t.Helper()
	data := logs(ctx, t, client, name)
	if !strings.Contains(data, want) {
		t.Fatalf("logs of %s have no %q:\n%s", name, want, tailBytes([]byte(data), 2048))
	}
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func resourceQuantity(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }

// TestReadmeInstall: the README's install commands are what TestRealNode runs, with only the substitutions
// readmeInstall documents.
func TestReadmeInstall(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gpuhub, z2jh := readmeInstall(t, repo, "/z2jh/chart")
	want := [][]string{
		{"upgrade", "--install", "gpuhub", repo + "/chart/gpuhub", "--namespace", "jhub", "--set", "quota.enabled=true",
			"--set", "quota.waitlist.enabled=true", "--set", "profiles.enabled=true", "--set", "culler.enabled=true"},
		{"upgrade", "--install", "jhub", "/z2jh/chart", "--namespace", "jhub", "-f", "testdata/z2jh-values.yaml",
			"-f", repo + "/chart/gpuhub/files/z2jh-values.yaml", "--set-file", "hub.extraConfig.gpuhub=" + repo + "/chart/gpuhub/files/gpuhub_hub_config.py"},
	}
	if diff := cmp.Diff(want, [][]string{gpuhub, z2jh}); diff != "" {
		t.Errorf("README's install commands as the e2e runs them (-want +got):\n%s", diff)
	}
}

// routineLine is a log line that says nothing about a failure: the Hub's xsrf cookies and its 2xx/3xx requests.
var routineLine = regexp.MustCompile(`_xsrf_utils|log:\d+\] [23]\d\d (GET|POST|HEAD) `)

// notRoutine is the last n lines of log that routineLine does not match.
func notRoutine(log string, n int) string {
	var kept []string
	for line := range strings.SplitSeq(strings.TrimRight(log, "\n"), "\n") {
		if !routineLine.MatchString(line) {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept[max(0, len(kept)-n):], "\n")
}
