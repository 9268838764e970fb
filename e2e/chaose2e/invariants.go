package chaose2e

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Pod is one single-user pod's life as the API server told the run's watch: created (admission counts it from
// here), started (its first container's startedAt: the ledger charges from here), deleting (deletionTimestamp:
// no longer counted by admission) and gone (the object deleted: the ledger charges up to here). Zero times are
// unknown (never started) or not yet.
type Pod struct {
	UID, User, Server, Node, Profile string
	Kind                             string  // gpu, mig, shared, cpu
	Share                            float64 // GPU-equivalents held (0 for CPU)
	Created, Started, Deleting, Gone time.Time
	Seen                             time.Time // when the run's watch first saw it: a burst spawn's answer
}

// Key names a user's server as the Hub and the decisions do ("" is the default server).
func Key(user, server string) string { return user + "/" + server }

// Period is a stretch of time [From, To); a zero To is still open.
type Period struct{ From, To time.Time }

func (p Period) contains(t time.Time) bool {
	return !t.Before(p.From) && (p.To.IsZero() || t.Before(p.To))
}

func (p Period) overlaps(from, to time.Time) bool {
	return (p.To.IsZero() || p.To.After(from)) && p.From.Before(to)
}

// Row is one line of the invariants table.
type Row struct {
	Invariant string
	OK        bool
	Numbers   string
	Problems  []string // one line each, shown under the table when not OK
}

// WriteTable prints rows as the run's invariants table, the problems of failed rows below it.
func WriteTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "invariant\tresult\tnumbers")
	for _, r := range rows {
		res := "PASS"
		if !r.OK {
			res = "FAIL"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Invariant, res, r.Numbers)
	}
	_ = tw.Flush()
	for _, r := range rows {
		for _, p := range r.Problems {
			_, _ = fmt.Fprintf(w, "  %s: %s\n", r.Invariant, p)
		}
	}
}

// LedgerRow compares each user's allocated GPU-seconds in the ledger with the lives of their pods x share. The
// ledger may be short by what its documented restart bound loses (services/usage-api/README.md, "Outages"): a pod
// that ended while the usage API was down is charged up to the checkpoint before the outage only, and one that
// started and ended inside it not at all. Beyond that it must be within tol (0.01) of the truth, both ways.
//
// A pod is charged from its start and up to when the usage API's informer told it the pod went, as here
// (services/usage-api/README.md, "Integration"), so the ledger is within tol of the truth with no allowance per
// pod. Only where the informer cannot tell the end (a deletion a relist finds after a watch outage: apiDown, the
// kube-apiserver's outages, widened by a tick each side) is the pod charged up to the last tick that saw it, short
// by up to share x tick.
func LedgerRow(pods []Pod, ledger map[string]float64, usageDown, apiDown []Period, tick time.Duration, tol float64) Row {
	want, lost := map[string]float64{}, map[string]float64{}
	users := []string{}
	for u := range ledger {
		users = append(users, u)
	}
	for _, p := range pods {
		if p.Share == 0 || p.Started.IsZero() {
			continue
		}
		if !slices.Contains(users, p.User) {
			users = append(users, p.User)
		}
		end := p.Gone
		if end.IsZero() {
			end = p.Deleting // the watch missed the deletion (an API server outage): the grace is short
		}
		if end.IsZero() || !end.After(p.Started) {
			continue
		}
		want[p.User] += p.Share * end.Sub(p.Started).Seconds()
		for _, o := range apiDown {
			if (Period{From: o.From.Add(-tick), To: o.To.Add(tick)}).contains(end) {
				lost[p.User] += p.Share * tick.Seconds()
				break
			}
		}
		for _, o := range usageDown {
			if o.contains(end) {
				from := o.From
				if p.Started.After(from) {
					from = p.Started
				}
				lost[p.User] += p.Share * end.Sub(from).Seconds()
			}
		}
	}
	slices.Sort(users)
	row := Row{Invariant: "GPU-hours = pod lifetimes x share (1 %)", OK: true}
	var nums []string
	var totalWant, totalGot float64
	for _, u := range users {
		got, w, l := ledger[u], want[u], lost[u]
		totalWant += w
		totalGot += got
		lo, hi := (1-tol)*(w-l), (1+tol)*w
		nums = append(nums, fmt.Sprintf("%s %.1f/%.1f", u, got, w))
		if got < lo-1e-6 || got > hi+1e-6 {
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("%s: ledger %.3f GPU-s, pods' lifetimes x share %.3f GPU-s (of which the usage API's restarts and ends hidden by API-server outages may lose %.3f): want %.3f to %.3f",
				u, got, w, l, lo, hi))
		}
	}
	row.Numbers = fmt.Sprintf("ledger/truth GPU-s: %s; total %.1f/%.1f", strings.Join(nums, ", "), totalGot, totalWant)
	if len(pods) == 0 || totalWant == 0 {
		row.OK = false
		row.Problems = append(row.Problems, "no GPU pod ran: the run proves nothing")
	}
	return row
}

