//go:build e2e

package cullere2e

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
	"github.com/gpuhub/gpuhub/e2e/internal/servers"
	"github.com/gpuhub/gpuhub/hubapi"
)

// noticeKey is the pod annotation of gpu-culler's notice (services/internal/notice).
const noticeKey = "gpuhub.io/notice-gpu-culler"

// TestSideBySide is issue 12's comparison: five scenarios on one Hub at once, each on servers of its own (and
// the stale-telemetry one on a node of its own), with gpu-culler's two replicas and each idle-culler version
// looking at all of them. At the end no server was stopped twice by gpu-culler.
func TestSideBySide(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T)
	}{
		{"idle GPU, tab open: gpu-culler warns then stops, idle-culler keeps", idleGPUTabOpen},
		{"silent busy cell, browser closed: gpu-culler keeps, idle-culler stops", silentBusyCell},
		{"agent killed: gpu-culler skips the stale server and says so", agentKilled},
		{"snooze in the panel: the stop moves by the snooze period", snoozeInPanel},
		{"leader killed mid-pass: the other replica takes over, no server stopped twice", leaderKilled},
	}
	// Side by side, not t.Parallel: that would run only GOMAXPROCS of them at once (2 on CI).
	var wg sync.WaitGroup
	for _, sc := range scenarios {
		wg.Go(func() { t.Run(sc.name, sc.run) })
	}
	wg.Wait()

	// Whatever else happened: gpu-culler asked the Hub to stop each server at most once.
	count := map[string][]call{}
	for _, c := range callsOf(cullerTaps, func(c call) bool { return c.Method == http.MethodDelete && c.User != "" }) {
		k := c.User + "/" + c.Server
		count[k] = append(count[k], c)
	}
	for k, cs := range count {
		if len(cs) > 1 {
			t.Errorf("gpu-culler stopped %s %d times: %v", k, len(cs), cs)
		}
	}
	if t.Failed() {
		for _, r := range replicas {
			t.Logf("%s log tail:\n%s", r.name, servers.LogTail(st.Dir, r.name, 40))
		}
	}
}

