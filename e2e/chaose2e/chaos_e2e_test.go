//go:build e2e

package chaose2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/e2e/emulator"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/hubapi"
)

// The bounded form (make test): one run with a fixed seed and every fault kind once (9 faults at least 20 s apart,
// the first after 15 s and the last 20 s before the end, fit 195 s). make chaos sets a longer run.
const (
	defaultSeed     = 20261123
	defaultDuration = 200 * time.Second
	defaultFaults   = 9
	readyLimit      = 30 * time.Second
	ledgerTolerance = 0.01
	usageTick       = time.Second // the usage API's --interval as gpuhubstack runs it
)

// formUser only looks at the spawn form: a login the local cluster allows (any name), never spawning, so that
// GET /hub/spawn always renders the form rather than redirecting to a running server.
const formUser = "dana"

var workloadUsers = []string{"alice", "bob", "carol", "admin"}

// idleUser's one server is started first and never touched again: the culler must stop it (idle for idlePeriod,
// then warned for the policy's warn), which the culler invariant requires. A user of no group (the default limits),
// made by logging in.
const idleUser = "erin"

// guaranteed is what the openers make happen whatever the faults: idleUser's stop, its admitted start, and its
// refused second server (the default limits allow one).
var guaranteed = Guaranteed{CullerStops: 1, Admits: 1, Refusals: 1}

// ledgerUsers are the users whose GPU-hours the ledger invariant compares.
var ledgerUsers = append(slices.Clone(workloadUsers), idleUser)

// choice is a spawn-form slug of gpu-profiles (services/gpu-profiles/README.md, "Slugs") and how often the
// workload asks for it.
type choice struct {
	slug   string
	weight int
}

var choices = []choice{
	{"cpu", 1}, {"gpu-h100-80gb-hbm3", 2}, {"gpu-h100-80gb-hbm3-x2", 1},
	{"mig-a100-sxm4-40gb-3g-20gb", 2}, {"mig-a100-sxm4-40gb-1g-5gb", 2}, {"shared-t4", 2},
}

func envInt(t *testing.T, name string, def int64) int64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

// TestChaos runs the seeded workload for the run's duration while the plan's faults are injected one after the
// other, then stops every server and checks the invariants (README: "Chaos suite").
func TestChaos(t *testing.T) {
	seed := uint64(envInt(t, "GPUHUB_CHAOS_SEED", defaultSeed))
	duration := time.Duration(envInt(t, "GPUHUB_CHAOS_SECONDS", int64(defaultDuration/time.Second))) * time.Second
	nFaults := int(envInt(t, "GPUHUB_CHAOS_FAULTS", defaultFaults))
	// The bounded run (9 faults) kills each service's active replica; a longer one every kind, seeded replicas too.
	kinds := AllFaults
	if nFaults <= len(BoundedFaults) {
		kinds = BoundedFaults
	}
	if postgresRestart == "" {
		// SQLite: one usage API (one writer on one file), no PostgreSQL to restart.
		kinds = slices.DeleteFunc(slices.Clone(kinds), func(k Fault) bool { return k == FaultPostgres || k == FaultUsageWriter })
	}
	plan, err := Plan(seed, duration, nFaults, kinds)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: seed %d (replay: GPUHUB_CHAOS_SEED=%d GPUHUB_CHAOS_SECONDS=%d GPUHUB_CHAOS_FAULTS=%d), %s of workload, faults:\n",
		seed, seed, int(duration.Seconds()), nFaults, duration)
	for _, p := range plan {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	t.Log(b.String())

	ctx, cancel := context.WithTimeout(context.Background(), duration+6*time.Minute)
	defer cancel()
	untilEveryLeaseHeld(ctx, t)
	bursts := 1 // before the faults
	for _, p := range plan {
		if slices.Contains(ActiveReplicaFaults, p.Fault) {
			bursts++
		}
	}
	r := newRun(ctx, t, seed, bursts)
	defer r.stopBusy()

	wctx, wcancel := context.WithTimeout(ctx, duration)
	defer wcancel()
	var wg sync.WaitGroup
	wg.Go(func() { r.workload(wctx) })
	wg.Go(func() { r.every(wctx, 3*time.Second, r.pollDecisions) })
	wg.Go(func() { r.every(wctx, 8*time.Second, r.checkForm) })
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		r.inject(ctx, plan)
	}()
	<-wctx.Done()
	<-faultsDone // a fault in progress finishes its recovery
	wg.Wait()
	r.checkForm(ctx)

	t.Log("chaos: workload over; stopping every server")
	r.windDown(ctx)
	r.pollDecisions(ctx)
	ledger := r.ledger(ctx)

	rows := r.invariants(ledger)
	var table strings.Builder
	WriteTable(&table, rows)
	t.Logf("chaos: invariants (seed %d):\n%s", seed, table.String())
	fmt.Fprintf(os.Stderr, "chaos: invariants (seed %d):\n%s", seed, table.String())
	for _, row := range rows {
		if !row.OK {
			t.Errorf("invariant %q failed: %s", row.Invariant, strings.Join(row.Problems, "; "))
		}
	}
	t.Log(r.summary())
	if t.Failed() {
		t.Log(r.podLog())
	}
}

