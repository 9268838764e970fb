package decide

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// at is a time on the test day, 2026-03-02, in UTC: at(14, 55).
func at(h, m int) time.Time { return time.Date(2026, 3, 2, h, m, 0, 0, time.UTC) }

const mib = 1 << 20

// gpuRule is the README's gpu rule without maxAge.
func gpuRule() policy.Rule {
	return policy.Rule{Kind: gpu.KindGPU, StaleAfter: 2 * time.Minute, IdlePeriod: time.Hour, Utilization: 5,
		MemoryTolerance: 256 * mib, Warn: 15 * time.Minute, Snooze: time.Hour, MaxSnoozes: 2, Action: policy.Stop}
}

func cpuRule() policy.Rule {
	return policy.Rule{CPU: true, StaleAfter: 2 * time.Minute, IdlePeriod: time.Hour, Warn: 10 * time.Minute,
		Snooze: time.Hour, MaxSnoozes: 2, Action: policy.Stop}
}

// samples is one sample a minute from `from` to `to` (both included), all with util and memory mem.
func samples(from, to time.Time, util float64, mem int64) []Sample {
	var out []Sample
	for t := from; !t.After(to); t = t.Add(time.Minute) {
		out = append(out, Sample{At: t, Utilization: util, MemoryBytes: mem})
	}
	return out
}

