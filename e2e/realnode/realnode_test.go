//go:build realnode

package realnode_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	cp, err := cluster.Start(ctx, cluster.Options{BinDir: kubeBin, NodeIP: ip})
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
	node, err := realnode.Start(ctx, realnode.Options{
		Kubelet: filepath.Join(kubeBin, "kubelet"), Dir: filepath.Join(t.TempDir(), "node"),
		Name: nodeName, IP: ip, PodCIDR: "10.244.0.0/24",
		Kubeconfig: kubeletKubeconfig, ClientCAFile: caFile,
		Images:       []string{archive("pause"), archive("gpu-quota"), archive("singleuser")},
		SandboxImage: "ghcr.io/gpuhub/pause:0.1.0",
		Labels:       map[string]string{"gpuhub.io/real-node": "true"},
		Client:       client,
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
	var last *corev1.Pod
	for ctx.Err() == nil {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
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
	events, _ := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	var msgs []string
	if events != nil {
		for _, e := range events.Items {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
	}
	phase := corev1.PodPhase("unknown")
	if last != nil {
		phase = last.Status.Phase
	}
	t.Fatalf("pod %s: phase %s, want %s; events:\n%s", name, phase, want, strings.Join(msgs, "\n"))
	return nil
}

// wantLogs reads the container's log through the API server, which asks the kubelet (its client
// certificate against the kubelet's x509 authentication).
func wantLogs(ctx context.Context, t *testing.T, client kubernetes.Interface, name, want string) {
	t.Helper()
	data, err := client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	if !strings.Contains(string(data), want) {
		t.Fatalf("logs of %s have no %q:\n%s", name, want, tailBytes(data, 2048))
	}
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
