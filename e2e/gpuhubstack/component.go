package gpuhubstack

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
)

// Options configures the stack component that `make demo` adds.
type Options struct {
	Chart    Chart  // Namespace empty: the stack's single-user namespace (as next to a z2jh release)
	UsageAPI string // usage-api executable
	Port     int    // usage API port on 127.0.0.1; must match HubService's
	Token    string // the service's Hub token; must match HubService's
}

// Component installs the chart's agents and RBAC once the stack is up and starts the usage API
// (ledger and kubeconfig in the stack's state dir).
func Component(o Options) stack.Component {
	return stack.Component{Name: "gpu-agents + usage API", Spec: func(s *stack.Stack) (proc.Spec, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		ch := o.Chart
		if ch.Namespace == "" {
			ch.Namespace = s.Opts.Namespace
		}
		ch.PodNamespace = s.Opts.Namespace
		if ch.KubeVersion == "" {
			v, err := ServerVersion(s.Client)
			if err != nil {
				return proc.Spec{}, err
			}
			ch.KubeVersion = v
		}
		objs, err := ch.Render(ctx)
		if err != nil {
			return proc.Spec{}, err
		}
		in, err := Install(ctx, s.Client, ch.Namespace, objs)
		if err != nil {
			return proc.Spec{}, err
		}
		if err := in.WaitAgents(ctx, s.Client, 2*time.Minute); err != nil {
			return proc.Spec{}, err
		}
		kc := filepath.Join(s.Dir, "usage-api", "kubeconfig")
		if err := in.WriteUsageKubeconfig(ctx, s.Client, s.ControlPlane.URL, s.ControlPlane.CAData(), kc); err != nil {
			return proc.Spec{}, err
		}
		agentToken := filepath.Join(s.Dir, "usage-api", "agent-token")
		if err := in.WriteAgentToken(ctx, s.Client, agentToken); err != nil {
			return proc.Spec{}, err
		}
		if o.UsageAPI == "" {
			return proc.Spec{}, fmt.Errorf("no usage-api executable given")
		}
		spec := Usage{
			Binary: o.UsageAPI, Port: o.Port, Kubeconfig: kc, Database: filepath.Join(s.Dir, "usage-api", "ledger.db"),
			Namespace: s.Opts.Namespace, AgentNamespace: ch.Namespace, AgentTokenFile: agentToken, AgentArgs: in.UsageAgentArgs,
			HubAPIURL: s.Hub.APIURL(), Token: o.Token,
		}.Spec()
		spec.LogFile = filepath.Join(s.Dir, "logs", "usage-api.log")
		return spec, nil
	}}
}
