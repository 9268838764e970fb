//go:build e2e

package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/e2e/emulator"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
	"github.com/gpuhub/gpuhub/hubapi"
)

// Timing of the chaos test. The agents sample every second (the chart as gpuhubstack renders it); the usage
// API ticks every 500 ms so that one tick is at most 1 % of the ~60 s pod lifetime checked at the end.
const (
	chaosAgentInterval = time.Second
	chaosUsageInterval = 500 * time.Millisecond
	// chaosStaleAfter is the usage API's default staleness age: 3 agent sampling intervals (contract 4).
	chaosStaleAfter = 3 * chaosAgentInterval
	// chaosMaxGap is the ledger's MaxGap in this test: the usage API outage below is three times longer.
	chaosMaxGap = 2 * time.Second
	// chaosInformerThreshold is how long an informer may fail to watch before /readyz fails (fault 9).
	chaosInformerThreshold = 2 * time.Second
	// slack absorbs scheduling on the shared 2-core machine in deadlines (never in equalities).
	slack = time.Second
	// gpuSecondsTol is the tolerance of GPU-time equalities: the ledger charges share x (tick - checkpoint)
	// exactly, so only float rounding and clock reads differ; a dropped or doubled tick (500 ms x share) is
	// 200x larger.
	gpuSecondsTol = 0.001
)

// Flags of the usage API this test sets. --informer-unready-after is slice "apiapp"'s (fault 9): the
// name must match usage-api --help.
var chaosUsageFlags = map[string]string{
	"ledger-max-gap":         chaosMaxGap.String(),
	"informer-unready-after": chaosInformerThreshold.String(),
}

// chaosMe is the part of GET api/v1/me the chaos test reads (contracts 4 and 5 of issue 9).
type chaosMe struct {
	SampledAt   time.Time `json:"sampledAt"`
	Stale       bool      `json:"stale"`
	StaleReason string    `json:"staleReason"`
	Servers     []struct {
		Pod         string `json:"pod"`
		Node        string `json:"node"`
		Stale       bool   `json:"stale"`
		StaleReason string `json:"staleReason"`
		GPUs        []struct {
			Kind                     string   `json:"kind"`
			ShareNumerator           int64    `json:"shareNumerator"`
			ShareDenominator         int64    `json:"shareDenominator"`
			SMUtilPercent            *float64 `json:"smUtilPercent"`
			UtilizationSource        string   `json:"utilizationSource"`
			Stale                    bool     `json:"stale"`
			StaleReason              string   `json:"staleReason"`
			UtilizationUnknownReason string   `json:"utilizationUnknownReason"`
		} `json:"gpus"`
	} `json:"servers"`
	GPUHours       map[string]*gpuHoursWindow `json:"gpuHours"`
	GPUHoursStatus string                     `json:"gpuHoursStatus"`
	GPUHoursReason string                     `json:"gpuHoursReason"`
}

type gpuHoursWindow struct {
	Allocated   float64 `json:"allocated"`
	Used        float64 `json:"used"`
	UsedUnknown float64 `json:"usedUnknown"`
}

// unit is the one GPU unit of a user with one server; ok is false otherwise.
func (m chaosMe) unit() (share float64, util *float64, stale bool, reason string, ok bool) {
	if len(m.Servers) != 1 || len(m.Servers[0].GPUs) != 1 {
		return 0, nil, false, "", false
	}
	g := m.Servers[0].GPUs[0]
	if g.ShareDenominator == 0 {
		return 0, nil, false, "", false
	}
	return float64(g.ShareNumerator) / float64(g.ShareDenominator), g.SMUtilPercent, g.Stale, g.StaleReason, true
}

// gpuSeconds is a ledger reading: the 7-day window (no midnight reset during the test) in GPU-seconds, at the
// usage API's tick time (sampledAt: the instant the ledger has integrated up to).
type gpuSeconds struct {
	at                         time.Time
	allocated, used, usedUnkwn float64
}

func (m chaosMe) ledger() (gpuSeconds, bool) {
	w := m.GPUHours["7d"]
	if w == nil || m.SampledAt.IsZero() {
		return gpuSeconds{}, false
	}
	return gpuSeconds{at: m.SampledAt, allocated: 3600 * w.Allocated, used: 3600 * w.Used, usedUnkwn: 3600 * w.UsedUnknown}, true
}

