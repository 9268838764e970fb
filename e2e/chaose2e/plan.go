// Package chaose2e runs a seeded workload on the local GPU cluster while faults are injected at seeded points, and
// checks afterwards that gpuhub lost nothing and never acted wrongly (issue 15, "Chaos on the local cluster"). The
// cluster and the run are in the e2e-tagged test files; the schedule and the invariants are plain functions here, so
// that they are unit-tested without a cluster.
package chaose2e

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Fault is a kind of fault the run injects.
type Fault string

// The faults. Each is undone the way its supervisor would undo it (README: "Chaos suite").
const (
	FaultAgent        Fault = "kill -9 gpu-agent"      // the emulated kubelet restarts it after its back-off
	FaultUsageAPI     Fault = "kill -9 usage-api"      // a seeded replica; restarted at once, as a Deployment's pod would be
	FaultQuota        Fault = "kill -9 gpu-quota"      // idem
	FaultCuller       Fault = "kill -9 gpu-culler"     // idem
	FaultProfiles     Fault = "kill -9 gpu-profiles"   // idem
	FaultHub          Fault = "kill -9 jupyterhub"     // idem; the proxy and the users' servers run on
	FaultAPIServer    Fault = "kill -9 kube-apiserver" // restarted by the harness, as a static pod by the kubelet
	FaultPostgres     Fault = "restart postgresql"     // pg_ctl restart -m fast under the usage API's writes
	FaultNodeNotReady Fault = "node NotReady"          // Ready=False on a GPU node; the emulator's heartbeat heals it
	// The active replica of each service, found from its Lease, killed during a burst of spawns (gpu-culler's
	// as a pass starts); the other replica takes over, and the harness restarts the killed one.
	FaultUsageWriter    Fault = "kill -9 usage-api ledger writer" // the Lease holder: it alone writes the ledger
	FaultQuotaDecider   Fault = "kill -9 gpu-quota decider"       // the Lease holder: it alone decides admissions
	FaultCullerLeader   Fault = "kill -9 gpu-culler leader"       // the Lease holder: it alone stops servers
	FaultProfilesLeader Fault = "kill -9 gpu-profiles leader"     // the Lease holder: it alone explains pending spawns
)

// BoundedFaults are the kinds of the bounded run (make test): each service's active replica rather than a seeded
// one, with every other kind, so that 9 faults fit 200 s.
var BoundedFaults = []Fault{FaultAgent, FaultUsageWriter, FaultQuotaDecider, FaultCullerLeader, FaultProfilesLeader,
	FaultHub, FaultAPIServer, FaultPostgres, FaultNodeNotReady}

// ActiveReplicaFaults kill a service's Lease holder: each is followed by a burst of spawns and a form check.
var ActiveReplicaFaults = []Fault{FaultUsageWriter, FaultQuotaDecider, FaultCullerLeader, FaultProfilesLeader}

// AllFaults lists every fault in a fixed order (the seed permutes it): the service kills of a seeded replica
// (active or standby) as well as of the active one.
var AllFaults = []Fault{FaultAgent, FaultUsageAPI, FaultQuota, FaultCuller, FaultProfiles, FaultHub, FaultAPIServer,
	FaultPostgres, FaultNodeNotReady, FaultUsageWriter, FaultQuotaDecider, FaultCullerLeader, FaultProfilesLeader}

// Planned is one fault of the schedule: what, when (from the start of the workload) and a seeded choice of target
// (which GPU node, for the agent and NotReady faults).
type Planned struct {
	At     time.Duration
	Fault  Fault
	Target int
}

func (p Planned) String() string {
	return fmt.Sprintf("%5.0fs %s (target %d)", p.At.Seconds(), p.Fault, p.Target)
}

// Plan draws n faults from kinds for a run of the given duration: every kind once before any repeats (in an order
// drawn from the seed), at seeded times at least minGap apart, the first after lead and the last at least tail
// before the end, so that every fault's recovery is seen by the workload. The same seed gives the same plan.
func Plan(seed uint64, duration time.Duration, n int, kinds []Fault) ([]Planned, error) {
	const (
		lead   = 15 * time.Second
		tail   = 20 * time.Second
		minGap = 20 * time.Second
	)
	if n <= 0 || len(kinds) == 0 {
		return nil, nil
	}
	window := duration - lead - tail
	if slack := window - time.Duration(n-1)*minGap; slack < 0 {
		return nil, fmt.Errorf("%d faults at least %s apart do not fit a %s run (first after %s, last %s before the end): lengthen the run or lower the count",
			n, minGap, duration, lead, tail)
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	// Times: n sorted draws from the slack, each spread by minGap (a uniform placement with the gaps kept).
	slack := window - time.Duration(n-1)*minGap
	offsets := make([]time.Duration, n)
	for i := range offsets {
		offsets[i] = time.Duration(r.Int64N(int64(slack) + 1))
	}
	slices.Sort(offsets)
	out := make([]Planned, 0, n)
	var order []Fault
	for i := range n {
		if len(order) == 0 {
			order = slices.Clone(kinds)
			r.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		}
		out = append(out, Planned{
			At:     (lead + offsets[i] + time.Duration(i)*minGap).Truncate(time.Second),
			Fault:  order[0],
			Target: r.IntN(1 << 16),
		})
		order = order[1:]
	}
	return out, nil
}