// Guaranteed is what the run's workload makes happen whatever the faults (its openers: an idle server for the
// culler, a start within a policy and one over it): an invariant that checked fewer events fails.
type Guaranteed struct {
	CullerStops, Admits, Refusals int
}

// Stop is a server stop one of gpuhub's services made, from its decisions API.
type Stop struct {
	Time                  time.Time
	Service, User, Server string
	Reason                string
	Numbers               map[string]float64
}

// CullerRow checks gpu-culler's stops against the workload's record: a stop of a server whose pod was busy at any
// point in [stop - idlePeriod, stop - lag) is a stop while busy (lag: what the telemetry needs to see a busy cell:
// agent sample + usage-API tick + culler sample); a stop while the server's node had stale telemetry is a stop on
// stale data. Stale is the culler's policy's word: data older than staleAfter. An outage (an agent down, the usage
// API down: the periods stale gives) makes the data stale staleAfter - lag after it began (the last sample before
// it was taken up to lag earlier) and until its end; before that the culler acts on data its policy calls fresh. Stops by the workload and by gpu-quota (a budget) are not
// the culler's. podAt finds the pod of a server at an instant. Fewer than minStops stops fail the row: the workload
// guarantees them (an idle server), and a row that checked nothing proves nothing.
func CullerRow(stops []Stop, podAt func(key string, t time.Time) (Pod, bool), busy map[string][]Period,
	stale func(node string) []Period, idlePeriod, lag, staleAfter time.Duration, minStops int,
) Row {
	row := Row{Invariant: "no server stopped while busy or stale", OK: true}
	culled := 0
	for _, s := range stops {
		culled++
		key := Key(s.User, s.Server)
		p, ok := podAt(key, s.Time)
		if !ok {
			row.Problems = append(row.Problems, fmt.Sprintf("stop of %s at %s: no pod of that server was running then (the record missed it)", key, s.Time.Format("15:04:05")))
			row.OK = false
			continue
		}
		for _, b := range busy[p.UID] {
			if b.overlaps(s.Time.Add(-idlePeriod), s.Time.Add(-lag)) {
				row.OK = false
				row.Problems = append(row.Problems, fmt.Sprintf("gpu-culler stopped %s (pod %s) at %s, busy from %s to %s",
					key, p.UID, s.Time.Format("15:04:05"), b.From.Format("15:04:05"), fmtEnd(b.To)))
			}
		}
		for _, w := range stale(p.Node) {
			if w = (Period{From: w.From.Add(staleAfter - lag), To: w.To}); w.contains(s.Time) {
				row.OK = false
				row.Problems = append(row.Problems, fmt.Sprintf("gpu-culler stopped %s at %s while the telemetry of %s was stale (%s to %s)",
					key, s.Time.Format("15:04:05"), p.Node, w.From.Format("15:04:05"), fmtEnd(w.To)))
			}
		}
		if age, ok := s.Numbers["data_age_seconds"]; ok && age > staleAfter.Seconds() {
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("gpu-culler stopped %s on data %.0fs old", key, age))
		}
	}
	if culled < minStops {
		row.OK = false
		row.Problems = append(row.Problems, fmt.Sprintf("gpu-culler stopped %d servers; the workload guarantees at least %d (an idle server left to it): nothing was checked", culled, minStops))
	}
	row.Numbers = fmt.Sprintf("%d culler stops (at least %d) checked against %d busy periods", culled, minStops, countPeriods(busy))
	return row
}

func countPeriods(m map[string][]Period) int {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	return n
}

func fmtEnd(t time.Time) string {
	if t.IsZero() {
		return "the end"
	}
	return t.Format("15:04:05")
}

// Limits are a user's effective concurrent limits in the run's quota policy.
type Limits struct {
	MaxGPUs    float64
	MaxServers int
	Kinds      []string // allowed GPU kinds
}

// Admission is one admit decision of gpu-quota with its numbers.
type Admission struct {
	Time       time.Time
	User       string
	Numbers    map[string]float64
	ServerName string
}

