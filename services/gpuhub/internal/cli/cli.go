// Package cli is the gpuhub command: one entry point for operators' tools, dispatching to each service's
// commands (gpuhub policy ... for gpu-quota and gpu-culler policies, gpuhub status's waitlist) and its own
// (gpuhub report: GPU-hours from the usage API; gpuhub status: the GPUs at a glance).
package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuhub/gpuhub/services/gpuhub/internal/policycmd"
	"github.com/gpuhub/gpuhub/services/gpuhub/internal/report"
	"github.com/gpuhub/gpuhub/services/gpuhub/internal/status"
)

// Env is what the command reads and writes besides its arguments.
type Env = policycmd.Env

const usage = `usage: gpuhub COMMAND ...

commands:
  policy check [--kind quota|culler] FILE... check gpu-quota and gpu-culler policy files
  policy explain USER [--groups a,b] --policy FILE | --quota-url URL
                                            a user's effective policy and why
  status [--usage-url URL] [--quota-url URL]
                                            the GPUs at a glance: inventory by class, who holds what with
                                            live utilization, the waitlist
  report [--window 30d] [--by user|group|kind] [--group G] [--user U] [--format table|csv|json]
                                            allocated and used GPU-hours, like Slurm's sreport
  report --right-size [--window 7d] [--by user|group|kind] [--user U]
                                            GPU-hours right-sizing would save; with --user, the advice

Run gpuhub policy help, gpuhub report --help, gpuhub status --help for details.
`

// Run runs gpuhub with args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		_, _ = fmt.Fprint(env.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "policy":
		return policycmd.Run(ctx, args[1:], env)
	case "status":
		return status.Run(ctx, args[1:], env, time.Now)
	case "report":
		return report.Run(ctx, args[1:], env, time.Now)
	case "help", "-h", "--help":
		_, _ = fmt.Fprint(env.Stdout, usage)
		return 0
	}
	_, _ = fmt.Fprintf(env.Stderr, "gpuhub: unknown command %q\n%s", args[0], usage)
	return 2
}
