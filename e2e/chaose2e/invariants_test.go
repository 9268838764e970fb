package chaose2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func TestPlan(t *testing.T) {
	tests := map[string]struct {
		seed     uint64
		duration time.Duration
		n        int
		wantErr  bool
	}{
		"every kind once in 5 minutes": {seed: 1, duration: 5 * time.Minute, n: len(AllFaults)},
		"bounded run":                  {seed: 42, duration: 150 * time.Second, n: 4},
		"too many for the run":         {seed: 1, duration: 60 * time.Second, n: 4, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Plan(tc.seed, tc.duration, tc.n, AllFaults)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Plan: err %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			again, _ := Plan(tc.seed, tc.duration, tc.n, AllFaults)
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("same seed, different plan (-first +second):\n%s", diff)
			}
			seen := map[Fault]bool{}
			for i, p := range got {
				if seen[p.Fault] {
					t.Errorf("%s repeated before every kind ran once: %v", p.Fault, got)
				}
				seen[p.Fault] = true
				if p.At < 15*time.Second || p.At > tc.duration-20*time.Second {
					t.Errorf("fault %d at %s: outside [15s, %s]", i, p.At, tc.duration-20*time.Second)
				}
				if i > 0 && p.At-got[i-1].At < 19*time.Second {
					t.Errorf("faults %d and %d only %s apart", i-1, i, p.At-got[i-1].At)
				}
			}
			if len(got) != tc.n {
				t.Errorf("%d faults, want %d", len(got), tc.n)
			}
		})
	}
	a, _ := Plan(1, 5*time.Minute, 9, AllFaults)
	b, _ := Plan(2, 5*time.Minute, 9, AllFaults)
	if cmp.Equal(a, b) {
		t.Error("seeds 1 and 2 give the same plan")
	}
}

func TestLedgerRow(t *testing.T) {
	pod := func(user string, share float64, start, end int) Pod {
		return Pod{User: user, Share: share, Started: at(start), Gone: at(end), Created: at(start - 1)}
	}
	tests := map[string]struct {
		pods      []Pod
		ledger    map[string]float64
		usageDown []Period
		apiDown   []Period
		tick      time.Duration
		wantOK    bool
	}{
		"exact": {
			pods:   []Pod{pod("alice", 3.0/7, 0, 70), pod("carol", 1, 10, 110)},
			ledger: map[string]float64{"alice": 30, "carol": 100},
			wantOK: true,
		},
		"within 1 % short (the last tick)": {
			pods: []Pod{pod("carol", 1, 0, 100)}, ledger: map[string]float64{"carol": 99.5}, wantOK: true,
		},
		"doubled": {
			pods: []Pod{pod("carol", 1, 0, 100)}, ledger: map[string]float64{"carol": 200},
		},
		"lost without an outage": {
			pods: []Pod{pod("carol", 1, 0, 100)}, ledger: map[string]float64{"carol": 90},
		},
		"short by the last tick of each pod (the old allowance: the usage API tells each end now)": {
			pods: []Pod{pod("alice", 3.0/7, 0, 30), pod("alice", 3.0/7, 40, 70)}, ledger: map[string]float64{"alice": 25.2},
			tick: time.Second,
		},
		"short by the last tick of a pod that ended while the API server was down": {
			pods: []Pod{pod("alice", 3.0/7, 0, 30), pod("alice", 3.0/7, 40, 70)}, ledger: map[string]float64{"alice": 25.5},
			apiDown: []Period{{From: at(29), To: at(35)}}, tick: time.Second, wantOK: true,
		},
		"lost within the documented restart bound": {
			pods: []Pod{pod("carol", 1, 0, 100)}, ledger: map[string]float64{"carol": 90},
			usageDown: []Period{{From: at(90), To: at(105)}}, wantOK: true,
		},
		"ledger charges a user who never ran": {
			pods: []Pod{pod("carol", 1, 0, 100)}, ledger: map[string]float64{"carol": 100, "bob": 5},
		},
		"cpu pods hold nothing": {
			pods:   []Pod{pod("carol", 1, 0, 100), {User: "admin", Started: at(0), Gone: at(50)}},
			ledger: map[string]float64{"carol": 100}, wantOK: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := LedgerRow(tc.pods, tc.ledger, tc.usageDown, tc.apiDown, tc.tick, 0.01)
			if got.OK != tc.wantOK {
				t.Errorf("OK = %v, want %v; %s %v", got.OK, tc.wantOK, got.Numbers, got.Problems)
			}
		})
	}
}

