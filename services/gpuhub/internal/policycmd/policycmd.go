// Package policycmd is `gpuhub policy`: check gpu-quota and gpu-culler policy files with each service's own
// parser, and explain one user's effective gpu-quota policy offline (from a file) or online (from the running
// gpu-quota). It lives beside gpu-quota, outside its internal tree, because the gpuhub command reads the policy
// model that only gpu-quota may import; gpu-culler's parser comes through services/gpu-culler/cullerkit.
package policycmd

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpuhub/gpuhub/services/gpu-culler/cullerkit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/quotakit"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/contract"
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
  gpuhub policy check [--kind quota|culler] FILE...
      check gpu-quota and gpu-culler policy files with the services' own parsers: every error as
      file:line:column: message (exit 1 if any); each file's kind is told by its top-level keys unless --kind
      says it, and the output names it
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
		env.HTTP = contract.NewHTTPClient(30 * time.Second)
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
	fs := flag.NewFlagSet("gpuhub policy check", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	kindFlag := fs.String("kind", "", "quota or culler: which service's parser (default: told by each file's top-level keys)")
	paths, err := parseInterleaved(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		_, _ = fmt.Fprintln(env.Stderr, err)
		return 2
	case *kindFlag != "" && *kindFlag != kindQuota && *kindFlag != kindCuller:
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub policy check: --kind %q: write --kind quota or --kind culler\n", *kindFlag)
		return 2
	case len(paths) == 0:
		_, _ = fmt.Fprintf(env.Stderr, "gpuhub policy check: name the policy files to check\n%s", Usage)
		return 2
	}
	code := 0
	for _, path := range paths {
		kind, how := *kindFlag, "--kind "+*kindFlag
		if kind == "" {
			var err error
			if kind, how, err = detectKind(path); err != nil {
				_, _ = fmt.Fprintf(env.Stdout, "%s: %v\n", path, err)
				code = 1
				continue
			}
		}
		var err error
		if kind == kindCuller {
			err = cullerkit.CheckPolicy(env.Stdout, path, "gpu-culler policy, "+how)
		} else {
			err = quotakit.CheckPolicy(env.Stdout, path, "gpu-quota policy, "+how)
		}
		if err != nil {
			code = 1
		}
	}
	return code
}

const (
	kindQuota  = "quota"
	kindCuller = "culler"
)

// detectKind tells a gpu-quota policy from a gpu-culler one by its top-level keys (the two share none): the
// kind with more of them wins, so that a stray key of the other kind is reported as unknown rather than
// turning the file over. A file that is not YAML is checked as a quota policy, whose parser reports the
// problem with its place.
func detectKind(path string) (kind, how string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("read policy: %w", err)
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return kindQuota, "by default", nil
	}
	var keys []string
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0].Content
		for i := 0; i+1 < len(m); i += 2 {
			keys = append(keys, m[i].Value)
		}
	}
	quotaKeys, cullerKeys := quotakit.PolicyKeys(), cullerkit.PolicyKeys()
	var q, c int
	for _, k := range keys {
		if slices.Contains(quotaKeys, k) {
			q++
		}
		if slices.Contains(cullerKeys, k) {
			c++
		}
	}
	switch {
	case q > c:
		return kindQuota, "told by its keys", nil
	case c > q:
		return kindCuller, "told by its keys", nil
	case len(keys) == 0:
		return "", "", errors.New("no top-level keys to tell a gpu-quota from a gpu-culler policy by: add --kind quota or --kind culler")
	}
	return "", "", fmt.Errorf("cannot tell a gpu-quota from a gpu-culler policy by its top-level keys (%s): add --kind quota or --kind culler",
		strings.Join(keys, ", "))
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
		p, err := quotakit.LoadPolicy(*path)
		if err != nil {
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
	a, err := contract.Caller{Token: token, HTTP: env.HTTP, Limit: 1 << 20}.Do(ctx, http.MethodGet, base+"api/v1/explain?"+q.Encode(), nil, nil)
	if err != nil {
		return "", fmt.Errorf("cannot reach gpu-quota: %w", err)
	}
	var body contract.Explanation
	switch {
	case a.Status == http.StatusUnauthorized:
		return "", errors.New("the Hub does not know the token in JUPYTERHUB_API_TOKEN: make a new one on the Hub's token page")
	case a.Status == http.StatusForbidden:
		return "", errors.New("only Hub admins may explain a user's policy: use an admin's token in JUPYTERHUB_API_TOKEN")
	case a.Status != http.StatusOK:
		return "", fmt.Errorf("gpu-quota answered %d: %s", a.Status, cmp.Or(a.Message(), http.StatusText(a.Status)))
	case a.Decode(&body) != nil || body.Text == "":
		return "", fmt.Errorf("gpu-quota's answer has no text: is %s gpu-quota's URL with its prefix?", base)
	}
	return body.Text, nil
}