// idleGPUTabOpen: alice's GPU sits idle while her JupyterLab tab reports activity to the Hub every 3 s, as an open
// tab does. gpu-culler warns (the notice on her pod, shown by the usage API's me) and stops the server at the
// deadline it showed; jupyterhub-idle-culler, which sees recent activity on every pass, never asks to stop it.
func idleGPUTabOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const user, server = "alice", "tab"
	hub().StartReady(ctx, t, user, server, "a100-1g")
	defer hub().Stop(t, user, server)
	ready := time.Now()
	tok := userToken(ctx, t, user)
	uc, err := hubapi.New(hubapi.Config{URL: st.HubURL() + "hub/api", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	tab, closeTab := context.WithCancel(ctx)
	tabDone := make(chan struct{})
	defer func() { closeTab(); <-tabDone }() // no t.Logf after the test ends
	go func() {
		defer close(tabDone)
		for {
			now := time.Now()
			if err := uc.NotifyActivity(tab, user, hubapi.Activity{LastActivity: now, Servers: map[string]time.Time{server: now}}); err != nil && tab.Err() == nil {
				t.Logf("activity: %v", err)
			}
			select {
			case <-tab.Done():
				return
			case <-time.After(3 * time.Second):
			}
		}
	}()

	n, seen := waitNotice(ctx, t, user, server, idlePeriod+2*every+30*time.Second, func(n cullerNotice) bool { return true })
	t.Logf("warned after %.0fs: %q (deadline %s)", seen.Sub(ready).Seconds(), n.Message, n.Deadline.Format(time.TimeOnly))
	if n.Reason != "idle" || !n.Stops || n.Deadline.IsZero() || !n.Snoozable || n.MaxSnoozes != 2 {
		t.Errorf("notice %+v: want an idle stop with a deadline, snoozable twice", n)
	}
	if got := n.Deadline.Sub(n.StopsSince); got < warn-time.Second {
		t.Errorf("warned %s before the stop, want the policy's %s", got, warn)
	}
	wantMeNotice(ctx, t, tok, server, n.Deadline)

	stopped := waitStopped(ctx, t, user, server, time.Until(n.Deadline)+every+leaseDuration+leaseRetry+20*time.Second)
	closeTab()
	stops := stopsRecorded(ctx, user, server)
	if len(stops) != 1 {
		t.Fatalf("gpu-culler's stops of %s/%s: %v, want one", user, server, stops)
	}
	if stops[0].At.Before(n.Deadline) {
		t.Errorf("stopped at %s, before the deadline shown, %s", stops[0].At.Format(time.TimeOnly), n.Deadline.Format(time.TimeOnly))
	}
	t.Logf("gpu-culler stopped it %.1fs after the deadline (%s)", stops[0].At.Sub(n.Deadline).Seconds(), stops[0])
	for _, ic := range idleCullers {
		if d := callsOf([]*tap{ic.tap}, func(c call) bool { return c.isDelete(user, server) }); len(d) > 0 {
			t.Errorf("jupyterhub-idle-culler %s would have stopped %s/%s behind an open tab: %v", ic.version, user, server, d)
		}
		// It looked, and kept it: passes while the server had run longer than its timeout.
		looked := callsOf([]*tap{ic.tap}, func(c call) bool {
			return c.isPass() && c.Status == http.StatusOK && c.At.After(ready.Add(idleTimeout)) && c.At.Before(stopped)
		})
		if len(looked) < 3 {
			t.Errorf("jupyterhub-idle-culler %s made %d passes while %s/%s ran past its timeout: the comparison proves nothing", ic.version, len(looked), user, server)
		}
		t.Logf("jupyterhub-idle-culler %s kept it over %d passes", ic.version, len(looked))
	}
	// Alice is told why (the panel and the Hub home page read it).
	var me struct {
		LastStop *struct {
			Server, Reason, Message string
		} `json:"lastStop"`
	}
	// The pass records its stops in one write when it ends (after its other stops), and every replica reads them
	// from its informer: the answer may lag the DELETE by a moment.
	code := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		me.LastStop = nil
		code = getJSON(ctx, st.HubURL()+"services/gpu-culler/api/v1/me", tok, &me)
		if (code == http.StatusOK && me.LastStop != nil) || time.Now().After(deadline) {
			break
		}
	}
	if code != http.StatusOK || me.LastStop == nil || me.LastStop.Server != server || me.LastStop.Reason != "idle" {
		t.Errorf("gpu-culler's me for alice: %d %+v, want the last stop of %q for idle", code, me.LastStop, server)
	} else {
		t.Logf("alice reads: %s", me.LastStop.Message)
		// And the Hub home page, in Chromium, says it above the Hub's own content.
		if out, err := runHomeStop(user, me.LastStop.Message); err != nil {
			t.Errorf("the Hub home page in Chromium: %v\n%s", err, out)
		} else {
			t.Logf("alice's Hub home page (home-stop-alice.png):\n%s", out)
		}
	}
}

