// Package replaykit hands gpu-quota's decision code to the trace replay (services/internal/replay), which Go's
// internal rule keeps out of services/gpu-quota/internal: the admission engine (policy decisions,
// reservations, the waitlist), the policy parser and the fair-share arithmetic. It has no logic of its own:
// aliases and one-line wrappers, as policycheck hands the culler's parser to the gpuhub command.
package replaykit

import (
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// The admission engine and what it is asked and answers (internal/admit).
type (
	Engine          = admit.Engine
	Options         = admit.Options
	Request         = admit.Request
	Result          = admit.Result
	WaitlistOptions = admit.WaitlistOptions
	WaitlistChoice  = admit.WaitlistChoice
	TickResult      = admit.TickResult
	AssessRequest   = admit.AssessRequest
	AssessOption    = admit.AssessOption
	Contention      = admit.Contention
)

// Reasons of a refusal the replay acts on.
const (
	ReasonNoneFree = admit.ReasonNoneFree
	ReasonWaitlist = admit.ReasonWaitlist
)

// Policy is a gpu-quota policy file (internal/quota).
type Policy = quota.Policy

// WaitlistState is the waitlist's stored state; an engine answers for its waitlist once one is loaded.
type WaitlistState = waitlist.State

// New returns an engine (admit.New).
func New(o Options) (*Engine, error) { return admit.New(o) }

// ParsePolicy reads a policy as gpu-quota does: strict YAML, validated; name is the file name errors carry.
func ParsePolicy(name string, data []byte) (*Policy, error) {
	p := &quota.Policy{}
	if err := ipolicy.Decode(name, data, p); err != nil {
		return nil, err
	}
	return p, nil
}
