//go:build e2e

package waitliste2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/e2e/internal/servers"
)

// KubeSpawner's annotations of a single-user pod, and gpu-culler's notice on it (docs/architecture.md).
const (
	annotationUser   = "hub.jupyter.org/username"
	annotationServer = "hub.jupyter.org/servername"
	cullerNotice     = "gpuhub.io/notice-gpu-culler"
)

type cullerWarning struct {
	Message  string    `json:"message"`
	Deadline time.Time `json:"deadline"`
	Stops    bool      `json:"stops"`
}

// place is gpu-quota's answer for one waitlist entry (services/gpu-quota/README.md, "When no GPU is free").
type place struct {
	User      string    `json:"user"`
	Server    string    `json:"server"`
	Class     string    `json:"class"`
	State     string    `json:"state"`
	Position  int       `json:"position"`
	FairShare float64   `json:"fairShare"`
	HeldUntil time.Time `json:"heldUntil"`
	Message   string    `json:"message"`
}

func TestWaitlistStory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	start := func(user, server, profile string) {
		t.Helper()
		if err := servers.StartReady(ctx, hubAdmin, user, server, profile, 3*time.Minute); err != nil {
			t.Fatalf("%v\n%s", err, logTail("gpu-quota", 30))
		}
	}
	// The Hub glue gives gpu-profiles a second per form; its first answers after start can take longer.
	poll(ctx, t, "the spawn form from gpu-profiles", time.Minute, func() bool {
		_, err := hubAdmin.StartServer(ctx, "admin", "", map[string]any{"profile": "cpu"})
		return err == nil
	})
	if err := servers.Stop(ctx, hubAdmin, "admin", ""); err != nil {
		t.Fatal(err)
	}

	// alice used an H100 a while ago; bob did not.
	start("alice", "", h100)
	time.Sleep(20 * time.Second)
	if err := servers.Stop(ctx, hubAdmin, "alice", ""); err != nil {
		t.Fatal(err)
	}
	// Her pod holds the GPU until it is gone.
	poll(ctx, t, "alice's pod gone", 2*time.Minute, func() bool { name, _ := podOf(ctx, t, "alice", ""); return name == "" })
	// carol holds both H100s: an idle one, and a long job she marked exempt from culling.
	start("carol", "", h100)
	start("carol", "long", h100)
	annotate(ctx, t, "carol", "long", exemptAnnotation, "training run")
	// bob works in a CPU server while he waits.
	start("bob", "", "cpu")

	// alice joins first, through the REST API (the same glue: the spawn's user_options say to join); bob a little
	// later from the spawn form in Chromium, for a named server, with "start my server automatically".
	if _, err := hubAdmin.StartServer(ctx, "alice", "", map[string]any{"profile": h100, "gpuhub_waitlist": true}); err != nil {
		t.Logf("alice's spawn: %v (a refusal is expected: she joins the waitlist)", err)
	}
	poll(ctx, t, "alice queued", 30*time.Second, func() bool { return len(places(ctx, t, "alice")) == 1 })
	time.Sleep(2 * time.Second)
	joined := browser(t, "waitlist.mjs", "MODE=join", "HUB_USER=bob", "HUB_SERVER=gpu", "PROFILE="+h100, "AUTO_START=1",
		"EXPECT=waiting for an H100")
	t.Logf("bob's spawn page said: %s", joined)

	// Fair share: alice used an H100 recently and bob did not, so bob goes first although alice joined first.
	var order []place
	poll(ctx, t, "bob first and alice second in the H100 queue", time.Minute, func() bool {
		order = places(ctx, t, "")
		return len(order) == 2 && order[0].User == "bob" && order[0].Position == 1 && order[1].User == "alice" && order[1].Position == 2
	})
	if !(order[1].FairShare < order[0].FairShare) {
		t.Errorf("fair share: alice %v should be below bob %v (she used an H100 recently)\n%s", order[1].FairShare, order[0].FairShare,
			logGrep("gpu-quota", "fair share", "decayed"))
	}
	// bob sees his place in the panel of the CPU server he works in.
	said := browser(t, "waitlist.mjs", "MODE=panel", "HUB_USER=bob", "HUB_SERVER=", "EXPECT=1 of 2", "WITHIN_MS=60000")
	t.Logf("bob's panel said: %s", said)

	// The H100 class is contended: gpu-culler warns carol first (a notice on her idle server's pod that says why)...
	var warned cullerWarning
	poll(ctx, t, "carol warned", idleWhenContended+warn+30*time.Second, func() bool {
		_, ann := podOf(ctx, t, "carol", "")
		return json.Unmarshal([]byte(ann[cullerNotice]), &warned) == nil && warned.Stops
	})
	if !strings.Contains(warned.Message, "waiting") {
		t.Errorf("carol's warning does not say someone is waiting: %q", warned.Message)
	}
	t.Logf("carol's warning: %s (stop at %s)", warned.Message, warned.Deadline.Format(time.TimeOnly))
	// ...then stops it, not before the deadline it showed.
	poll(ctx, t, "carol's idle server stopped", warn+time.Minute, func() bool {
		u, err := hubAdmin.GetUser(ctx, "carol")
		if err != nil {
			return false
		}
		_, running := u.Servers[""]
		return !running
	})
	if now := time.Now(); now.Before(warned.Deadline) {
		t.Errorf("carol's server stopped at %s, before the deadline %s her warning showed", now, warned.Deadline)
	}

	// The freed H100 is held for bob and his server starts by itself.
	poll(ctx, t, "bob's GPU server started for him", 3*time.Minute, func() bool {
		u, err := hubAdmin.GetUser(ctx, "bob")
		if err != nil {
			return false
		}
		s, ok := u.Servers["gpu"]
		return ok && s.Ready
	})
	poll(ctx, t, "alice first", time.Minute, func() bool {
		ps := places(ctx, t, "alice")
		return len(ps) == 1 && ps[0].Position == 1 && ps[0].State == "waiting"
	})
	// bob's panel, in his CPU server's JupyterLab, says his GPU server was started for him.
	said = browser(t, "waitlist.mjs", "MODE=panel", "HUB_USER=bob", "HUB_SERVER=", "EXPECT=was started for you")
	t.Logf("bob's panel said: %s", said)

	// carol's long job was never touched.
	if u, err := hubAdmin.GetUser(ctx, "carol"); err != nil || !u.Servers["long"].Ready {
		t.Errorf("carol's exempt server: %v %+v", err, u)
	}
}