// runHomeStop runs e2e/browser/home-stop.mjs in headless Chromium: user logs in and opens /hub/home, which must
// show gpu-culler's box containing want.
func runHomeStop(user, want string) (string, error) {
	modules, chromium := os.Getenv("GPUHUB_BROWSER_MODULES"), os.Getenv("GPUHUB_CHROMIUM")
	if modules == "" || chromium == "" {
		return "", errors.New("GPUHUB_BROWSER_MODULES and GPUHUB_CHROMIUM must be set; run `make e2e`")
	}
	artifacts, _ := filepath.Abs(filepath.Join("..", "artifacts"))
	script, _ := filepath.Abs(filepath.Join("..", "browser", "home-stop.mjs"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "HUB_URL="+st.HubURL(), "HUB_USER="+user, "HUB_PASSWORD="+password,
		"EXPECT_STOP="+want, "GPUHUB_ARTIFACTS="+artifacts)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// silentBusyCell: bob's kernel runs a long cell that keeps the (simulated) GPU busy, and nothing talks to the Hub
// about his server after the cell starts. jupyterhub-idle-culler asks to stop it once its timeout has passed since
// the last activity; gpu-culler keeps it, without a notice, past its idle period and warning.
func silentBusyCell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const user, server = "bob", "cell"
	hub().StartReady(ctx, t, user, server, "h100")
	defer hub().Stop(t, user, server)
	tok := userToken(ctx, t, user)
	if err := runSilentCell(ctx, st.HubURL(), user, server, tok, busyCell); err != nil {
		t.Fatalf("busy cell on %s/%s: %v\nhub log:\n%s", user, server, err, st.Hub.LogTail(30))
	}
	busy := time.Now()
	t.Log("the busy cell runs; the websocket is closed")

	for _, ic := range idleCullers {
		var d []call
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, idleTimeout+idleEvery+45*time.Second, true, func(context.Context) (bool, error) {
			d = callsOf([]*tap{ic.tap}, func(c call) bool { return c.isDelete(user, server) })
			return len(d) > 0, nil
		})
		if err != nil {
			t.Errorf("jupyterhub-idle-culler %s never asked to stop %s/%s, silent for %.0fs: %v", ic.version, user, server, time.Since(busy).Seconds(), err)
			continue
		}
		if d[0].Status != http.StatusForbidden {
			t.Errorf("jupyterhub-idle-culler %s's stop got %d from the Hub, want 403 (it holds no delete:servers)", ic.version, d[0].Status)
		}
		t.Logf("jupyterhub-idle-culler %s would stop it %.0fs after the cell started (%s)", ic.version, d[0].At.Sub(busy).Seconds(), d[0])
	}

	until := busy.Add(idlePeriod + warn + 2*every)
	sawBusy := false
	for time.Now().Before(until) {
		if n, ok := currentNotice(ctx, t, user, server); ok {
			t.Fatalf("gpu-culler warned %s/%s while its GPU is busy: %+v", user, server, n)
		}
		if d := callsOf(cullerTaps, func(c call) bool { return c.isDelete(user, server) }); len(d) > 0 {
			t.Fatalf("gpu-culler stopped %s/%s while its GPU is busy: %v", user, server, d)
		}
		if s, ok := gpuServer(ctx, t, user, server); ok && s.SMUtilPercent != nil && *s.SMUtilPercent >= busyPercent {
			sawBusy = true
		}
		time.Sleep(time.Second)
	}
	if !runningNow(ctx, t, user, server) {
		t.Fatalf("%s/%s is not running %.0fs after its busy cell started", user, server, time.Since(busy).Seconds())
	}
	if !sawBusy {
		t.Errorf("the usage API never showed %s/%s's GPU at %d %% or more: the busy cell did not count as GPU use", user, server, busyPercent)
	}
	t.Logf("gpu-culler kept it %.0fs (idle period %s + warning %s + 2 passes)", time.Since(busy).Seconds(), idlePeriod, warn)
}

