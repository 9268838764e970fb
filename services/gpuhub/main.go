// Command gpuhub is the operators' tool: gpuhub policy check FILE, gpuhub policy explain USER, gpuhub status,
// gpuhub report. See services/gpuhub/README.md.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/gpuhub/gpuhub/services/gpuhub/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.LookupEnv})
	stop()
	os.Exit(code)
}
