package gpuhubstack

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
)

// ProfilesServiceName is gpu-profiles' Hub service name (chart value profiles.serviceName). The Hub glue finds its
// url and api_token under this name in c.JupyterHub.services.
const ProfilesServiceName = "gpu-profiles"

// Profiles describes the gpu-profiles process, flags as the chart's Deployment sets them.
type Profiles struct {
	Binary     string // gpu-profiles executable
	Port       int    // on 127.0.0.1 (the Hub service URL names it)
	Kubeconfig string // a token of the chart's gpu-profiles ServiceAccount (Installed.WriteKubeconfig)
	Config     string // overrides file; empty: none
	Namespace  string // single-user pods
	// LeaseNamespace is the release namespace; LeaseArgs the chart's --lease-name (Installed.ProfilesArgs).
	LeaseNamespace string
	LeaseArgs      []string
	QuotaURL       string // gpu-quota base URL with its prefix; empty: none
	// UsageURL is the usage API's base URL with its prefix (Usage.BaseURL): right-size advice marks the form's
	// recommended choice, as the chart sets it; empty: none.
	UsageURL  string
	HubAPIURL string
	Token     string // the service's Hub token
	// PendingEndAfter is --pending-end-after (default 30s: the demo should move quickly).
	PendingEndAfter string
	LogLevel        string // default info
	ExtraArgs       []string
}

// URL is gpu-profiles' base URL on loopback with its prefix: http://127.0.0.1:<port>/services/gpu-profiles/.
func (p Profiles) URL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/services/%s/", p.Port, ProfilesServiceName)
}

// Spec is the process description for proc.Start (readiness: /readyz).
func (p Profiles) Spec() proc.Spec {
	env, args := serviceProcess(ProfilesServiceName, p.HubAPIURL, p.Token, p.Port, p.LogLevel)
	args = append(args,
		"--namespace="+p.Namespace, "--kubeconfig="+p.Kubeconfig, "--reader-services="+ServiceName,
		"--lease-namespace="+p.LeaseNamespace, "--pending-end-after="+cmp.Or(p.PendingEndAfter, "30s"),
	)
	if p.Config != "" {
		args = append(args, "--config="+p.Config, "--config-poll=2s")
	}
	if p.QuotaURL != "" {
		args = append(args, "--quota-url="+p.QuotaURL)
	}
	if p.UsageURL != "" {
		args = append(args, "--usage-url="+p.UsageURL)
	}
	args = append(args, p.LeaseArgs...)
	return proc.Spec{
		Name:         "gpu-profiles",
		Path:         p.Binary,
		Args:         append(args, p.ExtraArgs...),
		Env:          env,
		Ready:        readyz(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.Port)),
		ReadyTimeout: 90 * time.Second,
		StopGrace:    10 * time.Second,
	}
}

// readyz is a proc.Spec readiness check: GET url answers 200.
func readyz(url string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	}
}