// agentKilled: carol's T4 share sits idle, so fresh telemetry would have it warned and stopped. The gpu-agent on
// its node is killed as soon as gpu-culler has seen the server, and again each time it comes back (a crash loop).
// gpu-culler neither warns nor stops it, and says why: skip decisions with reason telemetry_stale, counted in its
// metrics.
func agentKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const user, server = "carol", "stale"
	hub().StartReady(ctx, t, user, server, "t4-shared")
	defer hub().Stop(t, user, server)
	pod := podOf(ctx, t, user, server)
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		s, ok := gpuServer(ctx, t, user, server)
		return ok && !s.Stale && s.SMUtilPercent != nil, nil
	})
	if err != nil {
		t.Fatalf("no fresh telemetry for %s/%s: %v", user, server, err)
	}
	time.Sleep(2 * time.Second) // gpu-culler samples every second

	agent := agentPodOn(ctx, t, pod.Spec.NodeName)
	loop, stopLoop := context.WithCancel(ctx)
	kills := make(chan int, 1)
	go func() {
		n := 0
		defer func() { kills <- n }()
		for loop.Err() == nil {
			if _, err := st.Emulator.KillContainer(agent.Namespace, agent.Name, agent.Spec.Containers[0].Name, syscall.SIGKILL); err == nil {
				n++
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	killed := time.Now()
	t.Logf("gpu-agent %s on %s killed (and again whenever it restarts)", agent.Name, pod.Spec.NodeName)

	until := killed.Add(idlePeriod + warn + 2*every)
	stale := map[string]decisionRecord{}
	skips := 0.0
	for time.Now().Before(until) {
		if n, ok := currentNotice(ctx, t, user, server); ok {
			t.Errorf("gpu-culler warned %s/%s on stale telemetry: %+v", user, server, n)
			break
		}
		if d := callsOf(cullerTaps, func(c call) bool { return c.isDelete(user, server) }); len(d) > 0 {
			t.Fatalf("gpu-culler stopped %s/%s on stale telemetry: %v", user, server, d)
		}
		for _, d := range decisions(ctx, t, user) {
			if d.Server == server && d.Action == "skip" && d.Reason == "telemetry_stale" {
				stale[d.ID] = d
			}
		}
		// Read while it runs: the leader scenario kills a replica meanwhile, and a counter dies with it.
		skips = max(skips, metricSum(ctx, t, "gpuhub_culler_skips_total", `reason="telemetry_stale"`))
		time.Sleep(2 * time.Second)
	}
	stopLoop()
	t.Logf("the agent was killed %d times", <-kills)
	if !runningNow(ctx, t, user, server) {
		t.Fatalf("%s/%s is not running after %.0fs of stale telemetry", user, server, time.Since(killed).Seconds())
	}
	if len(stale) == 0 {
		t.Errorf("gpu-culler's decisions never said it skipped %s/%s for stale telemetry", user, server)
	}
	for _, d := range stale {
		t.Logf("decision: %s %s: %s %v", d.Action, d.Reason, d.Detail, d.Numbers)
		break
	}
	if skips == 0 {
		t.Error(`gpuhub_culler_skips_total{reason="telemetry_stale"} stayed 0 on every replica`)
	}
}

// snoozeInPanel: carol's idle server is warned; she opens JupyterLab in Chromium and presses Snooze in the GPU
// panel. The deadline on the notice moves by the policy's snooze period, and the server stops at the new deadline,
// not the old one.
func snoozeInPanel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const user, server = "carol", "snooze"
	hub().StartReady(ctx, t, user, server, "a100-1g")
	defer hub().Stop(t, user, server)

	// Chromium opens the panel now and waits there for the countdown: the page's load is done before it.
	browser := make(chan browserResult, 1)
	go func() { browser <- runSnooze(t, user, server) }()
	n0, _ := waitNotice(ctx, t, user, server, idlePeriod+2*every+60*time.Second, func(n cullerNotice) bool { return n.Snoozes == 0 })
	t.Logf("warned: deadline %s", n0.Deadline.Format(time.TimeOnly))
	res := <-browser
	if !res.OK {
		t.Fatalf("snooze in Chromium failed:\n%s", res.Output)
	}
	n1, ok := currentNotice(ctx, t, user, server)
	if !ok || n1.Snoozes != 1 {
		t.Fatalf("after the snooze: notice %+v (present %v), want one snooze taken", n1, ok)
	}
	if moved := n1.Deadline.Sub(n0.Deadline); moved < snooze-time.Second || moved > snooze+time.Second {
		t.Errorf("the snooze moved the stop by %s (%s -> %s), want the policy's %s", moved,
			n0.Deadline.Format(time.TimeOnly), n1.Deadline.Format(time.TimeOnly), snooze)
	}
	t.Logf("snoozed in the panel (%q): deadline %s -> %s", res.Result, n0.Deadline.Format(time.TimeOnly), n1.Deadline.Format(time.TimeOnly))

	waitStopped(ctx, t, user, server, time.Until(n1.Deadline)+every+leaseDuration+leaseRetry+20*time.Second)
	stops := stopsRecorded(ctx, user, server)
	if len(stops) != 1 {
		t.Fatalf("gpu-culler's stops of %s/%s: %v, want one", user, server, stops)
	}
	if stops[0].At.Before(n1.Deadline) {
		t.Errorf("stopped at %s, before the snoozed deadline %s", stops[0].At.Format(time.TimeOnly), n1.Deadline.Format(time.TimeOnly))
	}
	t.Logf("stopped %.1fs after the snoozed deadline, %.1fs after the original one", stops[0].At.Sub(n1.Deadline).Seconds(),
		stops[0].At.Sub(n0.Deadline).Seconds())
}

// leaderKilled: bob's idle server comes due; the leader's DELETE reaches the Hub, and the leader is killed with
// SIGKILL before the Hub's answer reaches it (mid-pass). The other replica takes the Lease within the lease
// duration and goes on with passes, and does not stop the server a second time.
func leaderKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const user, server = "bob", "leader"
	// Later than the others, so that its stop does not fall into the pass that stops alice's server.
	time.Sleep(20 * time.Second)
	seen, release := holdStop(cullerTaps, user, server)
	defer release()
	hub().StartReady(ctx, t, user, server, "a100-3g")
	defer hub().Stop(t, user, server)

	var held call
	select {
	case held = <-seen:
	case <-time.After(idlePeriod + warn + 3*every + 30*time.Second):
		t.Fatalf("gpu-culler never stopped %s/%s", user, server)
	}
	var leader, other replica
	for _, r := range replicas {
		if r.name == held.Client {
			leader = r
		} else {
			other = r
		}
	}
	if metric(ctx, t, leader, "gpuhub_culler_leader", "") != 1 {
		t.Errorf("%s stopped a server but does not say it leads", leader.name)
	}
	p := st.Process(leader.name)
	if p == nil {
		t.Fatalf("no process %s", leader.name)
	}
	if err := syscall.Kill(-p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	release()
	<-p.Done()
	t.Logf("killed %s (pid %d) with its stop of %s/%s in flight (%s)", leader.name, p.Pid(), user, server, held)

	var took time.Duration
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, leaseDuration+leaseRetry+10*time.Second, true, func(context.Context) (bool, error) {
		if metric(ctx, t, other, "gpuhub_culler_leader", "") == 1 {
			took = time.Since(killed)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s did not take over: %v", other.name, err)
	}
	// The dead leader renewed at most one retry period before the kill; the other replica tries every retry period
	// with client-go's jitter (up to 2.2 periods apart).
	if took > leaseDuration+3*leaseRetry {
		t.Errorf("%s took over %.1fs after the kill, want within the lease duration %s (+ a jittered retry of %s)", other.name, took.Seconds(), leaseDuration, leaseRetry)
	}
	t.Logf("%s leads %.1fs after the kill", other.name, took.Seconds())

	waitStopped(ctx, t, user, server, time.Minute)
	// Two passes of the new leader, then count.
	// Its passes are counted by its own metric: a pass asks the Hub only about servers that may need an action,
	// so a quiet pass sends the Hub nothing.
	before := metric(ctx, t, other, "gpuhub_culler_passes_total", `result="ok"`)
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*every+10*time.Second, true, func(context.Context) (bool, error) {
		return metric(ctx, t, other, "gpuhub_culler_passes_total", `result="ok"`) >= before+2, nil
	})
	if err != nil {
		t.Errorf("%s made fewer than two passes after taking over: %v", other.name, err)
	}
	if stops := callsOf(cullerTaps, func(c call) bool { return c.isDelete(user, server) }); len(stops) != 1 {
		t.Errorf("stops of %s/%s: %v, want one", user, server, stops)
	}
}

// cullerNotice is the annotation gpu-culler writes on a pod (contract C2).
type cullerNotice struct {
	Service    string    `json:"service"`
	Kind       string    `json:"kind"`
	Reason     string    `json:"reason"`
	Message    string    `json:"message"`
	Deadline   time.Time `json:"deadline"`
	Snoozable  bool      `json:"snoozable"`
	CreatedAt  time.Time `json:"createdAt"`
	Stops      bool      `json:"stops"`
	StopsSince time.Time `json:"stopsSince"`
	Snoozes    int       `json:"snoozes"`
	MaxSnoozes int       `json:"maxSnoozes"`
}

// currentNotice is gpu-culler's notice on user's pod for server now.
func currentNotice(ctx context.Context, t *testing.T, user, server string) (cullerNotice, bool) {
	t.Helper()
	pod, ok := findPod(ctx, t, user, server)
	if !ok {
		return cullerNotice{}, false
	}
	v, ok := pod.Annotations[noticeKey]
	if !ok {
		return cullerNotice{}, false
	}
	var n cullerNotice
	if err := json.Unmarshal([]byte(v), &n); err != nil {
		t.Fatalf("%s on %s: %v: %s", noticeKey, pod.Name, err, v)
	}
	return n, true
}

// waitNotice waits for a notice of gpu-culler on user's pod that ok accepts; it returns it with when it was seen.
func waitNotice(ctx context.Context, t *testing.T, user, server string, within time.Duration, ok func(cullerNotice) bool) (cullerNotice, time.Time) {
	t.Helper()
	var n cullerNotice
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		got, present := currentNotice(ctx, t, user, server)
		if present && ok(got) {
			n = got
			return true, nil
		}
		if !runningNow(ctx, t, user, server) {
			return false, fmt.Errorf("%s/%s is not running", user, server)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no notice of gpu-culler on %s/%s: %v\ndecisions: %+v", user, server, err, decisions(ctx, t, user))
	}
	return n, time.Now()
}

// wantMeNotice checks that the usage API's me shows the user gpu-culler's notice on server, with its deadline.
func wantMeNotice(ctx context.Context, t *testing.T, token, server string, deadline time.Time) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		var me struct {
			Notices []struct {
				cullerNotice
				Server string `json:"server"`
			} `json:"notices"`
		}
		code := getJSON(ctx, st.HubURL()+"services/gpu-usage/api/v1/me", token, &me)
		last = fmt.Sprintf("%d %+v", code, me.Notices)
		for _, n := range me.Notices {
			if n.Service == "gpu-culler" && n.Server == server && n.Deadline.Equal(deadline) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("the usage API's me does not show gpu-culler's notice on %q with deadline %s: %s", server, deadline, last)
	}
}