// AdmissionRow checks that no admission went over a limit, twice: from the pods themselves (at every pod's
// creation, the user's GPU pods not being deleted hold at most maxGPUs in at most maxServers servers, each of an
// allowed kind) and from gpu-quota's admit decisions (held + requested within the limit, budget used below the
// budget). The workload guarantees at least min.Admits admits and min.Refusals refused spawns over a limit (refusals:
// gpu-quota's deny decisions and the spawns the workload saw refused, most often by the glue's check of the
// choice against gpu-profiles, which asks gpu-quota; fewer fail the row, which would otherwise pass having
// checked nothing.
func AdmissionRow(pods []Pod, limits func(user string) Limits, admits []Admission, refusals int, min Guaranteed) Row {
	row := Row{Invariant: "no admission over a limit", OK: true}
	checked := 0
	for _, p := range pods {
		if p.Share == 0 || p.Created.IsZero() {
			continue
		}
		checked++
		lim := limits(p.User)
		if !slices.Contains(lim.Kinds, p.Kind) {
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("%s got a %s server (%s), a kind its policy does not allow", p.User, p.Kind, p.Profile))
		}
		held, servers := 0.0, 0
		for _, q := range pods {
			if q.User != p.User || q.Share == 0 || q.Created.After(p.Created) {
				continue
			}
			if (!q.Deleting.IsZero() && !q.Deleting.After(p.Created)) || (!q.Gone.IsZero() && !q.Gone.After(p.Created)) {
				continue
			}
			held += q.Share
			servers++
		}
		if held > lim.MaxGPUs+1e-6 || servers > lim.MaxServers {
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("%s held %.4f GPUs in %d servers when %s's pod was created at %s; limits %.4f GPUs, %d servers",
				p.User, held, servers, Key(p.User, p.Server), p.Created.Format("15:04:05"), lim.MaxGPUs, lim.MaxServers))
		}
	}
	for _, a := range admits {
		n := a.Numbers
		if l, ok := n["limit"]; ok && n["held"]+n["requested"] > l+1e-6 {
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("gpu-quota admitted %s at %s with held %.4f + requested %.4f over the limit %.4f",
				a.User, a.Time.Format("15:04:05"), n["held"], n["requested"], l))
		}
		if b, ok := n["budget"]; ok && n["used"] >= b {
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("gpu-quota admitted %s at %s with %.4f of a %.4f GPU-hour budget used", a.User, a.Time.Format("15:04:05"), n["used"], b))
		}
	}
	if len(admits) < min.Admits || refusals < min.Refusals {
		row.OK = false
		row.Problems = append(row.Problems, fmt.Sprintf("%d admits and %d refused spawns; the workload guarantees at least %d and %d: the limits were not exercised",
			len(admits), refusals, min.Admits, min.Refusals))
	}
	if checked == 0 {
		row.OK = false
		row.Problems = append(row.Problems, "no GPU pod was created: nothing was checked")
	}
	row.Numbers = fmt.Sprintf("%d GPU pods, %d admits (at least %d), %d refusals (at least %d)", checked, len(admits), min.Admits, refusals, min.Refusals)
	return row
}

// Recovery is how one injected fault was undone: when the supervisor restarted the part and when it was ready.
type Recovery struct {
	Fault            Fault
	Target           string
	Injected         time.Time
	Restarted, Ready time.Time // zero Ready: never ready again
	Err              string
	NotApplicable    string // why the fault was not injected in this run (PostgreSQL without a server)
	By               string // who restarted it (the emulated kubelet, the harness as a Deployment would)
}

// RecoveryRow checks that every part was ready again within limit of its restart.
func RecoveryRow(recs []Recovery, limit time.Duration) Row {
	row := Row{Invariant: fmt.Sprintf("back to ready within %s of the restart", limit), OK: true}
	var nums []string
	injected := 0
	for _, r := range recs {
		if r.NotApplicable != "" {
			nums = append(nums, fmt.Sprintf("%s: not injected", r.Fault))
			continue
		}
		injected++
		switch {
		case r.Err != "":
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("%s (%s): %s", r.Fault, r.Target, r.Err))
			nums = append(nums, fmt.Sprintf("%s: error", r.Fault))
		case r.Ready.IsZero():
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("%s (%s): never ready again", r.Fault, r.Target))
			nums = append(nums, fmt.Sprintf("%s: not ready", r.Fault))
		default:
			took := r.Ready.Sub(r.Restarted)
			nums = append(nums, fmt.Sprintf("%s %.1fs", r.Fault, took.Seconds()))
			if took > limit {
				row.OK = false
				row.Problems = append(row.Problems, fmt.Sprintf("%s (%s): ready %.1fs after its restart", r.Fault, r.Target, took.Seconds()))
			}
		}
	}
	if injected == 0 {
		row.OK = false
		row.Problems = append(row.Problems, "no fault was injected")
	}
	row.Numbers = strings.Join(nums, "; ")
	return row
}

