// Package status is `gpuhub status`: the GPUs at a glance in a terminal. Three parts, each from the service
// that knows it, read with one Hub token: the inventory by GPU class (the usage API's api/v1/cluster), who
// holds what with live utilization (its admin-only api/v1/servers) and the waitlist (gpu-quota's, through
// services/gpuhub/internal/waitlist). A part whose service is not configured, down or refusing says so in its
// place, and the others still print.
package status

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/gpuhub/internal/policycmd"
	"github.com/gpuhub/gpuhub/services/gpuhub/internal/report"
	"github.com/gpuhub/gpuhub/services/gpuhub/internal/usageapi"
	"github.com/gpuhub/gpuhub/services/gpuhub/internal/waitlist"
)

// Usage is the help of `gpuhub status`.
const Usage = `usage:
  gpuhub status [--usage-url URL] [--quota-url URL] [--token-file FILE]
      the GPUs at a glance: the inventory by GPU class (total, held, busy, idle but held, free) and who holds
      what with live utilization, from the usage API (--usage-url or $GPUHUB_USAGE_URL, e.g.
      https://hub.example.org/services/gpu-usage/), and the GPU waitlist of gpu-quota (--quota-url or
      $GPUHUB_QUOTA_URL, e.g. https://hub.example.org/services/gpu-quota/). Give either or both; a part whose
      service is not given or cannot answer says so and the rest still prints (exit code 1 if one could not).
      The token: --token-file FILE or $JUPYTERHUB_API_TOKEN, a Hub admin's (any user may read the inventory).
`

// quotaURLHint is how the output describes a right --quota-url.
const quotaURLHint = "gpu-quota's URL with its prefix, e.g. https://hub.example.org/services/gpu-quota/"

// Run runs `gpuhub status ARGS...` and returns the exit code: 0, 1 (a part could not be shown), 2 (usage).
func Run(ctx context.Context, args []string, env policycmd.Env, now func() time.Time) int {
	fs := flag.NewFlagSet("gpuhub status", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {} // printed below: to stdout when asked for, to stderr after a mistake
	var (
		usageURL  = fs.String("usage-url", "", "the usage API's URL, prefix included [$GPUHUB_USAGE_URL]")
		quotaURL  = fs.String("quota-url", "", "gpu-quota's URL, prefix included [$GPUHUB_QUOTA_URL]")
		tokenFile = fs.String("token-file", "", "read the Hub token from this file [$JUPYTERHUB_API_TOKEN]")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = fmt.Fprint(env.Stdout, Usage)
			return 0
		}
		_, _ = fmt.Fprint(env.Stderr, Usage)
		return 2
	}
	if *usageURL == "" {
		*usageURL, _ = env.Getenv("GPUHUB_USAGE_URL")
	}
	if *quotaURL == "" {
		*quotaURL, _ = env.Getenv("GPUHUB_QUOTA_URL")
	}
	switch {
	case fs.NArg() > 0:
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub status: unexpected %q: every option is a flag\n%s", fs.Arg(0), Usage)
		return 2
	case *usageURL == "" && *quotaURL == "":
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub status: give --usage-url URL (or set GPUHUB_USAGE_URL) for the GPUs, "+
			"--quota-url URL (or set GPUHUB_QUOTA_URL) for the waitlist, or both\n%s", Usage)
		return 2
	}
	token, tokenFrom, err := report.Token(env, *tokenFile)
	if err != nil {
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub status: %v\n", err)
		return 1
	}
	httpClient := env.HTTP
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	p := &parts{w: env.Stdout}
	if *usageURL == "" {
		p.notShown("GPU inventory and holders", "give --usage-url URL (or set GPUHUB_USAGE_URL), "+usageapi.URLHint)
	} else {
		u := &usageClient{usageapi.Client{HTTP: httpClient, Base: withSlash(*usageURL), Token: token, TokenFrom: tokenFrom,
			Forbidden: "who holds which GPU is for Hub admins: use an admin's token"}}
		// Any caller the Hub knows may read the inventory: when it fails (down, wrong URL, unknown token), the
		// holders would fail the same way, so one line says so for both.
		if c, err := u.cluster(ctx); err != nil {
			p.failed("GPU inventory and holders", err)
		} else {
			p.write(func(w io.Writer) error { writeInventory(w, c); return nil }, "GPU inventory")
			p.write(func(w io.Writer) error {
				s, err := u.servers(ctx)
				if err == nil {
					writeHolders(w, s)
				}
				return err
			}, "GPU holders")
		}
	}
	if *quotaURL == "" {
		p.notShown("GPU waitlist", "give --quota-url URL (or set GPUHUB_QUOTA_URL), "+quotaURLHint)
	} else {
		at := now()
		p.write(func(w io.Writer) error {
			return waitlist.WriteWaitlist(ctx, w, waitlist.Source{HTTP: httpClient, URL: *quotaURL, Token: token, TokenFrom: tokenFrom}, at)
		}, "GPU waitlist")
	}
	if p.anyFailed {
		return 1
	}
	return 0
}

// parts writes the parts of the status a blank line apart: each one whole, or a line saying why it is not shown.
type parts struct {
	w         io.Writer
	n         int
	anyFailed bool
}

func (p *parts) section(text string) {
	if p.n > 0 {
		_, _ = fmt.Fprintln(p.w)
	}
	p.n++
	_, _ = io.WriteString(p.w, text)
}

func (p *parts) notShown(title, why string) { p.section(title + ": not shown: " + why + "\n") }

func (p *parts) failed(title string, err error) {
	p.anyFailed = true
	p.notShown(title, err.Error())
}

func (p *parts) write(write func(io.Writer) error, title string) {
	var out strings.Builder
	if err := write(&out); err != nil {
		p.failed(title, err)
		return
	}
	p.section(out.String())
}

func withSlash(u string) string {
	if strings.HasSuffix(u, "/") {
		return u
	}
	return u + "/"
}