// usageServer is one entry of the usage API's servers listing (contract C1).
type usageServer struct {
	User          string   `json:"user"`
	Server        string   `json:"server"`
	Node          string   `json:"node"`
	SMUtilPercent *float64 `json:"smUtilPercent"`
	Stale         bool     `json:"stale"`
}

// gpuServer is user/server's entry in the usage API's servers listing (read as an admin).
func gpuServer(ctx context.Context, t *testing.T, user, server string) (usageServer, bool) {
	t.Helper()
	var out struct {
		Servers []usageServer `json:"servers"`
	}
	if code := getJSON(ctx, usageURL+"servers", st.Hub.AdminToken(), &out); code != http.StatusOK {
		return usageServer{}, false
	}
	for _, s := range out.Servers {
		if s.User == user && s.Server == server {
			return s, true
		}
	}
	return usageServer{}, false
}

// decisionRecord is one of gpu-culler's decisions (services/internal/decision).
type decisionRecord struct {
	ID      string             `json:"id"`
	Time    time.Time          `json:"time"`
	User    string             `json:"user"`
	Server  string             `json:"server"`
	Action  string             `json:"action"`
	Reason  string             `json:"reason"`
	Detail  string             `json:"detail"`
	Message string             `json:"message"`
	Numbers map[string]float64 `json:"numbers"`
}

