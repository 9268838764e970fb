//go:build e2e

package profilese2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/e2e/emulator"
	"github.com/gpuhub/gpuhub/e2e/internal/servers"
)

// pendingEndAfter is gpu-profiles' --pending-end-after here: short, so the test sees a hopeless spawn end.
const pendingEndAfter = 10 * time.Second

// baseConfig are the overrides the cluster starts with: two whole GPUs on one node as an extra choice.
const baseConfig = `note: GPUs are shared. Stop your server when you are done.
kinds:
  gpu:
    multiGPU: [2]
`

// The generated choices of e2e/topology.yaml and what each asks for: the slug scheme of
// services/gpu-profiles/README.md, checked here against the cluster itself.
var kinds = map[string]struct{ product, resource string }{
	"gpu-h100-80gb-hbm3":         {"NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu"},
	"mig-a100-sxm4-40gb-3g-20gb": {"NVIDIA-A100-SXM4-40GB", "nvidia.com/mig-3g.20gb"},
	"mig-a100-sxm4-40gb-1g-5gb":  {"NVIDIA-A100-SXM4-40GB", "nvidia.com/mig-1g.5gb"},
	"shared-t4":                  {"Tesla-T4-SHARED", "nvidia.com/gpu.shared"},
}

// TestFormFreeCountsMatchCluster: bob's form lists every GPU kind of the cluster with the free count the API
// server's own objects give (allocatable minus what bound, unfinished pods request), and the CPU choice.
func TestFormFreeCountsMatchCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	hub().StartReady(ctx, t, "alice", "slice", "mig-a100-sxm4-40gb-1g-5gb")
	defer hub().Stop(t, "alice", "slice")

	form := openForm(t, formRun{user: "bob"})
	want := clusterFree(ctx, t)
	got := map[string]string{}
	for _, c := range form.Choices {
		if _, ok := kinds[c.Slug]; ok {
			got[c.Slug] = c.Free
		}
	}
	wantText := map[string]string{}
	for slug, n := range want {
		wantText[slug] = fmt.Sprintf("%d free of %d", n[0], n[1])
	}
	if d := diffMaps(wantText, got); d != "" {
		t.Errorf("free counts on bob's form differ from the cluster's:\n%s", d)
	}
	if wantText["mig-a100-sxm4-40gb-1g-5gb"] != "7 free of 8" {
		t.Errorf("alice's slice is not counted: 1g.5gb %q, want 7 free of 8", wantText["mig-a100-sxm4-40gb-1g-5gb"])
	}
	if form.choice("cpu") == nil || form.choice("cpu").Disabled {
		t.Errorf("the CPU choice is missing or disabled: %+v", form.Choices)
	}
	if !strings.Contains(form.Note, "GPUs are shared") {
		t.Errorf("the overrides' note is not on the form: %q", form.Note)
	}
}

// TestNoH100FreeOnTheForm: carol holds both H100s. Bob's form shows the H100 choice disabled with "none free"
// and the MIG slices free; a forced submit of the H100 (a stale form) is refused within 5 s naming what is free.
func TestNoH100FreeOnTheForm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	hub().StartReady(ctx, t, "carol", "both", "gpu-h100-80gb-hbm3-x2")
	defer hub().Stop(t, "carol", "both")
	// The glue keeps each user's answer for GPUHUB_PROFILES_CACHE_SECONDS (5 s): a form of bob's rendered by the
	// test before, while the H100s were free, must have aged out.
	time.Sleep(6 * time.Second)

	form := openForm(t, formRun{user: "bob", screenshot: "spawn-form-generated.png"})
	h100 := form.choice("gpu-h100-80gb-hbm3")
	if h100 == nil || !h100.Disabled || !h100.AriaDisabled || h100.Free != "0 free of 2" {
		t.Fatalf("H100 on bob's form: %+v, want disabled with 0 free of 2", h100)
	}
	if !strings.Contains(strings.ToLower(h100.Reason), "free") || !strings.Contains(h100.DescribedBy, "-reason") {
		t.Errorf("H100 reason %q (aria-describedby %q) does not say none is free", h100.Reason, h100.DescribedBy)
	}
	for _, slug := range []string{"mig-a100-sxm4-40gb-3g-20gb", "mig-a100-sxm4-40gb-1g-5gb", "shared-t4"} {
		if c := form.choice(slug); c == nil || c.Disabled {
			t.Errorf("%s should be offered and free: %+v", slug, c)
		}
	}
	if c := form.choice("gpu-h100-80gb-hbm3-x2"); c != nil && !c.Disabled {
		t.Errorf("two H100s offered while none is free: %+v", c)
	}
	if strings.Contains(fmt.Sprint(form.Choices), "carol") {
		t.Errorf("bob's form names carol: %+v", form.Choices)
	}

	defer hub().Stop(t, "bob", "h100") // a refused spawn leaves the named server behind (named_server_limit_per_user)
	res := openForm(t, formRun{user: "bob", server: "h100", force: "gpu-h100-80gb-hbm3", expect: "free"})
	if res.TookMs > 5000 {
		t.Errorf("refused after %d ms, want within 5 s", res.TookMs)
	}
	if !strings.Contains(res.Text, "MIG") {
		t.Errorf("refusal %q does not name the free MIG slices", res.Text)
	}
	if u := hub().User(ctx, t, "bob"); u.Servers["h100"].Ready {
		t.Error("bob/h100 runs after the refusal")
	}
}