func TestCullerRow(t *testing.T) {
	alice := Pod{UID: "a1", User: "alice", Node: "gpu-a100-0", Created: at(0), Started: at(1)}
	podAt := func(key string, _ time.Time) (Pod, bool) { return alice, key == "alice/" }
	noStale := func(string) []Period { return nil }
	tests := map[string]struct {
		stops  []Stop
		busy   map[string][]Period
		stale  func(string) []Period
		wantOK bool
	}{
		"idle for the whole period": {
			stops: []Stop{{Time: at(100), User: "alice"}}, busy: map[string][]Period{"a1": {{From: at(10), To: at(40)}}},
			stale: noStale, wantOK: true,
		},
		"busy within the idle period": {
			stops: []Stop{{Time: at(100), User: "alice"}}, busy: map[string][]Period{"a1": {{From: at(10), To: at(80)}}},
			stale: noStale,
		},
		"busy started just before the stop (the telemetry could not see it yet)": {
			stops: []Stop{{Time: at(100), User: "alice"}}, busy: map[string][]Period{"a1": {{From: at(99)}}},
			stale: noStale, wantOK: true,
		},
		"stale telemetry (the agent down for longer than staleAfter)": {
			stops: []Stop{{Time: at(104), User: "alice"}},
			stale: func(node string) []Period {
				if node == "gpu-a100-0" {
					return []Period{{From: at(95), To: at(110)}}
				}
				return nil
			},
		},
		"the agent just went down: the data is still fresh by the policy": {
			stops: []Stop{{Time: at(100), User: "alice"}},
			stale: func(node string) []Period {
				if node == "gpu-a100-0" {
					return []Period{{From: at(95), To: at(110)}}
				}
				return nil
			},
			wantOK: true,
		},
		"a stop on data older than staleAfter": {
			stops: []Stop{{Time: at(100), User: "alice", Numbers: map[string]float64{"data_age_seconds": 11}}}, stale: noStale,
		},
		"stop of a server the record never saw": {
			stops: []Stop{{Time: at(100), User: "bob"}}, stale: noStale,
		},
		"no stop at all (nothing checked)": {stale: noStale},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := CullerRow(tc.stops, podAt, tc.busy, tc.stale, 40*time.Second, 3*time.Second, 10*time.Second, 1)
			if got.OK != tc.wantOK {
				t.Errorf("OK = %v, want %v; %v", got.OK, tc.wantOK, got.Problems)
			}
		})
	}
}

func TestAdmissionRow(t *testing.T) {
	limits := func(user string) Limits {
		if user == "bob" {
			return Limits{MaxGPUs: 3.0 / 7, MaxServers: 1, Kinds: []string{"mig", "shared"}}
		}
		return Limits{MaxGPUs: 2, MaxServers: 2, Kinds: []string{"gpu", "mig", "shared"}}
	}
	// Each case but the bare ones also has the run's guaranteed events: a fine admit and a refusal.
	fine := Admission{User: "carol", Numbers: map[string]float64{"limit": 2, "held": 0, "requested": 1}}
	tests := map[string]struct {
		pods    []Pod
		admits  []Admission
		denials int
		bare    bool
		wantOK  bool
	}{
		"no admit and no refusal (nothing checked)": {
			pods: []Pod{{User: "carol", Share: 1, Kind: "gpu", Created: at(0)}}, bare: true,
		},
		"admits but no refusal": {
			pods: []Pod{{User: "carol", Share: 1, Kind: "gpu", Created: at(0)}}, admits: []Admission{fine}, bare: true,
		},
		"decisions but no GPU pod": {admits: []Admission{fine}, denials: 1, bare: true},
		"the guaranteed events and a pod": {
			pods: []Pod{{User: "carol", Share: 1, Kind: "gpu", Created: at(0)}}, admits: []Admission{fine}, denials: 1, bare: true,
			wantOK: true,
		},
		"two whole GPUs for carol": {
			pods:   []Pod{{User: "carol", Share: 1, Kind: "gpu", Created: at(0)}, {User: "carol", Server: "s2", Share: 1, Kind: "gpu", Created: at(5)}},
			wantOK: true,
		},
		"a third GPU while two run": {
			pods: []Pod{{User: "carol", Share: 1, Kind: "gpu", Created: at(0)}, {User: "carol", Server: "s2", Share: 2, Kind: "gpu", Created: at(5)}},
		},
		"a new server after the old one is deleted": {
			pods: []Pod{{User: "bob", Share: 3.0 / 7, Kind: "mig", Created: at(0), Deleting: at(20)},
				{User: "bob", Server: "s2", Share: 1.0 / 4, Kind: "shared", Created: at(21)}},
			wantOK: true,
		},
		"a kind the policy does not allow": {
			pods: []Pod{{User: "bob", Share: 1, Kind: "gpu", Created: at(0)}},
		},
		"an admit over the budget": {
			admits: []Admission{{User: "bob", Numbers: map[string]float64{"budget": 0.01, "used": 0.02}}},
		},
		"an admit within the limit": {
			pods:   []Pod{{User: "carol", Share: 1, Kind: "gpu", Created: at(0)}},
			admits: []Admission{{User: "carol", Numbers: map[string]float64{"limit": 2, "held": 1, "requested": 1}}},
			wantOK: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			admits, denials := tc.admits, tc.denials
			if !tc.bare {
				admits, denials = append([]Admission{fine}, admits...), denials+1
			}
			got := AdmissionRow(tc.pods, limits, admits, denials, Guaranteed{Admits: 1, Refusals: 1})
			if got.OK != tc.wantOK {
				t.Errorf("OK = %v, want %v; %v", got.OK, tc.wantOK, got.Problems)
			}
		})
	}
}