func (g gpuSeconds) String() string {
	return fmt.Sprintf("at %s: allocated %.4f used %.4f usedUnknown %.4f GPU-s",
		g.at.Format("15:04:05.000"), g.allocated, g.used, g.usedUnkwn)
}

// chaosClient reads the usage API as one user.
type chaosClient struct {
	ctx   context.Context
	base  string // usage API v1 base
	token string
}

func (c chaosClient) me(t *testing.T) (chaosMe, int) {
	t.Helper()
	var m chaosMe
	code := getUsage(c.ctx, t, c.base+"me?history=false", c.token, &m)
	return m, code
}

// steady returns an answer whose ledger reading and tick time belong together: two answers in a row with
// the same sampledAt and the same GPU-hours (the ledger commits a tick just before the view of that tick is
// published; a request in between would pair the new hours with the old time).
func (c chaosClient) steady(t *testing.T) (chaosMe, gpuSeconds) {
	t.Helper()
	var prev chaosMe
	var prevG gpuSeconds
	have := false
	for range 50 {
		m, code := c.me(t)
		g, ok := m.ledger()
		if code == http.StatusOK && ok {
			if have && g.at.Equal(prevG.at) && g.allocated == prevG.allocated && g.used == prevG.used && g.usedUnkwn == prevG.usedUnkwn {
				return m, g
			}
			prev, prevG, have = m, g, true
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no steady GPU-hours reading (last %+v)", prev)
	return chaosMe{}, gpuSeconds{}
}

// waitFor calls cond every 200 ms until it is true or timeout passes; it returns how long that took, whether
// cond became true, and cond's last message.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, string)) (time.Duration, bool, string) {
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		last = msg
		return ok, nil
	})
	return time.Since(start), err == nil, last
}

// poll is waitFor that fails the test on timeout.
func poll(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	took, ok, last := waitFor(ctx, timeout, cond)
	if !ok {
		t.Fatalf("%s: not within %s; last: %s", what, timeout, last)
	}
	return took
}

func near(got, want float64) bool { return math.Abs(got-want) <= gpuSecondsTol }

