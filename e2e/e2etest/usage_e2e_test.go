//go:build e2e

package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/logscan"
	"github.com/gpuhub/gpuhub/hubapi"
)

// usageMe is the part of GET api/v1/me this test reads.
type usageMe struct {
	User      string     `json:"user"`
	SampledAt *time.Time `json:"sampledAt"`
	Servers   []struct {
		Node string `json:"node"`
		GPUs []struct {
			Kind              string   `json:"kind"`
			ShareNumerator    int64    `json:"shareNumerator"`
			ShareDenominator  int64    `json:"shareDenominator"`
			SMUtilPercent     *float64 `json:"smUtilPercent"`
			UtilizationSource string   `json:"utilizationSource"`
		} `json:"gpus"`
	} `json:"servers"`
	GPUHours map[string]struct {
		Allocated float64 `json:"allocated"`
	} `json:"gpuHours"`
}

func (m usageMe) gpu() (kind string, num, den int64, util float64, ok bool) {
	if len(m.Servers) != 1 || len(m.Servers[0].GPUs) != 1 || m.Servers[0].GPUs[0].SMUtilPercent == nil {
		return "", 0, 0, 0, false
	}
	g := m.Servers[0].GPUs[0]
	return g.Kind, g.ShareNumerator, g.ShareDenominator, *g.SMUtilPercent, true
}

