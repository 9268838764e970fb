// Package config binds command-line flags to environment variables.
//
// Precedence is flag > environment > default: a flag given on the command line always wins, a flag left
// unset takes its environment variable when that is set, and otherwise keeps its default. `--help` shows the
// variable next to each flag, so operators can see both spellings in one place.
package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// LookupEnv reads one environment variable; os.LookupEnv in production, a map in tests.
type LookupEnv func(key string) (string, bool)

// Parse registers the environment fallbacks in envs (flag name → variable name), parses args into fs and
// applies the fallbacks to every flag that args did not set. An unknown flag name in envs is a programming
// error and is reported as such; a malformed environment value names the variable.
func Parse(fs *flag.FlagSet, args []string, envs map[string]string, lookup LookupEnv) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	names := make([]string, 0, len(envs))
	for name := range envs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			return fmt.Errorf("config: no flag %q for environment variable %s", name, envs[name])
		}
		if !strings.Contains(f.Usage, "$"+envs[name]) {
			f.Usage = fmt.Sprintf("%s [$%s]", f.Usage, envs[name])
		}
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	for _, name := range names {
		if set[name] {
			continue
		}
		v, ok := lookup(envs[name])
		if !ok || v == "" {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s: %w", envs[name], err))
		}
	}
	return errors.Join(errs...)
}

// List splits a comma-separated flag value ("a, b,,c") into its non-empty, trimmed items; nil when none.
func List(v string) []string {
	var items []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// HubEnv is the environment JupyterHub gives its managed services; external services (all of ours) get the
// same names from their Deployment so a service runs unchanged either way.
var HubEnv = struct {
	APIURL, APIToken, ServiceName, ServicePrefix, BaseURL, ClientID string
}{
	APIURL:        "JUPYTERHUB_API_URL",
	APIToken:      "JUPYTERHUB_API_TOKEN",
	ServiceName:   "JUPYTERHUB_SERVICE_NAME",
	ServicePrefix: "JUPYTERHUB_SERVICE_PREFIX",
	BaseURL:       "JUPYTERHUB_BASE_URL",
	ClientID:      "JUPYTERHUB_CLIENT_ID",
}