// FormCheck is one GET /hub/spawn as a user.
type FormCheck struct {
	Time     time.Time
	OK       bool
	Fallback bool   // the static list (gpu-profiles unreachable), with its note
	Skipped  string // why not checked (the Hub itself down)
	Detail   string
}

// FormRow checks that the spawn form rendered at every check the Hub could answer.
func FormRow(checks []FormCheck) Row {
	row := Row{Invariant: "spawn form always rendered", OK: true}
	ok, fallback, skipped := 0, 0, 0
	for _, c := range checks {
		switch {
		case c.Skipped != "":
			skipped++
		case c.OK:
			ok++
			if c.Fallback {
				fallback++
			}
		default:
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("%s: %s", c.Time.Format("15:04:05"), c.Detail))
		}
	}
	if ok == 0 {
		row.OK = false
		row.Problems = append(row.Problems, "the form was never checked")
	}
	row.Numbers = fmt.Sprintf("%d of %d checks rendered (%d from the static fallback), %d skipped while the Hub was down",
		ok, len(checks)-skipped, fallback, skipped)
	return row
}

// StoppedOnceRow checks that gpu-culler stopped no server twice: every stop in its decisions (of every replica,
// merged) names a pod (podAt), and no pod is named by two stops. A stop is recorded only once the Hub took it,
// so two stops of one pod are two leaders (or one leader twice) acting on the same server: the Lease handing
// over without the stopped pod leaving the new leader's list. Fewer than minStops stops fail the row, as for
// CullerRow.
func StoppedOnceRow(stops []Stop, podAt func(key string, t time.Time) (Pod, bool), minStops int) Row {
	row := Row{Invariant: "no server stopped twice", OK: true}
	first := map[string]Stop{}
	checked := 0
	for _, s := range slices.SortedFunc(slices.Values(stops), func(a, b Stop) int { return a.Time.Compare(b.Time) }) {
		key := Key(s.User, s.Server)
		p, ok := podAt(key, s.Time)
		if !ok {
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("stop of %s at %s: no pod of that server was running then (the record missed it)", key, s.Time.Format("15:04:05")))
			continue
		}
		checked++
		if f, seen := first[p.UID]; seen {
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("gpu-culler stopped %s (pod %s) twice: at %s and at %s",
				key, p.UID, f.Time.Format("15:04:05.000"), s.Time.Format("15:04:05.000")))
			continue
		}
		first[p.UID] = s
	}
	if checked < minStops {
		row.OK = false
		row.Problems = append(row.Problems, fmt.Sprintf("gpu-culler stopped %d servers; the workload guarantees at least %d: nothing was checked", checked, minStops))
	}
	row.Numbers = fmt.Sprintf("%d culler stops (at least %d) of %d distinct pods", checked, minStops, len(first))
	return row
}

// BurstSpawn is one spawn of a burst: when it was asked for, when the first answer came (the pod created:
// admitted; a refusal with its message), zero when none came.
type BurstSpawn struct {
	Server           string
	Asked, Answered  time.Time
	Admitted         bool
	Message          string // the refusal's message, as the user reads it
	UnansweredDetail string // what was seen instead of an answer
}

// Burst is a user's servers started at once against a known limit (Limit servers admitted), during a fault or
// before any (Fault empty).
type Burst struct {
	Fault  Fault
	User   string
	Limit  int
	Spawns []BurstSpawn
}

// RefusalKind sorts a refusal's message: "unavailable" (the glue could not ask gpu-quota: onUnavailable closed),
// "limit" (a quota limit, from gpu-quota or from gpu-profiles asking it: its messages say "at most"), or
// "other" (nothing free of the kind, an unknown choice).
func RefusalKind(message string) string {
	switch {
	case strings.Contains(message, "cannot check your GPU quota"):
		return "unavailable"
	case strings.Contains(message, "at most"):
		return "limit"
	}
	return "other"
}

