package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/api"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/logging"
)

// oneDecider runs a replica on the shared fake API server kc, with the Lease and its advertise URL.
func oneDecider(kc *fake.Clientset, name string) func(*Options) {
	return func(o *Options) {
		o.Kube = kc
		o.Identity, o.AdvertiseURL = name, "http://"+o.Listener.Addr().String()
		o.LeaseDuration, o.RenewDeadline, o.LeaseRetryPeriod = 2*time.Second, 1500*time.Millisecond, 50*time.Millisecond
		o.WhileLeader = func(ctx context.Context, _ Leading) { <-ctx.Done() }
	}
}

func (r *running) deciding(t *testing.T) bool {
	t.Helper()
	return counterOrGauge(t, r, "gpuhub_quota_deciding", "") == 1
}

// counterOrGauge sums name's series in r's registry whose labels include value ("": all).
func counterOrGauge(t *testing.T, r *running, name, value string) float64 {
	t.Helper()
	return metricSum(t, r.registry, name, value)
}

// metricSum sums the counters and gauges called name in reg whose labels include value ("": every series).
func metricSum(t *testing.T, reg prometheus.Gatherer, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := value == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// twoReplicas starts two replicas on one fake API server (with opts) and returns the deciding one first.
func twoReplicas(t *testing.T, opts ...func(*Options)) (decider, standby *running) {
	t.Helper()
	kc := fake.NewClientset(objects()...)
	a := start(t, append([]func(*Options){oneDecider(kc, "gpu-quota-0")}, opts...)...)
	b := start(t, append([]func(*Options){oneDecider(kc, "gpu-quota-1")}, opts...)...)
	eventually(t, "one replica decides", func() bool { return a.deciding(t) != b.deciding(t) })
	decider, standby = a, b
	if b.deciding(t) {
		decider, standby = b, a
	}
	// Until then the standby would not take over at once (the campaign gate).
	eventually(t, "the standby is in sync", func() bool { return counterOrGauge(t, standby, "gpuhub_quota_replica_in_sync", "") == 1 })
	return decider, standby
}

// TestTwoReplicasConcurrentAdmitsOverHTTP: 1,000 admissions at once, alternating between two replicas, against a
// limit of 7 servers admit exactly 7: the standby relays its half to the decider, which decides all of them.
func TestTwoReplicasConcurrentAdmitsOverHTTP(t *testing.T) {
	decider, standby := twoReplicas(t)
	raceSevenOf1000(t, decider, standby)
	if n := counterOrGauge(t, standby, "gpuhub_quota_forwarded_total", "ok"); n != 500 {
		t.Errorf("the standby relayed %v, want 500", n)
	}
	if n := counterOrGauge(t, standby, "gpuhub_quota_decisions_total", ""); n != 0 {
		t.Errorf("the standby decided %v, want 0", n)
	}
}

// TestStandbyRelaysEveryEndpoint: the decision log and a user's quota read through the standby are the decider's;
// the answer's status is passed on as it is.
func TestStandbyRelaysEveryEndpoint(t *testing.T) {
	decider, standby := twoReplicas(t)
	code, res := standby.admit(t, http.DefaultClient, `{"user":"bob","resources":{"nvidia.com/mig-1g.5gb":1},
		"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-A100-SXM4-40GB","nvidia.com/mig.strategy":"mixed"}}`)
	if code != 200 || !res.Allow || res.Reservation == "" {
		t.Fatalf("through the standby: %d %+v", code, res)
	}
	get := func(r *running, path, token string) (int, string) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, r.url+prefix+path, nil)
		req.Header.Set("Authorization", "token "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"api/v1/decisions", "api/v1/users/bob/quota"} {
		dc, db := get(decider, path, "alice-token")
		sc, sb := get(standby, path, "alice-token")
		if dc != 200 || sc != dc || sb != db {
			t.Errorf("%s: the decider answers %d %s\nthe standby %d %s", path, dc, db, sc, sb)
		}
		if path == "api/v1/decisions" && !strings.Contains(db, res.DecisionID) {
			t.Errorf("the decision %s is not in the decider's log: %s", res.DecisionID, db)
		}
	}
	if code, _ := get(standby, "api/v1/decisions", "bob-token"); code != http.StatusForbidden {
		t.Errorf("bob's read of the decisions through the standby: %d, want the decider's 403", code)
	}
}