// decisions are user's decisions on every live replica (each keeps its own; the leader makes them).
func decisions(ctx context.Context, t *testing.T, user string) []decisionRecord {
	t.Helper()
	var all []decisionRecord
	for _, r := range replicas {
		var out struct {
			Decisions []decisionRecord `json:"decisions"`
		}
		if code := getJSON(ctx, r.url+"api/v1/decisions?limit=1000&user="+user, st.Hub.AdminToken(), &out); code == http.StatusOK {
			all = append(all, out.Decisions...)
		}
	}
	return all
}

// metric is the value of a metric on a replica's /metrics (the sum over the series whose labels contain
// labels); -1 when the replica does not answer.
func metric(ctx context.Context, t *testing.T, r replica, name, labels string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.port), http.NoBody)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	sum := 0.0
	for line := range strings.SplitSeq(b.String(), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		if labels != "" && !strings.Contains(line, labels) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// metricSum is a metric summed over the live replicas.
func metricSum(ctx context.Context, t *testing.T, name, labels string) float64 {
	sum := 0.0
	for _, r := range replicas {
		if v := metric(ctx, t, r, name, labels); v > 0 {
			sum += v
		}
	}
	return sum
}

// getJSON GETs url with a Hub token and decodes the answer; it returns the status (0 when none came).
func getJSON(ctx context.Context, url, token string, out any) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

func userToken(ctx context.Context, t *testing.T, user string) string {
	t.Helper()
	tok, err := hubAdmin.CreateToken(ctx, user, hubapi.TokenRequest{ExpiresIn: 900, Note: "culler e2e"})
	if err != nil {
		t.Fatalf("token for %s: %v", user, err)
	}
	logscan.Register("Hub token of user "+user+" (culler e2e)", tok.Token)
	return tok.Token
}

// runningNow reports whether the Hub has user's server ready or on its way.
func runningNow(ctx context.Context, t *testing.T, user, server string) bool {
	t.Helper()
	u, err := hubAdmin.GetUser(ctx, user)
	if err != nil {
		return true // unknown: not evidence of a stop
	}
	s, ok := u.Servers[server]
	return ok && (s.Ready || s.Pending != "")
}

// waitStopped waits until the Hub has user's server stopped and returns when it saw that.
// stopsRecorded is gpu-culler's DELETEs of user/server through its taps, once there is one (or after 10 s): the
// Hub may show the server stopped a moment before its answer to the DELETE passes the tap, which records it.
func stopsRecorded(ctx context.Context, user, server string) []call {
	var stops []call
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		stops = callsOf(cullerTaps, func(c call) bool { return c.isDelete(user, server) })
		return len(stops) > 0, nil
	})
	return stops
}