func TestRecoveryAndFormRows(t *testing.T) {
	recs := []Recovery{
		{Fault: FaultQuota, Restarted: at(0), Ready: at(3)},
		{Fault: FaultPostgres, NotApplicable: "SQLite ledger"},
	}
	if got := RecoveryRow(recs, 30*time.Second); !got.OK {
		t.Errorf("recovery in 3 s: %v", got.Problems)
	}
	if got := RecoveryRow(append(recs, Recovery{Fault: FaultHub, Restarted: at(0), Ready: at(31)}), 30*time.Second); got.OK {
		t.Error("a Hub ready after 31 s passes")
	}
	checks := []FormCheck{{OK: true}, {OK: true, Fallback: true}, {Skipped: "Hub down"}}
	if got := FormRow(checks); !got.OK || !strings.Contains(got.Numbers, "2 of 2") {
		t.Errorf("form row: %+v", got)
	}
	if got := FormRow(append(checks, FormCheck{Detail: "502"})); got.OK {
		t.Error("a failed form check passes")
	}
	var b strings.Builder
	WriteTable(&b, []Row{{Invariant: "x", OK: false, Numbers: "1", Problems: []string{"p"}}})
	want := "invariant  result  numbers\nx          FAIL    1\n  x: p\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// verdict is what the tests of the new rows compare: pass or fail, and how many problems were found.
type verdict struct {
	OK       bool
	Problems int
}

func checkVerdict(t *testing.T, got Row, wantOK bool, wantProblems int) {
	t.Helper()
	if diff := cmp.Diff(verdict{wantOK, wantProblems}, verdict{got.OK, len(got.Problems)}); diff != "" {
		t.Errorf("(-want +got):\n%s\nproblems: %v", diff, got.Problems)
	}
}

func TestStoppedOnceRow(t *testing.T) {
	pods := map[string]Pod{"erin/": {UID: "p1", User: "erin"}, "bob/": {UID: "p2", User: "bob"}}
	podAt := func(key string, _ time.Time) (Pod, bool) { p, ok := pods[key]; return p, ok }
	stop := func(user string, s int) Stop { return Stop{Time: at(s), Service: "gpu-culler", User: user} }
	tests := map[string]struct {
		stops        []Stop
		wantOK       bool
		wantProblems int
	}{
		"nothing happened":                {wantProblems: 1},
		"one stop each":                   {stops: []Stop{stop("erin", 60), stop("bob", 70)}, wantOK: true},
		"the new leader stops it again":   {stops: []Stop{stop("erin", 60), stop("bob", 70), stop("erin", 75)}, wantProblems: 1},
		"a stop of a server with no pod":  {stops: []Stop{stop("erin", 60), stop("carol", 70)}, wantProblems: 1},
		"the same stop twice in one pass": {stops: []Stop{stop("erin", 60), stop("erin", 60)}, wantProblems: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := StoppedOnceRow(tc.stops, podAt, 1)
			checkVerdict(t, got, tc.wantOK, tc.wantProblems)
		})
	}
}