// TestForwardNoSecondHop: a relayed request that reaches a replica that does not decide is answered 503 "not
// the leader" at once, not relayed again.
func TestForwardNoSecondHop(t *testing.T) {
	_, standby := twoReplicas(t)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, standby.url+prefix+"api/v1/admit",
		strings.NewReader(`{"user":"bob","resources":{}}`))
	req.Header.Set("Authorization", "token quota-token")
	req.Header.Set(ForwardedHeader, "gpu-quota-9@http://127.0.0.1:1")
	begin := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(api.NotLeaderHeader) == "" {
		t.Errorf("%d %v, want 503 with %s", resp.StatusCode, resp.Header, api.NotLeaderHeader)
	}
	if d := time.Since(begin); d > time.Second {
		t.Errorf("answered after %v: parked or relayed", d)
	}
	if n := counterOrGauge(t, standby, "gpuhub_quota_forwarded_total", ""); n != 0 {
		t.Errorf("relayed %v", n)
	}
}

// TestParkedThenUnavailable: while the Lease's holder cannot be reached, a request waits the park time (1.5 s)
// for a decider, then gets 503 with Retry-After and the policy's onUnavailable, which the glue applies (also a
// glue that has not heard the mode from a decision: a Hub restarted during the handover).
func TestParkedThenUnavailable(t *testing.T) {
	holder, secs, now := "gpu-quota-gone@http://127.0.0.1:1", int32(3600), metav1.NewMicroTime(time.Now())
	kc := fake.NewClientset(append(objects(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: "gpu-quota"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}})...)
	closed := func(o *Options) {
		if err := replaceFile(o.PolicyPath, []byte(goodPolicy+"onUnavailable: closed\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := start(t, oneDecider(kc, "gpu-quota-0"), closed)
	eventually(t, "the holder is observed", func() bool { return strings.Contains(r.logs.String(), "another replica leads") })
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, r.url+prefix+"api/v1/admit",
		strings.NewReader(`{"user":"bob","resources":{}}`))
	req.Header.Set("Authorization", "token quota-token")
	begin := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body contract.Unavailable
	err = json.NewDecoder(resp.Body).Decode(&body)
	_ = resp.Body.Close()
	d := time.Since(begin)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || resp.Header.Get(api.NotLeaderHeader) != "" {
		t.Errorf("%d %v, want 503 with Retry-After 1", resp.StatusCode, resp.Header)
	}
	if err != nil || body.OnUnavailable != "closed" || !strings.Contains(body.Message, "no gpu-quota replica decides") {
		t.Errorf("body %+v (%v), want the handover's message and the policy's onUnavailable closed", body, err)
	}
	if d < 1400*time.Millisecond || d > 5*time.Second {
		t.Errorf("answered after %v, want after the park time of 1.5 s", d)
	}
	if n := counterOrGauge(t, r, "gpuhub_quota_forwarded_total", "unavailable"); n != 1 {
		t.Errorf("forwarded_total{unavailable} %v, want 1", n)
	}
}

// TestHandoverOnStop: the decider stops (a drain); the standby takes the Lease and decides, and requests sent to
// it meanwhile wait for that instead of failing.
func TestHandoverOnStop(t *testing.T) {
	decider, standby := twoReplicas(t)
	done := make(chan struct {
		code  int
		allow bool
	}, 1)
	decider.cancel()
	go func() {
		code, res := standby.admit(t, http.DefaultClient, `{"user":"bob","server":"x","resources":{}}`)
		done <- struct {
			code  int
			allow bool
		}{code, res.Allow}
	}()
	if err := <-decider.done; err != nil {
		t.Errorf("the old decider's Run: %v", err)
	}
	decider.done <- nil // for start's cleanup
	got := <-done
	if got.code != 200 || !got.allow {
		t.Errorf("during the handover: %d allow=%v, want 200 and admitted", got.code, got.allow)
	}
	eventually(t, "the standby decides", func() bool { return standby.deciding(t) })
}

// raceAdmits sends n admissions of racer at once to r (servers from first on) and counts those admitted.
func raceAdmits(t *testing.T, r *running, first, n int) int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var admitted atomic.Int64
	begin := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-begin
			code, res := r.admit(t, client, fmt.Sprintf(`{"user":"racer","server":"s%d","groups":["racers"],
				"resources":{"nvidia.com/gpu.shared":1},"nodeSelector":{"nvidia.com/gpu.product":"Tesla-T4-SHARED"}}`, first+i))
			switch {
			case code != 200:
				t.Errorf("status %d", code)
			case res.Allow:
				admitted.Add(1)
			case res.Reason != "max_servers":
				t.Errorf("unexpected %+v", res)
			}
		})
	}
	close(begin)
	wg.Wait()
	return int(admitted.Load())
}

