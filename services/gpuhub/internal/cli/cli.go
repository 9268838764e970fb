// Package cli is the gpuhub command: one entry point for operators' tools, dispatching to each service's
// commands (gpuhub policy ... for gpu-quota policies).
package cli

import (
	"context"
	"fmt"

	"github.com/gpuhub/gpuhub/services/gpu-quota/policycmd"
)

// Env is what the command reads and writes besides its arguments.
type Env = policycmd.Env

const usage = `usage: gpuhub COMMAND ...

commands:
  policy check FILE...                      check gpu-quota policy files
  policy explain USER [--groups a,b] --policy FILE | --quota-url URL
                                            a user's effective policy and why

Run gpuhub policy help for details.
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
	case "help", "-h", "--help":
		_, _ = fmt.Fprint(env.Stdout, usage)
		return 0
	}
	_, _ = fmt.Fprintf(env.Stderr, "gpuhub: unknown command %q\n%s", args[0], usage)
	return 2
}
