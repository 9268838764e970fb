package replay

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// Config is the scenario and the idleness model (config/replay.yaml, every number with its source).
type Config struct {
	Seed      uint64    `yaml:"seed"`
	Trace     Trace     `yaml:"trace"`
	Users     Users     `yaml:"users"`
	Capacity  Capacity  `yaml:"capacity"`
	Requests  Requests  `yaml:"requests"`
	Idleness  Idleness  `yaml:"idleness"`
	Behaviour Behaviour `yaml:"behaviour"`
	RightSize RightSize `yaml:"rightSize"`
}

// RightSize is the right-size advice setup (advice.go): the share of users whose work fits a time-sliced
// share, and the share of users who follow the advice.
type RightSize struct {
	Fit    float64 `yaml:"fit"`
	Follow float64 `yaml:"follow"`
}

// Trace says which part of the trace is replayed.
type Trace struct {
	From     int64   `yaml:"from"`
	Fraction float64 `yaml:"fraction"`
}

// Users are the synthetic users and their groups.
type Users struct {
	Count  int     `yaml:"count"`
	Groups []Group `yaml:"groups"`
}

// Group is a Hub group and the share of the users in it.
type Group struct {
	Name  string  `yaml:"name"`
	Share float64 `yaml:"share"`
}

// Capacity is the simulated cluster.
type Capacity struct {
	// GPUs is the main scenario's capacity; 0: chosen by Choose.
	GPUs           int     `yaml:"gpus"`
	Choose         Choose  `yaml:"choose"`
	Ample          int     `yaml:"ample"`
	SharedFraction float64 `yaml:"sharedFraction"`
	Replicas       int64   `yaml:"replicas"`
}

// Choose is the rule for the main capacity: the largest on the grid From..To (by Step) at which the anchor
// (Kubernetes + idle-culler) makes at least WaitedShare of its requests wait.
type Choose struct {
	From        int     `yaml:"from"`
	To          int     `yaml:"to"`
	Step        int     `yaml:"step"`
	WaitedShare float64 `yaml:"waitedShare"`
}

// Requests maps the trace's requests to spawn choices.
type Requests struct {
	SharedUpToMilli int `yaml:"sharedUpToMilli"`
}

// Idleness is the GPU activity model inside a server.
type Idleness struct {
	BusyMean        ipolicy.Duration `yaml:"busyMean"`
	ThinkMean       ipolicy.Duration `yaml:"thinkMean"`
	AwayProbability float64          `yaml:"awayProbability"`
	AwayMean        ipolicy.Duration `yaml:"awayMean"`
	// AwayShape is the long gaps' distribution: "exponential" (memoryless) or "pareto" (Lomax: heavy-tailed,
	// with AwayTailIndex, scaled so its mean is AwayMean).
	AwayShape         string  `yaml:"awayShape"`
	AwayTailIndex     float64 `yaml:"awayTailIndex"`
	TabClosedWhenAway float64 `yaml:"tabClosedWhenAway"`
	TabClosedWhenBusy float64 `yaml:"tabClosedWhenBusy"`
	BusyUtilization   float64 `yaml:"busyUtilization"`
}

// The shapes of the long idle gaps.
const (
	AwayExponential = "exponential"
	AwayPareto      = "pareto"
)

// Behaviour is what users, the anchor's culler and the waitlist do.
type Behaviour struct {
	RetryEvery        ipolicy.Duration `yaml:"retryEvery"`
	SnoozeWhenTabOpen float64          `yaml:"snoozeWhenTabOpen"`
	FalseCullWindow   ipolicy.Duration `yaml:"falseCullWindow"`
	HubIdleTimeout    ipolicy.Duration `yaml:"hubIdleTimeout"`
	HubCullEvery      ipolicy.Duration `yaml:"hubCullEvery"`
	WaitlistHold      ipolicy.Duration `yaml:"waitlistHold"`
	FairShareHalfLife ipolicy.Duration `yaml:"fairShareHalfLife"`
	LedgerEvery       ipolicy.Duration `yaml:"ledgerEvery"`
}

