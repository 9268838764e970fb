package decision

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
)

func TestLogKeepsNewestFirstAndCounts(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	now := time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)
	l, err := NewLog(Options{Service: "gpu-quota", Size: 3, Registerer: reg, Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Now: func() time.Time { now = now.Add(time.Second); return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range []string{"alice", "bob", "carol", "dave"} {
		action := ActionAdmit
		if i%2 == 1 {
			action = ActionDeny
		}
		l.Record(Record{User: u, Action: action, Reason: "max_gpus", Numbers: map[string]float64{"limit": 1, "held": float64(i)}})
	}
	var got []string
	for _, r := range l.List(Filter{}) {
		got = append(got, r.User)
	}
	if diff := cmp.Diff([]string{"dave", "carol", "bob"}, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if got := l.List(Filter{Action: ActionDeny}); len(got) != 2 || got[0].User != "dave" {
		t.Errorf("List(deny) = %+v", got)
	}
	if got := l.List(Filter{User: "carol", Limit: 1}); len(got) != 1 || got[0].Service != "gpu-quota" || got[0].Actor != "gpu-quota" {
		t.Errorf("List(carol) = %+v", got)
	}
	if got := l.List(Filter{Since: now}); len(got) != 1 || got[0].User != "dave" {
		t.Errorf("List(since last) = %+v", got)
	}
	if n := testutil.ToFloat64(l.count.WithLabelValues(ActionDeny, "max_gpus")); n != 2 {
		t.Errorf("decisions_total{deny} = %v, want 2", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gpuhub_quota_decisions_total Decisions by action (admit, deny, notice, stop, clear) and reason.
# TYPE gpuhub_quota_decisions_total counter
gpuhub_quota_decisions_total{action="admit",reason="max_gpus"} 2
gpuhub_quota_decisions_total{action="deny",reason="max_gpus"} 2
`)); err != nil {
		t.Error(err)
	}
	if !strings.Contains(buf.String(), "action=deny reason=max_gpus user=dave server=\"\" held=3 limit=1") {
		t.Errorf("log line lacks the numbers:\n%s", buf.String())
	}
}

// TestLogNumbersAsJSON: the numbers in a JSON log line are what encoding/json writes for them, whole or not.
func TestLogNumbersAsJSON(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLog(Options{Service: "gpu-quota", Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	numbers := map[string]float64{"a": 0, "b": 1, "c": 0.4286, "d": 2592000, "e": 1e21, "f": -3, "g": 1e-7, "h": math.Copysign(0, -1), "i": 1 << 53}
	l.Record(Record{User: "alice", Action: ActionDeny, Reason: "max_gpus", Numbers: numbers})
	for k, v := range numbers {
		want, err := json.Marshal(map[string]float64{k: v})
		if err != nil {
			t.Fatal(err)
		}
		if field := strings.Trim(string(want), "{}"); !strings.Contains(buf.String(), field) {
			t.Errorf("log line lacks %s:\n%s", field, buf.String())
		}
	}
}

// TestRecordPanicKeepsLogUsable: a reason the metric refuses (not UTF-8) panics in Record, and the log still
// lists and records afterwards (review finding: the counter was looked up under the log's lock).
func TestRecordPanicKeepsLogUsable(t *testing.T) {
	l, err := NewLog(Options{Service: "gpu-quota"})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		l.Record(Record{User: "alice", Action: ActionDeny, Reason: "\xff"})
	}()
	done := make(chan int, 1)
	go func() {
		l.Record(Record{User: "bob", Action: ActionDeny, Reason: "max_gpus"})
		done <- len(l.List(Filter{}))
	}()
	select {
	case n := <-done:
		if n == 0 {
			t.Error("List is empty after Record")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the log is stuck after a panicking Record")
	}
}

// TestWriteDelay: with a WriteDelay the records are listed and counted at once, and their lines come after
// the delay (or at Flush), in the order recorded; a backlog of maxPending is written by the Record that
// reaches it.
func TestWriteDelay(t *testing.T) {
	w := &logtest.Buffer{}
	lines := func() []string {
		var users []string
		for line := range strings.Lines(w.String()) {
			var v struct{ User string }
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			users = append(users, v.User)
		}
		return users
	}
	reg := prometheus.NewRegistry()
	l, err := NewLog(Options{Service: "gpu-quota", Registerer: reg, Logger: slog.New(slog.NewJSONHandler(w, nil)), WriteDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob"} {
		l.Record(Record{User: u, Action: ActionDeny, Reason: "max_gpus"})
	}
	if got := lines(); len(got) != 0 {
		t.Errorf("lines before the delay: %q", got)
	}
	if n := len(l.List(Filter{})); n != 2 {
		t.Errorf("List has %d records, want 2 at once", n)
	}
	if n := testutil.ToFloat64(l.count.WithLabelValues(ActionDeny, "max_gpus")); n != 2 {
		t.Errorf("decisions_total = %v, want 2 at once", n)
	}
	time.Sleep(2 * time.Millisecond) // the lines are written later than decided
	l.Flush()
	if diff := cmp.Diff([]string{"alice", "bob"}, lines()); diff != "" {
		t.Errorf("lines after Flush (-want +got):\n%s", diff)
	}
	var first struct{ Time time.Time }
	if err := json.Unmarshal([]byte(strings.SplitN(w.String(), "\n", 2)[0]), &first); err != nil {
		t.Fatal(err)
	}
	if decided := l.List(Filter{})[1].Time; !first.Time.Equal(decided) {
		t.Errorf("alice's line has time %v, want the decision's %v", first.Time, decided)
	}

	w.Reset()
	want := make([]string, maxPending)
	for i := range want {
		want[i] = strconv.Itoa(i)
		l.Record(Record{User: want[i], Action: ActionAdmit, Reason: "ok"})
	}
	if diff := cmp.Diff(want, lines()); diff != "" {
		t.Errorf("a backlog of maxPending is not written by Record (-want +got):\n%s", diff)
	}

	w.Reset()
	short, err := NewLog(Options{Service: "gpu-quota", Logger: slog.New(slog.NewJSONHandler(w, nil)), WriteDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var recorded sync.WaitGroup
	for _, u := range []string{"carol", "dave", "erin"} {
		short.Record(Record{User: u, Action: ActionDeny, Reason: "max_gpus"})
		recorded.Go(func() { short.Record(Record{User: u + "2", Action: ActionDeny, Reason: "max_gpus"}) })
	}
	recorded.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for len(lines()) < 6 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	got := lines()
	if len(got) != 6 {
		t.Fatalf("after the delay: lines %q, want 6", got)
	}
	// The records of this goroutine keep their order among the lines.
	var mine []string
	for _, u := range got {
		if !strings.HasSuffix(u, "2") {
			mine = append(mine, u)
		}
	}
	if diff := cmp.Diff([]string{"carol", "dave", "erin"}, mine); diff != "" {
		t.Errorf("order of lines (-want +got):\n%s", diff)
	}

	// Above info nothing is written, so nothing waits either: listed and counted all the same.
	w.Reset()
	warn, err := NewLog(Options{Service: "gpu-quota", Logger: slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})),
		WriteDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	warn.Record(Record{User: "frank", Action: ActionDeny, Reason: "max_gpus"})
	warn.mu.Lock()
	pending := len(warn.pending)
	warn.mu.Unlock()
	if pending != 0 || len(warn.List(Filter{})) != 1 {
		t.Errorf("logger at warn: %d records wait for the delay, %d listed; want 0 and 1", pending, len(warn.List(Filter{})))
	}
	warn.Flush()
	if got := w.String(); got != "" {
		t.Errorf("logger at warn wrote %q", got)
	}
}
