package gpuhubstack

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
)

// Options configures the stack components that `make demo` adds.
type Options struct {
	Chart    Chart  // Namespace empty: the stack's single-user namespace (as next to a z2jh release)
	UsageAPI string // usage-api executable
	Port     int    // usage API port on 127.0.0.1; must match LocalHub.Services
	Token    string // the service's Hub token; must match LocalHub.Services
	// SessionTTL is the usage API's --session-ttl (the admin view's sessions); empty: its default (15m).
	SessionTTL string
	// UsageDatabase is the usage API's ledger (--database: a SQLite path or a postgres:// URL); empty: SQLite in the
	// stack's state dir (usage-api/ledger.db).
	UsageDatabase string
	// Quota runs gpu-quota too when Quota.Binary is set (and the chart is rendered with it).
	Quota QuotaOptions
	// Profiles runs gpu-profiles too when Profiles.Binary is set (and the chart is rendered with it).
	Profiles ProfilesOptions
	// Culler runs gpu-culler too when Culler.Binary is set (and the chart is rendered with it).
	Culler CullerOptions
}

// ProfilesOptions configures the gpu-profiles process of the stack.
type ProfilesOptions struct {
	Binary string // gpu-profiles executable; empty: no gpu-profiles
	Port   int    // on 127.0.0.1; must match LocalHub.Services
	Token  string // its Hub token; must match LocalHub.Services
	Config string // overrides file; empty: none (every kind offered as it is)
	// PendingEndAfter is --pending-end-after (default 30s).
	PendingEndAfter string
}

// QuotaOptions configures the gpu-quota process of the stack.
type QuotaOptions struct {
	Binary string // gpu-quota executable; empty: no gpu-quota
	Port   int    // on 127.0.0.1; must match LocalHub.Services
	Token  string // its Hub token; must match LocalHub.Services
	Policy string // policy file (make demo: e2e/hub/quota-demo.yaml)
	// Waitlist runs gpu-quota's waitlist (--waitlist) with WaitlistHold (default the service's); register the
	// service with the z2jh values' waitlist switch on (LocalHubValues without NoWaitlist).
	Waitlist     bool
	WaitlistHold string
}

// LocalServices are o's Hub services on loopback, for LocalHub.Services: the usage API, and gpu-quota, gpu-profiles
// and gpu-culler where o runs them.
func (o Options) LocalServices() map[string]LocalService {
	services := map[string]LocalService{ServiceName: {Port: o.Port, Token: o.Token}}
	if o.Quota.Binary != "" {
		services[QuotaServiceName] = LocalService{Port: o.Quota.Port, Token: o.Quota.Token}
	}
	if o.Profiles.Binary != "" {
		services[ProfilesServiceName] = LocalService{Port: o.Profiles.Port, Token: o.Profiles.Token}
	}
	if o.Culler.Binary != "" {
		services[CullerServiceName] = LocalService{Port: o.Culler.Port, Token: o.Culler.Token}
	}
	return services
}

// Components returns the stack components of gpuhub: the chart's agents and RBAC with the usage API, then
// gpu-quota when o.Quota.Binary is set, then gpu-profiles when o.Profiles.Binary is set, then gpu-culler's
// replicas when o.Culler.Binary is set. Register the services with the Hub first, with the glue, as z2jh does: the
// chart's z2jh values through LocalHubValues, with each service's port and token in LocalHub.Services.
func Components(o Options) []stack.Component {
	var in *Installed
	usage := Usage{Port: o.Port}
	cs := []stack.Component{{Name: "gpu-agents + usage API", Spec: func(s *stack.Stack) (proc.Spec, error) {
		var spec proc.Spec
		var err error
		in, spec, err = usageSpec(s, o)
		return spec, err
	}}}
	if o.Quota.Binary != "" {
		cs = append(cs, quotaComponent(o, &in, usage))
	}
	if o.Profiles.Binary != "" {
		cs = append(cs, profilesComponent(o, &in))
	}
	if o.Culler.Binary != "" {
		cs = append(cs, cullerComponents(o, &in, usage)...)
	}
	return cs
}

func profilesComponent(o Options, installed **Installed) stack.Component {
	return stack.Component{Name: "gpu-profiles", Spec: func(s *stack.Stack) (proc.Spec, error) {
		in := *installed
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		kc := filepath.Join(s.Dir, "gpu-profiles", "kubeconfig")
		if err := in.WriteKubeconfig(ctx, s.Client, in.ProfilesServiceAccount, s.ControlPlane.URL, s.ControlPlane.CAData(), kc); err != nil {
			return proc.Spec{}, err
		}
		p := Profiles{
			Binary: o.Profiles.Binary, Port: o.Profiles.Port, Kubeconfig: kc, Config: o.Profiles.Config,
			Namespace: s.Opts.Namespace, LeaseNamespace: in.Namespace, LeaseArgs: in.ProfilesArgs,
			HubAPIURL: s.Hub.APIURL(), Token: o.Profiles.Token, PendingEndAfter: o.Profiles.PendingEndAfter,
		}
		if o.Quota.Binary != "" {
			p.QuotaURL = Quota{Port: o.Quota.Port}.URL()
		}
		if o.UsageAPI != "" {
			p.UsageURL = Usage{Port: o.Port}.BaseURL()
		}
		spec := p.Spec()
		spec.LogFile = filepath.Join(s.Dir, "logs", "gpu-profiles.log")
		return spec, nil
	}}
}