// TestFallbackWhenProfilesDown: with gpu-profiles stopped the form still renders, from the admin's static list
// (e2e/hub/values.yaml singleuser.profileList), with a note saying so; it comes back when gpu-profiles does.
func TestFallbackWhenProfilesDown(t *testing.T) {
	if err := st.StopComponent("gpu-profiles"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // the glue's per-user cache (5 s) still holds bob's last live form
	form := openForm(t, formRun{user: "bob", screenshot: "spawn-form-fallback.png"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := st.StartComponent(ctx, "gpu-profiles"); err != nil {
		t.Fatalf("gpu-profiles did not come back: %v", err)
	}
	if form.choice("h100") == nil || form.choice("gpu-h100-80gb-hbm3") != nil {
		t.Errorf("with gpu-profiles down the form is not the static list: %+v", form.Choices)
	}
	if !strings.Contains(form.Note, "cannot be shown right now") {
		t.Errorf("the fallback form's note %q does not say the live list is unavailable", form.Note)
	}
	t.Logf("fallback note: %s", form.Note)
	// Back: the generated list again (the glue caches each user's form a few seconds).
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(context.Context) (bool, error) {
		f := openForm(t, formRun{user: "bob"})
		return f.choice("gpu-h100-80gb-hbm3") != nil, nil
	})
	if err != nil {
		t.Errorf("the generated form did not come back after gpu-profiles restarted: %v", err)
	}
}

// TestPendingExplainedThenEnded: the T4 share is made to ask for more CPU than its node has (an override), so
// its pod stays Pending: the progress page shows gpu-profiles' explanation within 10 s, not the scheduler's
// text. Then the T4 node is cordoned: nothing can ever place the pod, the page says the spawn ends, and it is
// ended after --pending-end-after.
func TestPendingExplainedThenEnded(t *testing.T) {
	writeConfig(t, baseConfig+"  shared-t4:\n    cpuGuarantee: 8\n    cpuLimit: 8\n")
	defer writeConfig(t, baseConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		for _, p := range askProfiles(t, "bob", []string{"students"}) {
			if p.Slug == "shared-t4" && fmt.Sprint(p.Override["cpu_guarantee"]) == "8" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("gpu-profiles did not take the new overrides: %v", err)
	}
	time.Sleep(6 * time.Second) // the glue's per-user cache (5 s) holds the form from before
	defer hub().Stop(t, "bob", "pending")

	res := openForm(t, formRun{user: "bob", server: "pending", submit: "shared-t4", expect: "enough CPU", within: 20 * time.Second})
	if strings.Contains(res.Text, "Insufficient cpu") || strings.Contains(res.Text, "0/") {
		t.Errorf("the progress page shows the scheduler's raw text: %q", res.Text)
	}
	t.Logf("explained after %d ms: %s", res.TookMs, res.Text)
	pod := podOf(ctx, t, "bob", "pending")
	if ev := events(ctx, t, pod); !strings.Contains(ev, "GPUhubPending") {
		t.Errorf("no GPUhubPending Event on %s: %s", pod, ev)
	}

	cordon(ctx, t, "gpu-t4-0", true)
	defer cordon(context.Background(), t, "gpu-t4-0", false)
	err = wait.PollUntilContextTimeout(ctx, time.Second, pendingEndAfter+time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := hubAdmin.GetUser(ctx, "bob")
		if err != nil {
			return false, nil
		}
		s, ok := u.Servers["pending"]
		return !ok || (s.Pending == "" && !s.Ready), nil
	})
	if err != nil {
		t.Fatalf("the hopeless spawn was not ended: %v\ngpu-profiles log:\n%s", err, logTail("gpu-profiles", 30))
	}
	if ev := events(ctx, t, pod); !strings.Contains(ev, "cordoned") {
		t.Errorf("no Event said the T4 node is cordoned: %s", ev)
	}
}

// TestSecondTopology: the nodes of e2e/topology-2.yaml join the running cluster; with no change to any
// configuration, the form offers their kinds (four whole L40S, two on one node, an A10 shared by MPS) with
// their free counts, and stops offering them when the nodes leave.
func TestSecondTopology(t *testing.T) {
	topo, err := emulator.LoadTopology(filepath.Join("..", "topology-2.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	emu, err := emulator.New(emulator.Options{Client: kube, Topology: topo, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.Register(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, n := range topo.Nodes {
			_ = kube.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		}
	}()
	runCtx, stopEmu := context.WithCancel(ctx)
	defer stopEmu()
	go func() { _ = emu.Run(runCtx) }()

	form := waitForm(ctx, t, "bob", func(f formResult) bool { return f.choice("mps-a10") != nil && f.choice("gpu-l40s") != nil })
	got := map[string]string{}
	for _, slug := range []string{"gpu-l40s", "gpu-l40s-x2", "mps-a10"} {
		if c := form.choice(slug); c != nil {
			got[slug] = c.Free
		}
	}
	want := map[string]string{"gpu-l40s": "4 free of 4", "gpu-l40s-x2": "2 free of 2", "mps-a10": "2 free of 2"}
	if d := diffMaps(want, got); d != "" {
		t.Errorf("the second topology's kinds on bob's form:\n%s", d)
	}
	if c := form.choice("mps-a10"); c != nil && !strings.Contains(strings.ToLower(c.Name+" "+describe(t, "mps-a10")), "mps") {
		t.Errorf("the A10 choice does not say it is an MPS share: %+v", c)
	}
	if form.choice("gpu-h100-80gb-hbm3") == nil {
		t.Error("the first topology's H100 left the form")
	}
	stopEmu()
	for _, n := range topo.Nodes {
		if err := kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitForm(ctx, t, "bob", func(f formResult) bool { return f.choice("gpu-l40s") == nil && f.choice("mps-a10") == nil })
}

// describe is a choice's description, as gpu-profiles generates it for bob.
func describe(t *testing.T, slug string) string {
	t.Helper()
	for _, p := range askProfiles(t, "bob", []string{"students"}) {
		if p.Slug == slug {
			return p.Description
		}
	}
	return ""
}

type profile struct {
	Slug        string         `json:"slug"`
	DisplayName string         `json:"display_name"`
	Description string         `json:"description"`
	Override    map[string]any `json:"kubespawner_override"`
}

// askProfiles asks gpu-profiles directly what the glue asks it for user's form (of the default server).
func askProfiles(t *testing.T, user string, groups []string) []profile {
	t.Helper()
	return askProfilesFor(t, user, "", groups)
}

// askProfilesFor is askProfiles for the form of user's server (the right-size mark is per server).
func askProfilesFor(t *testing.T, user, server string, groups []string) []profile {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"user": user, "groups": groups, "server": server})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, profilesURL+"api/v1/profiles", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "token "+profilesToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Profiles []profile `json:"profiles"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("gpu-profiles answered %s: %v", resp.Status, err)
	}
	return out.Profiles
}

// clusterFree counts, from the API server's nodes and pods, each kind's free and allocatable units on
// schedulable nodes: slug -> [free, allocatable].
func clusterFree(ctx context.Context, t *testing.T) map[string][2]int64 {
	t.Helper()
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]map[string]int64{} // node -> resource -> requested
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			for r, q := range c.Resources.Requests {
				if used[p.Spec.NodeName] == nil {
					used[p.Spec.NodeName] = map[string]int64{}
				}
				used[p.Spec.NodeName][string(r)] += q.Value()
			}
		}
	}
	out := map[string][2]int64{}
	for slug, k := range kinds {
		var free, alloc int64
		for _, n := range nodes.Items {
			if n.Labels["nvidia.com/gpu.product"] != k.product || n.Spec.Unschedulable {
				continue
			}
			q, ok := n.Status.Allocatable[corev1.ResourceName(k.resource)]
			if !ok {
				continue
			}
			alloc += q.Value()
			free += q.Value() - used[n.Name][k.resource]
		}
		out[slug] = [2]int64{free, alloc}
	}
	return out
}

type choice struct {
	Slug         string `json:"slug"`
	Name         string `json:"name"`
	Free         string `json:"free"`
	Disabled     bool   `json:"disabled"`
	AriaDisabled bool   `json:"ariaDisabled"`
	DescribedBy  string `json:"describedBy"`
	Reason       string `json:"reason"`
	Description  string `json:"description"`
	Checked      bool   `json:"checked"`
}

type formResult struct {
	OK      bool     `json:"ok"`
	Choices []choice `json:"choices"`
	Note    string   `json:"note"`
	Text    string   `json:"text"`
	TookMs  int      `json:"tookMs"`
}

func (f formResult) choice(slug string) *choice {
	for i := range f.Choices {
		if f.Choices[i].Slug == slug {
			return &f.Choices[i]
		}
	}
	return nil
}

type formRun struct {
	user, server, screenshot string
	force, submit, expect    string
	within                   time.Duration
}

// openForm runs e2e/browser/spawn-form.mjs in headless Chromium: user's spawn form for server, and, with force
// or submit, what the Hub shows after submitting that choice (expect within the given time, default 5 s).
func openForm(t *testing.T, r formRun) formResult {
	t.Helper()
	modules, chromium := os.Getenv("GPUHUB_BROWSER_MODULES"), os.Getenv("GPUHUB_CHROMIUM")
	if modules == "" || chromium == "" {
		t.Fatal("GPUHUB_BROWSER_MODULES and GPUHUB_CHROMIUM must be set; run `make e2e`")
	}
	if r.server == "" {
		r.server = "form" // every look at a form uses one named server (the Hub allows a few per user)
	}
	if r.within == 0 {
		r.within = 5 * time.Second
	}
	artifacts, _ := filepath.Abs(filepath.Join("..", "artifacts"))
	script, _ := filepath.Abs(filepath.Join("..", "browser", "spawn-form.mjs"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "HUB_URL="+st.HubURL(), "HUB_USER="+r.user, "HUB_PASSWORD="+password, "HUB_SERVER="+r.server,
		"GPUHUB_ARTIFACTS="+artifacts, "FORCE_PROFILE="+r.force, "SUBMIT_PROFILE="+r.submit, "EXPECT_TEXT="+r.expect,
		fmt.Sprintf("WITHIN_MS=%d", r.within.Milliseconds()))
	if r.screenshot != "" {
		cmd.Env = append(cmd.Env, "SCREENSHOT="+r.screenshot)
	}
	out, err := cmd.CombinedOutput()
	var res formResult
	if lines := regexp.MustCompile(`(?m)^\{.*"choices".*\}$`).FindAll(out, -1); len(lines) > 0 {
		if uerr := json.Unmarshal(lines[len(lines)-1], &res); uerr != nil {
			err = errors.Join(err, fmt.Errorf("the result line: %w", uerr))
		}
	}
	if err != nil || !res.OK {
		t.Fatalf("spawn form of %s/%s in Chromium: %v\n%s\nhub log:\n%s", r.user, r.server, err, out, st.Hub.LogTail(30))
	}
	return res
}

// waitForm opens user's form until ok accepts it (gpu-profiles follows the cluster within moments; the glue
// caches a user's form for a few seconds).
func waitForm(ctx context.Context, t *testing.T, user string, ok func(formResult) bool) formResult {
	t.Helper()
	var last formResult
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 90*time.Second, true, func(context.Context) (bool, error) {
		last = openForm(t, formRun{user: user})
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("the form of %s never became as expected: %v; last: %+v", user, err, last.Choices)
	}
	return last
}

func writeConfig(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(configPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // --config-poll=2s
}

func cordon(ctx context.Context, t *testing.T, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("cordon %s=%t: %v", node, on, err)
	}
}

// podOf is the name of user's pod for server (KubeSpawner's annotations).
func podOf(ctx context.Context, t *testing.T, user, server string) string {
	t.Helper()
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Annotations["hub.jupyter.org/username"] == user && p.Annotations["hub.jupyter.org/servername"] == server {
			return p.Name
		}
	}
	t.Fatalf("no pod of %s/%s", user, server)
	return ""
}

// events are the pod's Events as KubeSpawner lists them (involvedObject.kind=Pod), one "reason: message" a line.
func events(ctx context.Context, t *testing.T, pod string) string {
	t.Helper()
	evs, err := kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "%s: %s\n", e.Reason, e.Message)
	}
	return b.String()
}

func diffMaps(want, got map[string]string) string {
	var b strings.Builder
	for k, w := range want {
		if got[k] != w {
			fmt.Fprintf(&b, "  %s: want %q, got %q\n", k, w, got[k])
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "  %s: unexpected %q\n", k, g)
		}
	}
	return b.String()
}

func logTail(component string, n int) string { return servers.LogTail(st.Dir, component, n) }

// hub is the suite's Hub for the helpers that fail the test.
func hub() servers.Hub { return servers.Hub{Admin: hubAdmin, LogTail: st.Hub.LogTail} }
