// Package quotakit is gpu-quota's one door for the tools (the gpuhub command, the trace replay in
// services/replay), which Go's internal rule keeps out of services/gpu-quota/internal: the admission engine
// (policy decisions, reservations, the waitlist), the policy parser and the fair-share arithmetic. It has no
// logic of its own: aliases and one-line wrappers.
package quotakit

import (
	"io"

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

// CheckPolicy loads the gpu-quota policy at path as gpu-quota does and writes the result to out: every error as
// file:line:column: message and a count, or "<path>: ok"; what, when set, is added to the last line.
func CheckPolicy(out io.Writer, path, what string) error {
	return ipolicy.CheckAs(out, path, what, &quota.Policy{})
}

// PolicyKeys are the top-level keys of a gpu-quota policy file.
func PolicyKeys() []string { return ipolicy.Keys(&quota.Policy{}) }

// LoadPolicy reads and validates the policy file at path as gpu-quota does at start.
func LoadPolicy(path string) (*Policy, error) {
	p := &quota.Policy{}
	if err := ipolicy.Load(path, p); err != nil {
		return nil, err
	}
	return p, nil
}
