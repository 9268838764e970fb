// Package policycmd is `gpuhub policy` for gpu-quota policies: check a file, and explain one user's
// effective policy offline (from a file) or online (from the running gpu-quota). It lives beside gpu-quota,
// outside its internal tree, because the gpuhub command reads the policy model that only gpu-quota may import.
package policycmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// Env is what the command reads and writes besides its arguments.
type Env struct {
	Stdout, Stderr io.Writer
	// Getenv reads JUPYTERHUB_API_TOKEN and GPUHUB_QUOTA_URL (os.LookupEnv).
	Getenv config.LookupEnv
	// HTTP asks the running gpu-quota (default: a client with a 30 s timeout).
	HTTP *http.Client
}

// Usage is the help of `gpuhub policy`.
const Usage = `usage:
  gpuhub policy check FILE...
      check gpu-quota policy files: every error as file:line:column: message (exit 1 if any)
  gpuhub policy explain USER [--groups a,b] --policy FILE
      the effective policy of USER, a member of the Hub groups a and b, and why (offline)
  gpuhub policy explain USER [--groups a,b] --quota-url URL   (or $GPUHUB_QUOTA_URL)
      the same from the running gpu-quota (URL with its prefix, e.g.
      https://hub.example.org/services/gpu-quota/), with the groups the Hub gives USER unless --groups is set;
      needs a Hub admin's token in $JUPYTERHUB_API_TOKEN
`

// Run runs `gpuhub policy ARGS...` and returns the exit code: 0, 1 (a bad file, a failed request), 2 (usage).
func Run(ctx context.Context, args []string, env Env) int {
	if env.HTTP == nil {
		env.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	if len(args) == 0 {
		_, _ = fmt.Fprint(env.Stderr, Usage)
		return 2
	}
	switch args[0] {
	case "check":
		return check(args[1:], env)
	case "explain":
		return explain(ctx, args[1:], env)
	case "help", "-h", "--help":
		_, _ = fmt.Fprint(env.Stdout, Usage)
		return 0
	}
	_, _ = fmt.Fprintf(env.Stderr, "gpuhub policy: unknown command %q\n%s", args[0], Usage)
	return 2
}

func check(args []string, env Env) int {
	if len(args) == 0 {
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub policy check: name the policy files to check\n%s", Usage)
		return 2
	}
	code := 0
	for _, path := range args {
		if err := policy.Check(env.Stdout, path, &quota.Policy{}); err != nil {
			code = 1
		}
	}
	return code
}

// parseInterleaved parses flags that may come before or after the positional arguments (explain USER --policy
// FILE), as people type them.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional, flags []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if f := fs.Lookup(name); f != nil && !strings.Contains(a, "=") && i+1 < len(args) {
				if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
					flags = append(flags, args[i+1])
					i++
				}
			}
		default:
			positional = append(positional, a)
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return append(positional, fs.Args()...), nil
}

func explain(ctx context.Context, args []string, env Env) int {
	fs := flag.NewFlagSet("gpuhub policy explain", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var (
		groupsFlag = fs.String("groups", "", "comma-separated Hub groups of the user (offline: default none; online: default the Hub's)")
		path       = fs.String("policy", "", "explain from this policy file (offline)")
		quotaURL   = fs.String("quota-url", "", "explain from the running gpu-quota at this URL, prefix included (online) [$GPUHUB_QUOTA_URL]")
	)
	groupsSet := false
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fs.Visit(func(f *flag.Flag) { groupsSet = groupsSet || f.Name == "groups" })
	if err == nil && *path == "" && *quotaURL == "" {
		*quotaURL, _ = env.Getenv("GPUHUB_QUOTA_URL")
	}
	switch {
	case err != nil:
		_, _ = fmt.Fprintln(env.Stderr, err)
		return 2
	case len(pos) != 1:
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub policy explain: name one user\n%s", Usage)
		return 2
	case (*path == "") == (*quotaURL == ""):
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub policy explain: give --policy FILE (offline) or --quota-url URL (online), one of them\n%s", Usage)
		return 2
	}
	user, groups := pos[0], config.List(*groupsFlag)
	if *path != "" {
		var p quota.Policy
		if err := policy.Load(*path, &p); err != nil {
			_, _ = fmt.Fprintf(env.Stderr, "%v\n%s does not load: run gpuhub policy check %s\n", err, *path, *path)
			return 1
		}
		_, _ = fmt.Fprint(env.Stdout, p.Explain(user, groups))
		return 0
	}
	text, err := explainOnline(ctx, env, *quotaURL, user, groups, groupsSet)
	if err != nil {
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub policy explain: %v\n", err)
		return 1
	}
	_, _ = fmt.Fprint(env.Stdout, text)
	return 0
}

func explainOnline(ctx context.Context, env Env, base, user string, groups []string, groupsSet bool) (string, error) {
	token, _ := env.Getenv("JUPYTERHUB_API_TOKEN")
	if token == "" {
		return "", errors.New("set JUPYTERHUB_API_TOKEN to a Hub admin's API token (the Hub's token page makes one)")
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	q := url.Values{"user": {user}}
	if groupsSet {
		q.Set("groups", strings.Join(groups, ","))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"api/v1/explain?"+q.Encode(), nil)
	if err != nil {
		return "", fmt.Errorf("--quota-url %q: %w", base, err)
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := env.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("cannot reach gpu-quota: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Text    string `json:"text"`
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = json.Unmarshal(data, &body)
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return "", errors.New("the Hub does not know the token in JUPYTERHUB_API_TOKEN: make a new one on the Hub's token page")
	case resp.StatusCode == http.StatusForbidden:
		return "", errors.New("only Hub admins may explain a user's policy: use an admin's token in JUPYTERHUB_API_TOKEN")
	case resp.StatusCode != http.StatusOK:
		msg := body.Message + body.Error
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return "", fmt.Errorf("gpu-quota answered %d: %s", resp.StatusCode, msg)
	case body.Text == "":
		return "", fmt.Errorf("gpu-quota's answer has no text: is %s gpu-quota's URL with its prefix?", base)
	}
	return body.Text, nil
}
