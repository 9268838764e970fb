// Command gpu-profiles is the Hub service gpu-profiles: the spawn form's choices generated from the live GPU
// inventory, with free counts, per group and quota. See services/gpu-profiles/README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/app"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/pending"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/logging"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/start"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpu-profiles", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		listen             = fs.String("listen", ":8000", "address to serve the API, probes and metrics on")
		prefix             = fs.String("prefix", "/services/gpu-profiles/", "URL prefix of the API (the Hub service prefix)")
		configPath         = fs.String("config", "", "overrides file (YAML; empty: every kind as generated); a file that does not load keeps the service from starting")
		configPoll         = fs.Duration("config-poll", 10*time.Second, "how often the overrides file is checked for a new content (ConfigMap updates); SIGHUP reloads at once")
		namespace          = fs.String("namespace", "", "namespace of the pods counted as holding GPUs (empty: all namespaces, as the scheduler counts)")
		quotaURL           = fs.String("quota-url", "", "gpu-quota base URL with its prefix, e.g. http://gpu-quota:8000/services/gpu-quota/ (empty: no choice is checked against quotas)")
		quotaTimeout       = fs.Duration("quota-timeout", 500*time.Millisecond, "how long a form waits for gpu-quota before its onUnavailable applies")
		quotaCache         = fs.Duration("quota-cache", 2*time.Second, "how long gpu-quota's answer serves the same user")
		quotaOnUnavailable = fs.String("quota-on-unavailable", "open", "what to do while gpu-quota cannot answer, until it has said its own onUnavailable: open (offer) or closed (disable GPU choices)")
		readerServices     = fs.String("reader-services", "", "comma-separated Hub services that may read the inventory (admins always may)")
		adminGroups        = fs.String("admin-groups", "", "comma-separated Hub groups whose members are admins here (the inventory)")
		pendingEndAfter    = fs.Duration("pending-end-after", pending.DefaultEndAfter, "how long a GPU spawn that nothing can ever place (no schedulable node of its kind, not provisionable) waits before it is ended through the Hub; 0 never ends one")
		leaseNamespace     = fs.String("lease-namespace", "", "namespace of the Lease that keeps the pending-spawn explainer to one replica (default: --namespace; empty both: no election, a single replica)")
		leaseName          = fs.String("lease-name", "gpu-profiles", "name of that Lease")
		kubeconfig         = fs.String("kubeconfig", "", "kubeconfig path (empty: in-cluster, then $KUBECONFIG)")
		unreadyAfter       = fs.Duration("informer-unready-after", time.Minute, "how long a pod or node watch may keep failing before /readyz fails and forms fall back")
		logFormat          = fs.String("log-format", "text", "log format: text or json")
		logLevel           = fs.String("log-level", "info", "log level: debug, info, warn or error")
	)
	err := config.Parse(fs, args, map[string]string{
		"listen": "GPUHUB_LISTEN", "prefix": config.HubEnv.ServicePrefix, "config": "GPUHUB_PROFILES_CONFIG", "config-poll": "GPUHUB_CONFIG_POLL",
		"namespace": "GPUHUB_NAMESPACE", "quota-url": "GPUHUB_QUOTA_URL", "quota-timeout": "GPUHUB_QUOTA_TIMEOUT",
		"quota-cache": "GPUHUB_QUOTA_CACHE", "quota-on-unavailable": "GPUHUB_QUOTA_ON_UNAVAILABLE",
		"reader-services": "GPUHUB_READER_SERVICES", "admin-groups": "GPUHUB_ADMIN_GROUPS", "kubeconfig": "KUBECONFIG",
		"pending-end-after": "GPUHUB_PENDING_END_AFTER", "lease-namespace": "GPUHUB_LEASE_NAMESPACE", "lease-name": "GPUHUB_LEASE_NAME",
		"informer-unready-after": "GPUHUB_INFORMER_UNREADY_AFTER", "log-format": "GPUHUB_LOG_FORMAT", "log-level": "GPUHUB_LOG_LEVEL",
	}, nil)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	if *quotaOnUnavailable != "open" && *quotaOnUnavailable != "closed" {
		_, _ = fmt.Fprintf(stderr, "--quota-on-unavailable is open or closed, not %q\n", *quotaOnUnavailable)
		return 2
	}
	logger, err := logging.New(stderr, *logFormat, *logLevel)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	// The overrides first: a file that does not load is the first thing to fix, whatever else is missing.
	if *configPath != "" {
		if err := policy.Load(*configPath, &profiles.Config{}); err != nil {
			return configFailed(stderr, err)
		}
	}
	cl, err := start.NewClients(start.Options{Service: "gpu-profiles", Kubeconfig: *kubeconfig, AdminGroups: config.List(*adminGroups), Logger: logger})
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 2
	}
	ctx, reload, stop := start.Signals()
	defer stop()

	if *leaseNamespace == "" {
		*leaseNamespace = *namespace
	}
	identity, _ := os.Hostname() // the pod name: one per replica
	err = app.Run(ctx, app.Options{
		Logger: logger, Registry: cl.Registry, Addr: *listen, Prefix: *prefix,
		ConfigPath: *configPath, ConfigPoll: *configPoll, Reload: reload,
		Kube: cl.Kube, Namespace: *namespace, InformerUnreadyAfter: *unreadyAfter,
		Token: cl.HubConfig.Token, Auth: cl.Auth.Middleware, ReaderServices: config.List(*readerServices),
		QuotaURL: *quotaURL, QuotaTimeout: *quotaTimeout, QuotaCacheTTL: *quotaCache, QuotaOnUnavailable: *quotaOnUnavailable,
		Extra: app.PendingExplainer(app.PendingOptions{Hub: cl.Hub, EndAfter: *pendingEndAfter,
			LeaseNamespace: *leaseNamespace, LeaseName: *leaseName, Identity: identity}),
	})
	var ce *app.ConfigError
	if errors.As(err, &ce) {
		return configFailed(stderr, ce.Err)
	}
	if err != nil {
		logger.Error("gpu-profiles stopped", "err", err)
		return 1
	}
	return 0
}

// configFailed prints why the overrides file does not load, one error a line (file:line:column: message).
func configFailed(stderr io.Writer, err error) int {
	_, _ = fmt.Fprintf(stderr, "gpu-profiles: the overrides file does not load; fix it and start again:\n%v\n", err)
	return 1
}
