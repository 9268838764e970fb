// Package report is `gpuhub report`, Slurm's sreport for a JupyterHub: allocated and used GPU-hours per user,
// Hub group or GPU kind over a window, sorted by allocated GPU-hours, with totals, read from the usage API
// (services/usage-api) with a Hub admin's token.
//
// Where the numbers come from: api/v1/users (pages of every user with their Hub groups and their 7d and 30d
// windows) names the users; a window of exactly 7d or 30d by user or group is answered from those pages alone.
// Any other window, and every report by kind, asks api/v1/users/{name} for each user's custom window (with
// its GPU classes), a few users at a time, skipping users without GPU-hours in the last 30 days when the
// window is shorter.
package report

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/gpuhub/internal/policycmd"
	"github.com/gpuhub/gpuhub/services/gpuhub/internal/usageapi"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// Usage is the help of `gpuhub report`.
const Usage = `usage:
  gpuhub report [--usage-url URL] [--window 30d] [--group G] [--user U] [--by user|group|kind]
                [--format table|csv|json] [--token-file FILE]
      allocated and used GPU-hours over the window (whole hours: 24h, 7d, 30d, 1d12h; default 30d) per user,
      Hub group or GPU kind, sorted by allocated GPU-hours, with totals (csv: rows only). Used is GPU time kept
      busy over the part whose utilization was known; unknown is the allocated part whose was not.
      --usage-url (or $GPUHUB_USAGE_URL) is the usage API's URL with its prefix, e.g.
      https://hub.example.org/services/gpu-usage/. The token: --token-file FILE or $JUPYTERHUB_API_TOKEN, a
      Hub admin's (a user's own token reports only --user THEIR-NAME).
  gpuhub report --right-size [--window 24h|7d|30d] [--by user|group|kind] [--user U] [--format table|csv|json]
      GPU-hours that right-sizing would have saved over the window (the UTC days it touches; default 7d, as the
      usage API's), per user, Hub group or GPU kind: an admin's token (or a --reader-services one). With --user, that user's advice per server
      (the smallest offered kind that holds its peak memory with a margin and covers its p95 SM use): their own
      token may read it.
`

// rightSizeDefaultWindow is --window's default with --right-size: the usage API's default period.
const rightSizeDefaultWindow = "7d"

// The ways to break a report down.
const (
	byUser  = "user"
	byGroup = "group"
	byKind  = "kind"
)

// noGroup names users in no Hub group in a report by group.
const noGroup = "(no group)"

// Run runs `gpuhub report ARGS...` and returns the exit code: 0, 1 (the usage API failed or refused), 2 (usage).
func Run(ctx context.Context, args []string, env policycmd.Env, now func() time.Time) int {
	fs := flag.NewFlagSet("gpuhub report", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {} // printed below: to stdout when asked for, to stderr after a mistake
	var (
		usageURL  = fs.String("usage-url", "", "the usage API's URL, prefix included [$GPUHUB_USAGE_URL]")
		windowArg = fs.String("window", "30d", "the window, whole hours up to now: 24h, 7d, 30d, 1d12h (--right-size: 7d)")
		group     = fs.String("group", "", "only the users of this Hub group")
		user      = fs.String("user", "", "only this user")
		by        = fs.String("by", byUser, "a row per user, group or kind")
		format    = fs.String("format", "table", "table, csv or json")
		tokenFile = fs.String("token-file", "", "read the Hub token from this file [$JUPYTERHUB_API_TOKEN]")
		rightSz   = fs.Bool("right-size", false, "GPU-hours right-sizing would save (with --user: the user's advice)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = fmt.Fprint(env.Stdout, Usage)
			return 0
		}
		_, _ = fmt.Fprint(env.Stderr, Usage)
		return 2
	}
	windowSet := false
	fs.Visit(func(f *flag.Flag) { windowSet = windowSet || f.Name == "window" })
	if *rightSz && !windowSet {
		*windowArg = rightSizeDefaultWindow
	}
	usageErr := func(format string, args ...any) int {
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub report: "+format+"\n%s", append(args, Usage)...)
		return 2
	}
	window, werr := parseWindow(*windowArg)
	if *usageURL == "" {
		*usageURL, _ = env.Getenv("GPUHUB_USAGE_URL")
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected %q: every option is a flag", fs.Arg(0))
	case werr != nil:
		return usageErr("--window %q: %v", *windowArg, werr)
	case !slices.Contains([]string{byUser, byGroup, byKind}, *by):
		return usageErr("--by %q: write --by user, --by group or --by kind", *by)
	case !slices.Contains([]string{"table", "csv", "json"}, *format):
		return usageErr("--format %q: write --format table, csv or json", *format)
	case *usageURL == "":
		return usageErr("give --usage-url URL (or set GPUHUB_USAGE_URL): %s", usageapi.URLHint)
	case *rightSz && !slices.Contains(rightSizePeriods, *windowArg):
		return usageErr("--right-size --window %q: write 24h, 7d or 30d (the usage API keeps right-size profiles by day, for 30 days)", *windowArg)
	case *rightSz && *group != "":
		return usageErr("--right-size has no --group: write --by group for a row per group")
	}
	c, err := newClient(env, *usageURL, *tokenFile)
	if err != nil {
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub report: %v\n", err)
		return 1
	}
	if *rightSz {
		if err := rightSize(ctx, c, env.Stdout, *windowArg, *by, *user, *format); err != nil {
			_, _ = fmt.Fprintf(env.Stderr, "gpuhub report: %v\n", err)
			return 1
		}
		return 0
	}
	q := query{Window: window, WindowArg: *windowArg, Group: *group, User: *user, By: *by}
	rep, err := build(ctx, c, q, now, &progress{w: env.Stderr, now: now, start: now()})
	if err != nil {
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub report: %v\n", err)
		return 1
	}
	switch *format {
	case "csv":
		err = writeCSV(env.Stdout, rep)
	case "json":
		err = writeJSON(env.Stdout, rep)
	default:
		err = writeTable(env.Stdout, rep)
	}
	if err != nil {
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub report: %v\n", err)
		return 1
	}
	return 0
}

// parseWindow reads a window as the usage API takes it: whole hours from 1h to 366d.
func parseWindow(s string) (time.Duration, error) {
	d, err := policy.ParseDuration(s)
	switch {
	case err != nil:
		return 0, err
	case d < time.Hour || d > 366*24*time.Hour || d%time.Hour != 0:
		return 0, errors.New("write whole hours from 1h to 366d, as in 24h, 7d, 30d or 1d12h")
	}
	return d, nil
}

func newClient(env policycmd.Env, base, tokenFile string) (*client, error) {
	c := &client{usageapi.Client{HTTP: env.HTTP, Base: base,
		Forbidden: "a report of other users needs a Hub admin's token; without one, --user YOUR-NAME reports your own GPU-hours"}}
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: 60 * time.Second}
	}
	if !strings.HasSuffix(c.Base, "/") {
		c.Base += "/"
	}
	var err error
	c.Token, c.TokenFrom, err = Token(env, tokenFile)
	return c, err
}

