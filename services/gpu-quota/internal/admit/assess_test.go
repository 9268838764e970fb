package admit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/golden"
)

// formOptions are the choices gpu-profiles generates for the test cluster, as it asks about them.
func formOptions() []AssessOption {
	opt := func(id string, r Request) AssessOption {
		return AssessOption{ID: id, Resources: r.Resources, NodeSelector: r.NodeSelector}
	}
	return []AssessOption{
		{ID: "cpu"},
		opt("gpu-h100-80gb-hbm3", h100("", "", 1)),
		opt("gpu-h100-80gb-hbm3-x2", h100("", "", 2)),
		opt("mig-a100-sxm4-40gb-3g-20gb", mig("", "", "3g.20gb")),
		opt("mig-a100-sxm4-40gb-1g-5gb", mig("", "", "1g.5gb")),
		opt("shared-t4", t4("", "")),
	}
}

// verdicts summarizes an assessment as "id=allow/reason" (or "id=-/reason" when refused).
func verdicts(a Assessment) []string {
	out := make([]string, len(a.Options))
	for i, v := range a.Options {
		verb := "allow"
		if !v.Allow {
			verb = "-"
		}
		out[i] = fmt.Sprintf("%s=%s/%s", v.ID, verb, v.Reason)
	}
	return out
}

