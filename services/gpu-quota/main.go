// Command gpu-quota is the Hub service gpu-quota: per-user and per-group GPU limits and GPU-hour budgets,
// checked when a server is spawned and enforced while it runs. See services/gpu-quota/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/app"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/kube"
	"github.com/gpuhub/gpuhub/services/internal/logging"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpu-quota", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		listen          = fs.String("listen", ":8000", "address to serve the API, probes and metrics on")
		prefix          = fs.String("prefix", "/services/gpu-quota/", "URL prefix of the API (the Hub service prefix)")
		policyPath      = fs.String("policy", "/etc/gpuhub/quota/policy.yaml", "policy file (YAML); a file that does not load keeps the service from starting")
		policyPoll      = fs.Duration("policy-poll", 10*time.Second, "how often the policy file is checked for a new content (ConfigMap updates); SIGHUP reloads at once")
		namespace       = fs.String("namespace", "", "namespace of the single-user pods (empty: all namespaces)")
		usageURL        = fs.String("usage-url", "", "usage API base URL with its prefix, e.g. http://gpu-usage:8000/services/gpu-usage/ (empty: GPU-hour budgets cannot be checked)")
		usageRefresh    = fs.Duration("usage-refresh", 15*time.Second, "how often GPU-hours are read from the usage API; an answer older than 3 refreshes is unavailable")
		reservationTTL  = fs.Duration("reservation-ttl", 5*time.Minute, "how long an admitted server's GPUs stay reserved if its pod never appears")
		enforceInterval = fs.Duration("enforce-interval", 30*time.Second, "how often the leader checks running servers against the policy")
		leaseNamespace  = fs.String("lease-namespace", "", "namespace of the leader-election Lease (default: --namespace)")
		leaseName       = fs.String("lease-name", "gpu-quota", "name of the leader-election Lease")
		readerServices  = fs.String("reader-services", "gpu-usage,gpu-profiles", "comma-separated Hub services that may read every user's quota and the decisions and assess spawn choices (api/v1/assess), besides admins")
		adminGroups     = fs.String("admin-groups", "", "comma-separated Hub groups whose members are admins here (decisions, explain, every user's quota)")
		hubRefresh      = fs.Duration("hub-refresh", 2*time.Minute, "how often the Hub's users and groups are re-read")
		kubeconfig      = fs.String("kubeconfig", "", "kubeconfig path (empty: in-cluster, then $KUBECONFIG)")
		unreadyAfter    = fs.Duration("informer-unready-after", time.Minute, "how long a pod or node watch may keep failing before /readyz fails")
		logFormat       = fs.String("log-format", "text", "log format: text or json")
		logLevel        = fs.String("log-level", "info", "log level: debug, info, warn or error")
	)
	err := config.Parse(fs, args, map[string]string{
		"listen": "GPUHUB_LISTEN", "prefix": config.HubEnv.ServicePrefix, "policy": "GPUHUB_POLICY", "policy-poll": "GPUHUB_POLICY_POLL",
		"namespace": "GPUHUB_NAMESPACE", "usage-url": "GPUHUB_USAGE_URL", "usage-refresh": "GPUHUB_USAGE_REFRESH",
		"reservation-ttl": "GPUHUB_RESERVATION_TTL", "enforce-interval": "GPUHUB_ENFORCE_INTERVAL",
		"lease-namespace": "GPUHUB_LEASE_NAMESPACE", "lease-name": "GPUHUB_LEASE_NAME", "reader-services": "GPUHUB_READER_SERVICES",
		"admin-groups": "GPUHUB_ADMIN_GROUPS", "hub-refresh": "GPUHUB_HUB_REFRESH", "kubeconfig": "KUBECONFIG",
		"informer-unready-after": "GPUHUB_INFORMER_UNREADY_AFTER", "log-format": "GPUHUB_LOG_FORMAT", "log-level": "GPUHUB_LOG_LEVEL",
	}, nil)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	logger, err := logging.New(stderr, *logFormat, *logLevel)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	// The policy first: a file that does not load is the first thing to fix, whatever else is missing.
	if err := policy.Load(*policyPath, &quota.Policy{}); err != nil {
		return policyFailed(stderr, err)
	}
	hubCfg := hubapi.ConfigFromEnv()
	hubCfg.Logger, hubCfg.UserAgent = logger, "gpuhub-gpu-quota"
	hub, err := hubapi.New(hubCfg)
	if err != nil {
		logger.Error("hub client", "err", err)
		return 2
	}
	restCfg, err := kube.RESTConfig(kube.Options{Kubeconfig: *kubeconfig, UserAgent: "gpuhub-gpu-quota"})
	if err != nil {
		logger.Error("kubernetes client", "err", err)
		return 2
	}
	kc, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		logger.Error("kubernetes client", "err", err)
		return 2
	}
	reg := prometheus.NewRegistry()
	auth := hubauth.New(hubauth.Options{Hub: hub, Logger: logger, AdminGroups: config.List(*adminGroups), Registerer: reg})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}()

	identity, _ := os.Hostname() // the pod name: one per replica
	err = app.Run(ctx, app.Options{
		Logger: logger, Registry: reg, Addr: *listen, Prefix: *prefix,
		PolicyPath: *policyPath, PolicyPoll: *policyPoll, Reload: reload,
		Kube: kc, Namespace: *namespace, InformerUnreadyAfter: *unreadyAfter,
		Hub: hub, HubRefresh: *hubRefresh, Token: hubCfg.Token, Auth: auth.Middleware, ReaderServices: config.List(*readerServices),
		UsageURL: *usageURL, UsageRefresh: *usageRefresh, ReservationTTL: *reservationTTL,
		LeaseNamespace: *leaseNamespace, LeaseName: *leaseName, Identity: identity, EnforceInterval: *enforceInterval,
		// The leader warns users over a limit or budget and stops their servers after the grace, through the Hub.
		WhileLeader: app.Enforce(hub),
	})
	var pe *app.PolicyError
	if errors.As(err, &pe) {
		return policyFailed(stderr, pe.Err)
	}
	if err != nil {
		logger.Error("gpu-quota stopped", "err", err)
		return 1
	}
	return 0
}

// policyFailed prints why the policy does not load, one error a line (file:line:column: message).
func policyFailed(stderr io.Writer, err error) int {
	_, _ = fmt.Fprintf(stderr, "gpu-quota: the policy file does not load; fix it (gpuhub policy check FILE) and start again:\n%v\n", err)
	return 1
}
