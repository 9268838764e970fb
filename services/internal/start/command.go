package start

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/logging"
)

// Command is the opening of a service's main: a flag set that already has the flags every service has
// (--kubeconfig, --log-format, --log-level, with their environment variables), the parse with the environment
// fallbacks, the logger, then the clients.
type Command struct {
	// Service is the binary's name ("gpu-quota"): the flag set's name, the user agent's, and the log's.
	Service string
	// Flags is where the main declares its own flags before Parse.
	Flags *flag.FlagSet
	// Logger is set by Parse.
	Logger *slog.Logger

	stderr                          io.Writer
	kubeconfig, logFormat, logLevel *string
	// env are the environment variables of flags declared by the methods below.
	env map[string]string
}

// sharedEnv are the environment variables of the flags NewCommand declares.
var sharedEnv = map[string]string{"kubeconfig": "KUBECONFIG", "log-format": "GPUHUB_LOG_FORMAT", "log-level": "GPUHUB_LOG_LEVEL"}

// NewCommand starts a main; help, flag errors and logs go to stderr.
func NewCommand(service string, stderr io.Writer) *Command {
	fs := flag.NewFlagSet(service, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &Command{
		Service:    service,
		Flags:      fs,
		stderr:     stderr,
		kubeconfig: fs.String("kubeconfig", "", "kubeconfig path (empty: in-cluster, then $KUBECONFIG)"),
		logFormat:  fs.String("log-format", "text", "log format: text or json"),
		logLevel:   fs.String("log-level", "info", "log level: debug, info, warn or error"),
		env:        map[string]string{},
	}
}

// ShutdownDelayFlag declares --shutdown-delay (GPUHUB_SHUTDOWN_DELAY), server.Options.ShutdownDelay, for a service
// whose pods serve behind a Service while another replica takes over (a rolling update).
func (c *Command) ShutdownDelayFlag() *time.Duration {
	c.env["shutdown-delay"] = "GPUHUB_SHUTDOWN_DELAY"
	return c.Flags.Duration("shutdown-delay", 0, "once asked to stop, keep taking new connections this long, /readyz failing, "+
		"before closing the port: kube-proxy still sends new connections to a terminating pod for a moment (the chart sets 3 s; 0: close at once)")
}

// Parse parses args with the environment fallbacks envs (flag name → variable, as config.Parse; the shared
// flags' are added) and builds the logger. When ok is false the main returns code at once: 0 after --help, 2
// when a flag, an environment value or the log settings are wrong (said on stderr).
func (c *Command) Parse(args []string, envs map[string]string) (code int, ok bool) {
	all := maps.Clone(sharedEnv)
	maps.Copy(all, c.env)
	maps.Copy(all, envs)
	err := config.Parse(c.Flags, args, all, nil)
	if errors.Is(err, flag.ErrHelp) {
		return 0, false
	}
	if err != nil {
		_, _ = fmt.Fprintln(c.stderr, err)
		return 2, false
	}
	if c.Logger, err = logging.New(c.stderr, *c.logFormat, *c.logLevel); err != nil {
		_, _ = fmt.Fprintln(c.stderr, err)
		return 2, false
	}
	return 0, true
}

// Kubeconfig is the --kubeconfig flag's value.
func (c *Command) Kubeconfig() string { return *c.kubeconfig }

// Clients builds the service's clients (NewClients) with the command's name, --kubeconfig and logger, which
// take the place of o's. When ok is false the error is logged and the main exits with 2.
func (c *Command) Clients(o Options) (cl Clients, ok bool) {
	o.Service, o.Kubeconfig, o.Logger = c.Service, *c.kubeconfig, c.Logger
	cl, err := NewClients(o)
	if err != nil {
		c.Logger.Error("cannot start", "err", err)
		return Clients{}, false
	}
	return cl, true
}

// Exit is the main's exit code once the service stopped: 0 when err is nil; 1 otherwise, with err logged.
func (c *Command) Exit(err error) int {
	if err != nil {
		c.Logger.Error(c.Service+" stopped", "err", err)
		return 1
	}
	return 0
}
