// Package decide is gpu-culler's decision for one server in one pass: a pure, deterministic function of the
// server's effective rule, what the Hub says about it, its own GPU telemetry, the culler's notice on its pod
// and the time (passed in). It never stops a server on missing or stale data, never without a warning shown
// for the rule's warn period, and never before the deadline the user was shown. The service reads the Hub,
// the usage API and the pod, calls Decide, and acts: set or clear the notice, stop, or log the skip.
package decide

import (
	"errors"
	"slices"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// Action is what the service does with a server this pass.
type Action string

// The actions.
const (
	// None: nothing is due; a notice of the culler on the pod is withdrawn.
	None Action = "none"
	// Warn: show (or keep) the notice with Decision.Deadline.
	Warn Action = "warn"
	// Stop: stop the server (and remove it, for a named server under stop-and-remove).
	Stop Action = "stop"
	// Skip: leave the server and its notice as they are, and count the reason.
	Skip Action = "skip"
)

// Reason says why.
type Reason string

// The reasons. Warn and Stop have idle or max_age; None has gpu_busy, hub_active, idle (not long enough) or
// off; Skip has the rest.
const (
	ReasonIdle     Reason = "idle"
	ReasonMaxAge   Reason = "max_age"
	ReasonGPUBusy  Reason = "gpu_busy"
	ReasonHubBusy  Reason = "hub_active"
	ReasonOff      Reason = "off"
	ReasonTelMiss  Reason = "telemetry_missing"
	ReasonTelStale Reason = "telemetry_stale"
	ReasonNoUsage  Reason = "usage_unreachable"
	ReasonUsageOld Reason = "usage_stale"
	ReasonExempt   Reason = "exempt"
	ReasonPending  Reason = "pending"
	ReasonNotReady Reason = "not_ready"
	ReasonSnoozed  Reason = "snoozed"
	ReasonDryRun   Reason = "dry_run"
)

// Server is what the Hub and the pod say about one running server.
type Server struct {
	User   string
	Name   string // "" is the default server
	Groups []string
	Admin  bool
	// Kind is the GPU kind the server holds, "" for a CPU-only server; Profile its gpu-profiles slug.
	Kind    gpu.Kind
	Profile string
	Started time.Time
	// LastActivity is the Hub's last_activity of the server; zero when it has none (Started counts).
	LastActivity time.Time
	// Pending is the Hub's pending ("spawn", "stop"), "" when none; Ready its ready.
	Pending     string
	Ready       bool
	Annotations map[string]string
}

// Sample is one telemetry sample of the server's own GPU allocation (for a time-sliced or MPS share, its own
// processes; for a MIG slice, the slice).
type Sample struct {
	At time.Time
	// Utilization is SM utilization in percent.
	Utilization float64
	// MemoryBytes is the GPU memory the server's processes use.
	MemoryBytes int64
}

// Telemetry is the server's GPU history as the usage API gives it.
type Telemetry struct {
	// Present is false when the usage API has no telemetry for this server's GPU.
	Present bool
	// Samples in any order; the window should reach back at least the idle period.
	Samples []Sample
}

// Usage is the state of the usage API as a whole.
type Usage struct {
	Reachable bool
	// At is when its data was last refreshed; zero when it does not say.
	At time.Time
}

// Notice is the culler's notice on the pod, as the last pass left it: zero when there is none.
type Notice struct {
	Reason Reason
	// Since is when the user was first shown the stop (notice.Notice.StopsSince).
	Since    time.Time
	Deadline time.Time
	// Snoozes is how many snoozes the user took on this notice.
	Snoozes int
}

// Input is everything a decision depends on.
type Input struct {
	Now       time.Time
	Rule      policy.Rule
	Server    Server
	Telemetry Telemetry
	Usage     Usage
	Notice    Notice
	// Contended is set while someone waits for this server's GPU class (the waitlist): the rule's
	// idleWhenContended applies.
	Contended bool
}

// Decision is what to do with one server, with the numbers it was decided on.
type Decision struct {
	Action Action
	Reason Reason
	// Would is the action a dry run or a snooze held back (Stop, Warn); "" otherwise.
	Would Action
	// Deadline is when the server stops (Warn, snoozed Skip, dry-run Skip of a Warn).
	Deadline time.Time
	// Detail says more for the log: who is exempt, how old the data is.
	Detail string
	// Message is what the user reads: the notice (Warn, snoozed Skip) or why the server stopped (Stop).
	Message string
	Numbers Numbers
}

// Numbers are what a decision looked at; zero where it did not get that far.
type Numbers struct {
	IdleFor     time.Duration // GPU idle for (Hub inactivity for a CPU-only server)
	HubIdleFor  time.Duration // no Hub activity for
	Age         time.Duration
	Utilization float64 // highest SM utilization over the idle stretch; the newest when busy
	MemoryDelta int64   // how much GPU memory changed over the idle stretch, in bytes
	DataAge     time.Duration

	IdlePeriod       time.Duration // the one that applies (idleWhenContended while contended)
	Contended        bool          // someone waits for the server's GPU class and the rule has idleWhenContended
	HubIdlePeriod    time.Duration
	UtilizationBelow float64
	MemoryTolerance  int64
	Warn             time.Duration
	MaxAge           time.Duration
	Snoozes          int
	MaxSnoozes       int
}

// Map is the numbers in seconds, percent and bytes, for a decision.Record.
func (n Numbers) Map() map[string]float64 {
	m := map[string]float64{
		"idle_seconds":        n.IdleFor.Seconds(),
		"age_seconds":         n.Age.Seconds(),
		"idle_period_seconds": n.IdlePeriod.Seconds(),
		"warn_seconds":        n.Warn.Seconds(),
	}
	add := func(k string, v float64, ok bool) {
		if ok {
			m[k] = v
		}
	}
	add("hub_idle_seconds", n.HubIdleFor.Seconds(), n.HubIdleFor > 0)
	add("hub_idle_period_seconds", n.HubIdlePeriod.Seconds(), n.HubIdlePeriod > 0)
	add("utilization_percent", n.Utilization, n.UtilizationBelow > 0)
	add("utilization_below_percent", n.UtilizationBelow, n.UtilizationBelow > 0)
	add("memory_delta_bytes", float64(n.MemoryDelta), n.UtilizationBelow > 0)
	add("memory_tolerance_bytes", float64(n.MemoryTolerance), n.UtilizationBelow > 0)
	add("data_age_seconds", n.DataAge.Seconds(), n.DataAge > 0)
	add("max_age_seconds", n.MaxAge.Seconds(), n.MaxAge > 0)
	add("snoozes", float64(n.Snoozes), n.MaxSnoozes > 0)
	add("max_snoozes", float64(n.MaxSnoozes), n.MaxSnoozes > 0)
	add("contended", 1, n.Contended)
	return m
}

// Decide decides what to do with one server now.
func Decide(in Input) Decision {
	r, s, now := in.Rule, in.Server, in.Now
	d := Decision{Action: Skip}
	d.Numbers = Numbers{
		Age: nonNeg(now.Sub(s.Started)), IdlePeriod: r.IdlePeriodFor(in.Contended), HubIdlePeriod: r.HubIdlePeriod,
		Warn: r.Warn, MaxAge: r.MaxAge, Snoozes: in.Notice.Snoozes, MaxSnoozes: r.MaxSnoozes,
		Contended: !r.CPU && r.UnderContention(in.Contended),
	}
	if !r.CPU {
		d.Numbers.UtilizationBelow, d.Numbers.MemoryTolerance = r.Utilization, r.MemoryTolerance
	}
	switch {
	case s.Pending != "":
		d.Reason, d.Detail = ReasonPending, "pending "+s.Pending
		return d
	case !s.Ready:
		d.Reason = ReasonNotReady
		return d
	}
	if why := r.Exempt.Exempts(s.User, s.Groups, s.Admin, s.Annotations); why != "" {
		d.Reason, d.Detail = ReasonExempt, why
		return d
	}
	hubSince := latest(s.LastActivity, s.Started)
	d.Numbers.HubIdleFor = nonNeg(now.Sub(hubSince))

	// Each cause of a stop that applies, with when it is due.
	type cause struct {
		reason Reason
		due    time.Time
	}
	var causes []cause
	none := ReasonOff
	if r.MaxAge > 0 {
		causes = append(causes, cause{ReasonMaxAge, s.Started.Add(r.MaxAge)})
	}
	period := d.Numbers.IdlePeriod
	if r.CPU {
		d.Numbers.IdleFor = d.Numbers.HubIdleFor
		if period > 0 {
			causes = append(causes, cause{ReasonIdle, hubSince.Add(period)})
			none = ReasonIdle
		}
	} else {
		if skip := checkData(&d, in); skip {
			return d
		}
		idleSince, busy := idleStretch(&d, in)
		switch {
		case busy:
			none = ReasonGPUBusy
		case period > 0:
			due := idleSince.Add(period)
			none = ReasonIdle
			if r.HubIdlePeriod > 0 && hubSince.Add(r.HubIdlePeriod).After(due) {
				due = hubSince.Add(r.HubIdlePeriod)
				if !now.Before(idleSince.Add(period - r.Warn)) {
					none = ReasonHubBusy // the GPU alone would be warned by now
				}
			}
			causes = append(causes, cause{ReasonIdle, due})
		}
	}

	// The cause due first among those whose warning has started (max_age first on a tie).
	var c *cause
	for i := range causes {
		if now.Before(causes[i].due.Add(-r.Warn)) {
			continue
		}
		if c == nil || causes[i].due.Before(c.due) {
			c = &causes[i]
		}
	}
	if c == nil {
		d.Action, d.Reason = None, none
		return d
	}
	d.Reason = c.reason

	shown := in.Notice.Since
	switch {
	case r.DryRun:
		shown = c.due.Add(-r.Warn) // a dry run supposes the warning was shown in time
	case shown.IsZero():
		shown = now // the warning is shown from now on
	}
	// earliest is the stop as the rule has it; the deadline the user was shown (a snooze) may be later.
	earliest := latest(c.due, shown.Add(r.Warn))
	deadline := earliest
	if !r.DryRun {
		deadline = latest(earliest, in.Notice.Deadline)
	}
	d.Deadline = deadline
	switch {
	case now.Before(deadline) && in.Notice.Snoozes > 0 && !now.Before(earliest):
		d.Action, d.Would, d.Reason = Skip, Stop, ReasonSnoozed
		d.Message = warnMessage(d, r, now)
	case now.Before(deadline):
		d.Action = Warn
		d.Message = warnMessage(d, r, now)
	default:
		d.Action, d.Deadline = Stop, time.Time{}
		d.Message = stopMessage(d, r, now)
	}
	if r.DryRun {
		d.Would, d.Action, d.Reason, d.Detail = d.Action, Skip, ReasonDryRun, "would "+string(d.Action)+": "+string(c.reason)
	}
	return d
}

// checkData fills in a skip when the data a GPU decision needs is missing or stale.
func checkData(d *Decision, in Input) bool {
	stale := in.Rule.StaleAfter
	switch {
	case !in.Usage.Reachable:
		d.Reason = ReasonNoUsage
		return true
	case !in.Usage.At.IsZero() && in.Now.Sub(in.Usage.At) > stale:
		d.Reason, d.Numbers.DataAge = ReasonUsageOld, in.Now.Sub(in.Usage.At)
		d.Detail = "the usage data is " + words(d.Numbers.DataAge) + " old (stale after " + words(stale) + ")"
		return true
	case !in.Telemetry.Present || len(in.Telemetry.Samples) == 0:
		d.Reason = ReasonTelMiss
		return true
	}
	newest := in.Telemetry.Samples[0].At
	for _, s := range in.Telemetry.Samples {
		newest = latest(newest, s.At)
	}
	d.Numbers.DataAge = nonNeg(in.Now.Sub(newest))
	if d.Numbers.DataAge > stale {
		d.Reason = ReasonTelStale
		d.Detail = "the GPU telemetry is " + words(d.Numbers.DataAge) + " old (stale after " + words(stale) + ")"
		return true
	}
	return false
}

// idleStretch finds since when the GPU has been idle: the oldest sample of the newest run of samples below the
// utilization threshold whose memory stays within the tolerance, with no gap longer than StaleAfter (what
// happened in a gap is unknown); never before the server started. busy is true when the newest sample is
// not idle.
func idleStretch(d *Decision, in Input) (since time.Time, busy bool) {
	r := in.Rule
	ss := slices.Clone(in.Telemetry.Samples)
	slices.SortStableFunc(ss, func(a, b Sample) int { return a.At.Compare(b.At) })
	last := ss[len(ss)-1]
	d.Numbers.Utilization = last.Utilization
	if last.Utilization >= r.Utilization {
		return in.Now, true
	}
	lo, hi := last.MemoryBytes, last.MemoryBytes
	since = last.At
	for i := len(ss) - 2; i >= 0; i-- {
		s := ss[i]
		if ss[i+1].At.Sub(s.At) > r.StaleAfter || s.Utilization >= r.Utilization {
			break
		}
		nlo, nhi := min(lo, s.MemoryBytes), max(hi, s.MemoryBytes)
		if nhi-nlo > r.MemoryTolerance {
			break
		}
		lo, hi, since = nlo, nhi, s.At
		d.Numbers.Utilization = max(d.Numbers.Utilization, s.Utilization)
	}
	d.Numbers.MemoryDelta = hi - lo
	since = latest(since, in.Server.Started)
	d.Numbers.IdleFor = nonNeg(in.Now.Sub(since))
	return since, false
}

// Snooze errors.
var (
	ErrNothingToSnooze = errors.New("no stop is announced for this server")
	ErrNotSnoozable    = errors.New("this stop cannot be snoozed")
	ErrNoSnoozesLeft   = errors.New("no snoozes left")
)

// Snooze is the notice after the user snoozes it at now: the deadline moves by the rule's snooze period (from
// now, if it has passed), once per snooze, at most MaxSnoozes times. A stop for max_age is not snoozable.
// contended is set while someone waits for the server's GPU class: a snooze then moves the stop by no more than
// the rule's idleWhenContended (policy.Rule.SnoozeFor).
func Snooze(r policy.Rule, n Notice, now time.Time, contended bool) (Notice, error) {
	switch {
	case n.Since.IsZero() || n.Deadline.IsZero():
		return n, ErrNothingToSnooze
	case n.Reason != ReasonIdle || r.MaxSnoozes == 0 || r.Snooze == 0:
		return n, ErrNotSnoozable
	case n.Snoozes >= r.MaxSnoozes:
		return n, ErrNoSnoozesLeft
	}
	n.Deadline = latest(n.Deadline, now).Add(r.SnoozeFor(contended))
	n.Snoozes++
	return n, nil
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

func nonNeg(d time.Duration) time.Duration { return max(d, 0) }
