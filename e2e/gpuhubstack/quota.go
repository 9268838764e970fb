package gpuhubstack

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/hub"
)

// GlueFile is the Hub glue inside the chart directory: the one Python file z2jh loads as
// hub.extraConfig.gpuhub, which the local Hub and the Hub integration tests load unchanged.
const GlueFile = "files/gpuhub_hub_config.py"

// HubValues returns the local Hub's values (e2e/hub/values.yaml) with the chart's glue as
// hub.extraConfig.gpuhub, read from chartDir: what `helm upgrade --set-file hub.extraConfig.gpuhub=...` gives a
// z2jh release. extra adds further hub.extraConfig snippets (tests: z2jh's spawn settings).
func HubValues(chartDir string, extra map[string]string) ([]byte, error) {
	glue, err := os.ReadFile(filepath.Join(chartDir, GlueFile))
	if err != nil {
		return nil, fmt.Errorf("hub glue: %w", err)
	}
	snippets := map[string]string{"gpuhub": string(glue)}
	for k, v := range extra {
		snippets[k] = v
	}
	return hub.WithExtraConfig(hub.DefaultValues(), snippets)
}

// Quota describes the gpu-quota process, flags as the chart's Deployment sets them.
type Quota struct {
	Binary     string // gpu-quota executable
	Port       int    // on 127.0.0.1 (the Hub service URL names it)
	Kubeconfig string // a token of the chart's gpu-quota ServiceAccount (Installed.WriteKubeconfig)
	Policy     string // policy file
	Namespace  string // single-user pods
	// LeaseNamespace is the release namespace; LeaseArgs the chart's --lease-name (Installed.QuotaArgs).
	LeaseNamespace string
	LeaseArgs      []string
	UsageURL       string // usage API base URL with its prefix (Usage.URL without api/v1/); empty: none
	// ProfilesToo adds gpu-profiles to the services that may call gpu-quota (assess), as the chart does when it
	// runs gpu-profiles.
	ProfilesToo bool
	// CullerToo adds gpu-culler (the waitlist's contended classes), as the chart does when it runs gpu-culler.
	CullerToo bool
	// Waitlist is --waitlist, WaitlistHold --waitlist-hold (empty: the service's default).
	Waitlist     bool
	WaitlistHold string
	// AdvertiseURL is --advertise-url (the chart's http://$(POD_IP):PORT with several replicas); empty: none.
	AdvertiseURL string
	HubAPIURL    string
	Token        string // the service's Hub token
	// UsageRefresh and EnforceInterval default to 5s and 10s (the demo should move quickly).
	UsageRefresh, EnforceInterval string
	LogLevel                      string // default info
	ExtraArgs                     []string
	ExtraEnvForTest               []string
}

// URL is gpu-quota's base URL on loopback with its prefix: http://127.0.0.1:<port>/services/gpu-quota/.
func (q Quota) URL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/services/%s/", q.Port, QuotaServiceName)
}

// Spec is the process description for proc.Start (readiness: /readyz).
func (q Quota) Spec() proc.Spec {
	env, args := serviceProcess(QuotaServiceName, q.HubAPIURL, q.Token, q.Port, q.LogLevel)
	env = append(env, q.ExtraEnvForTest...)
	readers := ServiceName
	if q.ProfilesToo {
		readers += "," + ProfilesServiceName
	}
	if q.CullerToo {
		readers += "," + CullerServiceName
	}
	args = append(args,
		"--policy="+q.Policy, "--policy-poll=2s", "--namespace="+q.Namespace, "--kubeconfig="+q.Kubeconfig,
		"--lease-namespace="+q.LeaseNamespace, "--reader-services="+readers,
		"--usage-refresh="+cmp.Or(q.UsageRefresh, "5s"), "--enforce-interval="+cmp.Or(q.EnforceInterval, "10s"),
	)
	if q.UsageURL != "" {
		args = append(args, "--usage-url="+q.UsageURL)
	}
	if q.AdvertiseURL != "" {
		args = append(args, "--advertise-url="+q.AdvertiseURL)
	}
	if q.Waitlist {
		args = append(args, "--waitlist")
		if q.WaitlistHold != "" {
			args = append(args, "--waitlist-hold="+q.WaitlistHold)
		}
	}
	args = append(args, q.LeaseArgs...)
	return proc.Spec{
		Name:         "gpu-quota",
		Path:         q.Binary,
		Args:         append(args, q.ExtraArgs...),
		Env:          env,
		Ready:        readyz(fmt.Sprintf("http://127.0.0.1:%d/readyz", q.Port)),
		ReadyTimeout: 90 * time.Second,
		StopGrace:    10 * time.Second,
	}
}