// TestUsageAPI (issue 4, item 6): alice runs a busy "cell" on her MIG 3g.20gb slice, bob idles on a
// time-sliced T4 replica; api/v1/me shows each the right kind and share (3/7 vs 1/4) and a utilization that
// rises and falls with the cell; bob's token cannot read alice's data; after a restart of the usage API the
// GPU-hours continue. Wired as `make demo` wires it (e2e/gpuhubstack): the gpu-agent DaemonSet and both
// services' RBAC come from chart/gpuhub (helm template, simulated backend), the agents admit only the chart's
// usage ServiceAccount (TokenReview), and the usage API runs as a process with a token of that
// ServiceAccount and the Hub service token of gpu-usage (least scopes). It is called directly (not through
// the proxy) with tokens minted for alice and bob.
func TestUsageAPI(t *testing.T) {
	if os.Getenv("GPUHUB_GPU_AGENT") == "" {
		t.Fatal("GPUHUB_GPU_AGENT is not set; run `make e2e` (it builds bin/gpu-agent)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const ns = "gpuhub-usage"
	in := installChart(ctx, t, ns)

	for user, profile := range map[string]string{"alice": "a100-3g", "bob": "t4-shared"} {
		if _, err := hubAdmin.StartServer(ctx, user, "", map[string]any{"profile": profile}); err != nil {
			t.Fatalf("start %s: %v", user, err)
		}
		defer hub().Stop(t, user, "")
	}
	for _, user := range []string{"alice", "bob"} {
		waitServer(ctx, t, user, "", func(s hubapi.Server) bool { return s.Ready })
	}
	tokens := map[string]string{}
	for _, user := range []string{"alice", "bob"} {
		tok, err := hubAdmin.CreateToken(ctx, user, hubapi.TokenRequest{Note: "usage e2e", ExpiresIn: 3600})
		if err != nil {
			t.Fatalf("token for %s: %v", user, err)
		}
		tokens[user] = tok.Token
		logscan.Register("Hub token of user "+user+" (usage e2e)", tok.Token)
	}

	kubeconfig := filepath.Join(t.TempDir(), "usage.kubeconfig")
	if err := in.WriteUsageKubeconfig(ctx, st.Client, st.ControlPlane.URL, st.ControlPlane.CAData(), kubeconfig); err != nil {
		t.Fatal(err)
	}
	agentToken := filepath.Join(t.TempDir(), "agent-token")
	if err := in.WriteAgentToken(ctx, st.Client, agentToken); err != nil {
		t.Fatal(err)
	}
	usage := gpuhubstack.Usage{
		Binary: usageBinary(ctx, t), Port: usagePort, Kubeconfig: kubeconfig, Database: filepath.Join(t.TempDir(), "ledger.db"),
		Namespace: namespace, AgentNamespace: ns, AgentTokenFile: agentToken, AgentArgs: in.UsageAgentArgs,
		HubAPIURL: st.Hub.APIURL(), Token: usageToken,
		LogLevel: "debug",
	}
	checkSnapshotAuth(ctx, t, in, tokens["alice"])
	// A restart below must stay within MaxGap whatever the machine's load: this test is about the ledger
	// continuing without double counting (TestChaos covers outages longer than MaxGap).
	const maxGap = "--ledger-max-gap=1m"
	api := startUsageAPI(ctx, t, usage, maxGap)

	me := func(user string) (usageMe, int) {
		var m usageMe
		code := getUsage(ctx, t, api.base+"me", tokens[user], &m)
		return m, code
	}
	poll := func(what string, cond func() (bool, string)) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(context.Context) (bool, error) {
			ok, msg := cond()
			last = msg
			return ok, nil
		})
		if err != nil {
			t.Fatalf("%s: %v; last: %s", what, err, last)
		}
	}

	// A busy cell in alice's server: a process in her pod (it inherits the pod's identity, as a kernel does).
	alicePod := findPod(ctx, t, "alice", "")
	stopBusy := startBusyCell(ctx, t, alicePod)
	defer stopBusy()

	poll("alice busy on MIG 3/7", func() (bool, string) {
		m, code := me("alice")
		kind, num, den, util, ok := m.gpu()
		done := code == http.StatusOK && ok && kind == "mig" && num == 3 && den == 7 && util >= 20
		if done {
			t.Logf("alice busy: kind %s share %d/%d smUtil %.0f%%", kind, num, den, util)
		}
		return done, fmt.Sprintf("%d %+v", code, m)
	})
	poll("bob idle on a T4 replica 1/4", func() (bool, string) {
		m, code := me("bob")
		kind, num, den, util, ok := m.gpu()
		done := code == http.StatusOK && ok && kind == "shared" && num == 1 && den == 4 && util < 10
		if done {
			t.Logf("bob idle: kind %s share %d/%d smUtil %.0f%%", kind, num, den, util)
		}
		return done, fmt.Sprintf("%d %+v", code, m)
	})
	stopBusy()
	poll("alice's utilization falls when the cell ends", func() (bool, string) {
		m, _ := me("alice")
		_, _, _, util, ok := m.gpu()
		if ok && util < 10 {
			t.Logf("alice after the cell: smUtil %.0f%%", util)
		}
		return ok && util < 10, fmt.Sprintf("%+v", m)
	})
	// carol has no server: she is listed only if the usage API read the Hub's user list with its
	// least-scope service token.
	poll("the Hub directory through the gpu-usage service token", func() (bool, string) {
		var page struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
		}
		code := getUsage(ctx, t, api.base+"users?limit=100", st.Hub.AdminToken(), &page)
		for _, it := range page.Items {
			if it.Name == "carol" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d %+v", code, page)
	})
	if code := getUsage(ctx, t, api.base+"users/alice", tokens["bob"], nil); code != http.StatusForbidden {
		t.Errorf("bob reads alice's usage: status %d, want 403", code)
	}
	if code := getUsage(ctx, t, api.base+"users/alice", tokens["alice"], nil); code != http.StatusOK {
		t.Errorf("alice reads her own usage by name: status %d, want 200", code)
	}
	var before float64
	poll("GPU-hours accumulate", func() (bool, string) {
		m, _ := me("alice")
		before = m.GPUHours["today"].Allocated
		return before > 0, fmt.Sprintf("%+v", m.GPUHours)
	})

	// Restart on the same ledger: the hours continue, and the time across the restart is charged exactly
	// once: allocated grows by share x the time between the two readings' ticks, within gpuSecondsTol (a
	// `>=` check would accept double counting).
	aliceLedger := chaosClient{ctx: ctx, base: api.base, token: tokens["alice"]}
	_, b := aliceLedger.steady(t)
	api.stop(t)
	stopped := time.Now()
	t.Logf("usage API stopped at %s", stopped.UTC().Format("15:04:05.000"))
	api = startUsageAPI(ctx, t, usage, maxGap)
	poll("GPU-hours after a restart", func() (bool, string) {
		m, code := me("alice")
		return code == http.StatusOK && m.SampledAt != nil && m.SampledAt.After(stopped), fmt.Sprintf("%d %+v", code, m)
	})
	_, a := aliceLedger.steady(t)
	dt := a.at.Sub(b.at).Seconds()
	if want := 3.0 / 7 * dt; !near(a.allocated-b.allocated, want) {
		t.Errorf("across the restart (%.3fs): alice's allocated grew by %.4f GPU-s, want 3/7 x %.3fs = %.4f\n  %s\n  %s",
			dt, a.allocated-b.allocated, dt, want, b, a)
	} else {
		t.Logf("alice across the restart:\n  %s\n  %s", b, a)
	}
	api.stop(t)
}

// usageAPI is a running usage-api process.
type usageAPI struct {
	p    *proc.Process
	base string // http://127.0.0.1:port/services/gpu-usage/api/v1/
}

