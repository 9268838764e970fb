package replay

import (
	"maps"
	"strconv"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
)

// Right-size advice (issue 38) in the replay: the trace has no GPU utilization or memory per pod, so each
// user's work gets a stated intensity (config/replay.yaml, rightSize), drawn by seed: with probability
// rightSize.fit it fits a 1/replicas time-sliced share (its peak memory with the advice's 20 % margin in the
// share's part of the memory, its p95 SM utilization over busy time within the share's guaranteed compute),
// else it does not (one of the two is over). A user's work keeps its intensity over the window (assumption:
// the same kind of work from one session to the next). A user follows the advice with probability
// rightSize.follow: after a whole-GPU server of theirs stops (its session ended or it was culled), gpuhub's
// real advice (services/internal/rightsize.Decide) is computed on the server's simulated profile (held and busy
// time, one sample a minute as the usage API takes them, the intensity's memory and p95) against the kinds the
// cluster offers; when it names a time-sliced share, the user's next one-GPU sessions ask for a share (a whole
// GPU when none is free, as small requests do).

// memoryMiB is the memory of one GPU of the trace's models, from NVIDIA's datasheets (Tesla P100 PCIe 16 GB,
// Tesla T4 16 GB GDDR6, Tesla V100 SXM2 16 and 32 GB, A10 24 GB GDDR6). G2 and G3 are undisclosed in the trace:
// no memory, so the advice is never given on them (rightsize: an offer with no memory is never a candidate).
var memoryMiB = map[string]uint64{
	"Tesla-P100-PCIE-16GB": 16 << 10, "Tesla-T4": 16 << 10, "Tesla-V100-SXM2-16GB": 16 << 10,
	"Tesla-V100-SXM2-32GB": 32 << 10, "NVIDIA-A10": 24 << 10,
}

// Intensity is one user's measured use while busy, as fractions: peak memory of the GPU's memory, and the
// p95 of SM utilization over busy time in percent of the whole GPU.
type Intensity struct {
	Fits          bool
	PeakMemory    float64 // share of the GPU's memory
	P95SMUtil     float64 // percent
	ReplicasShare float64 // 1/replicas: what the draw was made against
}

// intensityOf draws a user's intensity (seeded by the seed and the user's name, mixed so that names differing
// in one digit are unrelated). It fits a share of 1/replicas with probability fit: peak memory uniform in
// [0.1, 1) of what fits with the margin, p95 uniform in [0.2, 1) of the share's compute; else either the memory
// (half of the users) or the compute (the other half) is over: uniform between 1.1x what fits and the whole GPU.
// These distributions are assumptions (no published per-notebook GPU memory and utilization was found); only
// whether the use fits changes what the advice says, and that share is the parameter.
func intensityOf(seed, user string, fit float64, replicas int64) Intensity {
	u := func(what string) float64 { return float64(mixed(seed, "rightsize", what, user)>>11) / (1 << 53) }
	share := 1 / float64(replicas)
	memFits := share / (1 + rightsize.MemoryMargin) // the most peak memory a share holds with the margin
	it := Intensity{Fits: u("fit") < fit, ReplicasShare: share,
		PeakMemory: memFits * (0.1 + 0.9*u("memory")), P95SMUtil: 100 * share * (0.2 + 0.8*u("compute"))}
	if it.Fits {
		// Keep the draws strictly inside: the advice compares with a margin of rounding only.
		it.PeakMemory, it.P95SMUtil = min(it.PeakMemory, 0.99*memFits), min(it.P95SMUtil, 99*share)
		return it
	}
	over := func(limit float64) float64 { return 1.1*limit + (1-1.1*limit)*u("over") }
	if u("which") < 0.5 {
		it.PeakMemory = over(memFits)
	} else {
		it.P95SMUtil = 100 * over(share)
	}
	return it
}

// Measured is what the usage API would have of one server: the minutes it held its GPU and the busy ones
// among them (one sample a minute), from and to (simulated minutes).
type Measured struct {
	HeldMin, BusyMin int
	From, To         int
}

// profileOf is the server's right-size profile as the usage API would build it from its samples.
func profileOf(user, server string, held rightsize.Offer, it Intensity, m Measured) rightsize.Profile {
	return rightsize.Profile{User: user, Server: server, Held: held, From: clock(m.From), To: clock(m.To),
		HeldSeconds: float64(m.HeldMin) * 60, BusySeconds: float64(m.BusyMin) * 60, Samples: int64(m.BusyMin),
		PeakMemoryBytes:  uint64(it.PeakMemory * float64(held.MemoryBytes)),
		P95MemoryBytes:   uint64(0.9 * it.PeakMemory * float64(held.MemoryBytes)),
		P95SMUtilPercent: it.P95SMUtil, Scale: 1}
}

// followAdvice is the advice on the server's profile and whether a following user takes it: the first
// candidate they may take is a time-sliced share (the only smaller kind the replay's cluster offers).
func followAdvice(p rightsize.Profile, offers []rightsize.Offer, now time.Time) (contract.RightSize, bool) {
	a := rightsize.Decide(p, offers, now)
	if a.Verdict != contract.VerdictSmaller {
		return a, false
	}
	_, ok := rightsize.First(a, func(k contract.RightSizeKind) bool { return k.Kind == gpu.KindShared })
	return a, ok
}

// offerLabels are a node's labels with its GPU memory (memoryMiB), for the advice's offers only: the rest of
// the simulation reads the nodes as they were.
func offerLabels(labels map[string]string) map[string]string {
	out := maps.Clone(labels)
	if mib, ok := memoryMiB[labels[gpu.LabelProduct]]; ok {
		out[gpu.LabelMemoryMiB] = strconv.FormatUint(mib, 10)
	}
	return out
}

// offersOf are the kinds the cluster offers, as the advice compares them.
func offersOf(c *cluster) []rightsize.Offer {
	var units []gpu.Allocation
	for _, n := range c.nodes {
		units = append(units, gpu.Allocations(map[string]int64{n.resource: 1}, gpu.Node{Labels: offerLabels(n.labels)})...)
	}
	return rightsize.OffersOf(units, nil)
}

// heldOffer is what a server holding res on n held, as the advice describes it.
func heldOffer(res map[string]int64, n *simNode) rightsize.Offer {
	as := gpu.Allocations(res, gpu.Node{Labels: offerLabels(n.labels)})
	if len(as) == 0 {
		return rightsize.Offer{}
	}
	return rightsize.OfferOf(as[0], 0)
}
