// Package cullerkit is gpu-culler's one door for the tools (the gpuhub command, the trace replay in
// services/replay), which Go's internal rule keeps out of services/gpu-culler/internal: the policy parser and
// its resolved rules, Decide (one server, one pass) and Snooze. It has no logic of its own: aliases and
// one-line wrappers. The waitlist's contended classes, which the culler polls over HTTP (internal/contention),
// the replay reads from gpu-quota's engine directly: the same answer, no network.
package cullerkit

import (
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// The policy file and one server's resolved rule (internal/policy).
type (
	Policy = policy.Policy
	Rule   = policy.Rule
)

// One decision's input and output (internal/decide).
type (
	Input     = decide.Input
	Server    = decide.Server
	Sample    = decide.Sample
	Telemetry = decide.Telemetry
	Usage     = decide.Usage
	Notice    = decide.Notice
	Decision  = decide.Decision
	Action    = decide.Action
	Reason    = decide.Reason
)

// The actions.
const (
	None = decide.None
	Warn = decide.Warn
	Stop = decide.Stop
	Skip = decide.Skip
)

// ReasonIdle is a warning's or stop's reason when the GPU sat idle.
const ReasonIdle = decide.ReasonIdle

// Decide is decide.Decide.
func Decide(in Input) Decision { return decide.Decide(in) }

// Snooze is decide.Snooze.
func Snooze(r Rule, n Notice, now time.Time, contended bool) (Notice, error) {
	return decide.Snooze(r, n, now, contended)
}

// ParsePolicy reads a policy as gpu-culler does: strict YAML, validated; name is the file name errors carry.
func ParsePolicy(name string, data []byte) (*Policy, error) {
	p := &policy.Policy{}
	if err := ipolicy.Decode(name, data, p); err != nil {
		return nil, err
	}
	return p, nil
}