// podLog lists the record of pods, for a failed run.
func (r *run) podLog() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString("chaos: pods (user/server kind share node: created started deleting gone):\n")
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format("15:04:05.000")
	}
	for _, p := range r.pods {
		fmt.Fprintf(&b, "  %s %s %.4f %s: %s %s %s %s busy %v\n", Key(p.User, p.Server), p.Kind, p.Share, p.Node,
			ts(p.Created), ts(p.Started), ts(p.Deleting), ts(p.Gone), r.busy[p.UID])
	}
	return b.String()
}

// run is one chaos run's state: the record of pods, busy cells, stops, decisions, faults and form checks.
type run struct {
	t       *testing.T
	rng     *rand.Rand
	client  *http.Client
	tokens  map[string]string // users' Hub tokens (the usage API's me)
	mu      sync.Mutex
	pods    map[string]*Pod           // by UID
	busy    map[string][]Period       // by pod UID
	cells   map[string]*exec.Cmd      // running busy cells by pod UID
	quotaD  map[string]decisionRecord // by ID
	cullerD map[string]decisionRecord // by ID
	recs    []Recovery                // faults, in order
	stale   map[string][]Period       // by node ("" for every node: the usage API down)
	forms   []FormCheck               // spawn form checks
	spawns  map[string]int            // workload spawn outcomes by kind of answer
	pending map[string]time.Time      // spawns asked for and not yet seen as a pod, by Key
	hubDown bool                      // while the Hub fault runs (form checks are skipped)
	counts  map[string]int            // workload actions
	refused int                       // the openers' spawns over a limit seen refused (their progress failed)
	deleted map[string]bool           // pod UIDs seen deleted
	form    *browser
	// burstUsers make one burst each (a fresh user: no server yet); bursts are the bursts made so far;
	// failoverForms the form checks after each active replica's kill.
	burstUsers    []string
	bursts        []*Burst
	failoverForms []FailoverForm
	ledgerUsers   []string
}

type decisionRecord struct {
	ID      string             `json:"id"`
	Time    time.Time          `json:"time"`
	Service string             `json:"service"`
	User    string             `json:"user"`
	Server  string             `json:"server"`
	Action  string             `json:"action"`
	Reason  string             `json:"reason"`
	Numbers map[string]float64 `json:"numbers"`
}

