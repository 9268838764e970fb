package telemetry

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/internal/contract"
)

func ptr(f float64) *float64 { return &f }

// usageAPI serves whatever answer is set, and checks the culler's token.
type usageAPI struct {
	mu     sync.Mutex
	answer contract.ServersResponse
	status int
}

func (u *usageAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r.URL.Path != "/services/gpu-usage/api/v1/servers" || r.Header.Get("Authorization") != "token culler-token" {
		http.Error(w, `{"message":"no"}`, http.StatusForbidden)
		return
	}
	if u.status != 0 {
		w.WriteHeader(u.status)
		return
	}
	_ = json.NewEncoder(w).Encode(u.answer)
}

func (u *usageAPI) set(at time.Time, es ...contract.Telemetry) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.answer, u.status = contract.ServersResponse{SampledAt: at, Servers: es}, 0
}

func TestSampler(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
	clock := t0
	api := &usageAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	s := New(Options{URL: srv.URL + "/services/gpu-usage", Token: "culler-token", Every: 10 * time.Second,
		Window: func() time.Duration { return 10 * time.Minute }, Now: func() time.Time { return clock }})
	ctx := context.Background()

	if u := s.Usage(); u.Reachable {
		t.Errorf("reachable before any answer: %+v", u)
	}
	alice := contract.Telemetry{User: "alice", Pod: "jupyter-alice", Namespace: "jhub", Kind: "gpu", AllocatedGPUs: 1, SMUtilPercent: ptr(1), MemoryUsedBytes: 100}
	// 20 minutes of samples: the window keeps 10 min (plus a bucket).
	for i := range 120 {
		clock = t0.Add(time.Duration(i) * 10 * time.Second)
		e := alice
		if i == 60 {
			e.SMUtilPercent = ptr(50) // one busy sample in the middle
		}
		api.set(clock, e)
		if err := s.Sample(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tel, info := s.Server("alice", "", 2*time.Minute)
	if !tel.Present || !info.Known || info.Kind != "gpu" {
		t.Fatalf("alice: %+v %+v", tel, info)
	}
	oldest := tel.Samples[0].At
	if age := clock.Sub(oldest); age > 11*time.Minute || age < 10*time.Minute {
		t.Errorf("history reaches back %v, want the 10 min window", age)
	}
	if len(tel.Samples) > 2*(MaxBuckets+2) {
		t.Errorf("%d samples", len(tel.Samples))
	}

	// A stale server adds no sample; one with unknown utilization neither, and says why.
	stale := alice
	stale.Stale, stale.StaleReason = true, "the agent on gpu-0 has not answered for 40 s"
	bob := contract.Telemetry{User: "bob", Server: "x", Pod: "jupyter-bob--x", Namespace: "jhub", Kind: "mig"}
	clock = clock.Add(10 * time.Second)
	api.set(clock, stale, bob)
	if err := s.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	tel2, info2 := s.Server("alice", "", 2*time.Minute)
	if len(tel2.Samples) != len(tel.Samples) || !info2.Stale {
		t.Errorf("a stale answer added samples (%d -> %d) or was not noted: %+v", len(tel.Samples), len(tel2.Samples), info2)
	}
	btel, binfo := s.Server("bob", "x", 2*time.Minute)
	if btel.Present || binfo.Unknown == "" {
		t.Errorf("bob without utilization: %+v %+v", btel, binfo)
	}

	// A new pod under the same server starts a new history; a server no longer listed is forgotten.
	moved := alice
	moved.Pod = "jupyter-alice-2"
	clock = clock.Add(10 * time.Second)
	api.set(clock, moved)
	if err := s.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	tel3, _ := s.Server("alice", "", 2*time.Minute)
	if diff := cmp.Diff([]decide.Sample{{At: clock, Utilization: 1, MemoryBytes: 100}}, tel3.Samples); diff != "" {
		t.Errorf("new pod's history (-want +got):\n%s", diff)
	}
	if _, i := s.Server("bob", "x", 0); i.Known {
		t.Error("bob is still known")
	}

	// Failures: reachable for three sampling periods after the last answer, then not.
	api.mu.Lock()
	api.status = http.StatusServiceUnavailable
	api.mu.Unlock()
	clock = clock.Add(10 * time.Second)
	if err := s.Sample(ctx); err == nil {
		t.Fatal("503 gave no error")
	}
	if !s.Usage().Reachable {
		t.Error("one failed request made the usage API unreachable")
	}
	clock = clock.Add(30 * time.Second)
	if s.Usage().Reachable {
		t.Error("still reachable 40 s after the last answer")
	}
}

// A bucket wider than the allowed gap is given as samples no further apart than the gap, so decide does not
// read a gap that was not there; a real gap starts a new bucket and stays visible.
func TestBucketsAndGaps(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
	sr := &series{}
	width, every := 5*time.Minute, 10*time.Second
	for i := range 60 { // 10 min of samples at 10 s
		sr.push(t0.Add(time.Duration(i)*every), 0, 100+int64(i), every, width, time.Hour)
	}
	sr.push(t0.Add(20*time.Minute), 0, 100, every, width, time.Hour) // after a 10 min gap
	if len(sr.buckets) != 3 {
		t.Fatalf("%d buckets, want 3", len(sr.buckets))
	}
	s := &Sampler{servers: map[key]*series{{"a", ""}: sr}}
	tel, _ := s.Server("a", "", 2*time.Minute)
	var gaps []time.Duration
	for i := 1; i < len(tel.Samples); i++ {
		if d := tel.Samples[i].At.Sub(tel.Samples[i-1].At); d > 2*time.Minute {
			gaps = append(gaps, d)
		}
	}
	if diff := cmp.Diff([]time.Duration{10*time.Minute + 10*time.Second}, gaps); diff != "" {
		t.Errorf("gaps (-want +got):\n%s", diff)
	}
}
