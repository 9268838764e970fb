package decide

import (
	"fmt"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
)

// warnMessage is the countdown the panel shows.
func warnMessage(d Decision, r policy.Rule, now time.Time) string {
	at := clock(d.Deadline, now)
	n := d.Numbers
	if d.Reason == ReasonMaxAge {
		return fmt.Sprintf("This server has run for %s; %s server may run for %s, so it stops at %s. Save your work before then.",
			words(n.Age), serverKind(r), words(r.MaxAge), at)
	}
	unless := "unless you use it"
	if left := r.MaxSnoozes - n.Snoozes; left > 0 && r.Snooze > 0 {
		unless += " or snooze"
	}
	snoozed := ""
	if n.Snoozes > 0 {
		snoozed = "Snoozed " + times(n.Snoozes) + ". "
	}
	switch {
	case r.CPU:
		return fmt.Sprintf("%sThis server has had no activity for %s; it stops at %s %s.", snoozed, words(n.IdleFor), at, unless)
	case r.HubIdlePeriod > 0:
		return fmt.Sprintf("%sYour GPU has been idle for %s and the server has had no activity for %s; it stops at %s %s.%s",
			snoozed, words(n.IdleFor), words(n.HubIdleFor), at, unless, waiting(n, r))
	}
	return fmt.Sprintf("%sYour GPU has been idle for %s; this server stops at %s %s.%s", snoozed, words(n.IdleFor), at, unless, waiting(n, r))
}

// waiting says why the idle period is shorter while someone waits for the server's kind of GPU; "" otherwise.
func waiting(n Numbers, r policy.Rule) string {
	if !n.Contended {
		return ""
	}
	switch {
	case r.IdlePeriod == 0: // idle culling only while someone waits
		return fmt.Sprintf(" Someone is waiting for this kind of GPU, so an idle server stops after %s.", words(n.IdlePeriod))
	case r.IdlePeriod > n.IdlePeriod:
		return fmt.Sprintf(" Someone is waiting for this kind of GPU, so an idle server stops after %s instead of %s.",
			words(n.IdlePeriod), words(r.IdlePeriod))
	}
	return "" // the same period: nothing is shorter
}

// stopMessage is what the user reads after the stop.
func stopMessage(d Decision, r policy.Rule, now time.Time) string {
	at := clock(now, now)
	n := d.Numbers
	switch {
	case d.Reason == ReasonMaxAge:
		return fmt.Sprintf("Stopped at %s: the server ran for %s, the longest %s server may run.", at, words(r.MaxAge), serverKind(r))
	case r.CPU:
		return fmt.Sprintf("Stopped at %s: no activity for %s.", at, words(n.IdleFor))
	}
	if n.Contended {
		return fmt.Sprintf("Stopped at %s: GPU idle for %s while someone was waiting for this kind of GPU.", at, words(n.IdleFor))
	}
	return fmt.Sprintf("Stopped at %s: GPU idle for %s.", at, words(n.IdleFor))
}

func serverKind(r policy.Rule) string {
	if r.CPU {
		return "a CPU-only"
	}
	return "a GPU"
}

func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// clock writes t as "15:10 UTC", with the date when it is not today ("Jan 2 15:10 UTC").
func clock(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04 UTC")
	}
	return t.Format("Jan 2 15:04 UTC")
}

// Words writes a duration as the culler's messages do (words).
func Words(d time.Duration) string { return words(d) }

// words writes a duration as people say it, rounded down: "less than a minute", "52 min", "1 h 5 min",
// "3 h", "2 days 4 h".
func words(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "less than a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d < 48*time.Hour:
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		if m == 0 {
			return fmt.Sprintf("%d h", h)
		}
		return fmt.Sprintf("%d h %d min", h, m)
	}
	days, h := d/(24*time.Hour), (d%(24*time.Hour))/time.Hour
	if h == 0 {
		return fmt.Sprintf("%d days", days)
	}
	return fmt.Sprintf("%d days %d h", days, h)
}
