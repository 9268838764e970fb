//go:build e2e

package chaose2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/hubapi"
)

// leaseNames are the chart's Leases (release gpuhub, in the release namespace: the stack's), by service.
var leaseNames = map[string]string{
	gpuhubstack.ServiceName: "gpuhub-usage-ledger", gpuhubstack.QuotaServiceName: "gpuhub-quota",
	gpuhubstack.CullerServiceName: "gpuhub-culler", gpuhubstack.ProfilesServiceName: "gpuhub-profiles",
}

// activeService is the service whose Lease holder each active-replica fault kills.
var activeService = map[Fault]string{
	FaultUsageWriter: gpuhubstack.ServiceName, FaultQuotaDecider: gpuhubstack.QuotaServiceName,
	FaultCullerLeader: gpuhubstack.CullerServiceName, FaultProfilesLeader: gpuhubstack.ProfilesServiceName,
}

// seededService is the service each old service fault kills a seeded replica of.
var seededService = map[Fault]string{
	FaultUsageAPI: gpuhubstack.ServiceName, FaultQuota: gpuhubstack.QuotaServiceName,
	FaultCuller: gpuhubstack.CullerServiceName, FaultProfiles: gpuhubstack.ProfilesServiceName,
}

// replicaNames are the stack's process names of a service's replicas.
func replicaNames(service string) []string {
	n := len(replicaPorts[service])
	names := make([]string, n)
	for i := range n {
		names[i] = gpuhubstack.ReplicaName(service, i, n)
	}
	return names
}