func newRun(ctx context.Context, t *testing.T, seed uint64, bursts int) *run {
	r := &run{
		t: t, rng: rand.New(rand.NewPCG(seed, seed+1)), client: &http.Client{Timeout: 10 * time.Second},
		tokens: map[string]string{}, pods: map[string]*Pod{}, busy: map[string][]Period{}, cells: map[string]*exec.Cmd{},
		quotaD: map[string]decisionRecord{}, cullerD: map[string]decisionRecord{}, stale: map[string][]Period{},
		spawns: map[string]int{}, pending: map[string]time.Time{}, counts: map[string]int{}, deleted: map[string]bool{},
		form: newBrowser(formUser), ledgerUsers: slices.Clone(ledgerUsers),
	}
	if err := newBrowser(idleUser).login(ctx); err != nil {
		t.Fatalf("log in as %s (creates the user): %v", idleUser, err)
	}
	for i := range bursts {
		u := fmt.Sprintf("burst%d", i+1)
		if err := newBrowser(u).login(ctx); err != nil {
			t.Fatalf("log in as %s (creates the user): %v", u, err)
		}
		r.burstUsers = append(r.burstUsers, u)
		r.ledgerUsers = append(r.ledgerUsers, u)
	}
	for _, u := range r.ledgerUsers {
		tok, err := hubAdmin.CreateToken(ctx, u, hubapi.TokenRequest{Note: "chaos e2e", ExpiresIn: 3600})
		if err != nil {
			t.Fatalf("token for %s: %v", u, err)
		}
		r.tokens[u] = tok.Token
	}
	r.watchPods(ctx)
	return r
}

// watchPods records every single-user pod's life from the API server (an informer: it lists again after an API
// server outage).
func (r *run) watchPods(ctx context.Context) {
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "component=singleuser-server" }))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj, false) },
		UpdateFunc: func(_, obj any) { r.observe(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			r.observe(obj, true)
		},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		r.t.Fatal("pod informer did not sync")
	}
}

// holding is what a single-user pod's GPU request holds on the local cluster's topology (e2e/topology.yaml).
func holding(p *corev1.Pod) (kind string, share float64) {
	for _, c := range p.Spec.Containers {
		for res, q := range c.Resources.Limits {
			n := float64(q.Value())
			switch res {
			case "nvidia.com/gpu":
				return "gpu", n
			case "nvidia.com/mig-3g.20gb":
				return "mig", n * 3 / 7
			case "nvidia.com/mig-1g.5gb":
				return "mig", n / 7
			case "nvidia.com/gpu.shared":
				return "shared", n / 4
			}
		}
	}
	return "cpu", 0
}

func (r *run) observe(obj any, gone bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.pods[string(p.UID)]
	if rec == nil {
		kind, share := holding(p)
		rec = &Pod{UID: string(p.UID), User: p.Annotations["hub.jupyter.org/username"], Server: p.Annotations["hub.jupyter.org/servername"],
			Kind: kind, Share: share, Created: p.CreationTimestamp.Time, Profile: p.Labels["gpuhub.io/profile"], Seen: now}
		r.pods[rec.UID] = rec
		delete(r.pending, Key(rec.User, rec.Server))
	}
	rec.Node = p.Spec.NodeName
	for _, cs := range p.Status.ContainerStatuses {
		for _, s := range []*metav1.Time{startedOf(cs.State), startedOf(cs.LastTerminationState)} {
			if s != nil && (rec.Started.IsZero() || s.Time.Before(rec.Started)) {
				rec.Started = s.Time
			}
		}
	}
	if p.DeletionTimestamp != nil && rec.Deleting.IsZero() {
		rec.Deleting = p.DeletionTimestamp.Time
	}
	if gone && rec.Gone.IsZero() {
		rec.Gone = now
	}
	if p.DeletionTimestamp != nil || gone || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		r.endBusyLocked(rec.UID, now)
	}
}

func startedOf(s corev1.ContainerState) *metav1.Time {
	switch {
	case s.Running != nil:
		return &s.Running.StartedAt
	case s.Terminated != nil:
		return &s.Terminated.StartedAt
	}
	return nil
}

