package gpuhubstack

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
)

// CullerServiceName is gpu-culler's Hub service name (chart value culler.serviceName). The panel reaches it
// through the Hub's proxy at /services/gpu-culler/ (the countdown and the snooze).
const CullerServiceName = "gpu-culler"

// CullerOptions configures the gpu-culler processes of the stack.
type CullerOptions struct {
	Binary string // gpu-culler executable; empty: no gpu-culler
	// Port is the Hub service's port (LocalHub.Services). With one replica the replica listens on it; with more,
	// each listens on its own ReplicaPorts entry and the caller puts something on Port that reaches them (what the
	// chart's Service does).
	Port         int
	ReplicaPorts []int
	Token        string // its Hub token; must match LocalHub.Services
	Policy       string // policy file (make demo: e2e/hub/culler-demo.yaml)
	// Replicas run side by side under the chart's Lease (default 1).
	Replicas int
	// SampleEvery is --sample-every (default 2s: the demo's countdown should move).
	SampleEvery string
	// HubAPIURL, when set, is replica i's Hub API URL (a test's recording proxy in front of the Hub); default
	// the Hub's own.
	HubAPIURL func(s *stack.Stack, replica int) (string, error)
	LogLevel  string
	ExtraArgs []string
}

// CullerComponentName is the stack component name of replica i of n: gpu-culler alone, gpu-culler-<i> among
// several.
func CullerComponentName(i, n int) string { return ReplicaName(CullerServiceName, i, n) }

func cullerComponents(o Options, installed **Installed, usage Usage) []stack.Component {
	n := max(o.Culler.Replicas, 1)
	cs := make([]stack.Component, 0, n)
	for i := range n {
		name := CullerComponentName(i, n)
		cs = append(cs, stack.Component{Name: name, Spec: func(s *stack.Stack) (proc.Spec, error) {
			in := *installed
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			port, err := replicaPort(CullerServiceName, o.Culler.Port, o.Culler.ReplicaPorts, i, n)
			if err != nil {
				return proc.Spec{}, err
			}
			hubURL := s.Hub.APIURL()
			if o.Culler.HubAPIURL != nil {
				u, err := o.Culler.HubAPIURL(s, i)
				if err != nil {
					return proc.Spec{}, err
				}
				hubURL = u
			}
			kc := filepath.Join(s.Dir, name, "kubeconfig")
			if err := in.WriteKubeconfig(ctx, s.Client, in.CullerServiceAccount, s.ControlPlane.URL, s.ControlPlane.CAData(), kc); err != nil {
				return proc.Spec{}, err
			}
			c := Culler{
				Binary: o.Culler.Binary, Port: port, Kubeconfig: kc, Policy: o.Culler.Policy,
				Namespace: s.Opts.Namespace, LeaseNamespace: in.Namespace, LeaseArgs: in.CullerArgs,
				UsageURL: usage.BaseURL(), HubAPIURL: hubURL, Token: o.Culler.Token,
				SampleEvery: o.Culler.SampleEvery, LogLevel: o.Culler.LogLevel, ExtraArgs: o.Culler.ExtraArgs,
			}
			if o.Quota.Binary != "" {
				c.QuotaURL = Quota{Port: o.Quota.Port}.URL()
			}
			spec := c.Spec()
			spec.Name = name
			spec.LogFile = filepath.Join(s.Dir, "logs", name+".log")
			return spec, nil
		}})
	}
	return cs
}

// Culler describes one gpu-culler process, flags as the chart's Deployment sets them.
type Culler struct {
	Binary     string // gpu-culler executable
	Port       int    // on 127.0.0.1
	Kubeconfig string // a token of the chart's gpu-culler ServiceAccount (Installed.WriteKubeconfig)
	Policy     string // policy file
	Namespace  string // single-user pods
	// LeaseNamespace is the release namespace; LeaseArgs the chart's --lease-name and --stops-configmap
	// (Installed.CullerArgs: the objects its Role names).
	LeaseNamespace string
	LeaseArgs      []string
	UsageURL       string // usage API base URL with its prefix (Usage.BaseURL)
	// QuotaURL is gpu-quota's base URL with its prefix (--quota-url: the waitlist's contended classes); empty: none.
	QuotaURL    string
	HubAPIURL   string
	Token       string // the service's Hub token
	SampleEvery string // default 2s
	LogLevel    string // default info
	ExtraArgs   []string
}

// URL is the replica's base URL on loopback with its prefix: http://127.0.0.1:<port>/services/gpu-culler/.
func (c Culler) URL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/services/%s/", c.Port, CullerServiceName)
}

// Spec is the process description for proc.Start (readiness: /readyz).
func (c Culler) Spec() proc.Spec {
	env, args := serviceProcess(CullerServiceName, c.HubAPIURL, c.Token, c.Port, c.LogLevel)
	args = append(args,
		"--policy="+c.Policy, "--namespace="+c.Namespace, "--kubeconfig="+c.Kubeconfig,
		"--usage-url="+c.UsageURL, "--sample-every="+cmp.Or(c.SampleEvery, "2s"),
		"--leader-elect=true", "--lease-namespace="+c.LeaseNamespace,
	)
	if c.QuotaURL != "" {
		args = append(args, "--quota-url="+c.QuotaURL, "--contention-every="+cmp.Or(c.SampleEvery, "2s"))
	}
	args = append(args, c.LeaseArgs...)
	return proc.Spec{
		Name:         CullerServiceName,
		Path:         c.Binary,
		Args:         append(args, c.ExtraArgs...),
		Env:          env,
		Ready:        readyz(fmt.Sprintf("http://127.0.0.1:%d/readyz", c.Port)),
		ReadyTimeout: 90 * time.Second,
		StopGrace:    10 * time.Second,
	}
}

// cullerArgs are a rendered gpu-culler Deployment's flags that name the objects its Role allows: the Lease and
// the ConfigMap of last stops.
func cullerArgs(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "--lease-name=") || strings.HasPrefix(a, "--stops-configmap=") {
			out = append(out, a)
		}
	}
	return out
}
