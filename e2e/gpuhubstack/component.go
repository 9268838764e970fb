package gpuhubstack

import (
	"context"
	"fmt"
	"os"
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
	// UsageReplicas run side by side on one PostgreSQL ledger (UsageDatabase a postgres:// URL) under the chart's
	// Lease (default 1). With one the replica listens on Port; with more, each on its own UsageReplicaPorts entry,
	// and the caller puts something on Port that reaches them (a Front, what the chart's Service does).
	UsageReplicas     int
	UsageReplicaPorts []int
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
	// Replicas run side by side under the chart's Lease (default 1); with more, each listens on its own
	// ReplicaPorts entry and Port is the caller's Front, as for CullerOptions.
	Replicas     int
	ReplicaPorts []int
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
	// Replicas run side by side (default 1): each listens on its own ReplicaPorts entry and advertises it
	// (--advertise-url); the Lease holder decides, the others relay to it. Port is the caller's Front.
	Replicas     int
	ReplicaPorts []int
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
	var usage Usage // replica 0's, which the other replicas copy
	cs := []stack.Component{{Name: "gpu-agents + usage API", Spec: func(s *stack.Stack) (proc.Spec, error) {
		var err error
		in, usage, err = usageSpec(s, o)
		if err != nil {
			return proc.Spec{}, err
		}
		return usageReplicaSpec(s, usage, o, 0)
	}}}
	for i := 1; i < max(o.UsageReplicas, 1); i++ {
		cs = append(cs, stack.Component{Name: ReplicaName(ServiceName, i, o.UsageReplicas), Spec: func(s *stack.Stack) (proc.Spec, error) {
			return usageReplicaSpec(s, usage, o, i)
		}})
	}
	front := Usage{Port: o.Port}
	if o.Quota.Binary != "" {
		cs = append(cs, quotaComponents(o, &in, front)...)
	}
	if o.Profiles.Binary != "" {
		cs = append(cs, profilesComponents(o, &in)...)
	}
	if o.Culler.Binary != "" {
		cs = append(cs, cullerComponents(o, &in, front)...)
	}
	return cs
}

// ReplicaName is the stack component (and process) name of replica i of n of a service: the service's own name
// alone, <name>-<i> among several. The usage API's process is usage-api.
func ReplicaName(service string, i, n int) string {
	if service == ServiceName {
		service = "usage-api"
	}
	if n <= 1 {
		return service
	}
	return fmt.Sprintf("%s-%d", service, i)
}

// replicaPort is where replica i of n listens: port alone, ports[i] among several.
func replicaPort(service string, port int, ports []int, i, n int) (int, error) {
	if n <= 1 {
		return port, nil
	}
	if len(ports) != n {
		return 0, fmt.Errorf("%d %s replicas need %d replica ports, have %d", n, service, n, len(ports))
	}
	return ports[i], nil
}

// usageReplicaSpec is replica i of the usage API: base on its own port, with its own log and, among several, the
// chart's ledger Lease and a session key every replica shares.
func usageReplicaSpec(s *stack.Stack, base Usage, o Options, i int) (proc.Spec, error) {
	n := max(o.UsageReplicas, 1)
	port, err := replicaPort(ServiceName, o.Port, o.UsageReplicaPorts, i, n)
	if err != nil {
		return proc.Spec{}, err
	}
	u := base
	u.Port = port
	if n > 1 {
		if len(u.LeaseArgs) == 0 {
			return proc.Spec{}, fmt.Errorf("%d usage API replicas: the rendered chart has no ledger Lease (usage.replicas)", n)
		}
		key := filepath.Join(s.Dir, "usage-api", "session-key")
		if _, err := os.Stat(key); err != nil {
			if err := os.WriteFile(key, []byte(NewToken()), 0o600); err != nil {
				return proc.Spec{}, err
			}
		}
		u.SessionKeyFile = key
	} else {
		u.LeaseArgs = nil
	}
	name := ReplicaName(ServiceName, i, n)
	spec := u.Spec()
	spec.Name = name
	spec.LogFile = filepath.Join(s.Dir, "logs", name+".log")
	return spec, nil
}