func quotaComponent(o Options, installed **Installed, usage Usage) stack.Component {
	return stack.Component{Name: "gpu-quota", Spec: func(s *stack.Stack) (proc.Spec, error) {
		in := *installed
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		kc := filepath.Join(s.Dir, "gpu-quota", "kubeconfig")
		if err := in.WriteKubeconfig(ctx, s.Client, in.QuotaServiceAccount, s.ControlPlane.URL, s.ControlPlane.CAData(), kc); err != nil {
			return proc.Spec{}, err
		}
		spec := Quota{
			Binary: o.Quota.Binary, Port: o.Quota.Port, Kubeconfig: kc, Policy: o.Quota.Policy,
			Namespace: s.Opts.Namespace, LeaseNamespace: in.Namespace, LeaseArgs: in.QuotaArgs,
			UsageURL: usage.BaseURL(), HubAPIURL: s.Hub.APIURL(), Token: o.Quota.Token, ProfilesToo: o.Profiles.Binary != "",
			CullerToo: o.Culler.Binary != "", Waitlist: o.Quota.Waitlist, WaitlistHold: o.Quota.WaitlistHold,
		}.Spec()
		spec.LogFile = filepath.Join(s.Dir, "logs", "gpu-quota.log")
		return spec, nil
	}}
}

// usageSpec installs the chart's agents and RBAC once the stack is up and describes the usage API process
// (ledger and kubeconfig in the stack's state dir).
func usageSpec(s *stack.Stack, o Options) (*Installed, proc.Spec, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ch := o.Chart
	if ch.Namespace == "" {
		ch.Namespace = s.Opts.Namespace
	}
	ch.PodNamespace = s.Opts.Namespace
	ch.NoQuota = o.Quota.Binary == ""
	ch.NoProfiles = o.Profiles.Binary == ""
	ch.NoCuller = o.Culler.Binary == ""
	if ch.KubeVersion == "" {
		v, err := ServerVersion(s.Client)
		if err != nil {
			return nil, proc.Spec{}, err
		}
		ch.KubeVersion = v
	}
	objs, err := ch.Render(ctx)
	if err != nil {
		return nil, proc.Spec{}, err
	}
	in, err := Install(ctx, s.Client, ch.Namespace, objs)
	if err != nil {
		return nil, proc.Spec{}, err
	}
	if err := in.WaitAgents(ctx, s.Client, 2*time.Minute); err != nil {
		return nil, proc.Spec{}, err
	}
	kc := filepath.Join(s.Dir, "usage-api", "kubeconfig")
	if err := in.WriteUsageKubeconfig(ctx, s.Client, s.ControlPlane.URL, s.ControlPlane.CAData(), kc); err != nil {
		return nil, proc.Spec{}, err
	}
	agentToken := filepath.Join(s.Dir, "usage-api", "agent-token")
	if err := in.WriteAgentToken(ctx, s.Client, agentToken); err != nil {
		return nil, proc.Spec{}, err
	}
	if o.UsageAPI == "" {
		return nil, proc.Spec{}, fmt.Errorf("no usage-api executable given")
	}
	db := o.UsageDatabase
	if db == "" {
		db = filepath.Join(s.Dir, "usage-api", "ledger.db")
	}
	u := Usage{
		Binary: o.UsageAPI, Port: o.Port, Kubeconfig: kc, Database: db,
		Namespace: s.Opts.Namespace, AgentNamespace: ch.Namespace, AgentTokenFile: agentToken, AgentArgs: in.UsageAgentArgs,
		HubAPIURL: s.Hub.APIURL(), Token: o.Token, SessionTTL: o.SessionTTL,
	}
	if o.Quota.Binary != "" {
		u.QuotaURL = Quota{Port: o.Quota.Port}.URL()
	}
	if o.Profiles.Binary != "" {
		// gpu-profiles reads each user's right-size advice (the form's mark), as the chart lets it.
		u.Readers = append(u.Readers, ProfilesServiceName)
	}
	if o.Culler.Binary != "" {
		u.Readers = append(u.Readers, CullerServiceName)
		// Any replica answers the admin view's decisions page (the chart's Service picks one too).
		u.CullerURL = Culler{Port: o.Culler.Port}.URL()
		if len(o.Culler.ReplicaPorts) > 0 {
			u.CullerURL = Culler{Port: o.Culler.ReplicaPorts[0]}.URL()
		}
	}
	spec := u.Spec()
	spec.LogFile = filepath.Join(s.Dir, "logs", "usage-api.log")
	return in, spec, nil
}
