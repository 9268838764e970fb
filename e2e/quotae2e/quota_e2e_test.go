//go:build e2e

package quotae2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
	"github.com/gpuhub/gpuhub/e2e/internal/servers"
	"github.com/gpuhub/gpuhub/hubapi"
)

// TestSecondGPUServerRefused: bob (students: one GPU server) runs a MIG slice; in Chromium he asks for a second
// GPU server and the spawn page tells him, within 5 s, which limit and what he can do.
func TestSecondGPUServerRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	hub().StartReady(ctx, t, "bob", "first", "a100-1g")
	defer hub().Stop(t, "bob", "first")
	res := browserSpawn(t, "bob", "second", "t4-shared", "students may run at most 1 GPU server")
	if !strings.Contains(res.Refusal, "Stop your other GPU server or pick a CPU-only profile") {
		t.Errorf("refusal %q does not say what bob can do", res.Refusal)
	}
	if u := hub().User(ctx, t, "bob"); u.Servers["second"].Ready {
		t.Errorf("bob/second is running after the refusal")
	}
	wantDecision(ctx, t, "bob", "deny", "max_servers")
}

// TestNoH100Free: carol (researchers: two GPUs) holds both H100s; bob, who may take one, is told at once that
// none is free and which GPUs are (without naming carol).
func TestNoH100Free(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	hub().StartReady(ctx, t, "carol", "both", "h100-x2")
	defer hub().Stop(t, "carol", "both")
	res := browserSpawn(t, "bob", "h100", "h100", "No H100 is free right now")
	if !strings.Contains(res.Refusal, "Free now and within your quota:") || !strings.Contains(res.Refusal, "MIG") {
		t.Errorf("refusal %q does not list the free GPUs bob may take", res.Refusal)
	}
	if strings.Contains(res.Refusal, "carol") {
		t.Errorf("refusal %q names another user", res.Refusal)
	}
	wantDecision(ctx, t, "bob", "deny", "none_free")
}

// TestBudgetExhaustedNoticeThenStop: alice's daily budget is made tiny (0.004 GPU-hours: half a minute on a
// 3g.20gb slice); as her server accrues GPU-hours she is over it, her panel's endpoint (usage API me) shows the
// notice with its deadline, the GPU panel in her JupyterLab (Chromium) shows it with a countdown, and after the
// policy's grace gpu-quota stops the server through the Hub.
func TestBudgetExhaustedNoticeThenStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// A grace long enough to open JupyterLab and look at the panel before the stop.
	writePolicy(t, strings.Replace(basePolicy, "grace: 20s", "grace: 75s", 1)+`users:
  alice:
    budgets:
      - {window: 24h, gpuHours: 0.004}
`)
	defer writePolicy(t, basePolicy)
	hub().StartReady(ctx, t, "alice", "budget", "a100-3g")
	defer hub().Stop(t, "alice", "budget")
	token := userToken(ctx, t, "alice")

	var notice meNotice
	var budget json.RawMessage
	t0 := time.Now()
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		me, err := getMe(ctx, token)
		if err != nil {
			return false, nil
		}
		budget = me.Budget
		for _, n := range me.Notices {
			if n.Service == "gpu-quota" {
				notice = n
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no gpu-quota notice in alice's me after %s (budget %s): %v\ngpu-quota log:\n%s", time.Since(t0), budget, err, logTail("gpu-quota", 30))
	}
	t.Logf("notice after %.0fs: %+v; budget %s", time.Since(t0).Seconds(), notice, budget)
	if notice.Kind != "budget" || notice.Reason != "budget_exhausted" || notice.Deadline == nil || !strings.Contains(notice.Message, "GPU budget") {
		t.Errorf("notice = %+v, want a budget notice with a deadline", notice)
	}
	if strings.Contains(notice.Message, "(0 of 0 ") {
		t.Errorf("notice %q lost its numbers to rounding", notice.Message)
	}
	if notice.Server != "budget" {
		t.Errorf("notice names server %q, want budget", notice.Server)
	}
	// The panel shows it: alice's JupyterLab in Chromium, GPU panel open, the notice with its countdown.
	panelNotice(t, "alice", "budget", "over your 24-hour GPU budget")
	if u := hub().User(ctx, t, "alice"); !u.Servers["budget"].Ready {
		t.Fatalf("alice's server was stopped before the grace ran out (notice at %s, deadline %s)", time.Now().Format(time.TimeOnly), notice.Deadline)
	}
	// Stopped only after the deadline, and within two enforcement intervals of it.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := hubAdmin.GetUser(ctx, "alice")
		if err != nil {
			return false, nil
		}
		s, ok := u.Servers["budget"]
		return !ok || (!s.Ready && s.Pending == ""), nil
	})
	stoppedAt := time.Now()
	if err != nil {
		t.Fatalf("alice's server still running 2 min after the notice: %v\ngpu-quota log:\n%s", err, logTail("gpu-quota", 30))
	}
	if stoppedAt.Before(*notice.Deadline) {
		t.Errorf("stopped at %s, before the notice's deadline %s", stoppedAt, notice.Deadline)
	}
	wantDecision(ctx, t, "alice", "notice", "budget_exhausted")
	wantDecision(ctx, t, "alice", "stop", "budget_exhausted")
}