// Validate checks what the simulation needs (called by the strict decoder).
func (c *Config) Validate() []error {
	var errs []error
	bad := func(path []string, format string, args ...any) {
		errs = append(errs, ipolicy.Errorf(path, format, args...))
	}
	if c.Trace.Fraction <= 0 || c.Trace.Fraction > 1 {
		bad([]string{"trace", "fraction"}, "must be in (0, 1]")
	}
	if c.Users.Count < 1 {
		bad([]string{"users", "count"}, "must be at least 1")
	}
	if len(c.Users.Groups) == 0 {
		bad([]string{"users", "groups"}, "name at least one group")
	}
	ch := c.Capacity.Choose
	switch {
	case c.Capacity.GPUs < 0:
		bad([]string{"capacity", "gpus"}, "must be at least 1, or 0 to choose it by capacity.choose")
	case c.Capacity.GPUs == 0 && (ch.From < 1 || ch.Step < 1 || ch.To < ch.From):
		bad([]string{"capacity", "choose"}, "needs from >= 1, step >= 1 and to >= from (or set capacity.gpus)")
	case c.Capacity.GPUs == 0 && (ch.WaitedShare <= 0 || ch.WaitedShare >= 1):
		bad([]string{"capacity", "choose", "waitedShare"}, "must be in (0, 1)")
	}
	if c.Capacity.Ample < 0 {
		bad([]string{"capacity", "ample"}, "must be at least 1, or 0 for no ample-capacity row")
	}
	if c.Capacity.Replicas < 2 {
		bad([]string{"capacity", "replicas"}, "must be at least 2 (a time-sliced GPU is shared)")
	}
	for _, p := range []struct {
		name string
		d    ipolicy.Duration
	}{{"busyMean", c.Idleness.BusyMean}, {"thinkMean", c.Idleness.ThinkMean}, {"awayMean", c.Idleness.AwayMean}} {
		if p.d.Std() < time.Minute {
			bad([]string{"idleness", p.name}, "must be at least 1m (the simulation's step)")
		}
	}
	switch c.Idleness.AwayShape {
	case AwayExponential:
	case AwayPareto:
		// The mean is finite only above 1, and AwayMean is the mean.
		if c.Idleness.AwayTailIndex <= 1 {
			bad([]string{"idleness", "awayTailIndex"}, "must be above 1 (the Pareto mean is infinite at or below 1)")
		}
	default:
		bad([]string{"idleness", "awayShape"}, "must be %q or %q", AwayExponential, AwayPareto)
	}
	for _, p := range []struct {
		name string
		d    ipolicy.Duration
	}{{"retryEvery", c.Behaviour.RetryEvery}, {"hubCullEvery", c.Behaviour.HubCullEvery}, {"ledgerEvery", c.Behaviour.LedgerEvery}} {
		if p.d.Std() < time.Minute {
			bad([]string{"behaviour", p.name}, "must be at least 1m (the simulation's step)")
		}
	}
	if c.RightSize.Fit < 0 || c.RightSize.Fit > 1 {
		bad([]string{"rightSize", "fit"}, "must be in [0, 1]")
	}
	if c.RightSize.Follow < 0 || c.RightSize.Follow > 1 {
		bad([]string{"rightSize", "follow"}, "must be in [0, 1]")
	}
	return errs
}

// LoadConfig reads a scenario file strictly (unknown keys and bad values are errors with their place).
func LoadConfig(path string) (*Config, error) {
	c := &Config{}
	if err := ipolicy.Load(path, c); err != nil {
		return nil, err
	}
	return c, nil
}

// Policies are the gpuhub runs' policy files, read by the services' own parsers.
type Policies struct {
	Quota, Culler, Profiles []byte
	// Names are the files' names, for errors.
	QuotaName, CullerName, ProfilesName string
}

// LoadPolicies reads quota.yaml, culler.yaml and profiles.yaml from dir.
func LoadPolicies(dir string) (Policies, error) {
	var p Policies
	var errs []error
	read := func(name string, into *[]byte, named *string) {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("read policy: %w", err))
		}
		*into, *named = b, path
	}
	read("quota.yaml", &p.Quota, &p.QuotaName)
	read("culler.yaml", &p.Culler, &p.CullerName)
	read("profiles.yaml", &p.Profiles, &p.ProfilesName)
	return p, errors.Join(errs...)
}

// returnFloor is, under heavy-tailed (Pareto) absences, the idle time in minutes from which a user away that
// long comes back within the false-cull window with probability below p: P = 1 - ((s+t)/(s+t+w))^a with s =
// awayMean (a - 1), so t = w / ((1-p)^(-1/a) - 1) - s. ok is false for exponential absences (memoryless:
// the chance does not fall with t).
func (c *Config) returnFloor(p float64) (t float64, ok bool) {
	i := c.Idleness
	if i.AwayShape != AwayPareto || i.AwayTailIndex <= 1 || p <= 0 || p >= 1 {
		return 0, false
	}
	a := i.AwayTailIndex
	s := i.AwayMean.Std().Minutes() * (a - 1)
	w := c.Behaviour.FalseCullWindow.Std().Minutes()
	return max(0, w/(math.Pow(1-p, -1/a)-1)-s), true
}