func profilesComponents(o Options, installed **Installed) []stack.Component {
	n := max(o.Profiles.Replicas, 1)
	cs := make([]stack.Component, 0, n)
	for i := range n {
		name := ReplicaName(ProfilesServiceName, i, n)
		cs = append(cs, stack.Component{Name: name, Spec: func(s *stack.Stack) (proc.Spec, error) {
			in := *installed
			port, err := replicaPort(ProfilesServiceName, o.Profiles.Port, o.Profiles.ReplicaPorts, i, n)
			if err != nil {
				return proc.Spec{}, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			kc := filepath.Join(s.Dir, name, "kubeconfig")
			if err := in.WriteKubeconfig(ctx, s.Client, in.ProfilesServiceAccount, s.ControlPlane.URL, s.ControlPlane.CAData(), kc); err != nil {
				return proc.Spec{}, err
			}
			p := Profiles{
				Binary: o.Profiles.Binary, Port: port, Kubeconfig: kc, Config: o.Profiles.Config,
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
			spec.Name = name
			spec.LogFile = filepath.Join(s.Dir, "logs", name+".log")
			return spec, nil
		}})
	}
	return cs
}

func quotaComponents(o Options, installed **Installed, usage Usage) []stack.Component {
	n := max(o.Quota.Replicas, 1)
	cs := make([]stack.Component, 0, n)
	for i := range n {
		name := ReplicaName(QuotaServiceName, i, n)
		cs = append(cs, stack.Component{Name: name, Spec: func(s *stack.Stack) (proc.Spec, error) {
			in := *installed
			port, err := replicaPort(QuotaServiceName, o.Quota.Port, o.Quota.ReplicaPorts, i, n)
			if err != nil {
				return proc.Spec{}, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			kc := filepath.Join(s.Dir, name, "kubeconfig")
			if err := in.WriteKubeconfig(ctx, s.Client, in.QuotaServiceAccount, s.ControlPlane.URL, s.ControlPlane.CAData(), kc); err != nil {
				return proc.Spec{}, err
			}
			q := Quota{
				Binary: o.Quota.Binary, Port: port, Kubeconfig: kc, Policy: o.Quota.Policy,
				Namespace: s.Opts.Namespace, LeaseNamespace: in.Namespace, LeaseArgs: in.QuotaArgs,
				UsageURL: usage.BaseURL(), HubAPIURL: s.Hub.APIURL(), Token: o.Quota.Token, ProfilesToo: o.Profiles.Binary != "",
				CullerToo: o.Culler.Binary != "", Waitlist: o.Quota.Waitlist, WaitlistHold: o.Quota.WaitlistHold,
			}
			if n > 1 {
				// What the chart's --advertise-url=http://$(POD_IP):PORT gives each pod: its own address.
				q.AdvertiseURL = fmt.Sprintf("http://127.0.0.1:%d", port)
			}
			spec := q.Spec()
			spec.Name = name
			spec.LogFile = filepath.Join(s.Dir, "logs", name+".log")
			return spec, nil
		}})
	}
	return cs
}

// usageSpec installs the chart's agents and RBAC once the stack is up and describes the usage API process
// (ledger and kubeconfig in the stack's state dir).
func usageSpec(s *stack.Stack, o Options) (*Installed, Usage, error) {
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
	ch.UsageReplicas, ch.QuotaReplicas = o.UsageReplicas, o.Quota.Replicas
	ch.ProfilesReplicas, ch.CullerReplicas = o.Profiles.Replicas, o.Culler.Replicas
	if ch.KubeVersion == "" {
		v, err := ServerVersion(s.Client)
		if err != nil {
			return nil, Usage{}, err
		}
		ch.KubeVersion = v
	}
	objs, err := ch.Render(ctx)
	if err != nil {
		return nil, Usage{}, err
	}
	in, err := Install(ctx, s.Client, ch.Namespace, objs)
	if err != nil {
		return nil, Usage{}, err
	}
	if err := in.WaitAgents(ctx, s.Client, 2*time.Minute); err != nil {
		return nil, Usage{}, err
	}
	kc := filepath.Join(s.Dir, "usage-api", "kubeconfig")
	if err := in.WriteUsageKubeconfig(ctx, s.Client, s.ControlPlane.URL, s.ControlPlane.CAData(), kc); err != nil {
		return nil, Usage{}, err
	}
	agentToken := filepath.Join(s.Dir, "usage-api", "agent-token")
	if err := in.WriteAgentToken(ctx, s.Client, agentToken); err != nil {
		return nil, Usage{}, err
	}
	if o.UsageAPI == "" {
		return nil, Usage{}, fmt.Errorf("no usage-api executable given")
	}
	db := o.UsageDatabase
	if db == "" {
		db = filepath.Join(s.Dir, "usage-api", "ledger.db")
	}
	u := Usage{
		Binary: o.UsageAPI, Port: o.Port, Kubeconfig: kc, Database: db,
		Namespace: s.Opts.Namespace, AgentNamespace: ch.Namespace, AgentTokenFile: agentToken, AgentArgs: in.UsageAgentArgs,
		HubAPIURL: s.Hub.APIURL(), Token: o.Token, SessionTTL: o.SessionTTL, LeaseArgs: in.UsageLeaseArgs,
	}
	if o.Quota.Binary != "" {
		u.QuotaURL = Quota{Port: o.Quota.Port}.URL()
	}
	u.Readers, u.AdviceReaders = usageReaders(o)
	if o.Culler.Binary != "" {
		// Any replica answers the admin view's decisions page (the chart's Service picks one too).
		u.CullerURL = Culler{Port: o.Culler.Port}.URL()
		if len(o.Culler.ReplicaPorts) > 0 {
			u.CullerURL = Culler{Port: o.Culler.ReplicaPorts[0]}.URL()
		}
	}
	return in, u, nil
}

// usageReaders are the usage API's --reader-services besides gpu-quota (which Usage.Spec adds with --quota-url),
// in the chart's order (gpuhub.usageReaders): gpu-culler reads every GPU server's telemetry. advice are its
// --advice-readers, as the chart's usage Deployment has them: gpu-profiles reads each user's right-size advice
// (the spawn form's mark) and nothing else of other users.
func usageReaders(o Options) (readers, advice []string) {
	if o.Culler.Binary != "" {
		readers = append(readers, CullerServiceName)
	}
	if o.Profiles.Binary != "" {
		advice = append(advice, ProfilesServiceName)
	}
	return readers, advice
}
