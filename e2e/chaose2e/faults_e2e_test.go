//go:build e2e

package chaose2e

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// inject runs the plan: each fault at its time from now (or right after the previous one's recovery, when that
// took longer), one at a time.
func (r *run) inject(ctx context.Context, plan []Planned) {
	start := time.Now()
	if postgresRestart == "" {
		r.mu.Lock()
		r.recs = append(r.recs, Recovery{Fault: FaultPostgres, NotApplicable: "not injected: the ledger is SQLite in this run (make chaos runs it on PostgreSQL)"})
		r.mu.Unlock()
	}
	for _, p := range plan {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(p.At))):
		}
		rec := r.fault(ctx, p)
		r.t.Logf("chaos: %s on %s: restarted after %.1fs, ready %.1fs after the restart %s",
			rec.Fault, rec.Target, rec.Restarted.Sub(rec.Injected).Seconds(), rec.Ready.Sub(rec.Restarted).Seconds(), rec.Err)
		r.mu.Lock()
		r.recs = append(r.recs, rec)
		r.mu.Unlock()
	}
}

// gpuNodes are the emulated GPU nodes, sorted (a plan's target picks one).
func gpuNodes(ctx context.Context) ([]string, error) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nvidia.com/gpu.present=true"})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("no GPU nodes")
	}
	return names, nil
}

