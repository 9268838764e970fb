// Package policy is gpu-culler's policy file: when a server counts as idle (per GPU kind, per gpu-profiles
// slug, and for CPU-only servers by Hub activity), how long it is warned before it stops, how it may be
// snoozed, the longest a server may run, who is exempt, and what a stop does. It loads through
// services/internal/policy (strict YAML, file:line:column errors, reloads that keep the last good file) and
// resolves the Rule that applies to one server (Policy.Rule). Pure: no clock, no Kubernetes, no Hub. The
// format, the precedence and the migration from z2jh's cull.* values are documented in
// services/gpu-culler/README.md.
package policy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// Policy is a gpu-culler policy file.
type Policy struct {
	// DryRun logs and counts what the culler would do, and neither warns nor stops anyone.
	DryRun bool `yaml:"dryRun"`
	// Every is how often a pass looks at every running server (z2jh cull.every). Default DefaultEvery.
	Every *ipolicy.Duration `yaml:"every"`
	// Concurrency is how many Hub reads and pod writes a pass makes at once (z2jh cull.concurrency); stops go one
	// at a time, paced by the Hub's latency (pass/pace.go). Default 10.
	Concurrency *int `yaml:"concurrency"`
	// StaleAfter is how old a server's GPU telemetry may be and still be acted on. Default DefaultStaleAfter.
	StaleAfter *ipolicy.Duration `yaml:"staleAfter"`
	// Exempt servers are never warned or stopped.
	Exempt Exempt `yaml:"exempt"`

	// GPU is the rule of every GPU server, unless Kinds or Profiles say otherwise field by field.
	GPU Entry `yaml:"gpu"`
	// Kinds are rules by GPU kind (gpu, mig, shared, mps, mig-shared).
	Kinds map[gpu.Kind]Entry `yaml:"kinds"`
	// Profiles are rules by gpu-profiles slug (gpu-h100-80gb-hbm3, mig-a100-sxm4-40gb-3g-20gb, ...).
	Profiles map[string]Entry `yaml:"profiles"`
	// CPU is the rule of CPU-only servers, idle by Hub activity alone (what z2jh's cull.* did for every server).
	CPU CPUEntry `yaml:"cpu"`
}

// Exempt names the servers the culler leaves alone.
type Exempt struct {
	Users  []string `yaml:"users"`  // Hub user names
	Groups []string `yaml:"groups"` // Hub group names
	// Annotations exempt a pod that has one of them: key -> value, "*" for any value.
	Annotations map[string]string `yaml:"annotations"`
	// Admins exempts Hub admins (z2jh cull.adminUsers: false).
	Admins bool `yaml:"admins"`
}

// Entry is a rule for GPU servers as the file writes it: every field optional; a field left out says nothing
// here, and the next rule in precedence (profile, kind, gpu, built-in) decides.
type Entry struct {
	// IdlePeriod is how long the GPU must be idle before the server stops; 0s turns idle culling off.
	IdlePeriod *ipolicy.Duration `yaml:"idlePeriod"`
	// IdleWhenContended replaces IdlePeriod while someone waits for the server's GPU class (the waitlist, issue 13).
	IdleWhenContended *ipolicy.Duration `yaml:"idleWhenContended"`
	// Utilization is the SM utilization, in percent of the server's own allocation, below which the GPU
	// counts as idle.
	Utilization *Percent `yaml:"utilization"`
	// MemoryTolerance is how much the GPU memory the server uses may change while it counts as idle.
	MemoryTolerance *Bytes `yaml:"memoryTolerance"`
	// HubIdlePeriod, when set, also requires no Hub activity (browser, kernels) for this long.
	HubIdlePeriod *ipolicy.Duration `yaml:"hubIdlePeriod"`
	Common        `yaml:",inline"`
}

// CPUEntry is the rule of CPU-only servers.
type CPUEntry struct {
	// IdlePeriod is how long without Hub activity before the server stops (z2jh cull.timeout); 0s, the
	// built-in value, leaves CPU-only servers alone.
	IdlePeriod *ipolicy.Duration `yaml:"idlePeriod"`
	Common     `yaml:",inline"`
}