// TestGracefulHandoverKeepsReservations: the decider admits 4 of the racer's 7 servers (no pod yet) and stops;
// the standby, which followed its stream, takes the Lease with those 4 reservations and admits exactly 3 more
// of 1,000.
func TestGracefulHandoverKeepsReservations(t *testing.T) {
	decider, standby := twoReplicas(t)
	if n := raceAdmits(t, decider, 0, 4); n != 4 {
		t.Fatalf("the first decider admitted %d of 4", n)
	}
	begin := time.Now()
	decider.cancel()
	if err := <-decider.done; err != nil {
		t.Errorf("the old decider's Run: %v", err)
	}
	decider.done <- nil // for start's cleanup
	eventually(t, "the standby decides", func() bool { return standby.deciding(t) })
	t.Logf("the standby decided %v after the stop began", time.Since(begin).Round(time.Millisecond))
	if n := standby.reservations(t); n != 4 {
		t.Errorf("the new decider starts with %v reservations, want the old one's 4", n)
	}
	if n := raceAdmits(t, standby, 100, 1000); n != 3 {
		t.Errorf("the new decider admitted %d of 1,000, want exactly 3 (7 servers, 4 reserved by the old one)", n)
	}
}

func (r *running) reservations(t *testing.T) float64 {
	t.Helper()
	return counterOrGauge(t, r, "gpuhub_quota_reservations", "")
}

// TestNoReadsPerDecisionTwoReplicas: decisions through either replica read no pod or node from the API server
// (the Lease's renewals are the election's, not the decisions').
func TestNoReadsPerDecisionTwoReplicas(t *testing.T) {
	kc := fake.NewClientset(objects()...)
	var reads atomic.Int64
	kc.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if r := a.GetResource().Resource; r == "pods" || r == "nodes" {
			reads.Add(1)
		}
		return false, nil, nil
	})
	kc.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if r := a.GetResource().Resource; r == "pods" || r == "nodes" {
			reads.Add(1)
		}
		return false, nil, nil
	})
	a := start(t, oneDecider(kc, "gpu-quota-0"))
	b := start(t, oneDecider(kc, "gpu-quota-1"))
	eventually(t, "one replica decides", func() bool { return a.deciding(t) != b.deciding(t) })
	before := reads.Load()
	if before == 0 {
		t.Fatal("the informers' lists and watches were not counted: the counter sees nothing")
	}
	for i := range 100 {
		for _, r := range []*running{a, b} {
			if code, _ := r.admit(t, http.DefaultClient, fmt.Sprintf(`{"user":"bob","server":"s%d","resources":{"nvidia.com/mig-1g.5gb":1},
				"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-A100-SXM4-40GB"}}`, i)); code != 200 {
				t.Fatalf("status %d", code)
			}
		}
	}
	if n := reads.Load() - before; n != 0 {
		t.Errorf("%d pod or node requests to the API server during 200 decisions over two replicas, want 0", n)
	}
}

// TestWaitlistJoinThroughStandbyKept: a join sent to the standby is the decider's (one queue), saved, and still
// queued on the standby once it has taken over from the decider.
func TestWaitlistJoinThroughStandbyKept(t *testing.T) {
	kc := fake.NewClientset(append(objects(), gpuPod("jupyter-dave", "dave", "gpu-h100", "nvidia.com/gpu"))...)
	store := &memStore{}
	withWaitlist := func(o *Options) {
		oneDecider(kc, o.Identity)(o)
		o.Waitlist, o.WaitlistStore, o.WaitlistTick, o.WaitlistHold = true, store, 50*time.Millisecond, time.Hour
	}
	a := start(t, func(o *Options) { o.Identity = "gpu-quota-0"; withWaitlist(o) })
	b := start(t, func(o *Options) { o.Identity = "gpu-quota-1"; withWaitlist(o) })
	eventually(t, "one replica decides", func() bool { return a.deciding(t) != b.deciding(t) })
	decider, standby := a, b
	if b.deciding(t) {
		decider, standby = b, a
	}
	eventually(t, "the standby is in sync", func() bool { return counterOrGauge(t, standby, "gpuhub_quota_replica_in_sync", "") == 1 })
	body := `{"user":"erin","groups":[],"resources":{"nvidia.com/gpu":1},"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"},
		"waitlist":{"join":true}}`
	code, res := standby.admit(t, http.DefaultClient, body)
	if code != 200 || res.Allow || res.Waitlist == nil || res.Waitlist.Position != 1 {
		t.Fatalf("erin through the standby: %d %+v", code, res)
	}
	if ps, err := decider.engine.Places("erin"); err != nil || len(ps) != 1 {
		t.Errorf("the decider's queue: %+v %v, want erin's place", ps, err)
	}
	eventually(t, "the queue saved", func() bool { e := store.entries(); return len(e) == 1 && e[0].User == "erin" })

	decider.cancel()
	if err := <-decider.done; err != nil {
		t.Errorf("the old decider's Run: %v", err)
	}
	decider.done <- nil // for start's cleanup
	eventually(t, "the standby decides", func() bool { return standby.deciding(t) })
	eventually(t, "erin still queued on the new decider", func() bool {
		ps, err := standby.engine.Places("erin")
		return err == nil && len(ps) == 1 && ps[0].Position == 1
	})
}