// installChart renders chart/gpuhub into namespace ns and applies what the local cluster runs
// (agents and RBAC), then waits for a ready agent on every GPU node.
func installChart(ctx context.Context, t *testing.T, ns string) *gpuhubstack.Installed {
	t.Helper()
	ch := gpuhubstack.Chart{Helm: os.Getenv("GPUHUB_HELM"), Dir: os.Getenv("GPUHUB_CHART"), Namespace: ns, PodNamespace: namespace}
	if ch.Helm == "" || ch.Dir == "" {
		t.Fatal("GPUHUB_HELM or GPUHUB_CHART is not set; run `make e2e`")
	}
	var err error
	if ch.KubeVersion, err = gpuhubstack.ServerVersion(st.Client); err != nil {
		t.Fatal(err)
	}
	objs, err := ch.Render(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in, err := gpuhubstack.Install(ctx, st.Client, ns, objs)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if in != nil {
			in.Uninstall(ctx, st.Client)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.WaitAgents(ctx, st.Client, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	return in
}

// usageBinary is $GPUHUB_USAGE_API, or the usage API built for this test.
func usageBinary(ctx context.Context, t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUHUB_USAGE_API"); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "usage-api")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../services/usage-api")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build usage-api: %v\n%s", err, out)
	}
	return bin
}

// startUsageAPI starts the usage API as gpuhubstack describes it, with extra flags appended (they win over
// the same flags before them).
func startUsageAPI(ctx context.Context, t *testing.T, u gpuhubstack.Usage, extraArgs ...string) *usageAPI {
	t.Helper()
	spec := u.Spec()
	spec.Args = append(spec.Args, extraArgs...)
	spec.LogFile = filepath.Join(t.TempDir(), "usage-api.log")
	p, err := proc.Start(ctx, slog.New(slog.DiscardHandler), spec)
	if err != nil {
		b, _ := os.ReadFile(spec.LogFile)
		t.Fatalf("usage-api: %v\n%s", err, b)
	}
	api := &usageAPI{p: p, base: u.URL()}
	t.Cleanup(func() {
		api.stop(t)
		if t.Failed() {
			if b, err := os.ReadFile(spec.LogFile); err == nil {
				t.Logf("usage-api log:\n%s", b)
			}
		}
	})
	return api
}

func (u *usageAPI) stop(t *testing.T) {
	t.Helper()
	select {
	case <-u.p.Done():
		return
	default:
	}
	t0 := time.Now()
	u.p.Stop()
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("usage-api took %s to stop after SIGTERM", d)
	}
}

// getUsage GETs url with a Hub token and decodes a 200 answer into into; it returns the status (0 when the
// service cannot be reached).
func getUsage(ctx context.Context, t *testing.T, url, token string, into any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if into != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Errorf("decode %s: %v", url, err)
		}
	}
	return resp.StatusCode
}

// checkSnapshotAuth: an agent's snapshot names users, so it admits only a token for its audience issued to
// the chart's usage ServiceAccount: without a token, with a Hub token, with the usage ServiceAccount's
// API-server token (what the usage API used to send) it answers 401; another ServiceAccount's token for the
// agents' audience gets 403.
func checkSnapshotAuth(ctx context.Context, t *testing.T, in *gpuhubstack.Installed, hubToken string) {
	t.Helper()
	pods, err := st.Client.CoreV1().Pods(in.Namespace).List(ctx, metav1.ListOptions{LabelSelector: in.AgentSelector})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("agent pods: %v (%d)", err, len(pods.Items))
	}
	url := fmt.Sprintf("http://%s/api/v1/snapshot", net.JoinHostPort(pods.Items[0].Status.PodIP, "9400"))
	token := func(sa string, audiences ...string) string {
		tr, err := st.Client.CoreV1().ServiceAccounts(in.Namespace).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		logscan.Register("token of ServiceAccount "+sa+" (usage e2e)", tr.Status.Token)
		return tr.Status.Token
	}
	for name, tc := range map[string]struct {
		auth string
		want int
	}{
		"no token":                                 {"", http.StatusUnauthorized},
		"Hub token":                                {"Bearer " + hubToken, http.StatusUnauthorized},
		"usage-api ServiceAccount, API audience":   {"Bearer " + token(in.UsageServiceAccount), http.StatusUnauthorized},
		"default ServiceAccount, agent audience":   {"Bearer " + token("default", in.AgentAudience), http.StatusForbidden},
		"usage-api ServiceAccount, agent audience": {"Bearer " + token(in.UsageServiceAccount, in.AgentAudience), http.StatusOK},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("snapshot with %s: status %d, want %d", name, resp.StatusCode, tc.want)
		}
	}
}
