// Command gpu-culler is the Hub service gpu-culler: it stops servers whose GPU sits idle, judged by measured GPU
// activity, after a warning the user can snooze; CPU-only servers by Hub activity under the same policy. See
// services/gpu-culler/README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/app"
	cpolicy "github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/leader"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/start"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	cmd := start.NewCommand("gpu-culler", stderr)
	fs := cmd.Flags
	var (
		listen          = fs.String("listen", ":8080", "address to serve the API, probes and metrics on")
		prefix          = fs.String("prefix", "/services/gpu-culler/", "URL prefix of the API (the Hub service prefix)")
		policyPath      = fs.String("policy", "", "policy file (YAML, required); a file that does not load keeps the service from starting")
		policyPoll      = fs.Duration("policy-poll", 10*time.Second, "how often the policy file is checked for a new content (ConfigMap updates); SIGHUP reloads at once")
		usageURL        = fs.String("usage-url", "", "the usage API's base URL with its prefix, e.g. http://gpu-usage:8000/services/gpu-usage/ (required)")
		sampleEvery     = fs.Duration("sample-every", 10*time.Second, "how often every replica samples the usage API's GPU telemetry")
		quotaURL        = fs.String("quota-url", "", "gpu-quota's base URL with its prefix, e.g. http://gpu-quota:8000/services/gpu-quota/, whose waitlist says which GPU classes someone waits for (idleWhenContended applies to their servers); empty: no waitlist, nothing is contended")
		contentionEvery = fs.Duration("contention-every", 10*time.Second, "how often every replica asks gpu-quota's waitlist; an answer older than 3 of these counts as nobody waiting")
		namespace       = fs.String("namespace", "", "namespace of the single-user pods (empty: all namespaces)")
		leaderElect     = fs.Bool("leader-elect", true, "act only while holding the Lease (false: this replica acts alone; run one)")
		leaseNamespace  = fs.String("lease-namespace", "", "namespace of the Lease and of the stops ConfigMap")
		leaseName       = fs.String("lease-name", "gpu-culler", "name of the Lease")
		ownerDeployment = fs.String("owner-deployment", "", "this service's Deployment, in --lease-namespace: the Lease and stops ConfigMap it creates get an ownerReference to it, so that deleting the Deployment (helm uninstall) deletes them; read at start, retried for up to a minute while the API server does not answer, then run without (empty: no owner)")
		leaseDuration   = fs.Duration("lease-duration", 15*time.Second, "how long a Lease lasts without renewal: a dead leader's replacement acts within it")
		renewDeadline   = fs.Duration("renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it stops acting")
		retryPeriod     = fs.Duration("retry-period", 2*time.Second, "how often replicas try to take or renew the Lease")
		stopsConfigMap  = fs.String("stops-configmap", "gpu-culler-stops", "ConfigMap (in --lease-namespace) keeping each user's last stop, so they read why")
		readerServices  = fs.String("reader-services", "gpu-usage", "comma-separated Hub services that may read the decisions (admins always may); gpu-usage: the admin view's decisions page")
		adminGroups     = fs.String("admin-groups", "", "comma-separated Hub groups whose members are admins here")
	)
	if code, ok := cmd.Parse(args, map[string]string{
		"listen": "GPUHUB_LISTEN", "prefix": config.HubEnv.ServicePrefix, "policy": "GPU_CULLER_POLICY", "policy-poll": "GPUHUB_POLICY_POLL",
		"usage-url": "GPU_USAGE_URL", "sample-every": "GPUHUB_SAMPLE_EVERY",
		"quota-url": "GPUHUB_QUOTA_URL", "contention-every": "GPUHUB_CONTENTION_EVERY", "namespace": "POD_NAMESPACE",
		"leader-elect": "GPUHUB_LEADER_ELECT", "lease-namespace": "GPUHUB_LEASE_NAMESPACE", "lease-name": "GPUHUB_LEASE_NAME", "owner-deployment": "GPUHUB_OWNER_DEPLOYMENT",
		"lease-duration": "GPUHUB_LEASE_DURATION", "renew-deadline": "GPUHUB_RENEW_DEADLINE", "retry-period": "GPUHUB_RETRY_PERIOD",
		"stops-configmap": "GPUHUB_STOPS_CONFIGMAP", "reader-services": "GPUHUB_READER_SERVICES", "admin-groups": "GPUHUB_ADMIN_GROUPS",
	}); !ok {
		return code
	}
	// The policy first: a file that does not load is the first thing to fix, whatever else is missing.
	if *policyPath == "" {
		_, _ = fmt.Fprintln(stderr, "gpu-culler: --policy is required (a YAML file; see services/gpu-culler/README.md)")
		return 2
	}
	if err := policy.Load(*policyPath, &cpolicy.Policy{}); err != nil {
		return policyFailed(stderr, err)
	}
	cl, ok := cmd.Clients(start.Options{AdminGroups: config.List(*adminGroups)})
	if !ok {
		return 2
	}
	ctx, reload, stop := start.Signals()
	defer stop()

	// The token's scopes decide whether the policy's group exemptions can be applied.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	me, err := cl.Hub.WhoAmI(wctx)
	cancel()
	if err != nil {
		cmd.Logger.Error("cannot ask the Hub about the culler's own token; check JUPYTERHUB_API_URL and that the Hub runs", "err", err)
		return 1
	}
	identity := leader.ProcessIdentity() // the pod name and pid: one per replica, also on one machine
	err = app.Run(ctx, app.Options{
		Logger: cmd.Logger, Registry: cl.Registry, Addr: *listen, Prefix: *prefix,
		PolicyPath: *policyPath, PolicyPoll: *policyPoll, Reload: reload,
		Kube: cl.Kube, Namespace: *namespace, HubConfig: cl.HubConfig, Token: cl.HubConfig.Token, Scopes: nonNil(me.Scopes),
		Auth: cl.Auth.Middleware, ReaderServices: config.List(*readerServices),
		UsageURL: *usageURL, SampleEvery: *sampleEvery, QuotaURL: *quotaURL, ContentionEvery: *contentionEvery,
		LeaderElect: *leaderElect, LeaseNamespace: *leaseNamespace, LeaseName: *leaseName, OwnerDeployment: *ownerDeployment, Identity: identity,
		LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod,
		StopsConfigMap: *stopsConfigMap,
	})
	var ce *app.ConfigError
	if errors.As(err, &ce) {
		return policyFailed(stderr, ce.Err)
	}
	return cmd.Exit(err)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// policyFailed prints why the policy does not load, one error a line (file:line:column: message).
func policyFailed(stderr io.Writer, err error) int {
	_, _ = fmt.Fprintf(stderr, "gpu-culler: the policy does not load; fix it and start again:\n%v\n", err)
	return 1
}