func TestAssess(t *testing.T) {
	carolH100s := []*corev1.Pod{
		pod("jupyter-carol", "carol", "", "gpu-h100", "nvidia.com/gpu"),
		pod("jupyter-carol-2", "carol", "two", "gpu-h100", "nvidia.com/gpu"),
	}
	bobMIG := []*corev1.Pod{pod("jupyter-bob", "bob", "", "gpu-a100", "nvidia.com/mig-1g.5gb")}
	tests := map[string]struct {
		pods    []*corev1.Pod
		hours   map[string]map[time.Duration]map[string]float64
		noHours bool
		closed  bool
		before  []Request // admitted first (their reservations count)
		req     AssessRequest
		want    []string
		wantOn  string
	}{
		"a student may take MIG slices and T4 shares, not H100s": {
			req: AssessRequest{User: "bob"},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=-/kind_not_allowed", "gpu-h100-80gb-hbm3-x2=-/kind_not_allowed",
				"mig-a100-sxm4-40gb-3g-20gb=allow/ok", "mig-a100-sxm4-40gb-1g-5gb=allow/ok", "shared-t4=allow/ok"},
		},
		"a student with a GPU server is at the server limit for another": {
			pods: bobMIG, req: AssessRequest{User: "bob", Server: "second"},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=-/kind_not_allowed", "gpu-h100-80gb-hbm3-x2=-/kind_not_allowed",
				"mig-a100-sxm4-40gb-3g-20gb=-/max_gpus", "mig-a100-sxm4-40gb-1g-5gb=-/max_servers", "shared-t4=-/max_servers"},
		},
		"the form of the server being restarted leaves its own pod out": {
			pods: bobMIG, req: AssessRequest{User: "bob"},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=-/kind_not_allowed", "gpu-h100-80gb-hbm3-x2=-/kind_not_allowed",
				"mig-a100-sxm4-40gb-3g-20gb=allow/ok", "mig-a100-sxm4-40gb-1g-5gb=allow/ok", "shared-t4=allow/ok"},
		},
		"reservations count as held": {
			before: []Request{mig("bob", "", "1g.5gb")}, req: AssessRequest{User: "bob", Server: "second"},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=-/kind_not_allowed", "gpu-h100-80gb-hbm3-x2=-/kind_not_allowed",
				"mig-a100-sxm4-40gb-3g-20gb=-/max_gpus", "mig-a100-sxm4-40gb-1g-5gb=-/max_servers", "shared-t4=-/max_servers"},
		},
		"budget spent: every GPU choice refused, CPU still offered": {
			hours: map[string]map[time.Duration]map[string]float64{"bob": {day: {classMIG1: 2.5}}},
			req:   AssessRequest{User: "bob"},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=-/kind_not_allowed", "gpu-h100-80gb-hbm3-x2=-/kind_not_allowed",
				"mig-a100-sxm4-40gb-3g-20gb=-/budget_exhausted", "mig-a100-sxm4-40gb-1g-5gb=-/budget_exhausted", "shared-t4=-/budget_exhausted"},
		},
		"none free is not a quota reason: dave may take an H100 carol holds": {
			pods: carolH100s, req: AssessRequest{User: "dave"},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=allow/ok", "gpu-h100-80gb-hbm3-x2=allow/ok",
				"mig-a100-sxm4-40gb-3g-20gb=allow/ok", "mig-a100-sxm4-40gb-1g-5gb=allow/ok", "shared-t4=-/kind_not_allowed"},
		},
		"holding two H100s leaves no room under max 2 GPUs": {
			pods: carolH100s, req: AssessRequest{User: "carol", Server: "third"},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=-/max_gpus", "gpu-h100-80gb-hbm3-x2=-/max_gpus",
				"mig-a100-sxm4-40gb-3g-20gb=-/max_gpus", "mig-a100-sxm4-40gb-1g-5gb=-/max_gpus", "shared-t4=-/kind_not_allowed"},
		},
		"usage unavailable, open": {
			noHours: true, req: AssessRequest{User: "bob"},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=-/kind_not_allowed", "gpu-h100-80gb-hbm3-x2=-/kind_not_allowed",
				"mig-a100-sxm4-40gb-3g-20gb=allow/usage_unavailable", "mig-a100-sxm4-40gb-1g-5gb=allow/usage_unavailable", "shared-t4=allow/usage_unavailable"},
		},
		"usage unavailable, closed": {
			noHours: true, closed: true, req: AssessRequest{User: "bob"}, wantOn: "closed",
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=-/kind_not_allowed", "gpu-h100-80gb-hbm3-x2=-/kind_not_allowed",
				"mig-a100-sxm4-40gb-3g-20gb=-/usage_unavailable", "mig-a100-sxm4-40gb-1g-5gb=-/usage_unavailable", "shared-t4=-/usage_unavailable"},
		},
		"groups in the request win over the directory": {
			req: AssessRequest{User: "bob", Groups: []string{"researchers"}},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=allow/ok", "gpu-h100-80gb-hbm3-x2=allow/ok",
				"mig-a100-sxm4-40gb-3g-20gb=allow/ok", "mig-a100-sxm4-40gb-1g-5gb=allow/ok", "shared-t4=-/kind_not_allowed"},
		},
		"no groups anywhere: the default": {
			req: AssessRequest{User: "nobody"},
			want: []string{"cpu=allow/no_gpu", "gpu-h100-80gb-hbm3=allow/ok", "gpu-h100-80gb-hbm3-x2=-/max_gpus",
				"mig-a100-sxm4-40gb-3g-20gb=allow/ok", "mig-a100-sxm4-40gb-1g-5gb=allow/ok", "shared-t4=allow/ok"},
		},
		"exempt": {
			pods: carolH100s, req: AssessRequest{User: "admin"},
			want: []string{"cpu=allow/exempt", "gpu-h100-80gb-hbm3=allow/exempt", "gpu-h100-80gb-hbm3-x2=allow/exempt",
				"mig-a100-sxm4-40gb-3g-20gb=allow/exempt", "mig-a100-sxm4-40gb-1g-5gb=allow/exempt", "shared-t4=allow/exempt"},
		},
		"no options": {req: AssessRequest{User: "bob", Options: []AssessOption{}}, want: []string{}},
	}
	var messages strings.Builder
	for _, name := range sortedNames(tests) {
		tc := tests[name]
		t.Run(name, func(t *testing.T) {
			objs := cluster()
			for _, p := range tc.pods {
				objs = append(objs, p)
			}
			r := newRig(t, objs...)
			r.hours.hours, r.hours.unavailable = tc.hours, tc.noHours
			if tc.closed {
				r.pol.Store(mustPolicy(t, "onUnavailable: closed\n"+testPolicy))
			}
			for _, b := range tc.before {
				if res := r.admit(t, b); !res.Allow {
					t.Fatalf("before: %+v refused: %s", b, res.Message)
				}
			}
			decisions, reserved := len(r.log.List(decision.Filter{})), r.reservations()
			req := tc.req
			if req.Options == nil {
				req.Options = formOptions()
			}
			got, err := r.eng.Assess(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, verdicts(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			wantOn := tc.wantOn
			if wantOn == "" {
				wantOn = "open"
			}
			if got.OnUnavailable != wantOn {
				t.Errorf("onUnavailable %q, want %q", got.OnUnavailable, wantOn)
			}
			for _, v := range got.Options {
				if v.Allow == (v.Message != "") && v.Reason != "usage_unavailable" {
					t.Errorf("%s: message %q for allow=%v", v.ID, v.Message, v.Allow)
				}
				if !v.Allow {
					fmt.Fprintf(&messages, "%s: %s: %s\n", name, v.ID, v.Message)
				}
			}
			if n := len(r.log.List(decision.Filter{})); n != decisions {
				t.Errorf("assess recorded %d decisions", n-decisions)
			}
			if n := r.reservations(); n != reserved {
				t.Errorf("assess changed the reservations: %d, was %d", n, reserved)
			}
			if n := r.apiRead.Load(); n != 0 {
				t.Errorf("assess made %d API-server requests, want 0", n)
			}
		})
	}
	golden.Check(t, "assess-messages.golden", messages.String())
}

// TestAssessMatchesAdmit: for every option, Assess says what Admit's policy decision says (Admit's none_free
// aside, which is about free GPUs, not quota), less what Admit's refusal adds about what is free instead.
func TestAssessMatchesAdmit(t *testing.T) {
	for _, user := range []string{"bob", "carol", "dave", "nobody", "admin"} {
		r := newRig(t, append(cluster(), pod("jupyter-carol", "carol", "", "gpu-h100", "nvidia.com/gpu"))...)
		got, err := r.eng.Assess(context.Background(), AssessRequest{User: user, Server: "x", Options: formOptions()})
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range formOptions() {
			res := r.admit(t, Request{User: user, Server: "x", Resources: o.Resources, NodeSelector: o.NodeSelector})
			r.eng.mu.Lock()
			r.eng.res = newReservations() // each admit as if it were the only one
			r.eng.mu.Unlock()
			if res.Reason == string(ReasonNoneFree) {
				continue
			}
			v := got.Options[i]
			if len(res.CanTake) > 0 && !res.Allow {
				msg, ok := strings.CutSuffix(res.Message, freeWithinQuota(res.CanTake))
				if !ok {
					t.Errorf("%s %s: admit's refusal %q does not end with what is free instead", user, o.ID, res.Message)
				}
				res.Message = msg
			}
			if v.Allow != res.Allow || v.Reason != res.Reason || v.Message != res.Message {
				t.Errorf("%s %s: assess %+v, admit %v %s %q", user, o.ID, v, res.Allow, res.Reason, res.Message)
			}
		}
	}
}

func TestAssessUnavailable(t *testing.T) {
	r := newRig(t, cluster()...)
	req := AssessRequest{User: "bob", Options: formOptions()}
	r.pol.Store(nil)
	if _, err := r.eng.Assess(context.Background(), req); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no policy: err %v, want ErrUnavailable", err)
	}
	r.pol.Store(mustPolicy(t, testPolicy))
	r.eng.o.Directory = func() (map[string][]string, error) { return nil, errors.New("hub down") }
	if _, err := r.eng.Assess(context.Background(), req); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "hub down") {
		t.Errorf("no directory: err %v", err)
	}
	req.Groups = []string{"students"}
	if _, err := r.eng.Assess(context.Background(), req); err != nil {
		t.Errorf("groups in the request need no directory: %v", err)
	}
	r.eng.o.Synced = func() error { return errors.New("informer caches not synced yet") }
	if _, err := r.eng.Assess(context.Background(), req); !errors.Is(err, ErrUnavailable) {
		t.Errorf("unsynced: err %v", err)
	}
}