// livePod is the server's pod that is running and not being deleted.
func (r *run) livePodLocked(key string) *Pod {
	for _, p := range r.pods {
		if Key(p.User, p.Server) == key && p.Deleting.IsZero() && p.Gone.IsZero() {
			return p
		}
	}
	return nil
}

// podAt is the server's pod that lived at t (for a stop: the one it stopped). A pod gone up to one culler pass
// before t counts too: a stop decided on the last sample can find the server already stopped by the workload.
func (r *run) podAt(key string, t time.Time) (Pod, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *Pod
	for _, p := range r.pods {
		if Key(p.User, p.Server) != key || p.Created.After(t) {
			continue
		}
		if end := p.Gone; end.IsZero() || !end.Before(t.Add(-cullerEvery)) {
			if best == nil || p.Created.After(best.Created) {
				best = p
			}
		}
	}
	if best == nil {
		return Pod{}, false
	}
	return *best, true
}

// workload is the seeded script: the openers (before the first fault, 15 s in), then every few seconds one user
// starts, stops, or makes a server busy or idle.
func (r *run) workload(ctx context.Context) {
	r.openers(ctx)
	for ctx.Err() == nil {
		r.mu.Lock()
		wait := time.Duration(2000+r.rng.IntN(3000)) * time.Millisecond
		user := workloadUsers[r.rng.IntN(len(workloadUsers))]
		server := []string{"", "s2"}[r.rng.IntN(2)]
		roll := r.rng.Float64()
		slug := pick(r.rng)
		key := Key(user, server)
		live := r.livePodLocked(key)
		since, pending := r.pending[key]
		if pending && time.Since(since) > 90*time.Second {
			delete(r.pending, key) // the spawn failed later (a refusal in the progress stream, a timeout)
			pending = false
		}
		r.mu.Unlock()
		switch {
		case live == nil && !pending && roll < 0.7:
			r.start(ctx, user, server, slug)
		case live != nil && roll < 0.25:
			r.stop(ctx, user, server)
		case live != nil && roll < 0.75 && live.Share > 0 && !live.Started.IsZero():
			r.toggleBusy(*live)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// openers make the events the invariants require at least once (guaranteed), before the first fault: idleUser's
// server, admitted and left idle for the culler to stop, then a second server of idleUser's, which gpu-quota
// refuses (maxServers 1) once the first one's pod exists.
func (r *run) openers(ctx context.Context) {
	const slug = "mig-a100-sxm4-40gb-1g-5gb"
	r.start(ctx, idleUser, "", slug)
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		r.mu.Lock()
		live := r.livePodLocked(Key(idleUser, ""))
		r.mu.Unlock()
		if live != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.start(ctx, idleUser, "s2", slug)
	ev, err := r.spawnOutcome(ctx, idleUser, "s2")
	switch {
	case err != nil:
		r.t.Errorf("chaos: %s/s2's start (over maxServers 1): %v", idleUser, err)
	case ev.Failed:
		r.t.Logf("chaos: %s/s2 refused as it must be: %s", idleUser, ev.Message)
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
	default:
		r.t.Errorf("chaos: %s/s2 started although %s's limits allow one server: %+v", idleUser, idleUser, ev)
	}
	r.burst(ctx, "") // with every replica up: exactly burstLimit admitted
}

// progressEvent is one event of a server's progress stream (/hub/api/users/{user}/servers/{name}/progress).
type progressEvent struct {
	Progress int    `json:"progress"`
	Failed   bool   `json:"failed"`
	Ready    bool   `json:"ready"`
	Message  string `json:"message"`
}

// spawnOutcome follows a server's progress stream to its failed or ready event (at most 30 s).
func (r *run) spawnOutcome(ctx context.Context, user, server string) (progressEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	u := st.Hub.APIURL() + "/users/" + url.PathEscape(user) + "/servers/" + url.PathEscape(server) + "/progress"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return progressEvent{}, err
	}
	req.Header.Set("Authorization", "token "+st.Hub.AdminToken())
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return progressEvent{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return progressEvent{}, fmt.Errorf("progress: %s %s", resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev progressEvent
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &ev); err != nil {
			return progressEvent{}, fmt.Errorf("progress event %q: %w", data, err)
		}
		if ev.Failed || ev.Ready {
			return ev, nil
		}
	}
	if err := sc.Err(); err != nil {
		return progressEvent{}, fmt.Errorf("progress stream: %w", err)
	}
	return progressEvent{}, errors.New("progress stream ended without a failed or ready event")
}

func pick(rng *rand.Rand) string {
	total := 0
	for _, c := range choices {
		total += c.weight
	}
	n := rng.IntN(total)
	for _, c := range choices {
		if n < c.weight {
			return c.slug
		}
		n -= c.weight
	}
	return choices[0].slug
}

func (r *run) count(what string) {
	r.mu.Lock()
	r.counts[what]++
	r.mu.Unlock()
}

func (r *run) start(ctx context.Context, user, server, slug string) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err := hubAdmin.StartServer(cctx, user, server, map[string]any{"profile": slug})
	var he *hubapi.APIError
	switch {
	case err == nil:
		r.count("start asked")
		r.mu.Lock()
		r.pending[Key(user, server)] = time.Now()
		r.mu.Unlock()
	case errors.As(err, &he) && he.StatusCode == http.StatusForbidden:
		r.count("start refused (403)")
	case errors.As(err, &he):
		r.count(fmt.Sprintf("start failed (%d)", he.StatusCode))
	default:
		r.count("start failed (no answer)")
	}
}

func (r *run) stop(ctx context.Context, user, server string) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := hubAdmin.StopServer(cctx, user, server, false); err != nil {
		r.count("stop failed")
		return
	}
	r.count("stop")
}

