package cullerkit

import (
	"io"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// CheckPolicy loads the gpu-culler policy at path as gpu-culler does and writes the result to out: every error as
// file:line:column: message and a count, or "<path>: ok"; what, when set, is added to the last line.
func CheckPolicy(out io.Writer, path, what string) error {
	return ipolicy.CheckAs(out, path, what, &policy.Policy{})
}

// PolicyKeys are the top-level keys of a gpu-culler policy file.
func PolicyKeys() []string { return ipolicy.Keys(&policy.Policy{}) }
