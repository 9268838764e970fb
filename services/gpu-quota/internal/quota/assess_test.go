package quota

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// assessPolicy is decidePolicy as an admin lowered it while servers ran: researchers may hold one whole GPU
// and one MIG slice of 1/7, students may no longer use MIG slices.
const assessPolicy = `
default:
  maxGPUs: 1
  maxServers: 2
  budgets:
    - {window: 24h, gpuHours: 8}
  weights:
    "gpu H100-80GB-HBM3": 2
    shared: 0.25
groups:
  students:
    maxGPUs: 3/7
    maxServers: 1
    allowedKinds: [shared]
    budgets:
      - {window: 24h, gpuHours: 2}
      - {window: 7d, gpuHours: 6}
  researchers:
    maxGPUs: 2
    maxGPUsPerKind: {mig: 1/7, gpu: 1}
    maxServers: 3
  guests:
    maxGPUs: 0
    maxServers: 0
    budgets: [{window: 24h, gpuHours: 0}]
users:
  admin: {exempt: true}
  tom: {maxGPUs: 1, maxServers: 1, budgets: [{window: 1h, gpuHours: 1}]}
`

type assessCase struct {
	user   string
	groups []string
	usage  Usage
	want   []Check // Message aside: the messages are golden (TestAssessMessagesGolden)
}

func assessCases() map[string]assessCase {
	return map[string]assessCase{
		"nothing running: over nothing, whatever the hours": {
			user: "bob", groups: studs, usage: Usage{GPUHours: hours(day, "shared T4", 100.0, 7*day)},
		},
		"exempt: over nothing": {
			user: "admin", usage: Usage{Held: allocs(whole(h100, 8)), Servers: 8, GPUHours: hours(day, "gpu H100-80GB-HBM3", 100.0)},
		},
		"student with a T4 share, within everything": {
			user: "bob", groups: studs, usage: Usage{Held: allocs(timeSliced(t4, 4)), Servers: 1,
				GPUHours: hours(day, "shared T4", 4.0, 7*day, "shared T4", 4.0)},
		},
		"student at the 24h budget (weighted): over it": {
			user: "bob", groups: studs, usage: Usage{Held: allocs(timeSliced(t4, 4)), Servers: 1,
				GPUHours: hours(day, "shared T4", 8.0, 7*day, "shared T4", 8.0)},
			want: []Check{{Reason: ReasonBudgetExhausted, Window: day, Budget: 2, Used: 2, From: group("students")}},
		},
		"student over both budgets: both, shortest window first": {
			user: "bob", groups: studs, usage: Usage{Held: allocs(timeSliced(t4, 4)), Servers: 1,
				GPUHours: hours(day, "shared T4", 10.0, 7*day, "shared T4", 30.0)},
			want: []Check{
				{Reason: ReasonBudgetExhausted, Window: day, Budget: 2, Used: 2.5, From: group("students")},
				{Reason: ReasonBudgetExhausted, Window: 7 * day, Budget: 6, Used: 7.5, From: group("students")},
			},
		},
		"a window that cannot be read is never over": {
			user: "bob", groups: studs, usage: Usage{Held: allocs(timeSliced(t4, 4)), Servers: 1,
				GPUHours: hours(7*day, "shared T4", 4.0)},
		},
		"no hours at all: the limits are still checked": {
			user: "bob", groups: studs, usage: Usage{Held: allocs(timeSliced(t4, 4), timeSliced(t4, 4)), Servers: 2},
			want: []Check{
				{Reason: ReasonMaxGPUs, Limit: 3.0 / 7, Held: 0.5, From: group("students")},
				{Reason: ReasonMaxServers, Limit: 1, Held: 2, From: group("students")},
			},
		},
		"student holding a MIG slice after MIG was taken away: kind_not_allowed, and over the total": {
			user: "bob", groups: studs, usage: Usage{Held: allocs(mig("3g.20gb", 3), timeSliced(t4, 4)), Servers: 1,
				GPUHours: hours(day, 7*day)},
			want: []Check{
				{Reason: ReasonKindNotAllowed, Kind: gpu.KindMIG, Held: 3.0 / 7, From: group("students")},
				{Reason: ReasonMaxGPUs, Limit: 3.0 / 7, Held: 3.0/7 + 0.25, From: group("students")},
			},
		},
		"holding exactly the limit is not over": {
			user: "rita", groups: resr, usage: Usage{Held: allocs(whole(h100, 1), mig("1g.5gb", 1)), Servers: 2,
				GPUHours: hours(day)},
		},
		"researcher holding two MIG slices and two H100s after the per-kind limits were lowered": {
			user: "rita", groups: resr, usage: Usage{Held: allocs(mig("1g.5gb", 1), mig("1g.5gb", 1), whole(h100, 2)), Servers: 3,
				GPUHours: hours(day, "gpu H100-80GB-HBM3", 1.0)},
			want: []Check{
				{Reason: ReasonMaxGPUs, Limit: 2, Held: 2 + 2.0/7, From: group("researchers")},
				{Reason: ReasonMaxGPUsPerKind, Kind: gpu.KindGPU, Limit: 1, Held: 2, From: group("researchers")},
				{Reason: ReasonMaxGPUsPerKind, Kind: gpu.KindMIG, Limit: 1.0 / 7, Held: 2.0 / 7, From: group("researchers")},
			},
		},
		"a guest with a server: no budget, no GPUs, no servers": {
			user: "gus", groups: []string{"guests"}, usage: Usage{Held: allocs(mps(a100, 2)), Servers: 1, GPUHours: hours(day)},
			want: []Check{
				{Reason: ReasonBudgetExhausted, Window: day, Budget: 0, From: group("guests")},
				{Reason: ReasonMaxGPUs, Limit: 0, Held: 0.5, From: group("guests")},
				{Reason: ReasonMaxServers, Limit: 0, Held: 1, From: group("guests")},
			},
		},
		"a user's own hourly budget of 1, an H100 hour weighted 2": {
			user: "tom", usage: Usage{Held: allocs(whole(h100, 1)), Servers: 1, GPUHours: hours(time.Hour, "gpu H100-80GB-HBM3", 0.5, day, "gpu H100-80GB-HBM3", 0.5)},
			want: []Check{{Reason: ReasonBudgetExhausted, Window: time.Hour, Budget: 1, Used: 1, From: user("tom")}},
		},
		"a user's own server limit": {
			user: "tom", usage: Usage{Held: allocs(mig("1g.5gb", 1), mig("1g.5gb", 1)), Servers: 2, GPUHours: hours(time.Hour, day)},
			want: []Check{{Reason: ReasonMaxServers, Limit: 1, Held: 2, From: user("tom")}},
		},
	}
}