// TestChaos (issue 9, "chaos on the local cluster"): alice keeps her MIG 3g.20gb slice busy while the
// parts under the usage API fail one after the other:
//
//  1. the kube-apiserver is stopped and started on the same port: the usage API keeps answering from its
//     caches, /readyz reports the broken informers while it lasts and recovers, and a pod created after the
//     restart (bob's server) appears in the usage API (the watches work again, not just the caches);
//  2. the gpu-agent on alice's node is killed with SIGKILL: within 3 sampling intervals (+ one usage-API tick)
//     `me` shows her GPU stale with a reason and no utilization, not the last number; over a measured span used
//     GPU time does not grow while allocated grows by share x span (the ledger bills it as used-unknown); the
//     emulator restarts the agent after the kubelet's 10 s back-off and fresh numbers resume;
//  3. the usage API is stopped for three times its ledger MaxGap and started again on the same ledger: alice's
//     GPU-hours equal her pod's lifetime x share within 1 %, and the outage itself is charged in full.
//
// The usage API starts on a fresh ledger before alice's server, so the ledger sees her pod from its start.
func TestChaos(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const ns = "gpuhub-chaos"
	in := installChart(ctx, t, ns)
	t.Cleanup(func() {
		if t.Failed() {
			logAgents(t, in)
		}
	})
	bin := usageBinary(ctx, t)
	var extra []string
	supported := usageFlagsSupported(ctx, t, bin)
	for flag, v := range chaosUsageFlags {
		if !supported[flag] {
			t.Errorf("usage-api has no --%s (issue 9): running without it", flag)
			continue
		}
		extra = append(extra, "--"+flag+"="+v)
	}
	kubeconfig := t.TempDir() + "/usage.kubeconfig"
	if err := in.WriteUsageKubeconfig(ctx, st.Client, st.ControlPlane.URL, st.ControlPlane.CAData(), kubeconfig); err != nil {
		t.Fatal(err)
	}
	agentToken := t.TempDir() + "/agent-token"
	if err := in.WriteAgentToken(ctx, st.Client, agentToken); err != nil {
		t.Fatal(err)
	}
	usage := gpuhubstack.Usage{
		Binary: bin, Port: usagePort, Kubeconfig: kubeconfig, Database: t.TempDir() + "/ledger.db",
		Namespace: namespace, AgentNamespace: ns, AgentTokenFile: agentToken, AgentArgs: in.UsageAgentArgs,
		HubAPIURL: st.Hub.APIURL(), Token: usageToken,
		Interval: chaosUsageInterval.String(),
	}
	api := startUsageAPI(ctx, t, usage, extra...)

	tokens := map[string]string{}
	for _, user := range []string{"alice", "bob"} {
		tok, err := hubAdmin.CreateToken(ctx, user, hubapi.TokenRequest{Note: "chaos e2e", ExpiresIn: 3600})
		if err != nil {
			t.Fatalf("token for %s: %v", user, err)
		}
		tokens[user] = tok.Token
		logscan.Register("Hub token of user "+user+" (chaos e2e)", tok.Token)
	}
	alice := chaosClient{ctx: ctx, base: api.base, token: tokens["alice"]}
	bob := chaosClient{ctx: ctx, base: api.base, token: tokens["bob"]}

	if _, err := hubAdmin.StartServer(ctx, "alice", "", map[string]any{"profile": "a100-3g"}); err != nil {
		t.Fatalf("start alice: %v", err)
	}
	defer hub().Stop(t, "alice", "")
	waitServer(ctx, t, "alice", "", func(s hubapi.Server) bool { return s.Ready })
	alicePod := findPod(ctx, t, "alice", "")
	defer startBusyCell(ctx, t, alicePod)()
	// The test's invariants start from a fresh, busy reading.
	aliceBusy := func(t *testing.T, what string, timeout time.Duration) time.Duration {
		t.Helper()
		return poll(ctx, t, timeout, what, func() (bool, string) {
			m, code := alice.me(t)
			share, util, stale, _, ok := m.unit()
			return code == http.StatusOK && ok && math.Abs(share-3.0/7) < 1e-9 && !stale && util != nil && *util >= 20,
				fmt.Sprintf("%d %+v", code, m)
		})
	}
	aliceBusy(t, "alice busy on MIG 3/7", 90*time.Second)

	t.Run("kube-apiserver restart", func(t *testing.T) {
		ready := func() (int, map[string]string) {
			var rep struct {
				Checks map[string]string `json:"checks"`
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", usagePort), nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, nil
			}
			defer resp.Body.Close()
			_ = json.NewDecoder(resp.Body).Decode(&rep)
			return resp.StatusCode, rep.Checks
		}
		poll(ctx, t, 30*time.Second, "usage API ready before the restart", func() (bool, string) {
			code, checks := ready()
			return code == http.StatusOK, fmt.Sprintf("%d %v", code, checks)
		})

		down := time.Now()
		st.ControlPlane.StopAPIServer(2 * time.Second)
		restarted := false
		defer func() { // the rest of the suite needs an API server
			if !restarted {
				if err := st.ControlPlane.StartAPIServer(context.WithoutCancel(ctx)); err != nil {
					t.Errorf("start kube-apiserver: %v", err)
				}
			}
		}()
		t.Logf("kube-apiserver stopped (%.1fs)", time.Since(down).Seconds())
		var detail map[string]string
		// The watches break at once; the threshold runs from there. The outage must stay well under ~50 s:
		// KubeSpawner's reflectors give up (and halt the Hub) after 8 failed retries doubling from 0.2 s.
		budget := chaosInformerThreshold + 8*time.Second
		if _, ok, last := waitFor(ctx, budget, func() (bool, string) {
			code, checks := ready()
			detail = checks
			return code == http.StatusServiceUnavailable && checks["watches"] != "" && checks["watches"] != "ok",
				fmt.Sprintf("%d %v", code, checks)
		}); ok {
			t.Logf("/readyz 503 after %.1fs of outage: watches: %s", time.Since(down).Seconds(), detail["watches"])
		} else {
			t.Errorf("/readyz does not fail its watches check within %s of the API server outage; last: %s", budget, last)
		}
		// The live share is still served from the last known state.
		if m, code := alice.me(t); code != http.StatusOK || len(m.Servers) != 1 {
			t.Errorf("alice's me during the API server outage: status %d, %d servers, want 200 and her server", code, len(m.Servers))
		}

		t0 := time.Now()
		if err := st.ControlPlane.StartAPIServer(ctx); err != nil {
			t.Fatalf("start kube-apiserver: %v", err)
		}
		restarted = true
		t.Logf("kube-apiserver back after %.1fs down (start %.1fs)", time.Since(down).Seconds(), time.Since(t0).Seconds())
		took := poll(ctx, t, 60*time.Second, "/readyz recovers after the API server is back", func() (bool, string) {
			code, checks := ready()
			return code == http.StatusOK, fmt.Sprintf("%d %v", code, checks)
		})
		t.Logf("/readyz 200 again %.1fs after the API server came back", took.Seconds())

		// A pod created after the restart reaches the usage API through the informers' new watches.
		if _, err := hubAdmin.StartServer(ctx, "bob", "", map[string]any{"profile": "t4-shared"}); err != nil {
			t.Fatalf("start bob: %v", err)
		}
		defer hub().Stop(t, "bob", "")
		waitServer(ctx, t, "bob", "", func(s hubapi.Server) bool { return s.Ready })
		took = poll(ctx, t, 30*time.Second, "bob's new server in the usage API", func() (bool, string) {
			m, code := bob.me(t)
			share, _, _, _, ok := m.unit()
			return code == http.StatusOK && ok && share == 0.25, fmt.Sprintf("%d %+v", code, m)
		})
		t.Logf("bob's server (created after the restart) in the usage API %.1fs after it was ready", took.Seconds())
	})

	t.Run("kill -9 the gpu-agent", func(t *testing.T) {
		aliceBusy(t, "alice fresh and busy before the kill", 60*time.Second)
		// Baseline: while fresh, used GPU time grows.
		_, g0 := alice.steady(t)
		time.Sleep(2 * time.Second)
		_, g1 := alice.steady(t)
		share := 3.0 / 7
		if dt := g1.at.Sub(g0.at).Seconds(); !near(g1.allocated-g0.allocated, share*dt) || g1.used <= g0.used || !near(g1.usedUnkwn, g0.usedUnkwn) {
			t.Errorf("fresh span of %.3fs: allocated +%.4f (want %.4f), used +%.4f (want > 0), usedUnknown +%.4f (want 0)",
				dt, g1.allocated-g0.allocated, share*dt, g1.used-g0.used, g1.usedUnkwn-g0.usedUnkwn)
		}

		agent := agentPodOn(ctx, t, in, alicePod.Spec.NodeName)
		killed := time.Now()
		pid, err := st.Emulator.KillContainer(agent.Namespace, agent.Name, agent.Spec.Containers[0].Name, syscall.SIGKILL)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("SIGKILL to the gpu-agent on %s (pod %s, pid %d)", agent.Spec.NodeName, agent.Name, pid)

		// Stale within 3 sampling intervals (the agent's last sample is at most one interval old at the kill,
		// and the usage API notices at its next tick).
		budget := chaosStaleAfter + chaosUsageInterval + slack
		var staleMe chaosMe
		poll(ctx, t, budget, "alice's GPU shown stale after the agent was killed", func() (bool, string) {
			m, code := alice.me(t)
			_, _, stale, _, ok := m.unit()
			if code != http.StatusOK || !ok || !stale {
				return false, fmt.Sprintf("%d %+v", code, m)
			}
			staleMe = m
			return true, ""
		})
		t.Logf("stale %.1fs after the kill (budget %s)", time.Since(killed).Seconds(), budget)
		g := staleMe.Servers[0].GPUs[0]
		if g.SMUtilPercent != nil || g.UtilizationSource != "none" || g.StaleReason == "" || g.UtilizationUnknownReason == "" {
			t.Errorf("stale unit: smUtilPercent %v, utilizationSource %q, staleReason %q, utilizationUnknownReason %q; want null, none and two reasons",
				g.SMUtilPercent, g.UtilizationSource, g.StaleReason, g.UtilizationUnknownReason)
		}
		if !staleMe.Stale || staleMe.StaleReason == "" || !staleMe.Servers[0].Stale || staleMe.Servers[0].StaleReason == "" {
			t.Errorf("stale user/server: user stale=%v reason %q, server stale=%v reason %q",
				staleMe.Stale, staleMe.StaleReason, staleMe.Servers[0].Stale, staleMe.Servers[0].StaleReason)
		}
		t.Logf("staleReason: %s", g.StaleReason)

		// While stale: allocated keeps accruing, used does not; the allocated time goes to used-unknown.
		_, s0 := alice.steady(t)
		time.Sleep(2 * time.Second)
		m1, s1 := alice.steady(t)
		if _, _, stale, _, _ := m1.unit(); !stale {
			t.Fatalf("alice's GPU fresh again %.1fs after the kill, before the measured stale span ended: the agent came back too early for this test",
				time.Since(killed).Seconds())
		}
		dt := s1.at.Sub(s0.at).Seconds()
		if !near(s1.allocated-s0.allocated, share*dt) || !near(s1.used, s0.used) || !near(s1.usedUnkwn-s0.usedUnkwn, share*dt) {
			t.Errorf("stale span of %.3fs: allocated +%.4f (want %.4f), used +%.4f (want 0), usedUnknown +%.4f (want %.4f)\n  %s\n  %s",
				dt, s1.allocated-s0.allocated, share*dt, s1.used-s0.used, s1.usedUnkwn-s0.usedUnkwn, share*dt, s0, s1)
		}
		if p, err := st.Client.CoreV1().Pods(agent.Namespace).Get(ctx, agent.Name, metav1.GetOptions{}); err == nil && p.Status.Phase != corev1.PodRunning {
			t.Errorf("agent pod in back-off: phase %s, want Running (as a kubelet reports a restarting container)", p.Status.Phase)
		}

		// The emulator restarts the agent after the kubelet's first back-off (10 s); fresh numbers resume.
		aliceBusy(t, "alice fresh again after the agent restarted", 10*time.Second+20*time.Second)
		t.Logf("fresh again %.1fs after the kill", time.Since(killed).Seconds())
		if p, err := st.Client.CoreV1().Pods(agent.Namespace).Get(ctx, agent.Name, metav1.GetOptions{}); err != nil {
			t.Error(err)
		} else if n := p.Status.ContainerStatuses[0].RestartCount; n != 1 {
			t.Errorf("agent restart count %d, want 1", n)
		}
		_, r0 := alice.steady(t)
		time.Sleep(2 * time.Second)
		_, r1 := alice.steady(t)
		if dt := r1.at.Sub(r0.at).Seconds(); !near(r1.allocated-r0.allocated, share*dt) || r1.used <= r0.used || !near(r1.usedUnkwn, r0.usedUnkwn) {
			t.Errorf("span after recovery %.3fs: allocated +%.4f (want %.4f), used +%.4f (want > 0), usedUnknown +%.4f (want 0)",
				dt, r1.allocated-r0.allocated, share*dt, r1.used-r0.used, r1.usedUnkwn-r0.usedUnkwn)
		}
	})

	t.Run("usage API down longer than MaxGap", func(t *testing.T) {
		share := 3.0 / 7
		_, before := alice.steady(t)
		api.stop(t)
		stopped := time.Now()
		time.Sleep(3 * chaosMaxGap)
		api = startUsageAPI(ctx, t, usage, extra...)
		t.Logf("usage API down %.1fs (MaxGap %s)", time.Since(stopped).Seconds(), chaosMaxGap)
		poll(ctx, t, 30*time.Second, "alice's GPU-hours after the restart", func() (bool, string) {
			m, code := alice.me(t)
			_, ok := m.ledger()
			return code == http.StatusOK && ok && m.SampledAt.After(stopped), fmt.Sprintf("%d %+v", code, m)
		})
		_, after := alice.steady(t)
		if gap := after.at.Sub(before.at); gap <= chaosMaxGap {
			t.Fatalf("outage of %s between the readings is not longer than MaxGap %s: the test proves nothing", gap, chaosMaxGap)
		}
		// The outage is charged in full: a pod that ran through it held its share all along.
		if dt := after.at.Sub(before.at).Seconds(); !near(after.allocated-before.allocated, share*dt) {
			t.Errorf("across the outage (%.3fs): allocated +%.4f GPU-s, want share x time = %.4f\n  %s\n  %s",
				dt, after.allocated-before.allocated, share*dt, before, after)
		}

		// GPU-hours = pod lifetime x share within 1 %. The lifetime runs from the container's startedAt (the API
		// server has it to the second, so the true start is in [startedAt, startedAt+1s)) to the tick time of
		// the reading. Read it after at least 60 s of lifetime so that one usage-API tick (500 ms) at the start
		// stays within the tolerance.
		pod, err := st.Client.CoreV1().Pods(alicePod.Namespace).Get(ctx, alicePod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		startedAt := containerStartedAt(t, pod)
		if wait := time.Until(startedAt.Add(61 * time.Second)); wait > 0 {
			time.Sleep(wait)
		}
		_, now := alice.steady(t)
		longest, shortest := now.at.Sub(startedAt).Seconds(), now.at.Sub(startedAt).Seconds()-1
		lo, hi := 0.99*share*shortest, 1.01*share*longest
		t.Logf("alice: %.4f GPU-s allocated; pod lifetime %.1f-%.1fs x %.6f = %.4f-%.4f GPU-s", now.allocated, shortest, longest, share, share*shortest, share*longest)
		if now.allocated < lo || now.allocated > hi {
			t.Errorf("alice's GPU-hours %.6f, want her pod's lifetime x share within 1 %%: [%.6f, %.6f] GPU-h",
				now.allocated/3600, lo/3600, hi/3600)
		}
	})
}

// startBusyCell runs a busy process with the pod's identity (a kernel's cell, as the simulated backend sees
// it) and returns a function that stops it.
func startBusyCell(ctx context.Context, t *testing.T, pod *corev1.Pod) func() {
	t.Helper()
	busy := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
	for k, v := range processEnv(t, podPID(t, pod)) {
		switch k {
		case emulator.EnvNode, emulator.EnvPodUID, emulator.EnvPodName, emulator.EnvPodNamespace:
			busy.Env = append(busy.Env, k+"="+v)
		}
	}
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if busy.ProcessState == nil {
			_ = busy.Process.Kill()
			_ = busy.Wait()
		}
	}
}

