// Command usage-api is the Hub service gpu-usage: live GPU shares per user and server, a durable GPU-hours
// ledger and the API the JupyterLab panel reads. See services/usage-api/README.md.
package main

import (
	"io"
	"os"
	"time"
	_ "time/tzdata" // the API's tz parameter must not depend on the image having /usr/share/zoneinfo

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuhub/gpuhub/hubapi/huboauth"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/leader"
	"github.com/gpuhub/gpuhub/services/internal/start"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/agentclient"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/app"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	cmd := start.NewCommand("usage-api", stderr)
	fs := cmd.Flags
	shutdownDelay := cmd.ShutdownDelayFlag()
	var (
		listen         = fs.String("listen", ":8000", "address to serve the API, probes and metrics on")
		prefix         = fs.String("prefix", "/services/gpu-usage/", "URL prefix of the API (the Hub service prefix)")
		interval       = fs.Duration("interval", 5*time.Second, "sampling and ledger integration interval")
		maxGap         = fs.Duration("ledger-max-gap", 0, "longest gap since the ledger checkpoint that is integrated in full (default 6 intervals)")
		staleAfter     = fs.Duration("stale-after", 0, "age past which a node's GPU telemetry is stale: utilization null, not billed as used (default 3 sampling intervals of the node's agent, at least 3 x --interval)")
		database       = fs.String("database", "/var/lib/gpuhub/ledger.db", "ledger: SQLite file path, or a postgres:// URL")
		databaseURL    = fs.String("database-url", "", "ledger: PostgreSQL URL; wins over --database when set")
		namespace      = fs.String("namespace", "", "namespace of the single-user pods (empty: all namespaces)")
		tolerations    = fs.String("tolerations", "", `the single-user pods' tolerations as a JSON list, as gpu-quota's --tolerations: a GPU on a node tainted NoSchedule/NoExecute against them is not counted free in right-size advice ("N free now"); the chart passes gpu-profiles' (empty: z2jh's user-pod tolerations and nvidia.com/gpu)`)
		agentNamespace = fs.String("agent-namespace", "", "namespace of the gpu-agent pods, the chart's release namespace (default: --namespace; required)")
		agentSelector  = fs.String("agent-selector", inventory.DefaultAgentSelector, "label selector of the gpu-agent pods (the chart's release labels)")
		agentSA        = fs.String("agent-service-account", inventory.DefaultAgentServiceAccount, "ServiceAccount a gpu-agent pod must run as; a pod that only copies the labels is not polled")
		agentTokenFile = fs.String("agent-token-file", agentclient.DefaultTokenFile, "projected ServiceAccount token (audience gpuhub-agent) sent to the gpu-agents, re-read as it rotates (empty: send none, for agents with --snapshot-auth=none)")
		agentPort      = fs.Int("agent-port", 9400, "port of the gpu-agents' snapshot endpoint")
		unreadyAfter   = fs.Duration("informer-unready-after", time.Minute, "how long a pod or node watch may keep failing before /readyz fails")
		hubRefresh     = fs.Duration("hub-refresh", 2*time.Minute, "how often the Hub's users and groups are re-read")
		adminGroups    = fs.String("admin-groups", "", "comma-separated Hub groups whose members may read every user's data")
		readerServices = fs.String("reader-services", "gpu-quota,gpu-culler", "comma-separated Hub services that may read every user's GPU-hours (api/v1/gpu-hours, gpu-hours/decayed), every server's telemetry (api/v1/servers) and every user's right-size advice and savings (api/v1/users/{name}/right-size, api/v1/right-size), besides admins")
		adviceReaders  = fs.String("advice-readers", "", "comma-separated Hub services that may read any user's right-size advice (api/v1/users/{name}/right-size) and nothing else of other users: gpu-profiles, for the spawn form's recommended choice (the chart passes it); empty: none besides admins and --reader-services")
		waitlistSvcs   = fs.String("waitlist-services", "gpu-quota", "comma-separated Hub services that may write the GPU waitlist's state (api/v1/waitlist/state), kept in the ledger's database; they and admins may read it")
		quotaURL       = fs.String("quota-url", "", "gpu-quota's base URL with its prefix (e.g. http://gpu-quota:8000/services/gpu-quota/): me's budget comes from it; empty: budget is null")
		quotaTimeout   = fs.Duration("quota-timeout", 2*time.Second, "how long me waits for gpu-quota's answer before the budget is unavailable")
		cullerURL      = fs.String("culler-url", "", "gpu-culler's base URL with its prefix (e.g. http://gpu-culler:8000/services/gpu-culler/): the admin view's decisions come from it (gpu-culler must list gpu-usage in its --reader-services); empty: the page says it is not configured")
		adminView      = fs.Bool("admin-view", true, "serve the admin view under --prefix (the Hub's Services menu links there); people log in through the Hub's OAuth flow")
		clientID       = fs.String("oauth-client-id", "", "the service's OAuth client id at the Hub (default service-<name>, <name> from --prefix)")
		callbackURL    = fs.String("oauth-callback-url", "", "redirect_uri exactly as the Hub registered it for the service (default <prefix>oauth_callback)")
		hubBaseURL     = fs.String("hub-base-url", "/", "the Hub's public base URL path (z2jh hub.baseUrl): browsers go to <it>hub/api/oauth2/authorize to log in")
		sessionKeyFile = fs.String("session-key-file", "", "file with >= 32 random bytes that sign the admin view's session cookies (empty: a random key per start; a restart then sends people through the Hub's login again, which is silent)")
		leaseNamespace = fs.String("ledger-lease-namespace", "", "with several replicas on one PostgreSQL ledger: namespace of the Lease that keeps the ledger's writes to one replica (the others follow its commits and answer from them); empty: this replica writes (one replica)")
		leaseName      = fs.String("ledger-lease-name", "gpu-usage-ledger", "name of the ledger writer's Lease")
		ownerDeploy    = fs.String("owner-deployment", "", "this service's Deployment, in --ledger-lease-namespace: the Lease it creates is owned by it, so that deleting the Deployment (helm uninstall) deletes it (empty: no owner)")
		sessionTTL     = fs.Duration("session-ttl", huboauth.DefaultSessionTTL, "how long an admin view session is trusted before the user's admin status is checked with the Hub again")
	)
	if code, ok := cmd.Parse(args, map[string]string{
		"listen": "GPUHUB_LISTEN", "prefix": config.HubEnv.ServicePrefix, "interval": "GPUHUB_INTERVAL",
		"ledger-max-gap": "GPUHUB_LEDGER_MAX_GAP", "stale-after": "GPUHUB_STALE_AFTER", "database": "GPUHUB_DATABASE", "database-url": "GPUHUB_DATABASE_URL",
		"namespace": "GPUHUB_NAMESPACE", "tolerations": "GPUHUB_TOLERATIONS", "agent-namespace": "GPUHUB_AGENT_NAMESPACE", "agent-port": "GPUHUB_AGENT_PORT",
		"agent-selector": "GPUHUB_AGENT_SELECTOR", "agent-service-account": "GPUHUB_AGENT_SERVICE_ACCOUNT", "agent-token-file": "GPUHUB_AGENT_TOKEN_FILE",
		"hub-refresh": "GPUHUB_HUB_REFRESH", "admin-groups": "GPUHUB_ADMIN_GROUPS",
		"reader-services": "GPUHUB_READER_SERVICES", "advice-readers": "GPUHUB_ADVICE_READERS", "waitlist-services": "GPUHUB_WAITLIST_SERVICES", "quota-url": "GPUHUB_QUOTA_URL", "quota-timeout": "GPUHUB_QUOTA_TIMEOUT", "culler-url": "GPUHUB_CULLER_URL",
		"admin-view": "GPUHUB_ADMIN_VIEW", "oauth-client-id": config.HubEnv.ClientID, "oauth-callback-url": "JUPYTERHUB_OAUTH_CALLBACK_URL",
		"hub-base-url": config.HubEnv.BaseURL, "session-key-file": "GPUHUB_SESSION_KEY_FILE", "session-ttl": "GPUHUB_SESSION_TTL",
		"informer-unready-after": "GPUHUB_INFORMER_UNREADY_AFTER",
		"ledger-lease-namespace": "GPUHUB_LEDGER_LEASE_NAMESPACE", "ledger-lease-name": "GPUHUB_LEDGER_LEASE_NAME", "owner-deployment": "GPUHUB_OWNER_DEPLOYMENT",
	}); !ok {
		return code
	}
	logger := cmd.Logger
	tol, err := inventory.ParseTolerations(*tolerations)
	if err != nil {
		logger.Error("--tolerations", "err", err)
		return 2
	}
	groups := config.List(*adminGroups)
	cl, ok := cmd.Clients(start.Options{AdminGroups: groups})
	if !ok {
		return 2
	}
	hubCfg, reg := cl.HubConfig, cl.Registry
	if *agentNamespace == "" {
		*agentNamespace = *namespace
	}
	if *agentNamespace == "" {
		// The agents' ServiceAccount is a name within a namespace: trusted only in the release's.
		logger.Error("--agent-namespace (or --namespace) is required: the namespace of the chart's gpu-agents")
		return 2
	}
	agentSel, err := labels.Parse(*agentSelector)
	if err != nil || agentSel.Empty() || *agentSA == "" {
		logger.Error("--agent-selector must be a non-empty label selector and --agent-service-account a name", "err", err)
		return 2
	}
	peers, err := app.NewPeers(app.PeerConfig{QuotaURL: *quotaURL, CullerURL: *cullerURL, Token: hubCfg.Token,
		Self: os.Getenv(config.HubEnv.ServiceName), Timeout: *quotaTimeout, Logger: logger, Registerer: reg})
	if err != nil {
		logger.Error("the other services' URLs", "err", err)
		return 2
	}
	var login app.Login
	if *adminView {
		l, err := app.NewLogin(app.LoginConfig{Prefix: *prefix, ClientID: *clientID, CallbackURL: *callbackURL, HubBaseURL: *hubBaseURL,
			KeyFile: *sessionKeyFile, TTL: *sessionTTL, AdminGroups: groups}, hubCfg, cl.Hub, reg, logger)
		if err != nil {
			logger.Error("admin view", "err", err)
			return 2
		}
		login = l
	}
	db := *database
	if *databaseURL != "" {
		db = *databaseURL
	}
	identity := leader.ProcessIdentity() // the pod name and pid: one per replica, also on one machine
	ctx, _, stop := start.Signals()
	defer stop()
	err = app.Run(ctx, app.Options{
		Logger: logger, Registry: reg, Addr: *listen, Prefix: *prefix,
		Kube: cl.Kube, Namespace: *namespace, Tolerations: tol, AgentNamespace: *agentNamespace, AgentPort: *agentPort, InformerUnreadyAfter: *unreadyAfter, ShutdownDelay: *shutdownDelay,
		AgentSelector: agentSel, AgentServiceAccount: *agentSA,
		// Agents admit only a token for their audience (the snapshot names users); never our API-server credential.
		AgentClient: agentclient.New(agentclient.Options{TokenFile: *agentTokenFile}),
		Hub:         cl.Hub, HubRefresh: *hubRefresh, Auth: cl.Auth.Middleware,
		ReaderServices: config.List(*readerServices), AdviceReaders: config.List(*adviceReaders), WaitlistServices: config.List(*waitlistSvcs), Budget: peers.Budget,
		QuotaAPI: peers.QuotaAPI, CullerAPI: peers.CullerAPI, Login: login,
		Database: db, Interval: *interval, MaxGap: *maxGap, StaleAfter: *staleAfter,
		LedgerLease: app.LeaseOptions{Namespace: *leaseNamespace, Name: *leaseName, Identity: identity, OwnerDeployment: *ownerDeploy},
	})
	return cmd.Exit(err)
}