func TestAssess(t *testing.T) {
	p := mustPolicy(t, assessPolicy)
	for name, tc := range assessCases() {
		t.Run(name, func(t *testing.T) {
			got := Assess(p.Effective(tc.user, tc.groups), tc.usage)
			opts := cmp.Options{cmpopts.IgnoreFields(Check{}, "Message"), cmpopts.EquateApprox(0, 1e-12), cmpopts.EquateEmpty()}
			if diff := cmp.Diff(tc.want, got, opts); diff != "" {
				t.Errorf("Assess (-want +got):\n%s", diff)
			}
			for _, c := range got {
				if c.Message == "" {
					t.Errorf("no message for %s", c.Reason)
				}
			}
		})
	}
}

func TestNoticeKind(t *testing.T) {
	for r, want := range map[Reason]string{ReasonBudgetExhausted: "budget", ReasonMaxGPUs: "limit", ReasonKindNotAllowed: "limit",
		ReasonMaxGPUsPerKind: "limit", ReasonMaxServers: "limit"} {
		if got := (Check{Reason: r}).NoticeKind(); got != want {
			t.Errorf("%s: NoticeKind = %q, want %q", r, got, want)
		}
	}
}

// TestAssessMessagesGolden: what each notice says, in testdata/notices.golden: the Assess cases with the stop
// a budget announces (every server) and a limit (the newest), and the ways of naming servers and deadlines.
func TestAssessMessagesGolden(t *testing.T) {
	p := mustPolicy(t, assessPolicy)
	now := time.Date(2026, 11, 23, 14, 20, 0, 0, time.UTC)
	deadline := now.Add(10 * time.Minute)
	cases := assessCases()
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		tc := cases[name]
		over := Assess(p.Effective(tc.user, tc.groups), tc.usage)
		if len(over) == 0 {
			continue
		}
		running := make([]string, tc.usage.Servers)
		for i := range running {
			running[i] = fmt.Sprintf("s%d", i+1)
		}
		if len(running) == 1 {
			running[0] = ""
		}
		stop := running
		if over[0].Reason != ReasonBudgetExhausted {
			stop = running[len(running)-1:]
		}
		fmt.Fprintf(&b, "%s\n  notice (%s): %s\n", name, over[0].NoticeKind(), NoticeMessage(over, Stop{Servers: stop, Running: len(running), Deadline: deadline, Now: now}))
		for _, c := range over {
			fmt.Fprintf(&b, "  %s: %s\n", c.Reason, c.Message)
		}
		b.WriteString("\n")
	}
	budget := []Check{{Reason: ReasonBudgetExhausted, Message: "You are over your 24-hour GPU budget (2 of 2 GPU-hours used)"}}
	for _, tc := range []struct {
		name string
		stop Stop
	}{
		{"one named server", Stop{Servers: []string{"train"}, Running: 1, Deadline: deadline, Now: now}},
		{"two servers, both stop", Stop{Servers: []string{"", "train"}, Running: 2, Deadline: deadline, Now: now}},
		{"three servers, all stop", Stop{Servers: []string{"a", "b", "c"}, Running: 3, Deadline: deadline, Now: now}},
		{"two of three stop", Stop{Servers: []string{"b", "c"}, Running: 3, Deadline: deadline, Now: now}},
		{"the default of two stops", Stop{Servers: []string{""}, Running: 2, Deadline: deadline, Now: now}},
		{"a deadline tomorrow", Stop{Servers: []string{""}, Running: 1, Deadline: now.Add(12 * time.Hour), Now: now}},
		{"nothing to stop", Stop{Running: 1, Deadline: deadline, Now: now}},
	} {
		fmt.Fprintf(&b, "stop: %s\n  %s\n\n", tc.name, NoticeMessage(budget, tc.stop))
	}
	golden.Check(t, "notices.golden", b.String())
	if NoticeMessage(nil, Stop{}) != "" {
		t.Error("NoticeMessage of nothing over is not empty")
	}
}