func join(parts ...[]Sample) []Sample {
	var out []Sample
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// in is a GPU server of bob started at 12:00, ready, with fresh usage data at now and telemetry hist.
func in(now time.Time, r policy.Rule, hist []Sample) Input {
	return Input{
		Now: now, Rule: r,
		Server:    Server{User: "bob", Groups: []string{"students"}, Kind: gpu.KindGPU, Started: at(12, 0), LastActivity: now.Add(-time.Minute), Ready: true},
		Telemetry: Telemetry{Present: true, Samples: hist},
		Usage:     Usage{Reachable: true, At: now.Add(-30 * time.Second)},
	}
}

func with(i Input, f func(*Input)) Input { f(&i); return i }

// busyThenIdle: busy until idleFrom (exclusive), idle from idleFrom to now.
func busyThenIdle(idleFrom, now time.Time) []Sample {
	return join(samples(at(12, 0), idleFrom.Add(-time.Minute), 80, 4096*mib), samples(idleFrom, now, 0, 4096*mib))
}

type outcome struct {
	Action   Action
	Reason   Reason
	Would    Action
	Deadline time.Time
	IdleFor  time.Duration
	Detail   string
	// Contended: judged under idleWhenContended.
	Contended bool
}

func project(d Decision) outcome {
	return outcome{Action: d.Action, Reason: d.Reason, Would: d.Would, Deadline: d.Deadline, IdleFor: d.Numbers.IdleFor, Detail: d.Detail,
		Contended: d.Numbers.Contended}
}

// contended: someone waits for the server's GPU class, and the rule idles after 20 min then.
func contended(i *Input) {
	i.Rule.IdleWhenContended = 20 * time.Minute
	i.Contended = true
}

func TestDecide(t *testing.T) {
	now := at(14, 55)
	idle52 := busyThenIdle(at(14, 3), now)
	warned := Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 10)}
	cases := map[string]struct {
		tc   Input
		want outcome
	}{
		"GPU busy": {
			tc:   in(now, gpuRule(), samples(at(12, 0), now, 80, 4096*mib)),
			want: outcome{Action: None, Reason: ReasonGPUBusy},
		},
		"idle 30 min: not yet": {
			tc:   in(now, gpuRule(), busyThenIdle(at(14, 25), now)),
			want: outcome{Action: None, Reason: ReasonIdle, IdleFor: 30 * time.Minute},
		},
		"idle 52 min, first warning: the full warn period from now": {
			tc:   in(now, gpuRule(), idle52),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 10), IdleFor: 52 * time.Minute},
		},
		"idle 45 min, warned on time: the deadline is the idle period's end": {
			tc: with(in(now, gpuRule(), busyThenIdle(at(14, 10), now)), func(i *Input) {
				i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 10)}
			}),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 10), IdleFor: 45 * time.Minute},
		},
		"idle 67 min, warned 15 min: stop": {
			tc:   with(in(at(15, 10), gpuRule(), busyThenIdle(at(14, 3), at(15, 10))), func(i *Input) { i.Notice = warned }),
			want: outcome{Action: Stop, Reason: ReasonIdle, IdleFor: 67 * time.Minute},
		},
		"idle 90 min, never warned (culler was down): warn first": {
			tc:   in(at(15, 33), gpuRule(), busyThenIdle(at(14, 3), at(15, 33))),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 48), IdleFor: 90 * time.Minute},
		},
		"warned only 5 min ago, idle period over: the warning runs its full period": {
			tc: with(in(at(15, 10), gpuRule(), busyThenIdle(at(14, 3), at(15, 10))), func(i *Input) {
				i.Notice = Notice{Reason: ReasonIdle, Since: at(15, 5), Deadline: at(15, 20)}
			}),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 20), IdleFor: 67 * time.Minute},
		},
		"snoozed: the stop was due, the snooze holds it": {
			tc: with(in(at(15, 20), gpuRule(), busyThenIdle(at(14, 3), at(15, 20))), func(i *Input) {
				i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(16, 10), Snoozes: 1}
			}),
			want: outcome{Action: Skip, Reason: ReasonSnoozed, Would: Stop, Deadline: at(16, 10), IdleFor: 77 * time.Minute},
		},
		"snooze over, still idle: stop": {
			tc: with(in(at(16, 10), gpuRule(), busyThenIdle(at(14, 3), at(16, 10))), func(i *Input) {
				i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(16, 10), Snoozes: 1}
			}),
			want: outcome{Action: Stop, Reason: ReasonIdle, IdleFor: 127 * time.Minute},
		},
		"used again after the warning: none (the notice goes)": {
			tc: with(in(at(15, 5), gpuRule(), join(busyThenIdle(at(14, 3), at(15, 2)), samples(at(15, 3), at(15, 5), 60, 4096*mib))), func(i *Input) {
				i.Notice = warned
			}),
			want: outcome{Action: None, Reason: ReasonGPUBusy},
		},
		"low utilization but memory growing (a model loading): idle only since it stopped": {
			tc:   in(now, gpuRule(), join(samples(at(13, 0), at(14, 44), 1, 1024*mib), samples(at(14, 45), now, 1, 4096*mib))),
			want: outcome{Action: None, Reason: ReasonIdle, IdleFor: 10 * time.Minute},
		},
		"memory moving within the tolerance: idle": {
			tc:   in(now, gpuRule(), join(samples(at(13, 0), at(14, 29), 1, 4000*mib), samples(at(14, 30), now, 1, 4200*mib))),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 10), IdleFor: 115 * time.Minute},
		},
		"a gap in the telemetry: idle only since it came back": {
			tc:   in(now, gpuRule(), join(samples(at(12, 0), at(14, 9), 0, 0), samples(at(14, 20), now, 0, 0))),
			want: outcome{Action: None, Reason: ReasonIdle, IdleFor: 35 * time.Minute},
		},
		"idle since before the server started: counted from the start": {
			tc:   with(in(now, gpuRule(), samples(at(12, 0), now, 0, 0)), func(i *Input) { i.Server.Started = at(14, 25) }),
			want: outcome{Action: None, Reason: ReasonIdle, IdleFor: 30 * time.Minute},
		},
		"GPU idle, browser tab open and sending activity: warned all the same": {
			tc:   with(in(now, gpuRule(), idle52), func(i *Input) { i.Server.LastActivity = now }),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 10), IdleFor: 52 * time.Minute},
		},
		"GPU idle, Hub active, the rule wants Hub inactivity too: kept": {
			tc: with(in(now, gpuRule(), idle52), func(i *Input) {
				i.Rule.HubIdlePeriod = 30 * time.Minute
				i.Server.LastActivity = at(14, 50)
			}),
			want: outcome{Action: None, Reason: ReasonHubBusy, IdleFor: 52 * time.Minute},
		},
		"GPU and Hub idle, the rule wants both: warned when the later is due": {
			tc: with(in(now, gpuRule(), idle52), func(i *Input) {
				i.Rule.HubIdlePeriod = 30 * time.Minute
				i.Server.LastActivity = at(14, 35)
			}),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 10), IdleFor: 52 * time.Minute},
		},
		"long silent GPU-busy cell, browser closed for hours: kept": {
			tc:   with(in(now, gpuRule(), samples(at(12, 0), now, 97, 30000*mib)), func(i *Input) { i.Server.LastActivity = at(10, 0) }),
			want: outcome{Action: None, Reason: ReasonGPUBusy},
		},
		"someone waits for the class: idleWhenContended": {
			tc:   with(in(now, gpuRule(), busyThenIdle(at(14, 30), now)), contended),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 10), IdleFor: 25 * time.Minute, Contended: true},
		},
		"nobody waits: the idle period, 25 min is not yet": {
			tc: with(in(now, gpuRule(), busyThenIdle(at(14, 30), now)), func(i *Input) {
				i.Rule.IdleWhenContended = 20 * time.Minute
			}),
			want: outcome{Action: None, Reason: ReasonIdle, IdleFor: 25 * time.Minute},
		},
		"someone waits, the rule has no idleWhenContended: the idle period": {
			tc:   with(in(now, gpuRule(), busyThenIdle(at(14, 30), now)), func(i *Input) { i.Contended = true }),
			want: outcome{Action: None, Reason: ReasonIdle, IdleFor: 25 * time.Minute},
		},
		"someone waits, idle 52 min, never warned: still the full warning": {
			tc:   with(in(now, gpuRule(), idle52), contended),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 10), IdleFor: 52 * time.Minute, Contended: true},
		},
		"someone waits, warned 15 min: stop (nobody waiting: 20 min more)": {
			tc: with(in(at(15, 10), gpuRule(), busyThenIdle(at(14, 30), at(15, 10))), func(i *Input) {
				contended(i)
				i.Notice = warned
			}),
			want: outcome{Action: Stop, Reason: ReasonIdle, IdleFor: 40 * time.Minute, Contended: true},
		},
		"someone waits since after the warning: the deadline shown holds": {
			tc: with(in(at(15, 0), gpuRule(), busyThenIdle(at(14, 10), at(15, 0))), func(i *Input) {
				contended(i)
				i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 10)}
			}),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 10), IdleFor: 50 * time.Minute, Contended: true},
		},
		"someone waits, snoozed: held until the snoozed deadline": {
			tc: with(in(at(15, 12), gpuRule(), busyThenIdle(at(14, 30), at(15, 12))), func(i *Input) {
				contended(i)
				i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 30), Snoozes: 1}
			}),
			want: outcome{Action: Skip, Would: Stop, Reason: ReasonSnoozed, Deadline: at(15, 30), IdleFor: 42 * time.Minute, Contended: true},
		},
		"someone waits, idle culling only then: warned": {
			tc: with(in(now, gpuRule(), busyThenIdle(at(14, 30), now)), func(i *Input) {
				contended(i)
				i.Rule.IdlePeriod = 0
			}),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 10), IdleFor: 25 * time.Minute, Contended: true},
		},
		"idle culling only while someone waits, nobody does: off": {
			tc: with(in(now, gpuRule(), busyThenIdle(at(14, 30), now)), func(i *Input) {
				i.Rule.IdlePeriod, i.Rule.IdleWhenContended = 0, 20*time.Minute
			}),
			want: outcome{Action: None, Reason: ReasonOff, IdleFor: 25 * time.Minute},
		},
		"a CPU-only server is not judged by the waitlist": {
			tc: with(in(now, cpuRule(), nil), func(i *Input) {
				i.Server.Kind, i.Server.LastActivity, i.Usage, i.Telemetry = "", at(14, 30), Usage{}, Telemetry{}
				i.Contended = true
			}),
			want: outcome{Action: None, Reason: ReasonIdle, IdleFor: 25 * time.Minute},
		},
		"max age, busy: warned, then the deadline is the age": {
			tc: with(in(now, gpuRule(), samples(at(12, 0), now, 90, 0)), func(i *Input) {
				i.Rule.MaxAge = 3 * time.Hour
			}),
			want: outcome{Action: Warn, Reason: ReasonMaxAge, Deadline: at(15, 10)},
		},
		"max age reached after a warning: stop however busy": {
			tc: with(in(at(15, 10), gpuRule(), samples(at(12, 0), at(15, 10), 90, 0)), func(i *Input) {
				i.Rule.MaxAge = 3 * time.Hour
				i.Notice = Notice{Reason: ReasonMaxAge, Since: at(14, 45), Deadline: at(15, 0)}
			}),
			want: outcome{Action: Stop, Reason: ReasonMaxAge},
		},
		"idle culling off (idlePeriod 0s)": {
			tc:   with(in(now, gpuRule(), idle52), func(i *Input) { i.Rule.IdlePeriod = 0 }),
			want: outcome{Action: None, Reason: ReasonOff, IdleFor: 52 * time.Minute},
		},
		"dry run: would stop, does nothing": {
			tc:   with(in(at(15, 10), gpuRule(), busyThenIdle(at(14, 3), at(15, 10))), func(i *Input) { i.Rule.DryRun = true }),
			want: outcome{Action: Skip, Reason: ReasonDryRun, Would: Stop, IdleFor: 67 * time.Minute, Detail: "would stop: idle"},
		},
		"dry run: would warn": {
			tc: with(in(now, gpuRule(), idle52), func(i *Input) { i.Rule.DryRun = true }),
			want: outcome{Action: Skip, Reason: ReasonDryRun, Would: Warn, Deadline: at(15, 3), IdleFor: 52 * time.Minute,
				Detail: "would warn: idle"},
		},
		"telemetry missing: never a stop": {
			tc:   with(in(at(15, 10), gpuRule(), nil), func(i *Input) { i.Telemetry.Present = false; i.Notice = warned }),
			want: outcome{Action: Skip, Reason: ReasonTelMiss},
		},
		"telemetry stale (agent down): never a stop": {
			tc: with(in(at(15, 10), gpuRule(), busyThenIdle(at(14, 3), at(15, 0))), func(i *Input) { i.Notice = warned }),
			want: outcome{Action: Skip, Reason: ReasonTelStale,
				Detail: "the GPU telemetry is 10 min old (stale after 2 min)"},
		},
		"usage API unreachable": {
			tc:   with(in(at(15, 10), gpuRule(), busyThenIdle(at(14, 3), at(15, 10))), func(i *Input) { i.Usage = Usage{}; i.Notice = warned }),
			want: outcome{Action: Skip, Reason: ReasonNoUsage},
		},
		"usage data stale": {
			tc: with(in(at(15, 10), gpuRule(), busyThenIdle(at(14, 3), at(15, 10))), func(i *Input) {
				i.Usage.At = at(15, 0)
			}),
			want: outcome{Action: Skip, Reason: ReasonUsageOld, Detail: "the usage data is 10 min old (stale after 2 min)"},
		},
		"exempt group": {
			tc: with(in(now, gpuRule(), idle52), func(i *Input) {
				i.Rule.Exempt = policy.Exempt{Groups: []string{"students"}}
			}),
			want: outcome{Action: Skip, Reason: ReasonExempt, Detail: "group students"},
		},
		"exempt by annotation": {
			tc: with(in(now, gpuRule(), idle52), func(i *Input) {
				i.Rule.Exempt = policy.Exempt{Annotations: map[string]string{"gpuhub.io/cull": "never"}}
				i.Server.Annotations = map[string]string{"gpuhub.io/cull": "never"}
			}),
			want: outcome{Action: Skip, Reason: ReasonExempt, Detail: "annotation gpuhub.io/cull=never"},
		},
		"pending stop": {
			tc:   with(in(now, gpuRule(), idle52), func(i *Input) { i.Server.Pending = "stop" }),
			want: outcome{Action: Skip, Reason: ReasonPending, Detail: "pending stop"},
		},
		"not ready": {
			tc:   with(in(now, gpuRule(), idle52), func(i *Input) { i.Server.Ready = false }),
			want: outcome{Action: Skip, Reason: ReasonNotReady},
		},
		"CPU-only, Hub activity 50 min ago: warned": {
			tc: with(in(now, cpuRule(), nil), func(i *Input) {
				i.Server.Kind, i.Server.LastActivity, i.Usage, i.Telemetry = "", at(14, 5), Usage{}, Telemetry{}
			}),
			want: outcome{Action: Warn, Reason: ReasonIdle, Deadline: at(15, 5), IdleFor: 50 * time.Minute},
		},
		"CPU-only, no activity ever, warned: stop (usage API not needed)": {
			tc: with(in(at(15, 10), cpuRule(), nil), func(i *Input) {
				i.Server.Kind, i.Server.LastActivity, i.Usage, i.Telemetry = "", time.Time{}, Usage{}, Telemetry{}
				i.Server.Started = at(14, 0)
				i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 50), Deadline: at(15, 0)}
			}),
			want: outcome{Action: Stop, Reason: ReasonIdle, IdleFor: 70 * time.Minute},
		},
		"CPU-only, culling off": {
			tc: with(in(now, cpuRule(), nil), func(i *Input) {
				i.Server.Kind, i.Server.LastActivity, i.Rule.IdlePeriod = "", at(10, 0), 0
			}),
			want: outcome{Action: None, Reason: ReasonOff, IdleFor: 2*time.Hour + 55*time.Minute}, // since it started
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Decide(tc.tc)
			if diff := cmp.Diff(tc.want, project(got)); diff != "" {
				t.Errorf("Decide (-want +got):\n%s\nnumbers: %+v", diff, got.Numbers)
			}
			if (got.Action == Warn || got.Action == Stop || got.Would != "") != (got.Message != "") {
				t.Errorf("message %q for %s %s", got.Message, got.Action, got.Reason)
			}
			if got.Action == Stop && (tc.tc.Notice.Since.IsZero() || tc.tc.Now.Sub(tc.tc.Notice.Since) < tc.tc.Rule.Warn ||
				tc.tc.Now.Before(tc.tc.Notice.Deadline)) {
				t.Errorf("a stop without a warning shown for %s: %+v", tc.tc.Rule.Warn, tc.tc.Notice)
			}
		})
	}
}

