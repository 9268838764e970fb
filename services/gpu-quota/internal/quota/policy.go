// Package quota is gpu-quota's policy model and its pure decisions: the policy file (per user, per Hub group
// and a default), how the entries that apply to one user merge into an Effective policy that says where each
// value came from (Explain), and Decide, the admission check of a new GPU server against what the user holds
// and has used. No Kubernetes, no Hub, no clock: the service passes all of that in. The file format and the
// precedence rules are documented with examples in services/gpu-quota/README.md.
package quota

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// Policy is a gpu-quota policy file.
type Policy struct {
	// OnUnavailable is what to do when the usage data a decision needs cannot be read: open (the default)
	// admits and counts it, closed refuses with a message that says the quota cannot be checked.
	OnUnavailable Mode `yaml:"onUnavailable"`
	// Grace (or GraceSeconds) is how long a user over a limit or budget keeps their GPU servers after the
	// notice, before gpu-quota stops them. Default DefaultGrace.
	Grace        *policy.Duration `yaml:"grace"`
	GraceSeconds *int64           `yaml:"graceSeconds"`

	Default Entry            `yaml:"default"`
	Groups  map[string]Entry `yaml:"groups"` // by Hub group name
	Users   map[string]Entry `yaml:"users"`  // by Hub user name
}

// DefaultGrace is the grace period when the file sets none.
const DefaultGrace = 10 * time.Minute

// Entry is the policy of the default, one group or one user. Every field is optional: a field left out says
// nothing here (precedence looks further), and a limit no entry sets is unlimited.
type Entry struct {
	// MaxGPUs is the most GPU-equivalents held at once (a whole GPU = 1, a MIG 3g.20gb on an A100 = 3/7, a
	// 4-way time-sliced share = 1/4).
	MaxGPUs *Limit `yaml:"maxGPUs"`
	// MaxGPUsPerKind is the same per kind of GPU (gpu, mig, shared, mps, mig-shared).
	MaxGPUsPerKind map[gpu.Kind]Limit `yaml:"maxGPUsPerKind"`
	// MaxServers is the most GPU servers running at once.
	MaxServers *Limit `yaml:"maxServers"`
	// Budgets are GPU-hour budgets over rolling windows, weighted by Weights.
	Budgets []Budget `yaml:"budgets"`
	// Weights is the billing weight of a GPU-hour per kind or class ("gpu", "gpu H100-80GB-HBM3", "mig
	// A100-SXM4-40GB 3g.20gb"); the most specific key that matches a class applies; 1 when none does.
	Weights map[string]float64 `yaml:"weights"`
	// AllowedKinds are the kinds of GPU that may be used at all; left out, every kind; [] none.
	AllowedKinds []gpu.Kind `yaml:"allowedKinds"`
	// Exempt users are admitted whatever their use, and never stopped for it.
	Exempt *bool `yaml:"exempt"`
	// Priority orders who gets a scarce kind first (higher first).
	Priority *int `yaml:"priority"`
}

// Budget is a GPU-hour budget over a rolling window.
type Budget struct {
	Window   policy.Duration `yaml:"window"`
	GPUHours *Limit          `yaml:"gpuHours"`
}

// Limit is a number that is never negative, or unlimited (+Inf, so that comparisons need no special case). A
// policy writes it as a number (2, 0.5), a fraction (3/7, 1/4) or the word unlimited.
type Limit float64

// Unlimited is the limit no entry sets.
var Unlimited = Limit(math.Inf(1))

// IsUnlimited reports whether l is no limit at all.
func (l Limit) IsUnlimited() bool { return math.IsInf(float64(l), 1) }

// UnmarshalYAML reads a number, a fraction or "unlimited".
func (l *Limit) UnmarshalYAML(n *yaml.Node) error {
	want := `expected a number, a fraction such as 3/7, or unlimited`
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s", want)
	}
	s := strings.TrimSpace(n.Value)
	if s == "unlimited" {
		*l = Unlimited
		return nil
	}
	var v float64
	var err error
	if num, den, ok := strings.Cut(s, "/"); ok && n.ShortTag() == "!!str" {
		var a, b int64
		a, err = strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err == nil {
			b, err = strconv.ParseInt(strings.TrimSpace(den), 10, 64)
		}
		if err == nil && b == 0 {
			return fmt.Errorf("%q divides by zero", s)
		}
		v = float64(a) / float64(b)
	} else if err = n.Decode(&v); err != nil && n.ShortTag() == "!!str" {
		v, err = strconv.ParseFloat(s, 64) // a quoted number
	}
	switch {
	case err != nil:
		return fmt.Errorf("%s; found %q", want, s)
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%q is not a limit: write unlimited for no limit", s)
	case v < 0:
		return fmt.Errorf("%q: a limit cannot be negative", s)
	}
	*l = Limit(v)
	return nil
}

// Mode is what happens when usage data cannot be read.
type Mode string

// The modes of onUnavailable.
const (
	Open   Mode = "open"
	Closed Mode = "closed"
)

// UnmarshalYAML accepts open and closed.
func (m *Mode) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		switch Mode(n.Value) {
		case Open, Closed:
			*m = Mode(n.Value)
			return nil
		}
		return fmt.Errorf("expected open or closed, found %q", n.Value)
	}
	return fmt.Errorf("expected open or closed")
}