// Common are the fields of both kinds of rules.
type Common struct {
	// Warn is how long the user sees the countdown before the server stops.
	Warn *ipolicy.Duration `yaml:"warn"`
	// Snooze is how far one snooze moves the stop; MaxSnoozes how many a warning allows (0: none).
	Snooze     *ipolicy.Duration `yaml:"snooze"`
	MaxSnoozes *int              `yaml:"maxSnoozes"`
	// MaxAge is the longest a server runs, busy or not (z2jh cull.maxAge); 0s is no limit.
	MaxAge *ipolicy.Duration `yaml:"maxAge"`
	// Action is what a stop does: stop, or stop-and-remove (a named server is also deleted).
	Action *Action `yaml:"action"`
}

// Action is what a stop does to the server.
type Action string

// The actions.
const (
	Stop          Action = "stop"
	StopAndRemove Action = "stop-and-remove"
)

// UnmarshalYAML accepts stop and stop-and-remove.
func (a *Action) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		switch Action(n.Value) {
		case Stop, StopAndRemove:
			*a = Action(n.Value)
			return nil
		}
		return fmt.Errorf("expected stop or stop-and-remove, found %q", n.Value)
	}
	return fmt.Errorf("expected stop or stop-and-remove")
}

// Percent is a percentage from 0 to 100, written 5 or "5%".
type Percent float64

// UnmarshalYAML reads a number or a number with a % sign.
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	want := "expected a percentage from 0 to 100, such as 5 or 5%"
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s", want)
	}
	s := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(n.Value), "%"))
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
		return fmt.Errorf("%s; found %q", want, n.Value)
	}
	*p = Percent(v)
	return nil
}

// Bytes is an amount of memory, written with a unit: 0, 512MiB, 1GiB, 500MB.
type Bytes int64

var bytesRe = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*(B|[KMGT]i?B)$`)

var byteUnits = map[string]float64{
	"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
}

// maxBytes bounds memory amounts (a petabyte is more than any GPU holds).
const maxBytes = 1 << 50

// ParseBytes reads an amount of memory: 0, or a number and a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB).
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	m := bytesRe.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("invalid amount of memory %q: write a number and a unit, as in 256MiB, 1GiB or 500MB", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil || v*byteUnits[m[2]] > maxBytes {
		return 0, fmt.Errorf("invalid amount of memory %q: at most 1PiB", s)
	}
	return int64(math.Round(v * byteUnits[m[2]])), nil
}

// UnmarshalYAML reads an amount of memory.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected an amount of memory such as 256MiB")
	}
	v, err := ParseBytes(n.Value)
	if err != nil {
		return err
	}
	*b = Bytes(v)
	return nil
}

// String writes the amount in the largest binary unit that divides it ("256MiB", "1GiB", "1000B"... "0").
func (b Bytes) String() string {
	if b == 0 {
		return "0"
	}
	for _, u := range []string{"TiB", "GiB", "MiB", "KiB"} {
		if n := int64(byteUnits[u]); int64(b)%n == 0 {
			return strconv.FormatInt(int64(b)/n, 10) + u
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// Built-in values: what applies when no entry of the file sets a field.
const (
	DefaultEvery       = time.Minute
	DefaultConcurrency = 10
	DefaultStaleAfter  = 2 * time.Minute

	DefaultIdlePeriod      = time.Hour
	DefaultUtilization     = 5.0             // percent
	DefaultMemoryTolerance = 256 * (1 << 20) // bytes
	DefaultWarn            = 15 * time.Minute
	DefaultSnooze          = time.Hour
	DefaultMaxSnoozes      = 2
)

// Bounds of the file's values.
const (
	maxPeriod      = 366 * 24 * time.Hour
	minEvery       = 10 * time.Second
	maxConcurrency = 100
	maxSnoozes     = 100
)
