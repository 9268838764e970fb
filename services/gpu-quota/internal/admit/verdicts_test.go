package admit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// watchOptions are three of the form's choices: enough to see each kind of refusal move.
func watchOptions() []AssessOption {
	opt := func(id string, r Request) AssessOption {
		return AssessOption{ID: id, Resources: r.Resources, NodeSelector: r.NodeSelector}
	}
	return []AssessOption{opt("h100", h100("", "", 1)), opt("mig-1g", mig("", "", "1g.5gb")), opt("t4", t4("", ""))}
}

// summary writes a line as "bob [students] h100=-/kind_not_allowed mig-1g=allow/ok t4=allow/ok", "left erin".
func summary(l VerdictLine) string {
	if l.Kind != contract.WatchUser {
		return l.Kind + " " + l.User
	}
	s := fmt.Sprintf("%s %v", l.User, l.Groups)
	for _, v := range verdicts(Assessment{Options: l.Options}) {
		s += " " + v
	}
	return s
}

// pass runs one pass of w and returns its kind and lines.
func pass(t *testing.T, w *VerdictWatch) (string, []VerdictLine) {
	t.Helper()
	var lines []VerdictLine
	kind, err := w.Pass(context.Background(), func(l VerdictLine) error { lines = append(lines, l); return nil })
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	return kind, lines
}

func summaries(lines []VerdictLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, summary(l))
	}
	return out
}

// TestVerdictWatchFirstTable: the first pass is a line per user of the directory, in name order, each Assess's
// own answer for the default server with the directory's groups.
func TestVerdictWatchFirstTable(t *testing.T) {
	r := newRig(t, append(cluster(), pod("jupyter-carol-a", "carol", "a", "gpu-h100", "nvidia.com/gpu"),
		pod("jupyter-carol-b", "carol", "b", "gpu-h100", "nvidia.com/gpu"))...)
	w := r.eng.WatchVerdicts(watchOptions())
	defer w.Close()
	kind, lines := pass(t, w)
	want := []string{
		"bob [students] h100=-/kind_not_allowed mig-1g=allow/ok t4=allow/ok",
		"carol [researchers] h100=-/max_gpus mig-1g=-/max_gpus t4=-/kind_not_allowed",
		"dave [researchers] h100=allow/ok mig-1g=allow/ok t4=-/kind_not_allowed",
		"erin [students] h100=-/kind_not_allowed mig-1g=allow/ok t4=allow/ok",
	}
	if diff := cmp.Diff(want, summaries(lines)); diff != "" || kind != PassFull {
		t.Errorf("pass %s, lines (-want +got):\n%s", kind, diff)
	}
	for _, l := range lines {
		a, err := r.eng.Assess(context.Background(), AssessRequest{User: l.User, Groups: (*r.dir.Load())[l.User], Options: watchOptions()})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(a.Options, l.Options); diff != "" || l.OnUnavailable != a.OnUnavailable {
			t.Errorf("%s's line is not Assess's answer (-assess +line):\n%s", l.User, diff)
		}
	}
}