// TestDecideDeterministic: the order of the samples does not matter, and the input is not changed.
func TestDecideDeterministic(t *testing.T) {
	hist := busyThenIdle(at(14, 3), at(14, 55))
	rev := make([]Sample, len(hist))
	for i, s := range hist {
		rev[len(hist)-1-i] = s
	}
	kept := append([]Sample(nil), rev...)
	a := Decide(in(at(14, 55), gpuRule(), hist))
	b := Decide(in(at(14, 55), gpuRule(), rev))
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("sample order changes the decision (-sorted +reversed):\n%s", diff)
	}
	if diff := cmp.Diff(kept, rev); diff != "" {
		t.Errorf("Decide changed its input:\n%s", diff)
	}
}

func TestSnooze(t *testing.T) {
	r := gpuRule()
	warned := Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 10)}
	cases := map[string]struct {
		n    Notice
		now  time.Time
		rule func(*policy.Rule)
		// contended: someone waits for the server's GPU class (the rule's idleWhenContended is 20 min).
		contended bool
		want      Notice
		wantErr   error
	}{
		"first snooze moves the deadline by the period": {
			n: warned, now: at(15, 0), want: Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(16, 10), Snoozes: 1},
		},
		"second snooze": {
			n:   Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(16, 10), Snoozes: 1},
			now: at(16, 0), want: Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(17, 10), Snoozes: 2},
		},
		"no snoozes left": {
			n: Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(17, 10), Snoozes: 2}, now: at(17, 0), wantErr: ErrNoSnoozesLeft,
		},
		"deadline passed, not yet stopped: from now": {
			n: warned, now: at(15, 12), want: Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(16, 12), Snoozes: 1},
		},
		"max age is not snoozable": {
			n: Notice{Reason: ReasonMaxAge, Since: at(14, 55), Deadline: at(15, 10)}, now: at(15, 0), wantErr: ErrNotSnoozable,
		},
		"the rule allows none": {
			n: warned, now: at(15, 0), rule: func(r *policy.Rule) { r.MaxSnoozes = 0 }, wantErr: ErrNotSnoozable,
		},
		"nothing announced": {now: at(15, 0), wantErr: ErrNothingToSnooze},
		"someone waits: the snooze lasts idleWhenContended, not the snooze period": {
			n: warned, now: at(15, 0), contended: true,
			want: Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 30), Snoozes: 1},
		},
		"someone waits, a second snooze: also cut, and still counted": {
			n: Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 30), Snoozes: 1}, now: at(15, 25), contended: true,
			want: Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 50), Snoozes: 2},
		},
		"someone waits, no snoozes left": {
			n: Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 50), Snoozes: 2}, now: at(15, 45), contended: true,
			wantErr: ErrNoSnoozesLeft,
		},
		"someone waits, the rule has no idleWhenContended: the snooze period": {
			n: warned, now: at(15, 0), contended: true, rule: func(r *policy.Rule) { r.IdleWhenContended = 0 },
			want: Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(16, 10), Snoozes: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rule := r
			rule.IdleWhenContended = 20 * time.Minute
			if tc.rule != nil {
				tc.rule(&rule)
			}
			got, err := Snooze(rule, tc.n, tc.now, tc.contended)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Snooze error %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Snooze (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSnoozeThenDecide: a snooze taken from the panel moves the stop by the snooze period.
func TestSnoozeThenDecide(t *testing.T) {
	n, err := Snooze(gpuRule(), Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 10)}, at(15, 0), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		now  time.Time
		want Action
	}{{at(15, 5), Warn}, {at(15, 10), Skip}, {at(16, 9), Skip}, {at(16, 10), Stop}} {
		i := in(step.now, gpuRule(), busyThenIdle(at(14, 3), step.now))
		i.Notice = n
		if d := Decide(i); d.Action != step.want || (d.Action != Stop && !d.Deadline.Equal(at(16, 10))) {
			t.Errorf("at %s: %s %s deadline %s, want %s", step.now.Format("15:04"), d.Action, d.Reason, d.Deadline.Format("15:04"), step.want)
		}
	}
}