// agentPodOn returns the chart's gpu-agent pod on node.
func agentPodOn(ctx context.Context, t *testing.T, in *gpuhubstack.Installed, node string) *corev1.Pod {
	t.Helper()
	pods, err := st.Client.CoreV1().Pods(in.Namespace).List(ctx, metav1.ListOptions{LabelSelector: in.AgentSelector})
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

// logAgents logs the tail of each gpu-agent's log (the emulator writes them under the stack's state dir).
func logAgents(t *testing.T, in *gpuhubstack.Installed) {
	t.Helper()
	pods, err := st.Client.CoreV1().Pods(in.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: in.AgentSelector})
	if err != nil {
		t.Logf("agent pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			b, err := os.ReadFile(filepath.Join(st.Dir, "nodes", "logs", p.Namespace+"_"+p.Name+"_"+c.Name+".log"))
			if err != nil {
				t.Logf("log of %s/%s: %v", p.Name, c.Name, err)
				continue
			}
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("gpu-agent %s on %s (%s), log tail:\n%s", p.Name, p.Spec.NodeName, podSummary([]corev1.Pod{p}), b)
		}
	}
}

// containerStartedAt is when the pod's (first) container started running, as the API server reports it.
func containerStartedAt(t *testing.T, pod *corev1.Pod) time.Time {
	t.Helper()
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return cs.State.Running.StartedAt.Time
		}
	}
	t.Fatalf("pod %s has no running container: %+v", pod.Name, pod.Status.ContainerStatuses)
	return time.Time{}
}

var helpFlag = regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)`)

// usageFlagsSupported lists the flags of `usage-api --help`.
func usageFlagsSupported(ctx context.Context, t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, _ := exec.CommandContext(ctx, bin, "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["listen"] {
		t.Fatalf("cannot read the flags of %s --help:\n%s", bin, strings.TrimSpace(string(out)))
	}
	return flags
}