// toggleBusy starts or ends a busy cell on the pod: a process with the pod's identity (as its kernel would carry
// it) that keeps the simulated GPU busy six tenths of the time. At most two run at once: the machine is shared.
func (r *run) toggleBusy(p Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, on := r.cells[p.UID]; on {
		r.endBusyLocked(p.UID, time.Now())
		r.counts["busy off"]++
		return
	}
	if len(r.cells) >= 2 {
		return
	}
	cmd := exec.Command("python3", "-c", //nolint:noctx // its lifetime is the pod's (endBusyLocked), not a request's
		"import time\nwhile True:\n    t = time.time()\n    while time.time() - t < 0.6: pass\n    time.sleep(0.4)\n")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", emulator.EnvNode + "=" + p.Node, emulator.EnvPodUID + "=" + p.UID,
		emulator.EnvPodNamespace + "=" + namespace, emulator.EnvPodName + "=chaos"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.t.Errorf("busy cell: %v", err)
		return
	}
	r.cells[p.UID] = cmd
	r.busy[p.UID] = append(r.busy[p.UID], Period{From: time.Now()})
	r.counts["busy on"]++
}

func (r *run) endBusyLocked(uid string, at time.Time) {
	cmd, on := r.cells[uid]
	if !on {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	delete(r.cells, uid)
	if ps := r.busy[uid]; len(ps) > 0 && ps[len(ps)-1].To.IsZero() {
		ps[len(ps)-1].To = at
	}
}

func (r *run) stopBusy() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid := range r.cells {
		r.endBusyLocked(uid, time.Now())
	}
}