// TestMessagesGolden: what the user reads, in plain words (testdata/messages.golden); the README quotes it.
func TestMessagesGolden(t *testing.T) {
	now := at(14, 55)
	idle52 := busyThenIdle(at(14, 3), now)
	cpu := func(i *Input) {
		i.Server.Kind, i.Server.LastActivity, i.Usage, i.Telemetry = "", at(14, 3), Usage{}, Telemetry{}
	}
	scenes := []struct {
		name string
		in   Input
	}{
		{"warn idle", in(now, gpuRule(), idle52)},
		{"warn idle, no snoozes left", with(in(now, gpuRule(), idle52), func(i *Input) {
			i.Notice = Notice{Reason: ReasonIdle, Since: at(13, 0), Deadline: at(15, 10), Snoozes: 2}
		})},
		{"warn idle, snoozed once", with(in(now, gpuRule(), idle52), func(i *Input) {
			i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 40), Deadline: at(15, 10), Snoozes: 1}
		})},
		{"warn idle and Hub inactive", with(in(now, gpuRule(), idle52), func(i *Input) {
			i.Rule.HubIdlePeriod, i.Server.LastActivity = 30*time.Minute, at(14, 10)
		})},
		{"warn CPU-only", with(in(now, cpuRule(), nil), cpu)},
		{"warn max age, tomorrow", with(in(at(23, 55), gpuRule(), samples(at(12, 0), at(23, 55), 90, 0)), func(i *Input) {
			i.Server.Started, i.Rule.MaxAge = at(0, 5).Add(-6*24*time.Hour), 7*24*time.Hour
		})},
		{"snoozed", with(in(at(15, 20), gpuRule(), busyThenIdle(at(14, 3), at(15, 20))), func(i *Input) {
			i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(16, 10), Snoozes: 1}
		})},
		{"stop idle", with(in(at(15, 10), gpuRule(), busyThenIdle(at(14, 3), at(15, 10))), func(i *Input) {
			i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 10)}
		})},
		{"warn idle, someone waiting", with(in(now, gpuRule(), busyThenIdle(at(14, 30), now)), contended)},
		{"warn idle, idle culling only while someone waits", with(in(now, gpuRule(), busyThenIdle(at(14, 30), now)), func(i *Input) {
			contended(i)
			i.Rule.IdlePeriod = 0
		})},
		{"stop idle, someone waiting", with(in(at(15, 10), gpuRule(), busyThenIdle(at(14, 30), at(15, 10))), func(i *Input) {
			contended(i)
			i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 10)}
		})},
		{"stop CPU-only", with(in(at(15, 10), cpuRule(), nil), func(i *Input) {
			cpu(i)
			i.Notice = Notice{Reason: ReasonIdle, Since: at(14, 55), Deadline: at(15, 3)}
		})},
		{"stop max age", with(in(at(15, 10), gpuRule(), samples(at(12, 0), at(15, 10), 90, 0)), func(i *Input) {
			i.Server.Started, i.Rule.MaxAge = at(15, 10).Add(-7*24*time.Hour), 7*24*time.Hour
			i.Notice = Notice{Reason: ReasonMaxAge, Since: at(14, 55), Deadline: at(15, 10)}
		})},
	}
	var b strings.Builder
	for _, s := range scenes {
		d := Decide(s.in)
		if d.Message == "" {
			t.Errorf("%s: no message (%s %s)", s.name, d.Action, d.Reason)
		}
		fmt.Fprintf(&b, "%s (%s %s): %s\n", s.name, d.Action, d.Reason, d.Message)
	}
	got := b.String()
	golden.Check(t, "messages.golden", got)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	quotes := regexp.MustCompile(`(?m)^- "(.*)"$`).FindAllSubmatch(readme, -1)
	if len(quotes) < 2 {
		t.Fatalf("README.md quotes %d messages", len(quotes))
	}
	for _, q := range quotes {
		if !strings.Contains(got, ": "+string(q[1])+"\n") {
			t.Errorf("README quotes a message that messages.golden does not have: %q", q[1])
		}
	}
}