// TestVerdictWatchChanges: after the first table, a pass sends only the users whose line changed, and a left
// line for a user gone from the directory; when nothing changed the pass is skipped.
func TestVerdictWatchChanges(t *testing.T) {
	students := strings.Replace(testPolicy, "allowedKinds: [mig, shared]", "allowedKinds: [gpu, mig, shared]", 1)
	tests := map[string]struct {
		change   func(t *testing.T, r *rig)
		wantPass string
		want     []string
	}{
		"nothing changed: the pass is skipped": {wantPass: PassSkipped},
		"a change no verdict depends on: a full pass, no line": {
			change: func(_ *testing.T, r *rig) { r.eng.Changed() }, wantPass: PassFull},
		"bob's other server's pod": {
			change: func(t *testing.T, r *rig) {
				r.create(t, pod("jupyter-bob-lab", "bob", "lab", "gpu-a100", "nvidia.com/mig-1g.5gb"))
			},
			wantPass: PassFull, want: []string{"bob [students] h100=-/kind_not_allowed mig-1g=-/max_servers t4=-/max_servers"}},
		"erin's other server admitted: its reservation counts": {
			change:   func(t *testing.T, r *rig) { r.admit(t, t4("erin", "other")) },
			wantPass: PassFull, want: []string{"erin [students] h100=-/kind_not_allowed mig-1g=-/max_servers t4=-/max_gpus"}},
		"a policy reload": {
			change: func(t *testing.T, r *rig) {
				r.pol.Store(mustPolicy(t, students))
				r.eng.Changed()
			},
			wantPass: PassFull, want: []string{
				"bob [students] h100=-/max_gpus mig-1g=allow/ok t4=allow/ok",
				"erin [students] h100=-/max_gpus mig-1g=allow/ok t4=allow/ok",
			}},
		"erin left the directory, frank joined, dave moved to the students": {
			change: func(_ *testing.T, r *rig) {
				dir := map[string][]string{"bob": {"students"}, "carol": {"researchers"}, "dave": {"students"}, "frank": {}}
				r.dir.Store(&dir)
				r.eng.Changed()
			},
			wantPass: PassFull, want: []string{
				"dave [students] h100=-/kind_not_allowed mig-1g=allow/ok t4=allow/ok",
				"frank [] h100=allow/ok mig-1g=allow/ok t4=allow/ok",
				"left erin",
			}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, cluster()...)
			w := r.eng.WatchVerdicts(watchOptions())
			defer w.Close()
			if kind, lines := pass(t, w); kind != PassFull || len(lines) != 4 {
				t.Fatalf("first pass %s with %d lines, want full with 4", kind, len(lines))
			}
			if tc.change != nil {
				tc.change(t, r)
			}
			kind, lines := pass(t, w)
			if diff := cmp.Diff(tc.want, summaries(lines)); diff != "" || kind != tc.wantPass {
				t.Errorf("pass %s, want %s; lines (-want +got):\n%s", kind, tc.wantPass, diff)
			}
			// Everything sent is remembered: the next pass has nothing to say (a clock pass where a student runs a
			// GPU pod under a budget).
			if kind, lines := pass(t, w); kind == PassFull || len(lines) != 0 {
				t.Errorf("the pass after: %s with %v, want no line and no full pass", kind, summaries(lines))
			}
		})
	}
}

// TestVerdictWatchClock: what changes by the clock alone counts. A reservation that expires moves the generation;
// a running GPU pod's GPU-hours are re-read at every pass for a user under a budget, and only for them.
func TestVerdictWatchClock(t *testing.T) {
	r := newRig(t, append(cluster(), pod("jupyter-bob-lab", "bob", "lab", "gpu-a100", "nvidia.com/mig-1g.5gb"))...)
	w := r.eng.WatchVerdicts(watchOptions())
	defer w.Close()
	pass(t, w)

	r.admit(t, t4("erin", "other"))
	if _, lines := pass(t, w); len(lines) != 1 {
		t.Fatalf("after erin's admission: %v", summaries(lines))
	}
	r.clock.Add(6 * time.Minute) // past the reservation's TTL
	kind, lines := pass(t, w)
	if diff := cmp.Diff([]string{"erin [students] h100=-/kind_not_allowed mig-1g=allow/ok t4=allow/ok"}, summaries(lines)); diff != "" || kind != PassFull {
		t.Errorf("after the TTL: pass %s, lines (-want +got):\n%s", kind, diff)
	}

	// GPU-hours move without a word to the engine (between two refreshes of the usage API, a pod accrues): bob
	// runs a GPU server under the students' 24-hour budget, erin does not.
	r.hours.mu.Lock()
	r.hours.hours = map[string]map[time.Duration]map[string]float64{
		"bob":  {24 * time.Hour: {"mig A100-SXM4-40GB 1g.5gb": 20}},
		"erin": {24 * time.Hour: {"mig A100-SXM4-40GB 1g.5gb": 20}},
	}
	r.hours.mu.Unlock()
	kind, lines = pass(t, w)
	want := []string{"bob [students] h100=-/kind_not_allowed mig-1g=-/budget_exhausted t4=-/budget_exhausted"}
	if diff := cmp.Diff(want, summaries(lines)); diff != "" || kind != PassClock {
		t.Errorf("accrual: pass %s, want clock; lines (-want +got):\n%s", kind, diff)
	}
	// The usage API's next answer is announced (Changed): erin's line follows in a full pass.
	r.eng.Changed()
	if kind, lines := pass(t, w); kind != PassFull || len(lines) != 1 || lines[0].User != "erin" {
		t.Errorf("after Changed: %s %v, want a full pass with erin's line", kind, summaries(lines))
	}
}

