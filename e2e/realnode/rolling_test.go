//go:build realnode

package realnode_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/realnode"
)

// rolledTag is the second tag the rolling upgrade gives gpuhub's images: the same image, as a release that pushed
// it again under a new tag would be, so the pods' spec changes and every workload rolls.
const rolledTag = "0.1.0-rolled"

// gpuhubWorkload is one workload of the gpuhub release as the rolling upgrade watches it: its component label,
// its Deployment (or, for the agent, DaemonSet) and its image's name.
type gpuhubWorkload struct {
	component, name, image string
	daemonSet              bool
}

var gpuhubWorkloads = []gpuhubWorkload{
	{component: "gpu-quota", name: "gpuhub-quota", image: "gpu-quota"},
	{component: "gpu-profiles", name: "gpuhub-profiles", image: "gpu-profiles"},
	{component: "gpu-culler", name: "gpuhub-culler", image: "gpu-culler"},
	{component: "usage-api", name: "gpuhub-usage", image: "usage-api"},
	{component: "gpu-agent", name: "gpuhub-agent", image: "gpu-agent", daemonSet: true},
}

// rollingUpgrade shows `helm upgrade` of gpuhub as a rolling update that refuses no spawn the policy allows. First
// gpu-quota goes to two replicas (one decides, holding the Lease; the other relays to it and keeps a copy of its
// reservations) with a policy whose onUnavailable is closed: from then on a spawn that meets no decider is refused
// with "cannot check", where open would admit it unchecked and hide the gap. Then one helm upgrade changes every
// gpuhub image's tag and the policy (bob's limit 1/7 -> 2/7) while alice starts and stops MIG servers and bob
// tries his whole GPU: every start of alice's is admitted, every one of bob's is refused by a policy (the old or
// the new), none for want of a decider, and the Hub's glue counts no unanswered gpu-quota call and no fallback
// form. It returns the helm command (without --kubeconfig) that keeps what it installed, for later upgrades.
func rollingUpgrade(ctx context.Context, t *testing.T, client kubernetes.Interface, node *realnode.Node, base, helm, kubeconfig string, gpuhubCmd []string, mig, whole string) []string {
	t.Helper()
	began := time.Now()
	alice, bob, admin := signIn(ctx, t, base, "alice"), signIn(ctx, t, base, "bob"), signIn(ctx, t, base, "admin")
	alice.stop(ctx, t)
	bob.stop(ctx, t)

	// Two replicas and the closed policy. The step from one replica to two is itself a cold start: the new pods
	// have no copy of the reservations of the old one (which relays to nobody), so none may campaign until the
	// Lease has been free for twice its duration. Nobody spawns meanwhile; the test waits for the decider.
	start := time.Now()
	twoReplicas := append(slices.Clone(gpuhubCmd), "--set", "quota.replicas=2", "--set-file", "quota.policy=testdata/quota-closed.yaml")
	helmUpgrade(ctx, t, helm, kubeconfig, twoReplicas)
	waitRolledOut(ctx, t, client, "0.1.0", 3*time.Minute)
	rolled := time.Since(start)
	decider := waitQuotaReplicas(ctx, t, client, 2*time.Minute)
	t.Logf("gpu-quota at 2 replicas: rolled out %.0f s after helm upgrade, %s decides (holds the Lease) and the other's copy is in sync %.0f s after it",
		rolled.Seconds(), decider, time.Since(start).Seconds())
	// The glue takes onUnavailable from gpu-quota's answers: alice's admitted start teaches it "closed".
	if msg := alice.spawn(ctx, t, mig); msg != "" {
		t.Fatalf("alice's MIG start under the closed policy, two replicas, was refused: %s", msg)
	}
	alice.stop(ctx, t)
	if msg := bob.spawn(ctx, t, whole); !strings.Contains(msg, "1/7 of a GPU") {
		t.Fatalf("bob's whole GPU under the closed policy: want gpu-quota's refusal for 1/7 of a GPU, got %q", msg)
	}

	// The rolling upgrade: a new tag of every gpuhub image, and a new policy.
	for _, w := range gpuhubWorkloads {
		ref := "ghcr.io/gpuhub/" + w.image
		if err := node.TagImage(ctx, ref+":0.1.0", ref+":"+rolledTag); err != nil {
			t.Fatal(err)
		}
	}
	before := gpuhubPods(ctx, t, client)
	metricsBefore := hubMetrics(ctx, t, admin)
	// Besides the spawns (one every few seconds), the glue's own call every 100 ms: a moment with no decider, or a
	// pod that stopped listening while its Service still sent to it, shows here even between two spawns.
	probes := probeAdmit(ctx, t, client)
	holders := leaseHolders(ctx, client)
	upgrade := append(slices.Clone(gpuhubCmd), "--set", "quota.replicas=2", "--set", "image.tag="+rolledTag,
		"--set-file", "quota.policy=testdata/quota-rolling.yaml")
	t.Logf("helm %s", strings.Join(upgrade, " "))
	done := make(chan error, 1)
	start = time.Now()
	go func() {
		args := append(slices.Clone(upgrade), "--kubeconfig", kubeconfig)
		out, err := exec.CommandContext(ctx, helm, args...).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("helm upgrade gpuhub: %w\n%s", err, out)
		}
		done <- err
	}()
	upgraded := false
	starts, startsWhileRolling, refusals := 0, 0, 0
	var refusal string
	for deadline := time.Now().Add(5 * time.Minute); ; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			upgraded = true
		default:
		}
		out, waiting := rolledOut(ctx, client, rolledTag)
		if msg := alice.spawn(ctx, t, mig); msg != "" {
			t.Fatalf("alice's MIG start %d during the rolling upgrade (%.0f s in; helm done: %v; rollout: %s) was refused: %s",
				starts+1, time.Since(start).Seconds(), upgraded, waiting, msg)
		}
		starts++
		if !out {
			startsWhileRolling++
		}
		alice.stop(ctx, t)
		refusal = bob.spawn(ctx, t, whole)
		if refusal == "" {
			t.Fatalf("bob's whole GPU was admitted during the rolling upgrade (%.0f s in): neither policy allows it", time.Since(start).Seconds())
		}
		if !strings.Contains(refusal, "1/7 of a GPU") && !strings.Contains(refusal, "2/7 of a GPU") {
			t.Fatalf("bob's whole GPU during the rolling upgrade (%.0f s in; rollout: %s) was refused, but not by a policy: %s",
				time.Since(start).Seconds(), waiting, refusal)
		}
		refusals++
		if upgraded && out && strings.Contains(refusal, "2/7 of a GPU") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 minutes after helm upgrade began: helm done: %v; rollout: %s; bob's last refusal: %s", upgraded, waiting, refusal)
		}
	}
	took := time.Since(start)
	probed := probes()
	t.Logf("gpu-quota's admit through its Service, as the glue calls it, every 100 ms over the rolling upgrade: %s", probed)
	// Every call must be answered: a spawn at that instant under onUnavailable closed would have been refused. (One
	// call in 370 once waited past the glue's 2 s: a relay connecting to a holder whose pod was gone, and a stopping
	// replica closing its port while kube-proxy still sent it connections; both fixed, issue 36.)
	if probed.failed > 0 {
		t.Errorf("gpu-quota's admit through its Service failed %d times of %d during the rolling upgrade (a spawn then would have been refused): %s",
			probed.failed, probed.total, probed)
	}

	// Every pod is new and runs the new tag.
	after := gpuhubPods(ctx, t, client)
	for _, w := range gpuhubWorkloads {
		var was, now []string
		for _, p := range before[w.component] {
			was = append(was, p.Name+" "+string(p.UID)[:8])
		}
		for _, p := range after[w.component] {
			now = append(now, p.Name+" "+string(p.UID)[:8])
			if slices.ContainsFunc(before[w.component], func(b corev1.Pod) bool { return b.UID == p.UID }) {
				t.Fatalf("%s: pod %s was not replaced by the rolling upgrade", w.component, p.Name)
			}
		}
		p := after[w.component][0]
		st := p.Status.ContainerStatuses[0]
		// The CRI names a running image by the first of its tags: the same image (digest) under its new one.
		t.Logf("%s: pods [%s] -> [%s], running %s (the CRI reports %s, %s)",
			w.component, strings.Join(was, ", "), strings.Join(now, ", "), p.Spec.Containers[0].Image, st.Image, st.ImageID)
	}
	metricsAfter := hubMetrics(ctx, t, admin)
	delta := func(series string) float64 { return metricsAfter.sum(series) - metricsBefore.sum(series) }
	got := map[string]float64{
		"quota unanswered (onUnavailable applied)": delta(`gpuhub_quota_glue_unavailable_total`),
		"profiles fallback forms":                  delta(`gpuhub_profiles_glue_requests_total{result="fallback"}`),
	}
	want := map[string]float64{"quota unanswered (onUnavailable applied)": 0, "profiles fallback forms": 0}
	if d := delta(`gpuhub_quota_glue_requests_total{outcome="admit"}`); d < float64(starts) {
		t.Fatalf("the glue counted %.0f admissions by gpu-quota during the rolling upgrade, want alice's %d starts", d, starts)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("the Hub glue's counters over the rolling upgrade: %s %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	t.Logf("helm upgrade rolled every gpuhub workload to %s and the policy in %.0f s (%.0f s for the two upgrades and their checks): alice's %d MIG starts (%d while pods were replaced) all admitted by gpu-quota; bob's %d whole-GPU starts all refused by a policy, none for want of a decider; the glue applied onUnavailable 0 times and fell back to the static form 0 times; gpu-quota's Lease: %s; bob now reads %q",
		rolledTag, took.Seconds(), time.Since(began).Seconds(), starts, startsWhileRolling, refusals, strings.Join(holders(), " -> "), refusal)
	return upgrade
}

