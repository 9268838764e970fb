// Command gpu-profiles is the Hub service gpu-profiles: the spawn form's choices generated from the live GPU
// inventory, with free counts, per group and quota. See services/gpu-profiles/README.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/app"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/pending"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/leader"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/start"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	cmd := start.NewCommand("gpu-profiles", stderr)
	fs := cmd.Flags
	shutdownDelay := cmd.ShutdownDelayFlag()
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
		usageURL           = fs.String("usage-url", "", "usage API base URL with its prefix, e.g. http://gpu-usage:8000/services/gpu-usage/: each user's right-size advice marks the recommended choice, fetched in the background (empty: no choice is marked)")
		adviceCache        = fs.Duration("advice-cache", 10*time.Minute, "how long a user's right-size advice serves before it is fetched again, in the background")
		readerServices     = fs.String("reader-services", "", "comma-separated Hub services that may read the inventory (admins always may)")
		adminGroups        = fs.String("admin-groups", "", "comma-separated Hub groups whose members are admins here (the inventory)")
		pendingEndAfter    = fs.Duration("pending-end-after", pending.DefaultEndAfter, "how long a GPU spawn that nothing can ever place (no schedulable node of its kind, not provisionable) waits before it is ended through the Hub; 0 never ends one")
		leaseNamespace     = fs.String("lease-namespace", "", "namespace of the Lease that keeps the pending-spawn explainer to one replica (default: --namespace; empty both: no election, a single replica)")
		leaseName          = fs.String("lease-name", "gpu-profiles", "name of that Lease")
		ownerDeployment    = fs.String("owner-deployment", "", "this service's Deployment, in --lease-namespace: the Lease it creates gets an ownerReference to it, so that deleting the Deployment (helm uninstall) deletes it; read at start, retried for up to a minute while the API server does not answer, then run without (empty: no owner)")
		unreadyAfter       = fs.Duration("informer-unready-after", time.Minute, "how long a pod or node watch may keep failing before /readyz fails and forms fall back")
	)
	if code, ok := cmd.Parse(args, map[string]string{
		"listen": "GPUHUB_LISTEN", "prefix": config.HubEnv.ServicePrefix, "config": "GPUHUB_PROFILES_CONFIG", "config-poll": "GPUHUB_CONFIG_POLL",
		"namespace": "GPUHUB_NAMESPACE", "quota-url": "GPUHUB_QUOTA_URL", "quota-timeout": "GPUHUB_QUOTA_TIMEOUT",
		"quota-cache": "GPUHUB_QUOTA_CACHE", "quota-on-unavailable": "GPUHUB_QUOTA_ON_UNAVAILABLE",
		"usage-url": "GPUHUB_USAGE_URL", "advice-cache": "GPUHUB_ADVICE_CACHE",
		"reader-services": "GPUHUB_READER_SERVICES", "admin-groups": "GPUHUB_ADMIN_GROUPS",
		"pending-end-after": "GPUHUB_PENDING_END_AFTER", "lease-namespace": "GPUHUB_LEASE_NAMESPACE", "lease-name": "GPUHUB_LEASE_NAME", "owner-deployment": "GPUHUB_OWNER_DEPLOYMENT",
		"informer-unready-after": "GPUHUB_INFORMER_UNREADY_AFTER",
	}); !ok {
		return code
	}
	if *quotaOnUnavailable != "open" && *quotaOnUnavailable != "closed" {
		_, _ = fmt.Fprintf(stderr, "--quota-on-unavailable is open or closed, not %q\n", *quotaOnUnavailable)
		return 2
	}
	// The overrides first: a file that does not load is the first thing to fix, whatever else is missing.
	if *configPath != "" {
		if err := policy.Load(*configPath, &profiles.Config{}); err != nil {
			return configFailed(stderr, err)
		}
	}
	cl, ok := cmd.Clients(start.Options{AdminGroups: config.List(*adminGroups)})
	if !ok {
		return 2
	}
	ctx, reload, stop := start.Signals()
	defer stop()

	if *leaseNamespace == "" {
		*leaseNamespace = *namespace
	}
	identity := leader.ProcessIdentity() // the pod name and pid: one per replica, also on one machine
	err := app.Run(ctx, app.Options{
		Logger: cmd.Logger, Registry: cl.Registry, Addr: *listen, Prefix: *prefix,
		ConfigPath: *configPath, ConfigPoll: *configPoll, Reload: reload,
		Kube: cl.Kube, Namespace: *namespace, InformerUnreadyAfter: *unreadyAfter, ShutdownDelay: *shutdownDelay,
		Token: cl.HubConfig.Token, Auth: cl.Auth.Middleware, ReaderServices: config.List(*readerServices),
		QuotaURL: *quotaURL, QuotaTimeout: *quotaTimeout, QuotaCacheTTL: *quotaCache, QuotaOnUnavailable: *quotaOnUnavailable,
		UsageURL: *usageURL, AdviceTTL: *adviceCache,
		Extra: app.PendingExplainer(app.PendingOptions{Hub: cl.Hub, EndAfter: *pendingEndAfter,
			LeaseNamespace: *leaseNamespace, LeaseName: *leaseName, OwnerDeployment: *ownerDeployment, Identity: identity}),
	})
	var ce *app.ConfigError
	if errors.As(err, &ce) {
		return configFailed(stderr, ce.Err)
	}
	return cmd.Exit(err)
}

// configFailed prints why the overrides file does not load, one error a line (file:line:column: message).
func configFailed(stderr io.Writer, err error) int {
	_, _ = fmt.Fprintf(stderr, "gpu-profiles: the overrides file does not load; fix it and start again:\n%v\n", err)
	return 1
}