func waitStopped(ctx context.Context, t *testing.T, user, server string, within time.Duration) time.Time {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		u, err := hubAdmin.GetUser(ctx, user)
		if err != nil {
			return false, nil
		}
		s, ok := u.Servers[server]
		return !ok || (!s.Ready && s.Pending == ""), nil
	})
	if err != nil {
		t.Fatalf("%s/%s was not stopped within %s: %v\ndecisions: %+v", user, server, within, err, decisions(ctx, t, user))
	}
	return time.Now()
}

func findPod(ctx context.Context, t *testing.T, user, server string) (*corev1.Pod, bool) {
	t.Helper()
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "component=singleuser-server"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pods.Items {
		if p.Annotations["hub.jupyter.org/username"] == user && p.Annotations["hub.jupyter.org/servername"] == server && p.DeletionTimestamp == nil {
			return &pods.Items[i], true
		}
	}
	return nil, false
}

func podOf(ctx context.Context, t *testing.T, user, server string) *corev1.Pod {
	t.Helper()
	p, ok := findPod(ctx, t, user, server)
	if !ok {
		t.Fatalf("no pod of %s/%s", user, server)
	}
	return p
}

// agentPodOn is the chart's gpu-agent pod on node.
func agentPodOn(ctx context.Context, t *testing.T, node string) *corev1.Pod {
	t.Helper()
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=gpu-agent"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pods.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no gpu-agent pod on %s", node)
	return nil
}

type browserResult struct {
	OK     bool
	Result string // what the panel says after the snooze
	Output string
}

// runSnooze runs e2e/browser/culler-snooze.mjs in headless Chromium: user logs in, opens server's JupyterLab and
// the GPU panel, waits for gpu-culler's countdown and presses Snooze.
func runSnooze(t *testing.T, user, server string) browserResult {
	modules, chromium := os.Getenv("GPUHUB_BROWSER_MODULES"), os.Getenv("GPUHUB_CHROMIUM")
	if modules == "" || chromium == "" {
		return browserResult{Output: "GPUHUB_BROWSER_MODULES and GPUHUB_CHROMIUM must be set; run `make e2e`"}
	}
	artifacts, _ := filepath.Abs(filepath.Join("..", "artifacts"))
	script, _ := filepath.Abs(filepath.Join("..", "browser", "culler-snooze.mjs"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "HUB_URL="+st.HubURL(), "HUB_USER="+user, "HUB_PASSWORD="+password, "HUB_SERVER="+server,
		"GPUHUB_ARTIFACTS="+artifacts, fmt.Sprintf("NOTICE_TIMEOUT_S=%d", int((idlePeriod+2*every+60*time.Second).Seconds())))
	out, err := cmd.CombinedOutput()
	res := browserResult{Output: string(out)}
	if lines := regexp.MustCompile(`(?m)^\{.*"ok".*\}$`).FindAll(out, -1); len(lines) > 0 {
		var r struct {
			OK     bool   `json:"ok"`
			Result string `json:"result"`
		}
		uerr := json.Unmarshal(lines[len(lines)-1], &r)
		if uerr != nil { // runSnooze runs in a goroutine of its own: no t.Fatal here
			res.Output += "\nthe result line: " + uerr.Error()
		}
		res.OK, res.Result = r.OK && err == nil && uerr == nil, r.Result
	}
	if err != nil {
		res.Output += "\n" + err.Error()
	}
	return res
}

// hub is the suite's Hub for the helpers that fail the test.
func hub() servers.Hub { return servers.Hub{Admin: hubAdmin, LogTail: st.Hub.LogTail} }