// TestQuotaDown: with gpu-quota down, the glue applies the policy's onUnavailable it last heard: closed refuses
// GPU spawns with the "cannot check" message; open admits them and counts it in the Hub's metrics.
func TestQuotaDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	defer func() {
		writePolicy(t, basePolicy)
		if err := st.StartComponent(context.Background(), "gpu-quota"); err != nil {
			t.Errorf("restart gpu-quota: %v", err)
		}
	}()
	// closed: one admitted spawn tells the glue the mode, then gpu-quota goes away.
	writePolicy(t, strings.Replace(basePolicy, "onUnavailable: open", "onUnavailable: closed", 1))
	hub().StartReady(ctx, t, "admin", "learn", "t4-shared")
	hub().Stop(t, "admin", "learn")
	if err := st.StopComponent("gpu-quota"); err != nil {
		t.Fatal(err)
	}
	browserSpawn(t, "bob", "down", "t4-shared", "The quota service cannot check your GPU quota right now")
	hub().Stop(t, "bob", "down")

	// open: the same with the other mode; bob's spawn is admitted and counted.
	if err := st.StartComponent(ctx, "gpu-quota"); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, basePolicy)
	hub().StartReady(ctx, t, "admin", "learn", "t4-shared")
	hub().Stop(t, "admin", "learn")
	before := hubMetric(ctx, t, `gpuhub_quota_glue_unavailable_total{mode="open"}`)
	if err := st.StopComponent("gpu-quota"); err != nil {
		t.Fatal(err)
	}
	hub().StartReady(ctx, t, "bob", "open", "t4-shared")
	hub().Stop(t, "bob", "open")
	if after := hubMetric(ctx, t, `gpuhub_quota_glue_unavailable_total{mode="open"}`); after != before+1 {
		t.Errorf("gpuhub_quota_glue_unavailable_total{mode=open} went %v -> %v, want one more", before, after)
	}
}

type meNotice struct {
	Service  string     `json:"service"`
	Kind     string     `json:"kind"`
	Reason   string     `json:"reason"`
	Message  string     `json:"message"`
	Deadline *time.Time `json:"deadline"`
	Server   string     `json:"server"`
}

type me struct {
	Notices []meNotice      `json:"notices"`
	Budget  json.RawMessage `json:"budget"`
}

// getMe reads the panel's endpoint through the Hub's proxy, as the panel does.
func getMe(ctx context.Context, token string) (me, error) {
	var out me
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.HubURL()+"services/gpu-usage/api/v1/me", nil)
	if err != nil {
		return out, err
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("me: %s", resp.Status)
	}
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

func userToken(ctx context.Context, t *testing.T, user string) string {
	t.Helper()
	tok, err := hubAdmin.CreateToken(ctx, user, hubapi.TokenRequest{Note: "quota e2e", ExpiresIn: 3600})
	if err != nil {
		t.Fatal(err)
	}
	logscan.Register("Hub token of user "+user+" (quota e2e)", tok.Token)
	return tok.Token
}