// Unavailable is the onUnavailable mode, open unless the file says closed.
func (p *Policy) Unavailable() Mode {
	if p.OnUnavailable == Closed {
		return Closed
	}
	return Open
}

// GracePeriod is how long a user over a limit keeps their servers after the notice.
func (p *Policy) GracePeriod() time.Duration {
	switch {
	case p.GraceSeconds != nil:
		return time.Duration(*p.GraceSeconds) * time.Second
	case p.Grace != nil:
		return p.Grace.Std()
	}
	return DefaultGrace
}

// Bounds of budget windows: the ledger counts GPU-hours in hour buckets, and keeps a year within reach.
const (
	minWindow = time.Hour
	maxWindow = 366 * 24 * time.Hour
	// maxGraceSeconds bounds graceSeconds well inside time.Duration.
	maxGraceSeconds = 366 * 24 * 3600
)

// Validate checks what the YAML decoder cannot: kinds, classes, windows, whole numbers. policy.Decode calls
// it and places each error on its node.
func (p *Policy) Validate() []error {
	var errs []error
	if p.Grace != nil && p.GraceSeconds != nil {
		errs = append(errs, policy.KeyErrorf([]string{"graceSeconds"}, "set grace or graceSeconds, not both"))
	}
	if p.GraceSeconds != nil && (*p.GraceSeconds < 0 || *p.GraceSeconds > maxGraceSeconds) {
		errs = append(errs, policy.Errorf([]string{"graceSeconds"}, "between 0 and %d seconds (a year)", maxGraceSeconds))
	}
	if p.Grace != nil && p.Grace.Std() > maxWindow {
		errs = append(errs, policy.Errorf([]string{"grace"}, "no longer than a year"))
	}
	errs = append(errs, p.Default.validate([]string{"default"})...)
	for _, section := range []struct {
		key     string
		entries map[string]Entry
		what    string
	}{{"groups", p.Groups, "group"}, {"users", p.Users, "user"}} {
		for _, name := range sortedKeys(section.entries) {
			at := []string{section.key, name}
			if strings.TrimSpace(name) == "" {
				errs = append(errs, policy.KeyErrorf(at, "a %s name cannot be empty", section.what))
			}
			errs = append(errs, section.entries[name].validate(at)...)
		}
	}
	return errs
}

func (e Entry) validate(at []string) []error {
	var errs []error
	path := func(more ...string) []string { return slices.Concat(at, more) }
	if e.MaxServers != nil && !e.MaxServers.IsUnlimited() && float64(*e.MaxServers) != math.Trunc(float64(*e.MaxServers)) {
		errs = append(errs, policy.Errorf(path("maxServers"), "a whole number of servers, not %g", float64(*e.MaxServers)))
	}
	for _, k := range sortedKeys(e.MaxGPUsPerKind) {
		if !k.Known() {
			errs = append(errs, policy.KeyErrorf(path("maxGPUsPerKind", string(k)), "unknown GPU kind %q; the kinds are %s", k, gpu.KindList()))
		}
	}
	seen := map[time.Duration]int{}
	for i, b := range e.Budgets {
		bi := path("budgets", strconv.Itoa(i))
		w := b.Window.Std()
		switch {
		case w == 0:
			errs = append(errs, policy.Errorf(append(bi, "window"), "a budget needs a window, such as 24h, 7d or 30d"))
		case w < minWindow || w > maxWindow || w%time.Hour != 0:
			errs = append(errs, policy.Errorf(append(bi, "window"),
				"a budget window is whole hours from 1h to 366d (GPU-hours are counted by the hour), not %s", b.Window))
		default:
			if first, dup := seen[w]; dup {
				errs = append(errs, policy.Errorf(append(bi, "window"), "a second budget for %s in this entry (the first is budgets.%d)", windowName(w), first))
			}
			seen[w] = i
		}
		if b.GPUHours == nil {
			errs = append(errs, policy.Errorf(append(bi, "gpuHours"), "a budget needs gpuHours"))
		}
	}
	for _, key := range sortedKeys(e.Weights) {
		at := path("weights", key)
		if msg := checkClassKey(key); msg != "" {
			errs = append(errs, policy.KeyErrorf(at, "%s", msg))
		}
		if w := e.Weights[key]; math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			errs = append(errs, policy.Errorf(at, "a weight is a number, 0 or more"))
		}
	}
	for i, k := range e.AllowedKinds {
		if !k.Known() {
			errs = append(errs, policy.Errorf(path("allowedKinds", strconv.Itoa(i)), "unknown GPU kind %q; the kinds are %s", k, gpu.KindList()))
		}
	}
	return errs
}

// checkClassKey says what is wrong with a weights key, "" when nothing: a kind, or a class or the start of one
// ("gpu H100-80GB-HBM3", "mig A100-SXM4-40GB", "mig A100-SXM4-40GB 3g.20gb"), words one space apart.
func checkClassKey(key string) string {
	words := strings.Fields(key)
	if len(words) == 0 {
		return "a weight needs a kind or class name"
	}
	if strings.Join(words, " ") != key {
		return fmt.Sprintf("write %q with single spaces, as classes are written", key)
	}
	if !gpu.Kind(words[0]).Known() {
		return fmt.Sprintf("%q starts with no GPU kind; a weight is for a kind (%s) or a class such as \"gpu H100-80GB-HBM3\"", key, gpu.KindList())
	}
	return ""
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