// BurstRow checks that each burst admitted exactly its limit: never more (two replicas deciding on their own
// memory admit one each), and fewer only when no spawn was refused for the limit (a refusal for the limit while
// the user was under it counts a reservation that does not exist). Spawns refused because gpu-quota could not be
// asked (its decider killed, the Lease not yet taken) or because nothing was free may leave a burst short.
// Fewer than minExact bursts that admitted exactly their limit fail the row: the workload guarantees one, before
// any fault, and a row that saw no exact burst proved nothing about "exactly".
func BurstRow(bursts []Burst, minExact int) Row {
	row := Row{Invariant: "exactly N admitted in each burst", OK: true}
	exact, short, spawns := 0, 0, 0
	for _, b := range bursts {
		admitted, limitRefusals := 0, 0
		for _, s := range b.Spawns {
			spawns++
			switch {
			case s.Admitted:
				admitted++
			case !s.Answered.IsZero() && RefusalKind(s.Message) == "limit":
				limitRefusals++
			}
		}
		what := "before the faults"
		if b.Fault != "" {
			what = "during " + string(b.Fault)
		}
		switch {
		case admitted > b.Limit:
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("%s's burst %s: %d of %d spawns admitted, limit %d", b.User, what, admitted, len(b.Spawns), b.Limit))
		case admitted == b.Limit:
			exact++
		case limitRefusals > 0:
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("%s's burst %s: %d admitted of a limit of %d, yet %d refused for the limit", b.User, what, admitted, b.Limit, limitRefusals))
		default:
			short++
		}
	}
	if exact < minExact {
		row.OK = false
		row.Problems = append(row.Problems, fmt.Sprintf("%d bursts admitted exactly their limit; the workload guarantees at least %d (its burst before the faults)", exact, minExact))
	}
	row.Numbers = fmt.Sprintf("%d bursts of %d spawns: %d exactly at the limit (at least %d), %d short with no refusal for the limit",
		len(bursts), spawns, exact, minExact, short)
	return row
}

// AnswerRow checks that every spawn of the bursts was answered within limit of being asked for: admitted (its
// pod created) or refused with a message. A spawn never answered, answered late or refused without a message
// fails the row, and so does a run without a spawn.
func AnswerRow(bursts []Burst, limit time.Duration) Row {
	row := Row{Invariant: fmt.Sprintf("every spawn answered within %s", limit), OK: true}
	total, admitted, refused := 0, 0, 0
	var slowest time.Duration
	for _, b := range bursts {
		for _, s := range b.Spawns {
			total++
			key := Key(b.User, s.Server)
			if s.Answered.IsZero() {
				row.OK = false
				row.Problems = append(row.Problems, fmt.Sprintf("%s asked at %s: never answered (%s)", key, s.Asked.Format("15:04:05.000"), s.UnansweredDetail))
				continue
			}
			took := s.Answered.Sub(s.Asked)
			slowest = max(slowest, took)
			if took > limit {
				row.OK = false
				row.Problems = append(row.Problems, fmt.Sprintf("%s asked at %s: answered after %.1fs", key, s.Asked.Format("15:04:05.000"), took.Seconds()))
			}
			switch {
			case s.Admitted:
				admitted++
			case strings.TrimSpace(s.Message) == "":
				row.OK = false
				row.Problems = append(row.Problems, fmt.Sprintf("%s asked at %s: refused without a reason", key, s.Asked.Format("15:04:05.000")))
			default:
				refused++
			}
		}
	}
	if admitted+refused == 0 {
		row.OK = false
		row.Problems = append(row.Problems, "no spawn of a burst was answered: nothing was checked")
	}
	row.Numbers = fmt.Sprintf("%d spawns: %d admitted, %d refused with a reason; slowest answer %.1fs", total, admitted, refused, slowest.Seconds())
	return row
}

// FailoverForm is the spawn form checked right after a failover (the fault's part ready again).
type FailoverForm struct {
	Fault Fault
	Check FormCheck
}

// LiveFormRow checks that after each failover the spawn form rendered with live data: gpu-profiles' generated
// choices, not the static fallback the glue shows while gpu-profiles cannot answer. Fewer than minChecks checks
// (the run's failovers) fail the row.
func LiveFormRow(checks []FailoverForm, minChecks int) Row {
	row := Row{Invariant: "spawn form live after each failover", OK: true}
	live := 0
	for _, c := range checks {
		switch {
		case !c.Check.OK:
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("after %s, %s: not rendered: %s", c.Fault, c.Check.Time.Format("15:04:05"), c.Check.Detail))
		case c.Check.Fallback:
			row.OK = false
			row.Problems = append(row.Problems, fmt.Sprintf("after %s, %s: the static fallback, not gpu-profiles' live choices", c.Fault, c.Check.Time.Format("15:04:05")))
		default:
			live++
		}
	}
	if len(checks) < minChecks {
		row.OK = false
		row.Problems = append(row.Problems, fmt.Sprintf("%d checks after a failover; the run made %d failovers", len(checks), minChecks))
	}
	row.Numbers = fmt.Sprintf("%d of %d checks after a failover live (at least %d)", live, len(checks), minChecks)
	return row
}