func TestWords(t *testing.T) {
	for d, want := range map[time.Duration]string{
		30 * time.Second: "less than a minute", 52 * time.Minute: "52 min", 67 * time.Minute: "1 h 7 min",
		3 * time.Hour: "3 h", 50 * time.Hour: "2 days 2 h", 7 * 24 * time.Hour: "7 days",
	} {
		if got := words(d); got != want {
			t.Errorf("words(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestNumbersMap(t *testing.T) {
	d := Decide(in(at(14, 55), gpuRule(), busyThenIdle(at(14, 3), at(14, 55))))
	want := map[string]float64{
		"idle_seconds": 52 * 60, "age_seconds": 175 * 60, "idle_period_seconds": 3600, "warn_seconds": 900,
		"hub_idle_seconds": 60, "utilization_percent": 0, "utilization_below_percent": 5,
		"memory_delta_bytes": 0, "memory_tolerance_bytes": 256 * mib, "snoozes": 0, "max_snoozes": 2,
	}
	if diff := cmp.Diff(want, d.Numbers.Map()); diff != "" {
		t.Errorf("Numbers.Map (-want +got):\n%s", diff)
	}

	// Someone waits: contended 1 and the shorter idle period used.
	d = Decide(with(in(at(14, 55), gpuRule(), busyThenIdle(at(14, 3), at(14, 55))), contended))
	want["contended"], want["idle_period_seconds"] = 1, 20*60
	if diff := cmp.Diff(want, d.Numbers.Map()); diff != "" {
		t.Errorf("Numbers.Map, contended (-want +got):\n%s", diff)
	}
}