func TestAdvertised(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"IPv4":            {"http://10.0.0.7:8000", "http://10.0.0.7:8000"},
		"a slash":         {"http://10.0.0.7:8000/", "http://10.0.0.7:8000"},
		"IPv6, bare":      {"http://fd00:10:244::7:8000", "http://[fd00:10:244::7]:8000"},
		"IPv6, bracketed": {"http://[fd00::7]:8000", "http://[fd00::7]:8000"},
		"a name":          {"https://gpu-quota-0.example:8443", "https://gpu-quota-0.example:8443"},
		"no port":         {"http://10.0.0.7", ""},
		"no scheme":       {"10.0.0.7:8000", ""},
		"a path":          {"http://10.0.0.7:8000/services/gpu-quota/", ""},
		"empty POD_IP":    {"http://:8000", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := advertised(tc.in)
			if (err != nil) != (tc.want == "") || got != tc.want {
				t.Errorf("advertised(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestReplicaStreamAccess: the stream of reservations is for gpu-quota's own token only, and only the decider
// serves it.
func TestReplicaStreamAccess(t *testing.T) {
	decider, standby := twoReplicas(t)
	tests := map[string]struct {
		r          *running
		token      string
		wantStatus int
	}{
		"no token":         {decider, "", http.StatusUnauthorized},
		"a user's token":   {decider, "bob-token", http.StatusUnauthorized},
		"an admin's token": {decider, "alice-token", http.StatusUnauthorized},
		"the standby's":    {standby, "quota-token", http.StatusServiceUnavailable},
		"gpu-quota's own":  {decider, "quota-token", http.StatusOK},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tc.r.url+prefix+replicaPath, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "token "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if tc.wantStatus == http.StatusServiceUnavailable && resp.Header.Get(api.NotLeaderHeader) == "" {
				t.Errorf("a 503 without %s", api.NotLeaderHeader)
			}
		})
	}
}

type notDeciding struct{}

func (notDeciding) Deciding() bool { return false }

func (notDeciding) OnUnavailable() string { return "closed" }

// TestRelayLeavesAGoneHolder: the Lease still names a holder whose pod is gone (its address answers nothing: a
// connect would wait for the caller's deadline) while the next holder decides. The relay gives up on the gone
// one after the dial timeout and looks again, so the request is answered by the next decider within the park
// time, not timed out by the caller (the glue waits 2 s).
func TestRelayLeavesAGoneHolder(t *testing.T) {
	next := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(ForwardedHeader) == "" {
			t.Errorf("relayed without %s", ForwardedHeader)
		}
		_, _ = io.WriteString(w, `{"allow":true}`)
	}))
	defer next.Close()
	const gone = "127.0.0.2:8000" // the test's dial hangs for it, as for a pod that is gone
	began := time.Now()
	holder := func() string {
		if time.Since(began) < 400*time.Millisecond { // the standby's view of the Lease lags the handover
			return "gpu-quota-old@http://" + gone
		}
		return "gpu-quota-new@" + next.URL
	}
	f, err := newForwarder("gpu-quota-1@http://127.0.0.1:1", prefix, notDeciding{}, holder, http.NotFoundHandler(), logging.Discard(), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var hung atomic.Int64
	dialer := f.dial
	f.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == gone {
			hung.Add(1)
			<-ctx.Done() // SYNs to an address nobody has: no answer
			return nil, ctx.Err()
		}
		return dialer(ctx, network, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // the glue's
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, prefix+"api/v1/admit", strings.NewReader(`{"user":"bob","resources":{}}`))
	rec := httptest.NewRecorder()
	f.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"allow":true`) {
		t.Errorf("%d %s, want the next decider's answer", rec.Code, rec.Body)
	}
	if d := time.Since(began); d > f.park {
		t.Errorf("answered after %v, want within the park time %v", d, f.park)
	}
	if hung.Load() == 0 {
		t.Error("the gone holder was never tried: the test shows nothing")
	}
}