// TestAssessConcurrentWithAdmits runs forms and spawns at once (for -race): assessing never changes what
// admissions decide.
func TestAssessConcurrentWithAdmits(t *testing.T) {
	r := newRig(t, cluster()...)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := r.eng.Assess(context.Background(), AssessRequest{User: "carol", Server: fmt.Sprint(i), Options: formOptions()}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	admitted := 0
	for i := range 4 {
		if res := r.admit(t, h100("dave", fmt.Sprint(i), 1)); res.Allow {
			admitted++
		}
	}
	wg.Wait()
	if admitted != 2 {
		t.Errorf("%d H100 servers admitted for dave, want 2 (his limit and the cluster's)", admitted)
	}
}

// TestAssessWaitlistHolds: a verdict tells what the waitlist's holds do to the option for this server, from
// the holds admit counts: units held for someone else are not free for it; the one held for it is its own,
// with its end.
func TestAssessWaitlistHolds(t *testing.T) {
	type held struct {
		ID            string
		HeldForOthers int64
		HeldForYou    time.Time
	}
	holdEnds := t0.Add(time.Minute + 10*time.Minute) // bob's turn comes a minute in; the rig holds 10 min
	tests := map[string]struct {
		holdForBob bool
		after      time.Duration // the clock moves on after the tick
		req        AssessRequest
		want       []held
	}{
		"nobody waits": {
			req:  AssessRequest{User: "dave"},
			want: []held{{ID: "h100"}, {ID: "mig-1g"}},
		},
		"held for bob: not free for dave": {
			holdForBob: true, req: AssessRequest{User: "dave"},
			want: []held{{ID: "h100", HeldForOthers: 1}, {ID: "mig-1g"}},
		},
		"held for bob: bob's, until the hold ends": {
			holdForBob: true, req: AssessRequest{User: "bob"},
			want: []held{{ID: "h100", HeldForYou: holdEnds}, {ID: "mig-1g"}},
		},
		"held for bob's default server: not for his other one": {
			holdForBob: true, req: AssessRequest{User: "bob", Server: "other"},
			want: []held{{ID: "h100", HeldForOthers: 1}, {ID: "mig-1g"}},
		},
		"a hold past its end counts for nobody, before the tick removes it": {
			holdForBob: true, after: 10 * time.Minute, req: AssessRequest{User: "dave"},
			want: []held{{ID: "h100"}, {ID: "mig-1g"}},
		},
	}
	for _, name := range sortedNames(tests) {
		tc := tests[name]
		t.Run(name, func(t *testing.T) {
			r := newWaitRig(t, &decayedTable{m: map[string]map[string]float64{}})
			r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
			r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
			if tc.holdForBob {
				if res := r.admit(t, joining(h100("bob", "", 1), false)); res.Waitlist == nil {
					t.Fatalf("bob did not join: %+v", res)
				}
				r.clock.Add(time.Minute)
				r.remove(t, "carol-2")
				if tick := r.eng.WaitlistTick(r.clock.Now()); len(tick.Held) != 1 {
					t.Fatalf("no hold for bob: %+v", tick)
				}
				r.clock.Add(tc.after)
			}
			req := tc.req
			req.Options = []AssessOption{
				{ID: "h100", Resources: h100("", "", 1).Resources, NodeSelector: h100("", "", 1).NodeSelector},
				{ID: "mig-1g", Resources: mig("", "", "1g.5gb").Resources, NodeSelector: mig("", "", "1g.5gb").NodeSelector},
			}
			gen := r.eng.wl.gen
			got, err := r.eng.Assess(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			var gotHeld []held
			for _, v := range got.Options {
				if !v.Allow {
					t.Errorf("%s refused: %s", v.ID, v.Message)
				}
				gotHeld = append(gotHeld, held{ID: v.ID, HeldForOthers: v.HeldForOthers, HeldForYou: v.HeldForYouUntil})
			}
			if diff := cmp.Diff(tc.want, gotHeld); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if r.eng.wl.gen != gen {
				t.Error("assess changed the waitlist")
			}
			// What admit does with the same request: refused for the waitlist exactly where units are held for others.
			res := r.admit(t, Request{User: req.User, Server: req.Server, Resources: req.Options[0].Resources, NodeSelector: req.Options[0].NodeSelector})
			if refused := res.Reason == string(ReasonWaitlist); refused != (gotHeld[0].HeldForOthers > 0) {
				t.Errorf("admit %s %q, while assess says %d held for others", res.Reason, res.Message, gotHeld[0].HeldForOthers)
			}
		})
	}
}