func (r *run) every(ctx context.Context, d time.Duration, f func(context.Context)) {
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// pollDecisions keeps every decision of gpu-quota and gpu-culler: they keep them in memory, so a kill loses what
// was not read before it.
func (r *run) pollDecisions(ctx context.Context) {
	type source struct {
		url  string
		into map[string]decisionRecord
	}
	// gpu-quota's standbys relay to its decider; each gpu-culler replica answers with its own decisions only.
	sources := []source{{quotaURL, r.quotaD}}
	for _, port := range replicaPorts[gpuhubstack.CullerServiceName] {
		sources = append(sources, source{gpuhubstack.Culler{Port: port}.URL(), r.cullerD})
	}
	for _, src := range sources {
		var body struct {
			Decisions []decisionRecord `json:"decisions"`
		}
		if err := r.getJSON(ctx, src.url+"api/v1/decisions?limit=10000", st.Hub.AdminToken(), &body); err != nil {
			continue // down: the next poll after its restart reads what it decided since
		}
		r.mu.Lock()
		for _, d := range body.Decisions {
			src.into[d.ID+"@"+d.Time.String()] = d
		}
		r.mu.Unlock()
	}
}

func (r *run) getJSON(ctx context.Context, url, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// windDown stops every server and waits until no single-user pod is left, so the ledger can be compared with
// finished lives.
func (r *run) windDown(ctx context.Context) {
	r.stopBusy()
	deadline := time.Now().Add(3 * time.Minute)
	orphansAfter := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		users, err := hubAdmin.ListUsers(ctx, hubapi.ListUsersOptions{})
		if err == nil {
			for _, u := range users {
				for name, s := range u.Servers {
					if s.Ready || s.Pending != "" {
						cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
						_, _ = hubAdmin.StopServer(cctx, u.Name, name, false)
						cancel()
					}
				}
			}
		}
		pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "component=singleuser-server"})
		if err == nil && len(pods.Items) == 0 {
			r.mu.Lock()
			n := 0
			for _, p := range r.pods {
				if p.Gone.IsZero() {
					n++
				}
			}
			r.mu.Unlock()
			if n == 0 {
				return
			}
		}
		if err == nil && time.Now().After(orphansAfter) {
			// A pod the Hub no longer knows (its spawn was cut by the Hub's kill): an admin deletes it.
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil {
					r.t.Logf("chaos: pod %s of %s is still there a minute after its server was stopped: deleting it", p.Name, Key(p.Annotations["hub.jupyter.org/username"], p.Annotations["hub.jupyter.org/servername"]))
					r.count("orphan pods deleted")
					_ = kube.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
				}
			}
		}
		time.Sleep(2 * time.Second)
	}
	r.t.Errorf("single-user pods still there 3 minutes after the workload stopped them")
}