// wantDecision checks gpu-quota's decisions API (read with the admin's Hub token) lists the decision.
func wantDecision(ctx context.Context, t *testing.T, user, action, reason string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, quotaURL+"api/v1/decisions?user="+user+"&action="+action, nil)
	req.Header.Set("Authorization", "token "+st.Hub.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("decisions: %v", err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Decisions []struct {
			Action, Reason, Message string
			Numbers                 map[string]float64
		} `json:"decisions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Errorf("decisions: %s: %v", resp.Status, err)
		return
	}
	for _, d := range body.Decisions {
		if d.Action == action && d.Reason == reason {
			return
		}
	}
	t.Errorf("no %s/%s decision for %s in gpu-quota's decisions API: %+v", action, reason, user, body.Decisions)
}

func writePolicy(t *testing.T, text string) {
	t.Helper()
	before := quotaMetric(`gpuhub_quota_policy_reloads_total{result="success"}`)
	tmp := policyPath + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, policyPath); err != nil {
		t.Fatal(err)
	}
	// gpu-quota checks the file every 2 s; a stopped gpu-quota reads it when it starts.
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return quotaMetric(`gpuhub_quota_policy_reloads_total{result="success"}`) > before, nil
	})
}

func quotaMetric(series string) float64 {
	base := strings.TrimSuffix(quotaURL, "services/gpu-quota/")
	v, _ := scrape(context.Background(), base+"metrics", "", series)
	return v
}

func hubMetric(ctx context.Context, t *testing.T, series string) float64 {
	t.Helper()
	v, err := scrape(ctx, st.HubURL()+"hub/metrics", st.Hub.ServiceToken(metricsReader), series)
	if err != nil {
		t.Fatalf("hub metrics: %v", err)
	}
	return v
}

// scrape returns the value of one series of a Prometheus text exposition (0 when absent).
func scrape(ctx context.Context, url, token, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, sc.Err()
}

type browserResult struct {
	Refusal string `json:"refusal"`
	TookMs  int    `json:"tookMs"`
}

// browserSpawn logs user in with headless Chromium, submits the spawn form for server with profile and
// expects a refusal containing want within 5 s (e2e/browser/login-spawn.mjs, EXPECT_REFUSAL).
func browserSpawn(t *testing.T, user, server, profile, want string) browserResult {
	t.Helper()
	modules, chromium := os.Getenv("GPUHUB_BROWSER_MODULES"), os.Getenv("GPUHUB_CHROMIUM")
	if modules == "" || chromium == "" {
		t.Fatal("GPUHUB_BROWSER_MODULES and GPUHUB_CHROMIUM must be set; run `make e2e`")
	}
	artifacts, _ := filepath.Abs(filepath.Join("..", "artifacts"))
	script, _ := filepath.Abs(filepath.Join("..", "browser", "login-spawn.mjs"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "HUB_URL="+st.HubURL(), "HUB_USER="+user, "HUB_PASSWORD="+password, "HUB_SERVER="+server,
		"HUB_PROFILE="+profile, "GPUHUB_ARTIFACTS="+artifacts, "EXPECT_REFUSAL="+want, "REFUSAL_WITHIN_MS=5000")
	out, err := cmd.CombinedOutput()
	t.Logf("browser output:\n%s", out)
	if err != nil {
		t.Fatalf("%s was not refused with %q within 5 s in Chromium: %v\nhub log:\n%s", user, want, err, st.Hub.LogTail(30))
	}
	var res browserResult
	lines := regexp.MustCompile(`(?m)^\{.*"refusal".*\}$`).FindAll(out, -1)
	if len(lines) == 0 {
		t.Fatalf("the browser printed no refusal line")
	}
	if err := json.Unmarshal(lines[len(lines)-1], &res); err != nil {
		t.Fatalf("the browser's refusal line: %v", err)
	}
	if res.TookMs > 5000 {
		t.Errorf("refusal shown after %d ms, want within 5 s", res.TookMs)
	}
	return res
}

// panelNotice opens user's JupyterLab in headless Chromium and waits for the GPU panel to show a notice
// containing want (e2e/browser/panel-notice.mjs); the screenshot is e2e/artifacts/panel-notice-<user>.png.
func panelNotice(t *testing.T, user, server, want string) {
	t.Helper()
	artifacts, _ := filepath.Abs(filepath.Join("..", "artifacts"))
	script, _ := filepath.Abs(filepath.Join("..", "browser", "panel-notice.mjs"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "HUB_URL="+st.HubURL(), "HUB_USER="+user, "HUB_PASSWORD="+password, "HUB_SERVER="+server,
		"GPUHUB_ARTIFACTS="+artifacts, "EXPECT_NOTICE="+want)
	out, err := cmd.CombinedOutput()
	t.Logf("browser output:\n%s", out)
	if err != nil {
		t.Errorf("the GPU panel did not show %q: %v (screenshots in %s)", want, err, artifacts)
	}
}

func logTail(component string, n int) string { return servers.LogTail(st.Dir, component, n) }

// hub is the suite's Hub for the helpers that fail the test.
func hub() servers.Hub { return servers.Hub{Admin: hubAdmin, LogTail: st.Hub.LogTail} }