// places asks gpu-quota for the waitlist (user "": every queue) with the Hub admin's token.
func places(ctx context.Context, t *testing.T, user string) []place {
	t.Helper()
	u := quotaURL + "api/v1/waitlist"
	if user != "" {
		u = quotaURL + "api/v1/users/" + user + "/waitlist"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+st.Hub.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Places []place `json:"places"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		return nil
	}
	var waiting []place
	for _, p := range out.Places {
		if p.State != "started" {
			waiting = append(waiting, p)
		}
	}
	return waiting
}

// podOf finds user's server's single-user pod by KubeSpawner's annotations.
func podOf(ctx context.Context, t *testing.T, user, server string) (name string, annotations map[string]string) {
	t.Helper()
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "component=singleuser-server"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Annotations[annotationUser] == user && p.Annotations[annotationServer] == server {
			return p.Name, p.Annotations
		}
	}
	return "", nil
}

func annotate(ctx context.Context, t *testing.T, user, server, key, value string) {
	t.Helper()
	name, _ := podOf(ctx, t, user, server)
	if name == "" {
		t.Fatalf("no pod for %s/%s", user, server)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if _, err := kube.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func poll(ctx context.Context, t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, time.Second, within, true, func(context.Context) (bool, error) { return ok(), nil })
	if err != nil {
		t.Fatalf("%s: not within %s\n--- gpu-quota ---\n%s\n--- gpu-quota (fair share) ---\n%s\n--- gpu-culler ---\n%s", what, within,
			logTail("gpu-quota", 40), logGrep("gpu-quota", "fair share", "decayed"), logTail("gpu-culler", 40))
	}
	t.Logf("%s (%.0fs)", what, time.Since(start).Seconds())
}

// browser runs e2e/browser/<script> in headless Chromium with env; it returns the line the script printed after
// "result: " and fails the test when the script fails. Screenshots go to e2e/artifacts.
func browser(t *testing.T, script string, env ...string) string {
	t.Helper()
	artifacts, _ := filepath.Abs(filepath.Join("..", "artifacts"))
	path, _ := filepath.Abs(filepath.Join("..", "browser", script))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", path)
	cmd.Env = append(os.Environ(), append([]string{"HUB_URL=" + st.HubURL(), "HUB_PASSWORD=" + password, "GPUHUB_ARTIFACTS=" + artifacts}, env...)...)
	out, err := cmd.CombinedOutput()
	t.Logf("browser output (%s %v):\n%s", script, env, out)
	if err != nil {
		t.Fatalf("%s: %v (screenshots in %s)", script, err, artifacts)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(line, "result: "); ok {
			return r
		}
	}
	return ""
}

func logTail(component string, n int) string { return servers.LogTail(st.Dir, component, n) }

// logGrep is the lines of component's log that contain any of words.
func logGrep(component string, words ...string) string {
	var out []string
	for _, line := range strings.Split(servers.LogTail(st.Dir, component, 100000), "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
