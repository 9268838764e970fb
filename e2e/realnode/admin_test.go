//go:build realnode

package realnode_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// localStorage makes the node's storage as an admin without a cloud would: a default StorageClass of local
// volumes (no provisioner; a claim binds when its pod is scheduled) and n PersistentVolumes of it, each a
// directory under dir on this node. The kubelet gives a local volume to the pod's fsGroup, so gpuhub's ledger
// (65532) and the Hub's database (1000) write to them as they would to a cloud disk.
func localStorage(ctx context.Context, t *testing.T, client kubernetes.Interface, dir string, n int) {
	t.Helper()
	wait := storagev1.VolumeBindingWaitForFirstConsumer
	retain := corev1.PersistentVolumeReclaimRetain
	if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "local", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: &wait,
		ReclaimPolicy:     &retain,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		path := filepath.Join(dir, fmt.Sprintf("pv-%d", i))
		if err := os.MkdirAll(path, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("local-%d", i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: retain,
				StorageClassName:              "local",
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}},
				}}}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitBound waits until the claim ns/name is Bound and returns its volume's name.
func waitBound(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pvc.Status.Phase == corev1.ClaimBound {
			return pvc.Spec.VolumeName
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("claim %s/%s not Bound within 2 minutes", ns, name)
	return ""
}

// execIn runs command in the first container of pod ns/name through the API server and the kubelet (what
// kubectl exec does) and returns its output; a command that fails is a test failure.
func execIn(ctx context.Context, t *testing.T, cfg *rest.Config, client kubernetes.Interface, ns, name string, command ...string) string {
	t.Helper()
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(error) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec in %s/%s %q: %v\nstdout:\n%s\nstderr:\n%s", ns, name, command, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// firstPod returns the name of a Running pod of ns matching selector.
func firstPod(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, selector string) string {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Name
		}
	}
	t.Fatalf("no Running pod in %s with %s", ns, selector)
	return ""
}

// A probe is a TCP connection a pod tries: open when it connects within 3 s, blocked otherwise.
type probe struct{ name, host, port string }

// pyProbes is a Python program (the Hub's and the single-user image have Python) printing "name open|blocked"
// for each probe, each tried up to three times so that a rule still being written is not taken for a verdict.
func pyProbes(probes []probe) string {
	var b strings.Builder
	b.WriteString("import socket\ndef tcp(host, port):\n    for _ in range(3):\n        try:\n            socket.create_connection((host, int(port)), timeout=3).close()\n            return 'open'\n        except OSError:\n            pass\n    return 'blocked'\n")
	for _, p := range probes {
		fmt.Fprintf(&b, "print(%q, tcp(%q, %q))\n", p.name, p.host, p.port)
	}
	return b.String()
}

// jsProbes is the same in JavaScript, for the proxy's image (Node.js).
func jsProbes(probes []probe) string {
	var b strings.Builder
	b.WriteString(`const net = require("net");
function tcp(host, port, left) {
  return new Promise((resolve) => {
    const s = net.connect({host, port: Number(port), timeout: 3000});
    const done = (v) => { s.destroy(); resolve(v); };
    s.on("connect", () => done("open"));
    s.on("timeout", () => done("blocked"));
    s.on("error", () => done("blocked"));
  }).then((v) => (v === "open" || left <= 1) ? v : tcp(host, port, left - 1));
}
(async () => {
`)
	for _, p := range probes {
		fmt.Fprintf(&b, "  console.log(%q, await tcp(%q, %q, 3));\n", p.name, p.host, p.port)
	}
	b.WriteString("})();\n")
	return b.String()
}

// verdicts parses "name verdict" lines.
func verdicts(out string) map[string]string {
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			got[name] = v
		}
	}
	return got
}

// leftovers lists every object of every listable API resource, in namespace ns and cluster-wide, that carries
// the release's instance label or whose name starts with prefix.
func leftovers(ctx context.Context, t *testing.T, cfg *rest.Config, ns, instance, prefix string) []string {
	t.Helper()
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := disc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			// Events are the cluster's record, not objects of the release; componentstatuses probe the
			// control plane on every list (slow, deprecated).
			if !slices.Contains(r.Verbs, "list") || r.Name == "events" || r.Name == "componentstatuses" || strings.Contains(r.Name, "/") {
				continue
			}
			ri := dyn.Resource(gv.WithResource(r.Name))
			var items *unstructured.UnstructuredList
			if r.Namespaced {
				items, err = ri.Namespace(ns).List(ctx, metav1.ListOptions{})
			} else {
				items, err = ri.List(ctx, metav1.ListOptions{})
			}
			if err != nil {
				t.Fatalf("list %s: %v", r.Name, err)
			}
			for _, it := range items.Items {
				if it.GetLabels()["app.kubernetes.io/instance"] == instance || strings.HasPrefix(it.GetName(), prefix) {
					found = append(found, r.Name+"/"+it.GetName())
				}
			}
		}
	}
	slices.Sort(found)
	return found
}