// Token reads the Hub token from tokenFile, or else from $JUPYTERHUB_API_TOKEN, and says where it came from
// (for errors about it; the token itself is never printed).
func Token(env policycmd.Env, tokenFile string) (token, from string, err error) {
	if tokenFile != "" {
		data, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", "", fmt.Errorf("--token-file: %w", err)
		}
		token, from = strings.TrimSpace(string(data)), "--token-file "+tokenFile
		if token == "" {
			return "", "", fmt.Errorf("--token-file %s is empty: write a Hub admin's API token into it (the Hub's token page makes one)", tokenFile)
		}
		return token, from, nil
	}
	token, _ = env.Getenv("JUPYTERHUB_API_TOKEN")
	if token == "" {
		return "", "", errors.New("no Hub token: set JUPYTERHUB_API_TOKEN to a Hub admin's API token, or give --token-file FILE (the Hub's token page makes one)")
	}
	return token, "JUPYTERHUB_API_TOKEN", nil
}

// query is what a report asks for.
type query struct {
	Window    time.Duration
	WindowArg string
	Group     string
	User      string
	By        string
}

// Report is a finished report, as the json format writes it.
type Report struct {
	Window string `json:"window"`
	// AsOf is when the report was asked for; the usage API counts in whole hours, so the window's ends are
	// those of its hour buckets (services/usage-api/openapi.yaml).
	AsOf  time.Time `json:"asOf"`
	By    string    `json:"by"`
	Group string    `json:"group,omitempty"`
	User  string    `json:"user,omitempty"`
	Rows  []Row     `json:"rows"`
	// Total counts each user once, also when a report by group lists them under several groups.
	Total Row `json:"total"`
}

// Row is one user, group or GPU kind.
type Row struct {
	Name string `json:"name"`
	// Groups are a user's Hub groups (by user).
	Groups []string `json:"groups,omitempty"`
	// Users is how many users the row sums (by group and kind, and the total).
	Users       int      `json:"users,omitempty"`
	Allocated   float64  `json:"allocatedGPUHours"`
	Used        float64  `json:"usedGPUHours"`
	UsedUnknown float64  `json:"usedUnknownGPUHours"`
	UsedPercent *float64 `json:"usedPercent"`
}

// hours are one user's GPU-hours in the window, in all and by kind.
type hours struct {
	name   string
	groups []string
	total  totals
	byKind map[string]totals
}

// totals are GPU-hours summed over classes.
type totals struct{ Allocated, Used, UsedUnknown float64 }