// TestVerdictWatchUnavailable: no table while the directory was never read; the error says why.
func TestVerdictWatchUnavailable(t *testing.T) {
	r := newRigWith(t, func(o *Options) {
		o.Directory = func() (map[string][]string, error) { return nil, errors.New("the Hub did not answer") }
	}, cluster()...)
	w := r.eng.WatchVerdicts(watchOptions())
	defer w.Close()
	_, err := w.Pass(context.Background(), func(VerdictLine) error { t.Error("a line"); return nil })
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "the Hub did not answer") {
		t.Errorf("err %v, want ErrUnavailable with the Hub's error", err)
	}
}

// TestVerdictWatchMetrics: passes by kind and the open watches.
func TestVerdictWatchMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := newRigWith(t, func(o *Options) { o.Registerer = reg }, cluster()...)
	w := r.eng.WatchVerdicts(watchOptions())
	pass(t, w)
	pass(t, w)
	want := `
# HELP gpuhub_quota_verdict_watches Open watches of verdicts (assess/watch): one per gpu-profiles replica.
# TYPE gpuhub_quota_verdict_watches gauge
gpuhub_quota_verdict_watches 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpuhub_quota_verdict_watches"); err != nil {
		t.Error(err)
	}
	w.Close()
	w.Close()
	got := map[string]float64{
		PassFull: testutil.ToFloat64(r.eng.verdicts.passes.WithLabelValues(PassFull)), PassClock: testutil.ToFloat64(r.eng.verdicts.passes.WithLabelValues(PassClock)),
		PassSkipped: testutil.ToFloat64(r.eng.verdicts.passes.WithLabelValues(PassSkipped)), "watches": testutil.ToFloat64(r.eng.verdicts.watches),
	}
	if diff := cmp.Diff(map[string]float64{PassFull: 1, PassClock: 0, PassSkipped: 1, "watches": 0}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestGeneration: each thing a verdict depends on moves the generation.
func TestGeneration(t *testing.T) {
	tests := map[string]func(t *testing.T, r *rig){
		"a pod":             func(t *testing.T, r *rig) { r.create(t, pod("jupyter-dave", "dave", "", "gpu-h100", "nvidia.com/gpu")) },
		"a reservation":     func(t *testing.T, r *rig) { r.admit(t, t4("erin", "")) },
		"Changed":           func(_ *testing.T, r *rig) { r.eng.Changed() },
		"a replica's reset": func(_ *testing.T, r *rig) { r.eng.SetDeciding(false); r.eng.ApplyReplica(ReplicaLine{Reset: true}) },
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, cluster()...)
			before := r.eng.Generation()
			if again := r.eng.Generation(); again != before {
				t.Fatalf("moved by itself: %d, %d", before, again)
			}
			change(t, r)
			if after := r.eng.Generation(); after == before {
				t.Errorf("still %d", after)
			}
		})
	}
}

// TestVerdictWatchHoldEnds: a waitlist hold that ends by the clock moves the generation before the waitlist's
// tick removes it: the users it was held against get their line.
func TestVerdictWatchHoldEnds(t *testing.T) {
	r := newWaitRig(t, &decayedTable{m: map[string]map[string]float64{}})
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
	if res := r.admit(t, joining(h100("bob", "", 1), false)); res.Waitlist == nil {
		t.Fatalf("bob did not join: %+v", res)
	}
	r.clock.Add(time.Minute)
	r.remove(t, "carol-2")
	if tick := r.eng.WaitlistTick(r.clock.Now()); len(tick.Held) != 1 {
		t.Fatalf("no hold for bob: %+v", tick)
	}
	w := r.eng.WatchVerdicts(watchOptions()[:1]) // the H100
	defer w.Close()
	held := func(lines []VerdictLine) map[string]int64 {
		out := map[string]int64{}
		for _, l := range lines {
			out[l.User] = l.Options[0].HeldForOthers
		}
		return out
	}
	_, lines := pass(t, w)
	if got := held(lines); got["dave"] != 1 || got["bob"] != 0 {
		t.Fatalf("held for others in the first table: %v", got)
	}
	if kind, lines := pass(t, w); kind != PassSkipped || len(lines) != 0 {
		t.Fatalf("before the hold ends: %s %v", kind, summaries(lines))
	}
	r.clock.Add(10 * time.Minute) // the hold ends; no tick yet
	kind, lines := pass(t, w)
	// Every user's line changes: bob's own hold is gone, and so is the unit held against the others.
	if got := held(lines); kind != PassFull || got["dave"] != 0 || len(got) != 9 || !lines[1].Options[0].HeldForYouUntil.IsZero() {
		t.Errorf("after the hold ended: pass %s, held for others %v, want a full pass with all 9 users' lines, none held", kind, got)
	}
}