// holder reads a service's Lease: the holder's identity while the Lease is held (renewed within its duration),
// "" when nobody holds it.
func holder(ctx context.Context, service string) (string, error) {
	l, err := kube.CoordinationV1().Leases(namespace).Get(ctx, leaseNames[service], metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	sp := l.Spec
	if sp.HolderIdentity == nil || *sp.HolderIdentity == "" || sp.RenewTime == nil || sp.LeaseDurationSeconds == nil {
		return "", nil
	}
	if time.Since(sp.RenewTime.Time) > time.Duration(*sp.LeaseDurationSeconds)*time.Second {
		return "", nil // expired: the holder is gone
	}
	return *sp.HolderIdentity, nil
}

// replicaOf maps a Lease identity to the replica (process name) that holds it: gpu-quota's names its advertise
// URL ("<host>@http://127.0.0.1:<port>"), the others end in the process id ("<host>_<pid>").
func replicaOf(service, identity string) (string, error) {
	names := replicaNames(service)
	if _, u, ok := strings.Cut(identity, "@"); ok {
		parsed, err := url.Parse(u)
		if err != nil {
			return "", fmt.Errorf("%s's Lease identity %q: %w", service, identity, err)
		}
		for i, p := range replicaPorts[service] {
			if strconv.Itoa(p) == parsed.Port() {
				return names[i], nil
			}
		}
		return "", fmt.Errorf("%s's Lease identity %q names no replica's port %v", service, identity, replicaPorts[service])
	}
	i := strings.LastIndex(identity, "_")
	pid, err := strconv.Atoi(identity[i+1:])
	if i < 0 || err != nil {
		return "", fmt.Errorf("%s's Lease identity %q ends in no process id", service, identity)
	}
	for _, name := range names {
		if p := st.Process(name); p != nil && p.Pid() == pid {
			return name, nil
		}
	}
	return "", fmt.Errorf("%s's Lease identity %q is no running replica's", service, identity)
}

// activeReplica is the replica that holds a service's Lease now, waiting up to wait for one (a Lease being taken
// over after an earlier fault, or at a cold start).
func activeReplica(ctx context.Context, service string, wait time.Duration) (name, identity string, err error) {
	deadline := time.Now().Add(wait)
	for {
		identity, err = holder(ctx, service)
		if err == nil && identity != "" {
			name, err = replicaOf(service, identity)
			if err == nil {
				return name, identity, nil
			}
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("nobody holds %s's Lease", service)
			}
			return "", "", err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// untilEveryLeaseHeld waits until a replica of each service that runs several holds its Lease. At a cold start
// gpu-quota's replicas have no copy of a decider's reservations and campaign only once nobody held the Lease for
// twice its duration (services/gpu-quota/README.md, "Replicas"): meanwhile nobody decides, and spawns get the
// policy's onUnavailable (closed here), which every replica's 503 carries.
func untilEveryLeaseHeld(ctx context.Context, t *testing.T) {
	start := time.Now()
	for service, ports := range replicaPorts {
		if len(ports) < 2 {
			continue
		}
		name, identity, err := activeReplica(ctx, service, 90*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", service, err)
		}
		t.Logf("chaos: %s holds %s's Lease (%s)", name, service, identity)
	}
	t.Logf("chaos: every Lease held %.1fs after the run began", time.Since(start).Seconds())
}

// killReplica sends SIGKILL to a replica's process group and waits for its end.
func killReplica(name string) error {
	p := st.Process(name)
	if p == nil {
		return fmt.Errorf("no component %s", name)
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	<-p.Done()
	return nil
}

// activeFault kills the service's Lease holder while a burst of spawns is under way (gpu-culler's as its pass
// starts), restarts it as its Deployment would, and is ready once another replica holds the Lease and the killed
// one is ready again. Then the spawn form must render with live data.
func (r *run) activeFault(ctx context.Context, p Planned, rec *Recovery) error {
	service := activeService[p.Fault]
	rec.By = "the other replica (Lease), then the harness restarts it as its Deployment would"
	if len(replicaPorts[service]) < 2 {
		return fmt.Errorf("%s runs one replica: no Lease holder to kill", service)
	}
	name, identity, err := activeReplica(ctx, service, 40*time.Second)
	if err != nil {
		return err
	}
	rec.Target = name + " (Lease holder " + identity + ")"
	if p.Fault == FaultCullerLeader {
		untilPass(ctx, replicaPorts[service][indexOf(replicaNames(service), name)])
	}
	r.pollDecisions(ctx) // what it decided so far is in its memory only
	var wg sync.WaitGroup
	wg.Go(func() { r.burst(ctx, p.Fault) })
	time.Sleep(150 * time.Millisecond) // the burst's spawns reach the Hub's hook: some are decided before the kill, some after
	rec.Injected = time.Now()
	if err := killReplica(name); err != nil {
		wg.Wait()
		return err
	}
	rec.Restarted = time.Now()
	restartErr := st.StartComponent(ctx, name)
	// Ready: another replica holds the Lease (a new identity: the restarted process is a new holder too).
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if id, err := holder(ctx, service); err == nil && id != "" && id != identity {
			if _, err := replicaOf(service, id); err == nil {
				rec.Ready = time.Now()
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	if restartErr != nil {
		rec.Ready = time.Time{}
		return fmt.Errorf("restart: %w", restartErr)
	}
	if rec.Ready.IsZero() {
		return fmt.Errorf("no other replica took %s's Lease within 60 s", service)
	}
	c := FormCheck{Time: time.Now()}
	c.OK, c.Fallback, c.Detail = r.form.spawnForm(ctx)
	r.mu.Lock()
	r.failoverForms = append(r.failoverForms, FailoverForm{Fault: p.Fault, Check: c})
	r.mu.Unlock()
	return nil
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return 0
}

// untilPass waits for gpu-culler's next pass on the replica at port: its last pass ended at the gauge's time and
// the next comes an `every` later. It gives up (returns at once) when the gauge cannot be read.
func untilPass(ctx context.Context, port int) {
	last, err := gauge(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), "gpuhub_culler_last_pass_timestamp_seconds")
	if err != nil || last == 0 {
		return
	}
	next := time.Unix(0, int64(last*1e9)).Add(cullerEvery)
	for next.Before(time.Now()) {
		next = next.Add(cullerEvery)
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(next.Add(20 * time.Millisecond))):
	}
}

// gauge reads one unlabelled sample from a Prometheus text page.
func gauge(ctx context.Context, metricsURL, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, http.NoBody)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", metricsURL, name)
}

// burstSlug and burstServers make a burst: a user of no group (the default limits: one GPU server) starts three
// named servers with a MIG 1g.5gb slice (eight on the cluster: the kind most often free) at once, of which
// exactly one may be admitted.
const burstSlug = "mig-a100-sxm4-40gb-1g-5gb"

// burstHold is how long a burst's admitted server runs before the burst stops it: the ledger invariant's 1 %
// holds for lives of a minute (the start is known to the second, the end to an informer's delivery); a server of
// two seconds would be judged on its first and last ticks alone.
const burstHold = 60 * time.Second

var burstServers = []string{"b1", "b2", "b3"}

// burstLimit is the default limits' maxServers (quotaPolicy), which the burst's spawns share.
const burstLimit = 1

// answerWithin is how soon every spawn must be answered.
const answerWithin = 5 * time.Second

// burst starts burstServers at once for the next burst user, records each spawn's answer (the pod created, or
// a refusal with its message) and stops what started burstHold later (the wind-down stops it if the run ends
// first).
func (r *run) burst(ctx context.Context, fault Fault) {
	r.mu.Lock()
	if len(r.bursts) >= len(r.burstUsers) {
		r.mu.Unlock()
		r.t.Errorf("chaos: a burst during %q, but only %d burst users were made", fault, len(r.burstUsers))
		return
	}
	user := r.burstUsers[len(r.bursts)]
	b := &Burst{Fault: fault, User: user, Limit: burstLimit}
	r.bursts = append(r.bursts, b)
	r.mu.Unlock()
	spawns := make([]BurstSpawn, len(burstServers))
	var wg sync.WaitGroup
	for i, server := range burstServers {
		wg.Go(func() { spawns[i] = r.burstSpawn(ctx, user, server) })
	}
	wg.Wait()
	r.mu.Lock()
	b.Spawns = spawns
	r.mu.Unlock()
	admitted := 0
	for _, s := range spawns {
		if s.Admitted {
			admitted++
		}
	}
	r.t.Logf("chaos: %s's burst (%s): %d of %d admitted", user, cmpOr(string(fault), "before the faults"), admitted, len(spawns))
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(burstHold):
		}
		for _, server := range burstServers {
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_, _ = hubAdmin.StopServer(cctx, user, server, false)
			cancel()
		}
	}()
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// burstSpawn asks the Hub to start one server and waits up to 10 s for its answer: its pod (admitted: the hook
// that asks gpu-quota let it through) or a failed progress event with the refusal's message.
func (r *run) burstSpawn(ctx context.Context, user, server string) BurstSpawn {
	s := BurstSpawn{Server: server, Asked: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := hubAdmin.StartServer(cctx, user, server, map[string]any{"profile": burstSlug}); err != nil {
		var he *hubapi.APIError
		if errors.As(err, &he) && he.StatusCode < 500 {
			s.Answered, s.Message = time.Now(), he.Message
			return s
		}
		s.UnansweredDetail = err.Error()
		return s
	}
	failed := make(chan progressEvent, 1)
	go func() {
		if ev, err := r.spawnOutcome(cctx, user, server); err == nil && ev.Failed {
			failed <- ev
		}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ev := <-failed:
			s.Answered, s.Message = time.Now(), ev.Message
			return s
		case <-tick.C:
			r.mu.Lock()
			p := r.livePodLocked(Key(user, server))
			r.mu.Unlock()
			if p != nil {
				s.Answered, s.Admitted = p.Seen, true
				return s
			}
		case <-cctx.Done():
			s.UnansweredDetail = "no pod and no failed progress event within 10 s"
			return s
		}
	}
}
