package policy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a length of time in a policy file: a Go duration ("90s", "10m", "1h30m") or days ("7d",
// "30d", "1d12h"), never negative, always with a unit (a bare 600 is an error: seconds or minutes?).
type Duration time.Duration

// Std is the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// UnmarshalYAML reads a duration from a scalar.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration such as 10m, 24h or 7d, found %s", describe(n))
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as ParseDuration reads it.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String writes the duration with days, hours, minutes and seconds, leaving out zero parts: "7d", "1d12h",
// "10m", "1h30m", "0s"; below a second, as time.Duration does.
func (d Duration) String() string { return FormatDuration(time.Duration(d)) }

// maxDays bounds durations in days well inside time.Duration's 292 years.
const maxDays = 100 * 366

var daysRe = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)d(.*)$`)

// ParseDuration reads a Go duration or one that starts with days ("7d", "1.5d", "1d12h").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	orig := s
	bad := func() error {
		return fmt.Errorf("invalid duration %q: write a number and a unit, s, m, h or d (as in 90s, 10m, 24h, 7d, 1d12h)", orig)
	}
	if s == "" {
		return 0, bad()
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("invalid duration %q: a duration cannot be negative", s)
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("invalid duration %q: a unit is missing (s, m, h or d, as in %ss or %sm)", s, s, s)
	}
	var total time.Duration
	if m := daysRe.FindStringSubmatch(s); m != nil {
		days, err := strconv.ParseFloat(m[1], 64)
		if err != nil || days > maxDays {
			return 0, bad()
		}
		total = time.Duration(math.Round(days * float64(24*time.Hour)))
		s = m[2]
		if s == "" {
			return total, nil
		}
		if s[0] == '+' || s[0] == '-' {
			return 0, bad()
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, bad()
	}
	if v < 0 {
		return 0, fmt.Errorf("invalid duration %q: a duration cannot be negative", orig)
	}
	if total > math.MaxInt64-v {
		return 0, bad()
	}
	return total + v, nil
}

// FormatDuration writes d as Duration.String does.
func FormatDuration(d time.Duration) string {
	if d < 0 {
		return "-" + FormatDuration(-d)
	}
	if d%time.Second != 0 {
		return d.String()
	}
	if d == 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.unit; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.name)
			d -= n * u.unit
		}
	}
	return b.String()
}