// ledger reads each user's allocated GPU-seconds (7-day window: no midnight reset) from the usage API, after the
// ticks that follow the last pod's end.
func (r *run) ledger(ctx context.Context) map[string]float64 {
	time.Sleep(3 * time.Second)
	out := map[string]float64{}
	for _, u := range r.ledgerUsers {
		var me struct {
			GPUHours map[string]*struct {
				Allocated float64 `json:"allocated"`
			} `json:"gpuHours"`
			GPUHoursStatus string `json:"gpuHoursStatus"`
		}
		var err error
		for range 30 {
			if err = r.getJSON(ctx, usageURL+"api/v1/me?history=false", r.tokens[u], &me); err == nil && me.GPUHours["7d"] != nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil || me.GPUHours["7d"] == nil {
			r.t.Errorf("%s's GPU-hours from the usage API: %v (status %q)", u, err, me.GPUHoursStatus)
			continue
		}
		out[u] = 3600 * me.GPUHours["7d"].Allocated
	}
	return out
}

// invariants computes the table's rows from the record.
func (r *run) invariants(ledger map[string]float64) []Row {
	r.mu.Lock()
	pods := make([]Pod, 0, len(r.pods))
	for _, p := range r.pods {
		pods = append(pods, *p)
	}
	var usageDown, apiDown []Period
	for _, rec := range r.recs {
		switch {
		case rec.Injected.IsZero():
		case rec.Fault == FaultUsageAPI && len(replicaPorts[gpuhubstack.ServiceName]) == 1:
			// The only usage API down: its documented restart bound. With replicas another one answers and the
			// next writer charges from the last checkpoint: nothing is lost.
			usageDown = append(usageDown, Period{From: rec.Injected, To: rec.Ready})
		case rec.Fault == FaultAPIServer:
			apiDown = append(apiDown, Period{From: rec.Injected, To: rec.Ready})
		}
	}
	var cullerStops []Stop
	for _, d := range r.cullerD {
		if d.Action == "stop" {
			cullerStops = append(cullerStops, Stop{Time: d.Time, Service: "gpu-culler", User: d.User, Server: d.Server, Reason: d.Reason, Numbers: d.Numbers})
		}
	}
	var admits []Admission
	refusals := r.refused
	for _, d := range r.quotaD {
		switch d.Action {
		case "admit":
			admits = append(admits, Admission{Time: d.Time, User: d.User, Numbers: d.Numbers, ServerName: d.Server})
		case "deny":
			refusals++
		}
	}
	busy := map[string][]Period{}
	for k, v := range r.busy {
		busy[k] = append([]Period(nil), v...)
	}
	stale := map[string][]Period{}
	for k, v := range r.stale {
		stale[k] = append([]Period(nil), v...)
	}
	recs := append([]Recovery(nil), r.recs...)
	forms := append([]FormCheck(nil), r.forms...)
	var bursts []Burst
	for _, b := range r.bursts {
		bursts = append(bursts, *b)
	}
	failoverForms := append([]FailoverForm(nil), r.failoverForms...)
	failovers := 0
	for _, rec := range r.recs {
		if slices.Contains(ActiveReplicaFaults, rec.Fault) && rec.Err == "" && !rec.Injected.IsZero() {
			failovers++
		}
	}
	r.mu.Unlock()
	staleOf := func(node string) []Period { return append(append([]Period(nil), stale[node]...), stale[""]...) }
	return []Row{
		LedgerRow(pods, ledger, usageDown, apiDown, usageTick, ledgerTolerance),
		CullerRow(cullerStops, r.podAt, busy, staleOf, idlePeriod, busyLag, cullerStaleAfter, guaranteed.CullerStops),
		StoppedOnceRow(cullerStops, r.podAt, guaranteed.CullerStops),
		AdmissionRow(pods, policyLimits, admits, refusals, guaranteed),
		BurstRow(bursts, 1),
		AnswerRow(bursts, answerWithin),
		RecoveryRow(recs, readyLimit),
		FormRow(forms),
		LiveFormRow(failoverForms, failovers),
	}
}

func (r *run) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	actions := map[string]int{}
	for k, v := range r.counts {
		actions[k] = v
	}
	byAction := map[string]int{}
	for _, d := range r.quotaD {
		byAction["gpu-quota "+d.Action+"/"+d.Reason]++
	}
	for _, d := range r.cullerD {
		byAction["gpu-culler "+d.Action+"/"+d.Reason]++
	}
	gpuPods := 0
	for _, p := range r.pods {
		if p.Share > 0 {
			gpuPods++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: %d pods (%d with GPUs); workload actions %v; decisions %v; faults:\n", len(r.pods), gpuPods, actions, byAction)
	for _, rec := range r.recs {
		switch {
		case rec.NotApplicable != "":
			fmt.Fprintf(&b, "  %s: %s\n", rec.Fault, rec.NotApplicable)
		default:
			fmt.Fprintf(&b, "  %s on %s at %s: restarted by %s after %.1fs, ready %.1fs later %s\n", rec.Fault, rec.Target,
				rec.Injected.Format("15:04:05"), rec.By, rec.Restarted.Sub(rec.Injected).Seconds(), rec.Ready.Sub(rec.Restarted).Seconds(), rec.Err)
		}
	}
	return b.String()
}