func (r *run) fault(ctx context.Context, p Planned) Recovery {
	rec := Recovery{Fault: p.Fault}
	fail := func(format string, a ...any) Recovery {
		rec.Err = fmt.Sprintf(format, a...)
		return rec
	}
	switch p.Fault {
	case FaultAgent:
		nodes, err := gpuNodes(ctx)
		if err != nil {
			return fail("%v", err)
		}
		node := nodes[p.Target%len(nodes)]
		rec.Target, rec.By = node, "the emulated kubelet (back-off)"
		agent, err := agentOn(ctx, node)
		if err != nil {
			return fail("%v", err)
		}
		restarts := agent.Status.ContainerStatuses[0].RestartCount
		rec.Injected = time.Now()
		if _, err := st.Emulator.KillContainer(agent.Namespace, agent.Name, agent.Spec.Containers[0].Name, syscall.SIGKILL); err != nil {
			return fail("kill: %v", err)
		}
		// The kubelet's back-off restarts it; ready once its container runs again and its probe passes.
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			a, err := kube.CoreV1().Pods(agent.Namespace).Get(ctx, agent.Name, metav1.GetOptions{})
			if err == nil && len(a.Status.ContainerStatuses) > 0 {
				cs := a.Status.ContainerStatuses[0]
				if cs.RestartCount > restarts && cs.State.Running != nil {
					if rec.Restarted.IsZero() {
						rec.Restarted = time.Now()
					}
					if cs.Ready {
						rec.Ready = time.Now()
						break
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		r.addStale(node, Period{From: rec.Injected, To: rec.Ready.Add(usageStaleAfter)})
		if rec.Ready.IsZero() {
			rec.Err = "agent not ready again within 90 s"
		}
	case FaultUsageWriter, FaultQuotaDecider, FaultCullerLeader, FaultProfilesLeader:
		if err := r.activeFault(ctx, p, &rec); err != nil {
			return fail("%v", err)
		}
	case FaultUsageAPI, FaultQuota, FaultCuller, FaultProfiles:
		// A seeded replica, the Lease holder or not.
		names := replicaNames(seededService[p.Fault])
		name := names[p.Target%len(names)]
		rec.Target, rec.By = name, "the harness, as its Deployment would"
		r.pollDecisions(ctx) // what it decided so far is in its memory only
		rec.Injected = time.Now()
		if err := killReplica(name); err != nil {
			return fail("%v", err)
		}
		rec.Restarted = time.Now()
		err := st.StartComponent(ctx, name)
		rec.Ready = time.Now()
		if p.Fault == FaultUsageAPI && len(names) == 1 {
			// The only usage API down: nobody answers the culler (another replica would).
			r.addStale("", Period{From: rec.Injected, To: rec.Ready.Add(usageStaleAfter)})
		}
		if err != nil {
			rec.Ready = time.Time{}
			return fail("restart: %v", err)
		}
	case FaultHub:
		rec.Target, rec.By = "jupyterhub", "the harness, as its Deployment would"
		r.setHubDown(true)
		defer r.setHubDown(false)
		rec.Injected = time.Now()
		st.Hub.Kill()
		rec.Restarted = time.Now()
		if err := st.Hub.Relaunch(ctx); err != nil {
			return fail("relaunch: %v", err)
		}
		rec.Ready = time.Now()
	case FaultAPIServer:
		rec.Target, rec.By = "kube-apiserver", "the harness, as the kubelet restarts a static pod"
		rec.Injected = time.Now()
		st.ControlPlane.StopAPIServer(0) // grace 0: SIGKILL at once
		rec.Restarted = time.Now()
		if err := st.ControlPlane.StartAPIServer(ctx); err != nil {
			return fail("restart: %v", err)
		}
		rec.Ready = time.Now()
	case FaultPostgres:
		rec.Target, rec.By = "postgresql", "pg_ctl restart -m fast"
		rec.Injected = time.Now()
		out, err := exec.CommandContext(ctx, postgresRestart).CombinedOutput()
		rec.Restarted = time.Now()
		if err != nil {
			return fail("%s: %v: %s", postgresRestart, err, out)
		}
		// Ready: the usage API commits and answers GPU-hours again.
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			var me struct {
				GPUHoursStatus string `json:"gpuHoursStatus"`
			}
			if err := r.getJSON(ctx, usageURL+"api/v1/me?history=false", r.tokens["carol"], &me); err == nil && me.GPUHoursStatus == "ok" &&
				readyz(ctx, usageURL) == nil {
				rec.Ready = time.Now()
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	case FaultNodeNotReady:
		nodes, err := gpuNodes(ctx)
		if err != nil {
			return fail("%v", err)
		}
		node := nodes[p.Target%len(nodes)]
		rec.Target, rec.By = node, "the emulated kubelet's next heartbeat"
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return fail("%v", err)
		}
		for i, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = corev1.ConditionFalse
				n.Status.Conditions[i].Reason = "ChaosNotReady"
				n.Status.Conditions[i].Message = "chaos e2e: the node stopped reporting"
				n.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		rec.Injected = time.Now()
		if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fail("mark NotReady: %v", err)
		}
		rec.Restarted = rec.Injected
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err == nil && nodeReady(n) {
				rec.Ready = time.Now()
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return rec
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readyz(ctx context.Context, base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.Scheme+"://"+u.Host+"/readyz", http.NoBody)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	return nil
}

func agentOn(ctx context.Context, node string) (*corev1.Pod, error) {
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=gpu-agent"})
	if err != nil {
		return nil, err
	}
	for i, p := range pods.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil && len(p.Status.ContainerStatuses) > 0 {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no gpu-agent pod on %s", node)
}

func (r *run) addStale(node string, p Period) {
	r.mu.Lock()
	r.stale[node] = append(r.stale[node], p)
	r.mu.Unlock()
}

func (r *run) setHubDown(down bool) {
	r.mu.Lock()
	r.hubDown = down
	r.mu.Unlock()
}

// checkForm is one GET /hub/spawn as formUser: the form must render, from gpu-profiles or from the static list.
func (r *run) checkForm(ctx context.Context) {
	r.mu.Lock()
	down := r.hubDown
	r.mu.Unlock()
	c := FormCheck{Time: time.Now()}
	if down {
		c.Skipped = "the Hub is down (its fault)"
	} else {
		c.OK, c.Fallback, c.Detail = r.form.spawnForm(ctx)
		r.mu.Lock()
		down = r.hubDown // it went down during the request
		r.mu.Unlock()
		if !c.OK && down {
			c.Skipped = "the Hub went down during the check"
		}
	}
	r.mu.Lock()
	r.forms = append(r.forms, c)
	r.mu.Unlock()
}

// browser is a logged-in user of the Hub's pages (cookies, xsrf), redirects not followed.
type browser struct {
	user   string
	client *http.Client
}

var (
	xsrfField    = regexp.MustCompile(`name="_xsrf" value="([^"]+)"`)
	profileInput = regexp.MustCompile(`name="profile"`)
)

func newBrowser(user string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{user: user, client: &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(ctx context.Context, method, path string, form url.Values) (int, string, error) {
	var body io.Reader = http.NoBody
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, st.HubURL()+path, body)
	if err != nil {
		return 0, "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	page, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(page), err
}

func (b *browser) login(ctx context.Context) error {
	_, page, err := b.do(ctx, http.MethodGet, "hub/login", nil)
	if err != nil {
		return err
	}
	m := xsrfField.FindStringSubmatch(page)
	if m == nil {
		return fmt.Errorf("login page without _xsrf")
	}
	code, _, err := b.do(ctx, http.MethodPost, "hub/login", url.Values{"username": {b.user}, "password": {password}, "_xsrf": {html.UnescapeString(m[1])}})
	if err != nil {
		return err
	}
	if code != http.StatusFound {
		return fmt.Errorf("login as %s: %d, want 302", b.user, code)
	}
	return nil
}

// spawnForm GETs the form (logging in first when the session is gone) and says whether it rendered and whether
// it is the static fallback (its slugs are values.yaml's, not gpu-profiles').
func (b *browser) spawnForm(ctx context.Context) (ok, fallback bool, detail string) {
	for attempt := range 2 {
		code, page, err := b.do(ctx, http.MethodGet, "hub/spawn", nil)
		if err != nil {
			return false, false, err.Error()
		}
		if code == http.StatusFound && attempt == 0 {
			if err := b.login(ctx); err != nil {
				return false, false, err.Error()
			}
			continue
		}
		if code != http.StatusOK || !profileInput.MatchString(page) {
			return false, false, fmt.Sprintf("GET /hub/spawn: %d, form with profiles: %v", code, profileInput.MatchString(page))
		}
		return true, !strings.Contains(page, "gpu-h100-80gb-hbm3"), ""
	}
	return false, false, "still redirected to the login after logging in"
}