// admitProbes is what probeAdmit saw: answers by outcome, and the first failures with their time.
type admitProbes struct {
	total, failed int
	outcomes      map[string]int
	first         []string
}

func (p admitProbes) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p.outcomes)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, p.outcomes[k]))
	}
	s := fmt.Sprintf("%d calls: %s", p.total, strings.Join(parts, ", "))
	if len(p.first) > 0 {
		s += "; first failures: " + strings.Join(p.first, "; ")
	}
	return s
}

// probeAdmit calls gpu-quota's api/v1/admit every 100 ms, as the Hub glue does (its URL, its token, its 2 s
// timeout, a kept-alive connection), for a CPU-only pod (admitted, "no_gpu", no reservation), until the returned
// function is called; that returns what it saw. Every call needs the decider: a standby relays it.
func probeAdmit(ctx context.Context, t *testing.T, client kubernetes.Interface) func() admitProbes {
	t.Helper()
	secret, err := client.CoreV1().Secrets("jhub").Get(ctx, "hub", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := string(secret.Data["hub.services.gpu-quota.apiToken"])
	svc, err := client.CoreV1().Services("jhub").Get(ctx, "gpuhub-quota", metav1.GetOptions{})
	if err != nil || token == "" {
		t.Fatalf("gpu-quota's Service and token: %v (token %d bytes)", err, len(token))
	}
	url := "http://" + svc.Spec.ClusterIP + ":8000/services/gpu-quota/api/v1/admit"
	body := `{"user":"alice","server":"probe","groups":[],"profile":"","pod":{"containers":[{"name":"notebook","resources":{"limits":{"cpu":"1"},"requests":{"cpu":"1"}}}],"initContainers":[],"nodeSelector":{}}}`
	httpc := &http.Client{Timeout: 2 * time.Second}
	call := func(ctx context.Context) string {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Authorization", "token "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpc.Do(req)
		if err != nil {
			return "error: " + err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"allow":true`) {
			return "admitted"
		}
		return fmt.Sprintf("%d %s", resp.StatusCode, tailBytes(b, 200))
	}
	if got := call(ctx); got != "admitted" {
		t.Fatalf("gpu-quota's admit at %s, before the upgrade: %s", url, got)
	}
	pctx, cancel := context.WithCancel(ctx)
	result := make(chan admitProbes, 1)
	start := time.Now()
	go func() {
		p := admitProbes{outcomes: map[string]int{}}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-pctx.Done():
				result <- p
				return
			case <-tick.C:
			}
			outcome := call(pctx)
			if pctx.Err() != nil {
				continue
			}
			p.total++
			if outcome == "admitted" {
				p.outcomes[outcome]++
				continue
			}
			p.failed++
			kind, _, _ := strings.Cut(outcome, " ")
			p.outcomes[kind]++
			if len(p.first) < 5 {
				p.first = append(p.first, fmt.Sprintf("%.1f s: %s", time.Since(start).Seconds(), outcome))
			}
		}
	}()
	return func() admitProbes {
		cancel()
		return <-result
	}
}

func helmUpgrade(ctx context.Context, t *testing.T, helm, kubeconfig string, args []string) {
	t.Helper()
	t.Logf("helm %s", strings.Join(args, " "))
	if out, err := exec.CommandContext(ctx, helm, append(slices.Clone(args), "--kubeconfig", kubeconfig)...).CombinedOutput(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// gpuhubPods lists the pods of each gpuhub workload by component, terminating ones too.
func gpuhubPods(ctx context.Context, t *testing.T, client kubernetes.Interface) map[string][]corev1.Pod {
	t.Helper()
	out := map[string][]corev1.Pod{}
	for _, w := range gpuhubWorkloads {
		pods, err := client.CoreV1().Pods("jhub").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=gpuhub,app.kubernetes.io/component=" + w.component})
		if err != nil {
			t.Fatal(err)
		}
		out[w.component] = pods.Items
	}
	return out
}

// rolledOut reports whether every gpuhub workload has rolled out to tag as `kubectl rollout status` sees it, and
// every pod left (terminating ones too) runs tag and is ready; else what is still waiting.
func rolledOut(ctx context.Context, client kubernetes.Interface, tag string) (bool, string) {
	var waiting []string
	for _, w := range gpuhubWorkloads {
		if w.daemonSet {
			d, err := client.AppsV1().DaemonSets("jhub").Get(ctx, w.name, metav1.GetOptions{})
			if err != nil || d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedNumberScheduled != d.Status.DesiredNumberScheduled ||
				d.Status.NumberAvailable != d.Status.DesiredNumberScheduled {
				waiting = append(waiting, w.name+" (DaemonSet)")
				continue
			}
		} else {
			d, err := client.AppsV1().Deployments("jhub").Get(ctx, w.name, metav1.GetOptions{})
			if err != nil || d.Spec.Replicas == nil || d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != *d.Spec.Replicas ||
				d.Status.Replicas != *d.Spec.Replicas || d.Status.AvailableReplicas != *d.Spec.Replicas {
				waiting = append(waiting, w.name)
				continue
			}
		}
		pods, err := client.CoreV1().Pods("jhub").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=gpuhub,app.kubernetes.io/component=" + w.component})
		if err != nil {
			waiting = append(waiting, w.name+" pods")
			continue
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+tag) || !podReady(&p) {
				waiting = append(waiting, "pod "+p.Name)
			}
		}
	}
	return len(waiting) == 0, strings.Join(waiting, ", ")
}

func waitRolledOut(ctx context.Context, t *testing.T, client kubernetes.Interface, tag string, within time.Duration) {
	t.Helper()
	var waiting string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(time.Second) {
		var out bool
		if out, waiting = rolledOut(ctx, client, tag); out {
			return
		}
	}
	t.Fatalf("gpuhub not rolled out to %s within %s: waiting for %s", tag, within, waiting)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// quotaLeaseHolder is the holder of gpu-quota's Lease: "<pod>@<advertise URL>" with more than one replica.
func quotaLeaseHolder(ctx context.Context, t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	l, err := client.CoordinationV1().Leases("jhub").Get(ctx, "gpuhub-quota", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leaseHolders follows gpu-quota's Lease (every 200 ms) until the returned function is called, which returns
// its holders in turn ("(none)" while nobody holds it: a decider gave it back).
func leaseHolders(ctx context.Context, client kubernetes.Interface) func() []string {
	lctx, cancel := context.WithCancel(ctx)
	result := make(chan []string, 1)
	start := time.Now()
	go func() {
		var seen []string
		last := "?"
		for lctx.Err() == nil {
			if l, err := client.CoordinationV1().Leases("jhub").Get(lctx, "gpuhub-quota", metav1.GetOptions{}); err == nil {
				h := "(none)"
				if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
					h = *l.Spec.HolderIdentity
				}
				if h != last {
					seen = append(seen, fmt.Sprintf("%s at %.1f s", h, time.Since(start).Seconds()))
					last = h
				}
			}
			select {
			case <-lctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		result <- seen
	}()
	return func() []string {
		cancel()
		return <-result
	}
}

// waitQuotaReplicas waits until one gpu-quota pod decides (holds the Lease, with its address) and every other's
// copy of its reservations is in sync (it may take over), as their /metrics say; it returns the decider's name.
func waitQuotaReplicas(ctx context.Context, t *testing.T, client kubernetes.Interface, within time.Duration) string {
	t.Helper()
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(time.Second) {
		pods, err := client.CoreV1().Pods("jhub").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=gpuhub,app.kubernetes.io/component=gpu-quota"})
		if err != nil {
			t.Fatal(err)
		}
		holder := quotaLeaseHolder(ctx, t, client)
		decider, synced, states := "", 0, []string{"lease " + holder}
		for _, p := range pods.Items {
			deciding, inSync := quotaGauge(ctx, p.Status.PodIP, "gpuhub_quota_deciding"), quotaGauge(ctx, p.Status.PodIP, "gpuhub_quota_replica_in_sync")
			states = append(states, fmt.Sprintf("%s deciding=%v in_sync=%v", p.Name, deciding, inSync))
			switch {
			case deciding == 1 && strings.HasPrefix(holder, p.Name+"@http://"):
				decider = p.Name
			case inSync == 1:
				synced++
			}
		}
		last = strings.Join(states, "; ")
		if decider != "" && synced == len(pods.Items)-1 {
			return decider
		}
	}
	t.Fatalf("gpu-quota: no decider with its standbys in sync within %s: %s", within, last)
	return ""
}

// quotaGauge reads a gauge from a gpu-quota pod's /metrics (-1 when it cannot).
func quotaGauge(ctx context.Context, ip, name string) float64 {
	if ip == "" {
		return -1
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ip+":8000/metrics", nil)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return parseSamples(string(body)).sum(name)
}

// metricSamples are the samples of a Prometheus text exposition, by series ("name{labels}").
type metricSamples map[string]float64

func parseSamples(text string) metricSamples {
	m := metricSamples{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			m[f[0]] = v
		}
	}
	return m
}

// sum adds the samples of a metric (every series of name) or of one series (`name{label="value"}`).
func (m metricSamples) sum(series string) float64 {
	total := 0.0
	for s, v := range m {
		if s == series || (!strings.Contains(series, "{") && strings.HasPrefix(s, series+"{")) {
			total += v
		}
	}
	return total
}

// hubMetrics reads the Hub's /hub/metrics as admin (the glue's counters are in the Hub's registry).
func hubMetrics(ctx context.Context, t *testing.T, admin *hubUser) metricSamples {
	t.Helper()
	status, body, err := admin.do(ctx, http.MethodGet, "/hub/metrics", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("the Hub's /hub/metrics as admin: %d %v\n%s", status, err, tailBytes([]byte(body), 1024))
	}
	return parseSamples(body)
}

// TestMetricSamples: the Hub's counters as prometheus_client writes them, summed by name or by name and label.
func TestMetricSamples(t *testing.T) {
	m := parseSamples(`# HELP gpuhub_quota_glue_unavailable_total GPU spawns that gpu-quota could not answer
# TYPE gpuhub_quota_glue_unavailable_total counter
gpuhub_quota_glue_unavailable_total{mode="open"} 2.0
gpuhub_quota_glue_unavailable_total{mode="closed"} 1.0
gpuhub_quota_glue_unavailable_created{mode="open"} 1.7960109e+09
gpuhub_profiles_glue_requests_total{result="fallback"} 3.0
gpuhub_profiles_glue_requests_total{result="live"} 40.0
gpuhub_quota_deciding 1
`)
	got := map[string]float64{}
	for _, s := range []string{"gpuhub_quota_glue_unavailable_total", `gpuhub_profiles_glue_requests_total{result="fallback"}`,
		"gpuhub_quota_deciding", "gpuhub_quota_replica_in_sync", "gpuhub_quota_glue"} {
		got[s] = m.sum(s)
	}
	want := map[string]float64{"gpuhub_quota_glue_unavailable_total": 3, `gpuhub_profiles_glue_requests_total{result="fallback"}`: 3,
		"gpuhub_quota_deciding": 1, "gpuhub_quota_replica_in_sync": 0, "gpuhub_quota_glue": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sums (-want +got):\n%s", diff)
	}
}
