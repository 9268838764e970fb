// Command gpu-quota is the Hub service gpu-quota: per-user and per-group GPU limits and GPU-hour budgets,
// checked when a server is spawned and enforced while it runs. See services/gpu-quota/README.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/app"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/start"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	cmd := start.NewCommand("gpu-quota", stderr)
	fs := cmd.Flags
	shutdownDelay := cmd.ShutdownDelayFlag()
	var (
		listen          = fs.String("listen", ":8000", "address to serve the API, probes and metrics on")
		prefix          = fs.String("prefix", "/services/gpu-quota/", "URL prefix of the API (the Hub service prefix)")
		policyPath      = fs.String("policy", "/etc/gpuhub/quota/policy.yaml", "policy file (YAML); a file that does not load keeps the service from starting")
		policyPoll      = fs.Duration("policy-poll", 10*time.Second, "how often the policy file is checked for a new content (ConfigMap updates); SIGHUP reloads at once")
		namespace       = fs.String("namespace", "", "namespace of the single-user pods (empty: all namespaces)")
		tolerations     = fs.String("tolerations", "", `the single-user pods' tolerations as a JSON list ([{"key":"team","operator":"Equal","value":"ml","effect":"NoSchedule"}]): a GPU on a node tainted NoSchedule/NoExecute against them is not free; the chart passes gpu-profiles' (empty: z2jh's user-pod tolerations and nvidia.com/gpu)`)
		usageURL        = fs.String("usage-url", "", "usage API base URL with its prefix, e.g. http://gpu-usage:8000/services/gpu-usage/ (empty: GPU-hour budgets cannot be checked)")
		usageRefresh    = fs.Duration("usage-refresh", 15*time.Second, "how often GPU-hours are read from the usage API; an answer older than 3 refreshes is unavailable")
		reservationTTL  = fs.Duration("reservation-ttl", 5*time.Minute, "how long an admitted server's GPUs stay reserved if its pod never appears")
		enforceInterval = fs.Duration("enforce-interval", 30*time.Second, "how often the leader checks running servers against the policy")
		leaseNamespace  = fs.String("lease-namespace", "", "namespace of the leader-election Lease (default: --namespace)")
		leaseName       = fs.String("lease-name", "gpu-quota", "name of the leader-election Lease")
		leaseRetry      = fs.Duration("lease-retry", 0, "how often the Lease holder renews it and the others try to take it (0: 2 s, client-go's; 500 ms with --advertise-url, so that a standby takes a Lease given back within the 1.5 s a relayed request waits for a decider)")
		advertiseURL    = fs.String("advertise-url", "", "where the other replicas reach this one, http://POD_IP:PORT (the chart passes it when quota.replicas > 1): only the Lease holder then decides admissions and waitlist changes, and the others relay the API to it (empty: this replica decides on its own; exact with one replica only)")
		ownerDeployment = fs.String("owner-deployment", "", "this service's Deployment, in --lease-namespace: the Lease it creates gets an ownerReference to it, so that deleting the Deployment (helm uninstall) deletes it; read at start, retried for up to a minute while the API server does not answer, then run without (empty: no owner)")
		readerServices  = fs.String("reader-services", "gpu-usage,gpu-profiles,gpu-culler", "comma-separated Hub services that may read every user's quota and the decisions, assess spawn choices (api/v1/assess) and read the waitlist (gpu-culler: the contended classes), besides admins")
		adminGroups     = fs.String("admin-groups", "", "comma-separated Hub groups whose members read what admins read here (decisions, explain, every user's quota and waitlist places); only Hub admins join or leave the waitlist for another user")
		waitlistOn      = fs.Bool("waitlist", false, "queue users for GPU classes that have none free, in fair-share order, and hold a freed unit for the next in line (needs --usage-url: the usage API keeps the queue; for auto-start the Hub role needs the servers scope)")
		waitlistHold    = fs.Duration("waitlist-hold", 10*time.Minute, "how long a freed GPU is held for the next in line before it passes on")
		halfLife        = fs.Duration("fair-share-half-life", 7*24*time.Hour, "half-life of GPU-hours in the waitlist's fair-share order (whole hours)")
		hubRefresh      = fs.Duration("hub-refresh", 2*time.Minute, "how often the Hub's users and groups are re-read")
		verdictInterval = fs.Duration("verdict-interval", 2*time.Second, "how often a watch of verdicts (api/v1/assess/watch: gpu-profiles' spawn forms) looks for changed verdicts and sends them; a look when nothing they depend on changed is skipped")
		unreadyAfter    = fs.Duration("informer-unready-after", time.Minute, "how long a pod or node watch may keep failing before /readyz fails")
	)
	if code, ok := cmd.Parse(args, map[string]string{
		"listen": "GPUHUB_LISTEN", "prefix": config.HubEnv.ServicePrefix, "policy": "GPUHUB_POLICY", "policy-poll": "GPUHUB_POLICY_POLL",
		"namespace": "GPUHUB_NAMESPACE", "tolerations": "GPUHUB_TOLERATIONS", "usage-url": "GPUHUB_USAGE_URL", "usage-refresh": "GPUHUB_USAGE_REFRESH",
		"reservation-ttl": "GPUHUB_RESERVATION_TTL", "enforce-interval": "GPUHUB_ENFORCE_INTERVAL",
		"lease-namespace": "GPUHUB_LEASE_NAMESPACE", "lease-name": "GPUHUB_LEASE_NAME", "lease-retry": "GPUHUB_LEASE_RETRY", "advertise-url": "GPUHUB_ADVERTISE_URL", "owner-deployment": "GPUHUB_OWNER_DEPLOYMENT", "reader-services": "GPUHUB_READER_SERVICES",
		"admin-groups": "GPUHUB_ADMIN_GROUPS", "hub-refresh": "GPUHUB_HUB_REFRESH",
		"informer-unready-after": "GPUHUB_INFORMER_UNREADY_AFTER", "waitlist": "GPUHUB_WAITLIST", "waitlist-hold": "GPUHUB_WAITLIST_HOLD",
		"fair-share-half-life": "GPUHUB_FAIR_SHARE_HALF_LIFE", "verdict-interval": "GPUHUB_VERDICT_INTERVAL",
	}); !ok {
		return code
	}
	// The policy first: a file that does not load is the first thing to fix, whatever else is missing.
	if err := policy.Load(*policyPath, &quota.Policy{}); err != nil {
		return policyFailed(stderr, err)
	}
	tol, err := inventory.ParseTolerations(*tolerations)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "gpu-quota: --tolerations: %v\n", err)
		return 2
	}
	cl, ok := cmd.Clients(start.Options{AdminGroups: config.List(*adminGroups)})
	if !ok {
		return 2
	}
	ctx, reload, stop := start.Signals()
	defer stop()

	identity, _ := os.Hostname() // the pod name: one per replica
	// client-go tries to take the Lease every retry period plus up to 120% of jitter: 2 s to 4.4 s at its default.
	// A standby would then take a Lease given back by a stopping decider up to 4.4 s later, while requests wait
	// 1.5 s for a decider (then 503, and the glue applies onUnavailable): 500 ms makes it 0.5 to 1.1 s.
	if *leaseRetry <= 0 && *advertiseURL != "" {
		*leaseRetry = 500 * time.Millisecond
	}
	err = app.Run(ctx, app.Options{
		Logger: cmd.Logger, Registry: cl.Registry, Addr: *listen, Prefix: *prefix,
		PolicyPath: *policyPath, PolicyPoll: *policyPoll, Reload: reload,
		Kube: cl.Kube, Namespace: *namespace, Tolerations: tol, InformerUnreadyAfter: *unreadyAfter, ShutdownDelay: *shutdownDelay,
		Hub: cl.Hub, HubRefresh: *hubRefresh, Token: cl.HubConfig.Token, Auth: cl.Auth.Middleware, ReaderServices: config.List(*readerServices),
		UsageURL: *usageURL, UsageRefresh: *usageRefresh, ReservationTTL: *reservationTTL, VerdictInterval: *verdictInterval,
		Waitlist: *waitlistOn, WaitlistHold: *waitlistHold, FairShareHalfLife: *halfLife, HubStart: cl.Hub,
		LeaseNamespace: *leaseNamespace, LeaseName: *leaseName, OwnerDeployment: *ownerDeployment, Identity: identity, AdvertiseURL: *advertiseURL, LeaseRetryPeriod: *leaseRetry, EnforceInterval: *enforceInterval,
		// The leader warns users over a limit or budget and stops their servers after the grace, through the Hub.
		WhileLeader: app.Enforce(cl.Hub),
	})
	var pe *app.PolicyError
	if errors.As(err, &pe) {
		return policyFailed(stderr, pe.Err)
	}
	return cmd.Exit(err)
}

// policyFailed prints why the policy does not load, one error a line (file:line:column: message).
func policyFailed(stderr io.Writer, err error) int {
	_, _ = fmt.Fprintf(stderr, "gpu-quota: the policy file does not load; fix it (gpuhub policy check FILE) and start again:\n%v\n", err)
	return 1
}
