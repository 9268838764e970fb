package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
)

// A sampler that fails now and then must not flap readiness: /readyz fails
// after the third failure in a row (the default), and recovers with the next
// good sample.
func TestReadyAfterConsecutiveFailures(t *testing.T) {
	fs := &fakeSampler{r: nvmlReading()}
	a := New(Config{Node: "n", Backend: "nvml", Interval: time.Second, Sampler: fs, Resolver: nvmlPIDs})
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	fs.err = errors.New("nvml: ERROR_UNKNOWN")
	var got []bool
	for range 4 {
		_ = a.SampleOnce(context.Background())
		got = append(got, a.Ready(context.Background()) == nil)
	}
	fs.err = nil
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	got = append(got, a.Ready(context.Background()) == nil)
	// ready after failures 1 and 2, not after 3 and 4, ready again after the recovery
	if diff := cmp.Diff([]bool{true, true, false, false, true}, got); diff != "" {
		t.Errorf("ready after each sample (-want +got):\n%s", diff)
	}
}

// hangingSampler answers until hang is set, then blocks (a wedged NVML call
// ignores its context) until release is closed.
type hangingSampler struct {
	fakeSampler
	mu      sync.Mutex
	hang    bool
	release chan struct{}
}

func (h *hangingSampler) setHang(v bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hang = v
}

func (h *hangingSampler) Sample(ctx context.Context) (reading.Reading, error) {
	h.mu.Lock()
	hang := h.hang
	h.mu.Unlock()
	if hang {
		<-h.release
	}
	return h.fakeSampler.Sample(ctx)
}

// A sampler that hangs never returns an error: without a deadline the agent
// would keep serving its last sample as if healthy and stay ready forever.
// Each attempt must fail after the interval, and readiness after three.
func TestHangingSamplerCountsAsFailed(t *testing.T) {
	hs := &hangingSampler{fakeSampler: fakeSampler{r: nvmlReading()}, release: make(chan struct{})}
	var once sync.Once
	unblock := func() { once.Do(func() { close(hs.release) }) }
	t.Cleanup(unblock)
	const interval = 50 * time.Millisecond
	a := New(Config{Node: "n", Backend: "nvml", Interval: interval, Sampler: hs, Resolver: nvmlPIDs})
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs.setHang(true)
	for i := 1; i <= 3; i++ {
		done := make(chan error, 1)
		go func() { done <- a.SampleOnce(context.Background()) }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("attempt %d with a hung backend succeeded", i)
			}
			t.Logf("attempt %d: %v", i, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("attempt %d with a hung backend did not return within 5s (interval %s)", i, interval)
		}
		if ready := a.Ready(context.Background()) == nil; ready != (i < 3) {
			t.Errorf("after %d hung attempts: ready = %v, want %v", i, ready, i < 3)
		}
	}
	if a.Snapshot() == nil {
		t.Fatal("the last good snapshot is no longer served")
	}

	// The wedged call returns: the next attempts succeed again.
	hs.setHang(false)
	unblock()
	deadline := time.Now().Add(5 * time.Second)
	for a.SampleOnce(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("sampling did not recover after the backend returned")
		}
		time.Sleep(interval / 5)
	}
	if err := a.Ready(context.Background()); err != nil {
		t.Errorf("not ready after recovery: %v", err)
	}
}

// The snapshot served after a failure is the last good one (its sampledAt
// says when), and its health says the latest attempt failed.
func TestSnapshotHealth(t *testing.T) {
	now := t0
	fs := &fakeSampler{r: nvmlReading()}
	a := New(Config{Node: "n", Backend: "nvml", Interval: 5 * time.Second, Sampler: fs, Resolver: nvmlPIDs,
		Now: func() time.Time { return now }})
	type health struct {
		OK                  bool   `json:"ok"`
		ConsecutiveFailures int    `json:"consecutiveFailures"`
		LastAttemptAt       string `json:"lastAttemptAt"`
		LastSuccessAt       string `json:"lastSuccessAt"`
		LastError           string `json:"lastError"`
	}
	type view struct {
		SampledAt string  `json:"sampledAt"`
		Health    *health `json:"health"`
	}
	serve := func() view {
		t.Helper()
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/api/v1/snapshot", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var v view
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := view{SampledAt: "2026-11-22T10:00:05.123Z", Health: &health{OK: true,
		LastAttemptAt: "2026-11-22T10:00:05.123Z", LastSuccessAt: "2026-11-22T10:00:05.123Z"}}
	if diff := cmp.Diff(want, serve()); diff != "" {
		t.Errorf("after a good sample (-want +got):\n%s", diff)
	}

	fs.err = errors.New("DeviceGetCount: ERROR_UNKNOWN")
	for range 2 {
		now = now.Add(5 * time.Second)
		_ = a.SampleOnce(context.Background())
	}
	want = view{SampledAt: "2026-11-22T10:00:05.123Z", Health: &health{OK: false, ConsecutiveFailures: 2,
		LastAttemptAt: "2026-11-22T10:00:15.123Z", LastSuccessAt: "2026-11-22T10:00:05.123Z",
		LastError: "DeviceGetCount: ERROR_UNKNOWN"}}
	if diff := cmp.Diff(want, serve()); diff != "" {
		t.Errorf("after two failed samples (-want +got):\n%s", diff)
	}

	fs.err = nil
	now = now.Add(5 * time.Second)
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	want = view{SampledAt: "2026-11-22T10:00:20.123Z", Health: &health{OK: true,
		LastAttemptAt: "2026-11-22T10:00:20.123Z", LastSuccessAt: "2026-11-22T10:00:20.123Z"}}
	if diff := cmp.Diff(want, serve()); diff != "" {
		t.Errorf("after recovery (-want +got):\n%s", diff)
	}
}
