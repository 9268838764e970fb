package policy

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
)

type watched struct {
	Limit int `yaml:"limit"`
}

// TestWatch: a changed file is reloaded within a poll and OnChange runs; a bad one keeps the last good version,
// is logged with its place and counted once (not once per poll); a signal reloads at once.
func TestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte("limit: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader[watched](path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewReloadMetrics(reg, "test", "policy", "policy")
	if err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	signal := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var changes atomic.Int64
	// Polls come from the test: a send returns once Watch took the tick, and the one after it once that poll
	// was done. A Watch that stopped polling fails the test rather than hanging it.
	ticks := make(chan time.Time)
	poll := func() {
		t.Helper()
		select {
		case ticks <- time.Now():
		case <-time.After(5 * time.Second):
			t.Fatal("Watch took no poll within 5 s")
		}
	}
	go Watch(ctx, r, WatchOptions{Ticks: ticks, Signal: signal, What: "policy", Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnChange: func() { changes.Add(1) }})

	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if ok() {
				return
			}
		}
		t.Fatalf("never: %s", what)
	}
	if err := replaceFile(path, []byte("limit: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	poll()
	eventually("the new version in use", func() bool { return r.Current().Limit == 2 && changes.Load() == 1 })
	if err := replaceFile(path, []byte("limit: 3\nlimt: 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	poll()
	eventually("the failure counted", func() bool { return testutil.ToFloat64(m.reloads.WithLabelValues("failure")) == 1 })
	// Three more polls of the same bad content; the third send returns only after the second was done.
	for range 3 {
		poll()
	}
	if got := testutil.ToFloat64(m.reloads.WithLabelValues("failure")); got != 1 || r.Current().Limit != 2 || testutil.ToFloat64(m.success) != 0 {
		t.Errorf("bad file: failures %v, limit %d, success %v; want 1, the last good 2, 0", got, r.Current().Limit, testutil.ToFloat64(m.success))
	}
	if err := replaceFile(path, []byte("limit: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	signal <- struct{}{}
	eventually("the signal's reload", func() bool { return r.Current().Limit == 5 })
	cancel()
	if !strings.Contains(logs.String(), "p.yaml:2:1") || !strings.Contains(logs.String(), "policy reload failed: keeping the last good one") {
		t.Errorf("the failure's log does not name the place:\n%s", logs.String())
	}
}

// replaceFile writes data to path as a ConfigMap update does, in one step (a new file renamed over the old): a
// watcher polling meanwhile never reads a half-written file.
func replaceFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
