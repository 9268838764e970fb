package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
)

// memStore is the usage API's waitlist store in memory (compare-and-swap on a version).
type memStore struct {
	mu      sync.Mutex
	st      waitlist.State
	version int64
	saves   int
}

func (m *memStore) Load(context.Context) (waitlist.State, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.Clone(), m.version, nil
}

func (m *memStore) Save(_ context.Context, st waitlist.State, version int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if version != m.version {
		return 0, waitlist.ErrConflict
	}
	m.st, m.version = st.Clone(), m.version+1
	m.saves++
	return m.version, nil
}

func (m *memStore) entries() []waitlist.Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.Clone().Entries
}

type starts struct {
	mu   sync.Mutex
	got  []string
	opts []map[string]any
}

func (s *starts) StartServer(_ context.Context, user, server string, options map[string]any) (hubapi.StartResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, user+"/"+server)
	s.opts = append(s.opts, options)
	return hubapi.StartResult{Pending: true}, nil
}

func (s *starts) count() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.got) }

// The queue is saved in the store, the next in line gets the freed GPU and their server is started through the
// Hub once, and a restarted gpu-quota finds the queue as it was.
func TestWaitlistSavedStartedRestored(t *testing.T) {
	store, hub := &memStore{}, &starts{}
	// The waitlist steps every 20 ms on a ticker of the test's, which counts the ticks the loop took (both runs
	// take from it, one after the other).
	var steps atomic.Int64
	ticks := make(chan time.Time)
	tickCtx, stopTicks := context.WithCancel(context.Background())
	defer stopTicks()
	go func() {
		for {
			select {
			case ticks <- time.Now():
				steps.Add(1)
			case <-tickCtx.Done():
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// moreSteps waits for n more ticks: the loop steps after each, and takes the next only once that step is done.
	moreSteps := func(n int64) {
		t.Helper()
		seen := steps.Load()
		eventually(t, fmt.Sprintf("%d more waitlist steps", n), func() bool { return steps.Load() >= seen+n })
	}
	withWaitlist := func(o *Options) {
		o.Waitlist, o.WaitlistStore, o.HubStart = true, store, hub
		o.WaitlistTicks, o.WaitlistHold = ticks, time.Hour
	}
	r := start(t, withWaitlist)
	if _, err := r.kube.CoreV1().Pods("jhub").Create(context.Background(), gpuPod("jupyter-dave", "dave", "gpu-h100", "nvidia.com/gpu"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Until the engine sees dave's pod an H100 is free, and erin's request would be admitted and reserve it
	// for her server until the TTL (a minute here): the unit she then waits for would stay reserved.
	eventually(t, "dave's pod seen", func() bool {
		q, err := r.engine.UserQuota("dave")
		return err == nil && q.Concurrent.HeldGPUs == 1
	})
	body := `{"user":"erin","groups":[],"resources":{"nvidia.com/gpu":1},"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"},
		"waitlist":{"join":true,"autoStart":true},"userOptions":{"profile":"h100"}}`
	eventually(t, "erin queued", func() bool {
		c, res := r.admit(t, http.DefaultClient, body)
		return c == 200 && !res.Allow && res.Waitlist != nil && res.Waitlist.Position == 1 && strings.Contains(res.Message, "number 1 of 1")
	})
	eventually(t, "the queue saved", func() bool { e := store.entries(); return len(e) == 1 && e[0].User == "erin" })

	if err := r.kube.CoreV1().Pods("jhub").Delete(context.Background(), "jupyter-dave", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "erin's server started", func() bool { return hub.count() == 1 })
	eventually(t, "the hold saved", func() bool {
		e := store.entries()
		return len(e) == 1 && e[0].Held() && e[0].StartRequested
	})
	moreSteps(3) // no second start in the steps after it
	if hub.count() != 1 || hub.opts[0]["profile"] != "h100" {
		t.Errorf("starts: %v %v", hub.got, hub.opts)
	}

	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
	r.done <- nil // for start's cleanup
	r2 := start(t, withWaitlist)
	eventually(t, "restored", func() bool {
		ps, err := r2.engine.Places("erin")
		return err == nil && len(ps) == 1 && ps[0].Position == 0 && !ps[0].HeldUntil.IsZero()
	})
	moreSteps(3) // the restarted loop's steps: the start was asked for before, not again
	if hub.count() != 1 {
		t.Errorf("started again after the restart: %v", hub.got)
	}
}

// TestWaitlistSavedBetweenSteps: a join is saved within saveAfter, not at the next step only (here an hour away):
// a decider killed outright loses at most that much of the queue.
func TestWaitlistSavedBetweenSteps(t *testing.T) {
	store := &memStore{}
	r := start(t, func(o *Options) { o.Waitlist, o.WaitlistStore, o.WaitlistTick = true, store, time.Hour })
	if _, err := r.kube.CoreV1().Pods("jhub").Create(context.Background(), gpuPod("jupyter-dave", "dave", "gpu-h100", "nvidia.com/gpu"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "dave's pod seen", func() bool {
		q, err := r.engine.UserQuota("dave")
		return err == nil && q.Concurrent.HeldGPUs == 1
	})
	body := `{"user":"erin","groups":[],"resources":{"nvidia.com/gpu":1},"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"},
		"waitlist":{"join":true}}`
	if c, res := r.admit(t, http.DefaultClient, body); c != 200 || res.Waitlist == nil {
		t.Fatalf("erin's join: %d %+v", c, res)
	}
	joined := time.Now()
	eventually(t, "the join saved", func() bool { e := store.entries(); return len(e) == 1 && e[0].User == "erin" })
	if d := time.Since(joined); d > 5*time.Second {
		t.Errorf("saved %v after the join, want within about %v", d, saveAfter)
	}
}

// failingStore refuses saves with err until it is cleared, counting the tries.
type failingStore struct {
	memStore
	err   error
	tries int
}

func (f *failingStore) Save(ctx context.Context, st waitlist.State, version int64) (int64, error) {
	f.mu.Lock()
	f.tries++
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return f.memStore.Save(ctx, st, version)
}

// A save the usage API refuses is tried again after 1 s, then 2 s, ... (not at every 250 ms with a warning each),
// counted by reason, and said once more when it works again; the last save (leadership ends) ignores the wait.
func TestWaitlistSaveBacksOff(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	store := &failingStore{err: &contract.StatusError{Method: "PUT", URL: "http://usage/api/v1/waitlist/state", Status: http.StatusRequestEntityTooLarge}}
	w, logs := newSaver(t, store, func() time.Time { return now })
	ctx := context.Background()
	tries := func() int { store.mu.Lock(); defer store.mu.Unlock(); return store.tries }
	for _, step := range []struct {
		advance time.Duration
		want    int
	}{{0, 1}, {500 * time.Millisecond, 1}, {500 * time.Millisecond, 2}, {time.Second, 2}, {time.Second, 3}, {3 * time.Second, 3}, {time.Second, 4}} {
		now = now.Add(step.advance)
		for range 4 { // the loop's saves every 250 ms
			w.save(ctx)
		}
		if got := tries(); got != step.want {
			t.Fatalf("after %v more: %d tries, want %d", step.advance, got, step.want)
		}
	}
	if got := testutil.ToFloat64(w.saveMetrics.failures.WithLabelValues(saveTooLarge)); got != 4 {
		t.Errorf("too_large failures %v, want 4", got)
	}
	if got := testutil.ToFloat64(w.saveMetrics.inARow); got != 4 {
		t.Errorf("failures in a row %v, want 4", got)
	}
	if n := strings.Count(logs.String(), "cannot save the waitlist"); n != 4 {
		t.Errorf("%d warnings, want one per try (4):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "DELETE api/v1/users/{name}/waitlist") {
		t.Errorf("the warning does not say what an admin can do:\n%s", logs.String())
	}
	store.mu.Lock()
	store.err = nil
	store.mu.Unlock()
	w.saveLast(ctx) // within the wait: tried all the same
	if got := tries(); got != 5 || len(store.entries()) != 1 {
		t.Fatalf("the last save: %d tries, %d entries saved; want 5 and 1", got, len(store.entries()))
	}
	if got := testutil.ToFloat64(w.saveMetrics.inARow); got != 0 {
		t.Errorf("failures in a row after the save %v, want 0", got)
	}
	if !strings.Contains(logs.String(), "waitlist saved again") {
		t.Errorf("no line says the waitlist is saved again:\n%s", logs.String())
	}
}

// newSaver is a waitlister over store whose queue changed since it was saved (erin joined).
func newSaver(t *testing.T, store WaitlistStore, now func() time.Time) (*waitlister, *logtest.Buffer) {
	t.Helper()
	logs := &logtest.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	decisions, err := decision.NewLog(decision.Options{Service: admit.Service, Size: 10, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := admit.New(admit.Options{Policy: func() *quota.Policy { return &quota.Policy{} }, Log: decisions,
		Waitlist: admit.WaitlistOptions{Enabled: true}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	eng.LoadWaitlist(waitlist.State{Entries: []waitlist.Entry{{User: "erin", Class: "h100", JoinedAt: now()}}})
	w := &waitlister{o: Options{Logger: logger, Now: now}, eng: eng, store: store}
	if w.saveMetrics, err = newSaveMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	return w, logs
}

// A replica whose loop ends after it lost the Lease leaves the queue the next leader stored since (it would
// replace it with its older one); when the loop ends because the process stops, the replica still holds the Lease
// and its last save replaces a former leader's late write, as the leader's save at shutdown does.
func TestWaitlistLeavingKeepsTheNextLeadersQueue(t *testing.T) {
	store := &memStore{}
	w, logs := newSaver(t, store, time.Now)
	stopping := make(chan struct{})
	w.stopping = stopping // open: the process goes on, the Lease was lost
	next := waitlist.State{Entries: []waitlist.Entry{{User: "frank", Class: "h100"}}}
	if _, err := store.Save(context.Background(), next, 0); err != nil { // the next leader's
		t.Fatal(err)
	}
	w.saveAtEnd(context.Background())
	if e := store.entries(); len(e) != 1 || e[0].User != "frank" {
		t.Errorf("after the loop ended with the Lease lost: stored %+v, want the next leader's (frank)", e)
	}
	if !strings.Contains(logs.String(), "no longer leads") {
		t.Errorf("no line says the last changes are left:\n%s", logs)
	}
	close(stopping) // the process stops
	w.saveAtEnd(context.Background())
	if e := store.entries(); len(e) != 1 || e[0].User != "erin" {
		t.Errorf("after the loop ended with the process: stored %+v, want this leader's own (erin)", e)
	}
}