func TestRefusalKind(t *testing.T) {
	got := map[string]string{}
	for _, m := range []string{
		"The quota service cannot check your GPU quota right now, so GPU servers cannot start. Try again in a few minutes, or pick a CPU-only profile.",
		"You already run 1 GPU server; each user may run at most 1 GPU server at a time. Stop one of your other GPU servers or pick a CPU-only profile.",
		"Every T4 share is in use right now.",
	} {
		got[m[:12]] = RefusalKind(m)
	}
	want := map[string]string{"The quota se": "unavailable", "You already ": "limit", "Every T4 sha": "other"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

const limitMessage = "You already run 1 GPU server; each user may run at most 1 GPU server at a time."

func burstOf(fault Fault, spawns ...BurstSpawn) Burst {
	return Burst{Fault: fault, User: "burst1", Limit: 1, Spawns: spawns}
}

func admitted(s int, after time.Duration) BurstSpawn {
	return BurstSpawn{Server: fmt.Sprintf("b%d", s), Asked: at(s), Answered: at(s).Add(after), Admitted: true}
}

func refused(s int, after time.Duration, msg string) BurstSpawn {
	return BurstSpawn{Server: fmt.Sprintf("b%d", s), Asked: at(s), Answered: at(s).Add(after), Message: msg}
}

func TestBurstRow(t *testing.T) {
	const unavailable = "The quota service cannot check your GPU quota right now, so GPU servers cannot start."
	calm := burstOf("", admitted(1, time.Second), refused(2, time.Second, limitMessage), refused(3, time.Second, limitMessage))
	tests := map[string]struct {
		bursts       []Burst
		wantOK       bool
		wantProblems int
	}{
		"nothing happened": {wantProblems: 1},
		"exactly one admitted, twice": {bursts: []Burst{calm, burstOf(FaultQuotaDecider,
			admitted(1, time.Second), refused(2, time.Second, limitMessage), refused(3, time.Second, limitMessage))}, wantOK: true},
		"two admitted: two replicas decided on their own": {bursts: []Burst{calm, burstOf(FaultQuotaDecider,
			admitted(1, time.Second), admitted(2, time.Second), refused(3, time.Second, limitMessage))}, wantProblems: 1},
		"none admitted while gpu-quota had no decider": {bursts: []Burst{calm, burstOf(FaultQuotaDecider,
			refused(1, 2*time.Second, unavailable), refused(2, 2*time.Second, unavailable), refused(3, 2*time.Second, unavailable))}, wantOK: true},
		"none admitted, yet refused for the limit": {bursts: []Burst{calm, burstOf(FaultQuotaDecider,
			refused(1, time.Second, unavailable), refused(2, time.Second, limitMessage), refused(3, time.Second, limitMessage))}, wantProblems: 1},
		"no burst at its limit": {bursts: []Burst{burstOf(FaultQuotaDecider,
			refused(1, 2*time.Second, unavailable), refused(2, 2*time.Second, unavailable))}, wantProblems: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := BurstRow(tc.bursts, 1)
			checkVerdict(t, got, tc.wantOK, tc.wantProblems)
		})
	}
}

func TestAnswerRow(t *testing.T) {
	tests := map[string]struct {
		bursts       []Burst
		wantOK       bool
		wantProblems int
	}{
		"nothing happened": {wantProblems: 1},
		"admitted and refused with a reason in time": {bursts: []Burst{burstOf(FaultUsageWriter,
			admitted(1, 800*time.Millisecond), refused(2, 4900*time.Millisecond, limitMessage))}, wantOK: true},
		"answered after 6 s": {bursts: []Burst{burstOf(FaultQuotaDecider,
			admitted(1, time.Second), refused(2, 6*time.Second, limitMessage))}, wantProblems: 1},
		"never answered": {bursts: []Burst{burstOf(FaultQuotaDecider,
			admitted(1, time.Second), BurstSpawn{Server: "b2", Asked: at(2), UnansweredDetail: "no pod, no failed event"})}, wantProblems: 1},
		"refused without a reason": {bursts: []Burst{burstOf(FaultQuotaDecider,
			admitted(1, time.Second), refused(2, time.Second, " "))}, wantProblems: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := AnswerRow(tc.bursts, 5*time.Second)
			checkVerdict(t, got, tc.wantOK, tc.wantProblems)
		})
	}
}

func TestLiveFormRow(t *testing.T) {
	live := FormCheck{Time: at(30), OK: true}
	tests := map[string]struct {
		checks       []FailoverForm
		failovers    int
		wantOK       bool
		wantProblems int
	}{
		"nothing happened":          {failovers: 1, wantProblems: 1},
		"live after every failover": {checks: []FailoverForm{{FaultProfilesLeader, live}, {FaultQuotaDecider, live}}, failovers: 2, wantOK: true},
		"the static fallback": {checks: []FailoverForm{{FaultProfilesLeader, FormCheck{Time: at(30), OK: true, Fallback: true}}, {FaultQuotaDecider, live}},
			failovers: 2, wantProblems: 1},
		"not rendered":           {checks: []FailoverForm{{FaultProfilesLeader, FormCheck{Time: at(30), Detail: "502"}}}, failovers: 1, wantProblems: 1},
		"a failover not checked": {checks: []FailoverForm{{FaultProfilesLeader, live}}, failovers: 2, wantProblems: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := LiveFormRow(tc.checks, tc.failovers)
			checkVerdict(t, got, tc.wantOK, tc.wantProblems)
		})
	}
}
