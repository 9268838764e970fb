// Package policycheck lets the gpuhub command check gpu-culler policy files with the culler's own parser,
// which Go's internal rule keeps inside services/gpu-culler. The parser stays in internal/policy; this only
// hands it out.
package policycheck

import (
	"io"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// Check loads the gpu-culler policy at path as gpu-culler does and writes the result to out: every error as
// file:line:column: message and a count, or "<path>: ok"; what, when set, is added to the last line.
func Check(out io.Writer, path, what string) error {
	return ipolicy.CheckAs(out, path, what, &policy.Policy{})
}

// Keys are the top-level keys of a gpu-culler policy file.
func Keys() []string { return ipolicy.Keys(&policy.Policy{}) }
