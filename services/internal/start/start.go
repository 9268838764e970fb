// Package start is what every gpuhub service's main does before its own wiring: the flags every service has
// and the logger (Command), the Hub client from the Hub's environment, the Kubernetes client, a metrics
// registry, the Hub-token authenticator for incoming requests (not for the gpu-agent: Options.WithoutHub), and
// the process signals (SIGINT/SIGTERM stop, SIGHUP reloads). Each main.go stays flags, this, and its app.Run.
package start

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/config"
	"github.com/gpuhub/gpuhub/services/internal/kube"
)

// Clients are a service's connections to the Hub and the API server, and what it answers with.
type Clients struct {
	// HubConfig is the Hub's environment (JUPYTERHUB_API_URL, JUPYTERHUB_API_TOKEN, ...); its Token is the
	// service's own Hub token. HubConfig, Hub and Auth are zero with Options.WithoutHub.
	HubConfig hubapi.Config
	Hub       *hubapi.Client
	Kube      kubernetes.Interface
	Registry  *prometheus.Registry
	// Auth resolves the Hub token of an incoming request to a user or service (admins include AdminGroups).
	Auth *hubauth.Authenticator
}

// Options name the service and its settings.
type Options struct {
	// Service is the binary's name ("gpu-quota"): the user agent is gpuhub-<Service>.
	Service string
	// Kubeconfig is the --kubeconfig flag (empty: in-cluster, then $KUBECONFIG).
	Kubeconfig string
	// AdminGroups are Hub groups whose members count as admins for this service.
	AdminGroups []string
	Logger      *slog.Logger
	// WithoutHub is for a service that is no Hub service (the gpu-agent): no Hub client, no Hub-token auth.
	WithoutHub bool
}

// NewClients builds the clients. Its errors say which client and why (the Hub's environment, a kubeconfig).
func NewClients(o Options) (Clients, error) {
	agent := "gpuhub-" + o.Service
	cl := Clients{Registry: prometheus.NewRegistry()}
	if !o.WithoutHub {
		cl.HubConfig = hubapi.ConfigFromEnv()
		// The Hub client's requests by operation and status (gpuhub_hubapi_requests_total) on the service's /metrics.
		cl.HubConfig.Logger, cl.HubConfig.UserAgent, cl.HubConfig.Registerer = o.Logger, agent, cl.Registry
		hub, err := hubapi.New(cl.HubConfig)
		if err != nil {
			return Clients{}, fmt.Errorf("hub client: %w", err)
		}
		cl.Hub = hub
	}
	restCfg, err := kube.RESTConfig(kube.Options{Kubeconfig: o.Kubeconfig, UserAgent: agent})
	if err != nil {
		return Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	if cl.Kube, err = kubernetes.NewForConfig(restCfg); err != nil {
		return Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	if !o.WithoutHub {
		// Service: a user's token must grant access to this Hub service, as JupyterHub's HubAuth requires.
		service := os.Getenv(config.HubEnv.ServiceName)
		if service == "" && o.Logger != nil {
			o.Logger.Warn(config.HubEnv.ServiceName + " is not set: users' tokens are not checked for access to this " +
				"service (a token a user gave another service acts for them here); the Hub sets it for its managed " +
				"services, the chart for each gpuhub service")
		}
		cl.Auth = hubauth.New(hubauth.Options{Hub: cl.Hub, Logger: o.Logger, AdminGroups: o.AdminGroups, Registerer: cl.Registry,
			Service: service})
	}
	return cl, nil
}

// Signals returns a context that ends on SIGINT or SIGTERM, and a channel that receives on SIGHUP (several
// SIGHUPs before the receiver looks count as one). stop releases the signals.
func Signals() (ctx context.Context, reload <-chan struct{}, stop func()) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	r := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				select {
				case r <- struct{}{}:
				default:
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, r, func() {
		signal.Stop(hup)
		close(done)
		cancel()
	}
}