// hubUser is a user's browser session with the Hub, through the proxy's Service: the form login, the spawn form,
// and the REST API with the session cookie (and its XSRF token), as JupyterHub's own pages use it.
type hubUser struct {
	base, name string
	client     *http.Client
}

var xsrfField = regexp.MustCompile(`name="_xsrf" value="([^"]+)"`)

// signIn logs name in (z2jh's default authenticator takes any password), retrying while the Hub restarts.
func signIn(ctx context.Context, t *testing.T, base, name string) *hubUser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	u := &hubUser{base: base, name: name, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	for i := 0; i < 60; i++ {
		if status, _, _ := u.do(ctx, http.MethodGet, "/hub/home", nil); status == http.StatusOK {
			return u
		}
		if _, page, err := u.do(ctx, http.MethodGet, "/hub/login", nil); err == nil {
			if m := xsrfField.FindStringSubmatch(page); m != nil {
				_, _, _ = u.do(ctx, http.MethodPost, "/hub/login", url.Values{"_xsrf": {m[1]}, "username": {name}, "password": {"any"}})
			}
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("%s could not log in at %s", name, base)
	return nil
}

// do sends a request; a form is posted as application/x-www-form-urlencoded. API calls carry the XSRF token.
func (u *hubUser) do(ctx context.Context, method, path string, form url.Values) (int, string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u.base+path, body)
	if err != nil {
		return 0, "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if strings.HasPrefix(path, "/hub/api/") {
		u.setXSRF(req)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// setXSRF gives an API request with the session cookie the XSRF token JupyterHub asks of it.
func (u *hubUser) setXSRF(req *http.Request) {
	for _, c := range u.client.Jar.Cookies(req.URL) {
		if c.Name == "_xsrf" {
			req.Header.Set("X-XSRFToken", c.Value)
		}
	}
}

// servers returns the user's servers as the Hub's REST API lists them (a pending one with its pending action);
// ok is false when the Hub did not answer.
func (u *hubUser) servers(ctx context.Context) (servers map[string]struct {
	Pending *string `json:"pending"`
}, ok bool) {
	status, body, err := u.do(ctx, http.MethodGet, "/hub/api/users/"+u.name, nil)
	var user struct {
		Servers map[string]struct {
			Pending *string `json:"pending"`
		} `json:"servers"`
	}
	if err != nil || status != http.StatusOK || json.Unmarshal([]byte(body), &user) != nil {
		return nil, false
	}
	return user.Servers, true
}

// waitNoServer waits up to within until the Hub lists no server for the user; false if it still does.
func (u *hubUser) waitNoServer(ctx context.Context, within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(time.Second) {
		if s, ok := u.servers(ctx); ok && len(s) == 0 {
			return true
		}
	}
	return false
}

// spawn submits the spawn form with profile and follows the start as the progress page does: "" once the server
// is ready, or the refusal the user is shown, on the form (a refusal within the Hub's first second) or in the
// progress stream ("Spawn failed: ...": z2jh's slow_spawn_timeout 0 sends every start there at once).
func (u *hubUser) spawn(ctx context.Context, t *testing.T, profile string) string {
	t.Helper()
	status, page, err := u.do(ctx, http.MethodGet, "/hub/spawn/"+u.name, nil)
	// The form posts to its action, which carries the XSRF token (?_xsrf=).
	m := regexp.MustCompile(`id="spawn_form"\s+action="([^"]+)"`).FindStringSubmatch(page)
	if err != nil || status != http.StatusOK || m == nil || !strings.Contains(page, `value="`+profile+`"`) {
		t.Fatalf("%s's spawn form: status %d, %v, no form action or no choice %q:\n%s", u.name, status, err, profile, tailBytes([]byte(page), 2048))
	}
	action, err := url.Parse(html.UnescapeString(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	status, page, err = u.do(ctx, http.MethodPost, action.RequestURI(), url.Values{"profile": {profile}})
	if err != nil {
		t.Fatalf("%s: submit the spawn form: %v", u.name, err)
	}
	if status == http.StatusFound || status == http.StatusSeeOther {
		return u.progress(ctx, t)
	}
	alert := regexp.MustCompile(`(?s)class="spawn-error-msg[^"]*"[^>]*>(.*?)</p>`).FindStringSubmatch(page)
	if status != http.StatusOK || alert == nil {
		t.Fatalf("%s: the spawn form answered %d with neither a redirect nor a message:\n%s", u.name, status, tailBytes([]byte(page), 2048))
	}
	return strings.Join(strings.Fields(html.UnescapeString(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(alert[1], " "))), " ")
}

// progress reads the server's progress stream (the event stream the progress page reads) to its end: "" when
// the server is ready, else the failure's message.
func (u *hubUser) progress(ctx context.Context, t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.base+"/hub/api/users/"+u.name+"/server/progress", nil)
	stream := &http.Client{Jar: u.client.Jar} // no overall timeout: the stream lasts as long as the start
	resp, err := stream.Do(req)
	if err != nil {
		t.Fatalf("%s: progress: %v", u.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: progress: %s %s", u.name, resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Ready   bool   `json:"ready"`
			Failed  bool   `json:"failed"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%s: progress event %q: %v", u.name, data, err)
		}
		switch {
		case ev.Ready:
			return ""
		case ev.Failed:
			return ev.Message
		}
	}
	t.Fatalf("%s: the progress stream ended without ready or failed: %v", u.name, sc.Err())
	return ""
}

// stop waits for a pending start of the user's server to end (interrupting one is not what a user does, and
// JupyterHub answers it with a 500 while KubeSpawner is creating the pod), stops the server, and waits until
// the Hub has no server for them.
func (u *hubUser) stop(ctx context.Context, t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if s, ok := u.servers(ctx); ok {
			if server, running := s[""]; !running {
				return
			} else if server.Pending == nil {
				break
			}
		}
	}
	if status, body, err := u.do(ctx, http.MethodDelete, "/hub/api/users/"+u.name+"/server", nil); err != nil || (status != http.StatusNoContent && status != http.StatusAccepted) {
		t.Fatalf("%s: stop server: %d %v %s", u.name, status, err, body)
	}
	if !u.waitNoServer(ctx, 2*time.Minute) {
		t.Fatalf("%s's server did not stop within 2 minutes", u.name)
	}
}

// profileSlug returns the slug of the spawn form's choice whose label contains name.
func (u *hubUser) profileSlug(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	_, page, err := u.do(ctx, http.MethodGet, "/hub/spawn/"+u.name, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?s)<input[^>]*name="profile"[^>]*value="([^"]+)"[^>]*>.*?</label>`).FindAllStringSubmatch(page, -1) {
		if strings.Contains(m[0], name) {
			return m[1]
		}
	}
	t.Fatalf("%s's spawn form has no choice %q:\n%s", u.name, name, tailBytes([]byte(page), 4096))
	return ""
}

// upgradePolicy runs `helm upgrade` of gpuhub (gpuhubCmd, the README's install) with a new quota policy while
// alice starts and stops MIG servers through the spawn form: none of her starts may be refused, before, during or
// after the upgrade. The new policy is in force once bob's whole GPU is refused.
// It returns the slugs of the MIG slice and whole H100 choices.
func upgradePolicy(ctx context.Context, t *testing.T, base, helm, kubeconfig string, gpuhubCmd []string) (mig, whole string) {
	t.Helper()
	alice, bob := signIn(ctx, t, base, "alice"), signIn(ctx, t, base, "bob")
	alice.stop(ctx, t) // the servers of the panel's story
	bob.stop(ctx, t)
	mig, whole = alice.profileSlug(ctx, t, "MIG 1g.5gb"), bob.profileSlug(ctx, t, "H100 80GB HBM3 (whole GPU)")
	args := append(slices.Clone(gpuhubCmd), "--set-file", "quota.policy=testdata/quota-upgrade.yaml", "--kubeconfig", kubeconfig)
	t.Logf("helm %s", strings.Join(args, " "))
	done := make(chan error, 1)
	go func() {
		out, err := exec.CommandContext(ctx, helm, args...).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("helm upgrade gpuhub: %w\n%s", err, out)
		}
		done <- err
	}()
	upgraded := false
	starts := 0
	refusal := ""
	deadline := time.Now().Add(4 * time.Minute)
	for refusal == "" {
		if time.Now().After(deadline) {
			t.Fatalf("bob's whole GPU was still admitted 4 minutes after helm upgrade began (alice started %d MIG servers meanwhile)", starts)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			upgraded = true
		default:
		}
		if msg := alice.spawn(ctx, t, mig); msg != "" {
			t.Fatalf("alice's MIG start %d (helm upgrade done: %v) was refused: %s", starts+1, upgraded, msg)
		}
		starts++
		alice.stop(ctx, t)
		if msg := bob.spawn(ctx, t, whole); msg != "" {
			refusal = msg
		} else {
			bob.stop(ctx, t)
		}
	}
	if !upgraded {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// gpu-profiles' start check refuses with the new policy's words and what is free instead (a MIG slice); when
	// its copy of gpu-quota's verdicts still has the old policy, or it cannot reach gpu-quota, the start goes on
	// and gpu-quota, which decides, refuses with the policy's words alone.
	if !strings.Contains(refusal, "MIG") && !strings.Contains(refusal, "at most 1/7 of a GPU") {
		t.Fatalf("bob's whole GPU was refused, but not for the new policy (1/7 GPU at a time): %s", refusal)
	}
	t.Logf("helm upgrade changed gpu-quota's policy: alice's %d MIG starts meanwhile were all admitted; bob's whole GPU is now refused: %q", starts, refusal)
	return mig, whole
}