func build(ctx context.Context, c *client, q query, now func() time.Time, prog *progress) (*Report, error) {
	asOf := now().UTC()
	from := asOf.Add(-q.Window)
	var users []contract.UserSummary
	if q.User != "" {
		// One user: their own token may do, and the custom window is one request.
		u, err := c.user(ctx, q.User, from)
		if errors.Is(err, errNoUser) {
			return nil, fmt.Errorf("%w: check the name with the Hub's admin page", err)
		}
		if err != nil {
			return nil, err
		}
		u.Name = q.User
		users = []contract.UserSummary{u}
		if q.Group != "" && !slices.Contains(u.Groups, q.Group) {
			users = nil
		}
	} else {
		all, err := c.listUsers(ctx, prog)
		if err != nil {
			return nil, err
		}
		for _, u := range all {
			if q.Group == "" || slices.Contains(u.Groups, q.Group) {
				users = append(users, u)
			}
		}
		if q.Group != "" && len(users) == 0 {
			return nil, fmt.Errorf("no user of the usage API is in Hub group %q: check the name (groups are case-sensitive)", q.Group)
		}
	}
	if err := ledgerStatus(users); err != nil {
		return nil, err
	}
	var hs []hours
	listed := map[time.Duration]string{7 * 24 * time.Hour: "7d", 30 * 24 * time.Hour: "30d"}[q.Window]
	if key := listed; key != "" && q.User == "" && q.By != byKind {
		for _, u := range users {
			if w := u.GPUHours[key]; w != nil {
				hs = append(hs, hours{name: u.Name, groups: u.Groups, total: totals{Allocated: w.Allocated, Used: w.Used, UsedUnknown: w.UsedUnknown}})
			}
		}
	} else {
		if q.User == "" {
			var names []string
			for _, u := range users {
				// No GPU-hours in the last 30 days: none in a shorter window either.
				if w := u.GPUHours["30d"]; q.Window <= 30*24*time.Hour && w != nil && w.Allocated == 0 {
					continue
				}
				names = append(names, u.Name)
			}
			var err error
			if users, err = c.customWindows(ctx, names, from, prog); err != nil {
				return nil, err
			}
			if err := ledgerStatus(users); err != nil {
				return nil, err
			}
		}
		for _, u := range users {
			if w := u.GPUHours["custom"]; w != nil {
				h := hours{name: u.Name, groups: u.Groups, total: totals{Allocated: w.Allocated, Used: w.Used, UsedUnknown: w.UsedUnknown},
					byKind: map[string]totals{}}
				for _, c := range w.ByClass {
					k := h.byKind[string(c.Kind)]
					k.Allocated, k.Used, k.UsedUnknown = k.Allocated+c.Allocated, k.Used+c.Used, k.UsedUnknown+c.UsedUnknown
					h.byKind[string(c.Kind)] = k
				}
				hs = append(hs, h)
			}
		}
	}
	rep := &Report{Window: q.WindowArg, AsOf: asOf, By: q.By, Group: q.Group, User: q.User, Rows: rows(hs, q)}
	rep.Total = Row{Name: "total"}
	for _, h := range hs {
		if h.total.Allocated > 0 {
			rep.Total.add(h.total)
		}
	}
	rep.Total.finish()
	return rep, nil
}

// ledgerStatus is the usage API's word when its ledger cannot answer: a report of zeros would be a lie.
func ledgerStatus(users []contract.UserSummary) error {
	for _, u := range users {
		if u.GPUHoursStatus == "unavailable" {
			return fmt.Errorf("the usage API cannot read its GPU-hours ledger just now (%s): try again in a minute",
				firstNonEmpty(u.GPUHoursReason, "gpuHoursStatus unavailable"))
		}
	}
	return nil
}

func (r *Row) add(h totals) {
	r.Users++
	r.Allocated += h.Allocated
	r.Used += h.Used
	r.UsedUnknown += h.UsedUnknown
}

// finish sets UsedPercent: used over the allocated GPU-hours whose utilization was known.
func (r *Row) finish() {
	if known := r.Allocated - r.UsedUnknown; known > 1e-9 {
		p := 100 * r.Used / known
		r.UsedPercent = &p
	}
}

// rows breaks the users' hours down as q.By says, leaving out rows without allocated GPU-hours, sorted by
// allocated GPU-hours, most first, then by name.
func rows(hs []hours, q query) []Row {
	byName := map[string]*Row{}
	add := func(name string, h totals) {
		if h.Allocated <= 0 {
			return
		}
		r := byName[name]
		if r == nil {
			r = &Row{Name: name}
			byName[name] = r
		}
		r.add(h)
	}
	for _, h := range hs {
		switch q.By {
		case byUser:
			add(h.name, h.total)
			if r := byName[h.name]; r != nil {
				r.Groups, r.Users = h.groups, 0
			}
		case byGroup:
			groups := h.groups
			if q.Group != "" {
				groups = []string{q.Group}
			}
			if len(groups) == 0 {
				groups = []string{noGroup}
			}
			for _, g := range groups {
				add(g, h.total)
			}
		case byKind:
			for k, c := range h.byKind {
				add(k, c)
			}
		}
	}
	out := make([]Row, 0, len(byName))
	for _, r := range byName {
		r.finish()
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Row) int {
		if a.Allocated != b.Allocated {
			if a.Allocated > b.Allocated {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
