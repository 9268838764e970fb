// Package rightsize decides whether a server held more GPU than its measured use needs (issue 38): from a
// server's usage profile (busy time, peak and p95 memory, p95 SM utilization over busy time) and the kinds the
// cluster offers, it answers keep, a ranked list of smaller kinds that fit, or not enough data, with the
// numbers. It is pure (no I/O, no clock of its own) so that the usage API, gpu-profiles and the gpuhub CLI
// share one rule and the acceptance cases are table tests.
//
// Whether the user may take a candidate (quota, profiles the user is allowed) is not decided here: the
// candidates are every offered kind that fits, smallest first, and the consumer takes the first the user may
// take.
package rightsize

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// Thresholds. Each is stated in the advice's evidence so a reader sees what the numbers were judged by.
const (
	// MemoryMargin is the headroom over the measured peak that a smaller kind's memory must hold: 20 % covers a
	// larger batch or a second notebook kernel without an out-of-memory error on the first bigger input, and
	// running out of GPU memory kills the work, whereas a short compute shortfall only slows it.
	MemoryMargin = 0.20
	// MinBusy is the least busy GPU time advice is given from: under an hour, the percentiles describe a
	// warm-up or one cell rather than how the server is used.
	MinBusy = time.Hour
	// MinSamples is the least number of busy samples: with fewer than 100, the p95 would leave out fewer than
	// five samples and be the maximum under another name.
	MinSamples = 100
	// StaleAfter is how old the newest sample may be before the advice says so: after a week the user may well
	// be doing other work on the server.
	StaleAfter = 7 * 24 * time.Hour
	// UnknownCaveat is the share of the held time without a known utilization (stale telemetry, MIG without
	// DCGM) from which the advice says so: a few stale ticks while an agent restarts say nothing, a tenth of the
	// time means the advice stands on part of the use only.
	UnknownCaveat = 0.10
	// ContentionCaveat is the share of the busy time shared with a busy neighbour on a time-sliced or MPS GPU
	// from which the advice says so: the p95 leaves out the top 5 % of busy samples, so once more of them than
	// that were held down by a neighbour, the p95 may be lower than the server's use alone.
	ContentionCaveat = 0.05
	// slack absorbs floating-point rounding when a p95 or a cost equals a share exactly (3/7 against 3/7).
	slack = 1e-9
)

// Offer is one kind of unit the cluster offers (or one a server held), as the advice compares them.
type Offer struct {
	Kind        gpu.Kind
	Class       string
	Product     string // short model name (gpu.ShortProduct), e.g. "H100-80GB-HBM3"; compute compares only within it
	Description string
	// MemoryBytes is what one unit can count on: the whole GPU's or MIG instance's memory, divided by the
	// replicas for a time-sliced or MPS replica (time-slicing does not partition memory, so a replica's fair
	// part is all it can count on when the others use theirs). 0 when unknown: never a candidate.
	MemoryBytes uint64
	// ComputeGPUs is the GPU time one unit is guaranteed in GPU-equivalents of its model: 1, g/slices, or
	// 1/replicas for a replica (what it gets when every replica is busy).
	ComputeGPUs float64
	// Cost is one hour's cost against a budget in GPU-hours where the project weighs kinds; 0: ComputeGPUs.
	Cost float64
}

// OfferOf describes one unit of an allocation (gpu.Allocations of a node's resources) with an optional cost
// weight (0: its GPU-equivalents).
func OfferOf(a gpu.Allocation, cost float64) Offer {
	mem := a.MemoryTotalBytes
	if a.Kind.Replicated() && a.Replicas > 1 {
		mem /= uint64(a.Replicas)
	}
	return Offer{Kind: a.Kind, Class: a.Class(), Product: gpu.ShortProduct(a.Product), Description: a.Description(),
		MemoryBytes: mem, ComputeGPUs: a.UnitShare(), Cost: cost}
}

// OffersOf lists each class among units once (the first unit of it), with the project's cost weights by class
// (nil or a missing class: the unit's GPU-equivalents). Pass every node's units (inventory.Node.Units).
func OffersOf(units []gpu.Allocation, cost map[string]float64) []Offer {
	seen := map[string]bool{}
	var out []Offer
	for _, a := range units {
		if seen[a.Class()] || a.Denominator == 0 {
			continue
		}
		seen[a.Class()] = true
		out = append(out, OfferOf(a, cost[a.Class()]))
	}
	return out
}

func (o Offer) cost() float64 {
	if o.Cost > 0 {
		return o.Cost
	}
	return o.ComputeGPUs
}

func (o Offer) wire() contract.RightSizeKind {
	return contract.RightSizeKind{Kind: o.Kind, Class: o.Class, Description: o.Description, MemoryBytes: o.MemoryBytes,
		ComputeGPUs: o.ComputeGPUs, CostPerHour: o.cost()}
}

// Profile is one server's measured use over a period.
type Profile struct {
	User, Server string
	// Held is what the server held while measured (all its units together).
	Held     Offer
	From, To time.Time // first and newest sample
	// HeldSeconds is the time held; BusySeconds the part with the GPU busy; UnknownSeconds the part whose
	// utilization was unknown (left out of every number).
	HeldSeconds, BusySeconds, UnknownSeconds float64
	// ContendedSeconds is the busy time during which another server on the same physical GPU was busy too
	// (time-sliced and MPS replicas, where the agent measures each pod; 0 where that cannot be known).
	ContendedSeconds float64
	// Samples is the number of busy samples the percentiles are over.
	Samples         int64
	PeakMemoryBytes uint64
	P95MemoryBytes  uint64
	// P95SMUtilPercent is the p95 of SM utilization over busy samples, as the agent measures it for the held
	// unit (of the whole GPU for whole and time-sliced units, of the instance for MIG).
	P95SMUtilPercent float64
	// Scale turns it into GPU time of the model (gpu.Allocation.UtilizationScale: 1, or g/slices for MIG).
	Scale float64
	// Simulated is set when any sample came from the agent's simulated backend.
	Simulated bool
}

// Decide gives the advice for one profile against the offered kinds, as of now.
func Decide(p Profile, offers []Offer, now time.Time) contract.RightSize {
	held := p.Held
	for _, o := range offers {
		if held.Description == "" && o.Class == held.Class {
			held.Description = o.Description
		}
	}
	if held.Description == "" {
		held.Description = held.Class
	}
	if held.Cost == 0 {
		// What was held costs what its class is offered at, per unit held, where the project weighs it.
		for _, o := range offers {
			if o.Class == held.Class && o.Cost > 0 && o.ComputeGPUs > 0 {
				held.Cost = o.Cost * held.ComputeGPUs / o.ComputeGPUs
				break
			}
		}
	}
	ev := contract.RightSizeEvidence{
		From: p.From, To: p.To, HeldSeconds: p.HeldSeconds, BusySeconds: p.BusySeconds, UnknownSeconds: p.UnknownSeconds,
		ContendedSeconds: p.ContendedSeconds,
		Samples:          p.Samples, PeakMemoryBytes: p.PeakMemoryBytes, P95MemoryBytes: p.P95MemoryBytes,
		P95SMUtilPercent: p.P95SMUtilPercent, P95UsedGPUs: p.P95SMUtilPercent / 100 * p.Scale,
		NeedMemoryBytes:   uint64(math.Ceil(float64(p.PeakMemoryBytes) * (1 + MemoryMargin))),
		MemoryMarginRatio: MemoryMargin, MinBusySeconds: MinBusy.Seconds(), MinSamples: MinSamples,
	}
	a := contract.RightSize{User: p.User, Server: p.Server, Held: held.wire(), Evidence: ev,
		Caveats: []string{}, Candidates: []contract.RightSizeCandidate{}, Simulated: p.Simulated}
	if p.Simulated {
		a.Caveats = append(a.Caveats, "measured on simulated GPUs: the numbers are not a real workload's")
	}
	if age := now.Sub(p.To); !p.To.IsZero() && age > StaleAfter {
		a.Stale = true
		a.Caveats = append(a.Caveats, fmt.Sprintf("the newest sample is %s old: the use may have changed since", days(age)))
	}
	if p.HeldSeconds > 0 && p.UnknownSeconds >= UnknownCaveat*p.HeldSeconds {
		a.Caveats = append(a.Caveats, fmt.Sprintf("for %s of the %s held the utilization was unknown (stale telemetry, or MIG without DCGM): that time is left out",
			hours(p.UnknownSeconds), hours(p.HeldSeconds)))
	}
	if p.BusySeconds > 0 && p.ContendedSeconds > ContentionCaveat*p.BusySeconds {
		a.Caveats = append(a.Caveats, fmt.Sprintf("for %s of the %s busy another server was busy on the same GPU: its p95 may be lower than its use alone",
			hours(p.ContendedSeconds), hours(p.BusySeconds)))
	}
	// The agent reports memory it cannot read as 0: with busy samples and a zero peak the memory is unknown, not
	// nothing, and every kind would seem to hold it.
	noMemory := p.Samples > 0 && p.PeakMemoryBytes == 0
	if noMemory {
		a.Caveats = append(a.Caveats, "GPU memory was not measured (the agent reported none): the memory a smaller kind needs is unknown")
	}
	switch {
	case p.BusySeconds < MinBusy.Seconds():
		a.Verdict = contract.VerdictNotEnoughData
		a.Reason = fmt.Sprintf("The GPU was busy for %s of the %s it was held; advice needs at least %s busy.",
			hours(p.BusySeconds), hours(p.HeldSeconds), hours(MinBusy.Seconds()))
		return a
	case p.Samples < MinSamples:
		a.Verdict = contract.VerdictNotEnoughData
		a.Reason = fmt.Sprintf("Only %d busy samples were taken; advice needs at least %d.", p.Samples, MinSamples)
		return a
	case noMemory:
		a.Verdict = contract.VerdictNotEnoughData
		a.Reason = "The GPU memory was not measured; advice needs the peak memory to know what fits."
		return a
	}
	heldCost := held.cost()
	// An unknown model ("") is no model: two unknowns need not be the same GPU.
	sameModel := func(o Offer) bool { return held.Product != "" && o.Product == held.Product }
	if !slices.ContainsFunc(offers, sameModel) {
		// With no kind of the model to compare with, keep says nothing about the use: say so.
		a.Caveats = append(a.Caveats, fmt.Sprintf("no node offers a kind of %s now (or its nodes were not read yet): nothing was compared",
			cmp.Or(held.Product, "this GPU model")))
	}
	for _, o := range offers {
		if !sameModel(o) || o.MemoryBytes == 0 || o.cost() >= heldCost-slack {
			continue
		}
		if o.MemoryBytes < ev.NeedMemoryBytes || o.ComputeGPUs+slack < ev.P95UsedGPUs {
			continue
		}
		a.Candidates = append(a.Candidates, contract.RightSizeCandidate{RightSizeKind: o.wire(), SavedPerHour: heldCost - o.cost()})
	}
	slices.SortFunc(a.Candidates, func(x, y contract.RightSizeCandidate) int {
		return cmp.Or(cmp.Compare(x.CostPerHour, y.CostPerHour), cmp.Compare(x.MemoryBytes, y.MemoryBytes), cmp.Compare(x.Class, y.Class))
	})
	a.Candidates = slices.CompactFunc(a.Candidates, func(x, y contract.RightSizeCandidate) bool { return x.Class == y.Class })
	use := fmt.Sprintf("peak memory %s (%s with the %d %% margin), p95 SM utilization %s %% (%s GPU) over %s busy",
		inGiB(p.PeakMemoryBytes), inGiB(ev.NeedMemoryBytes), int(MemoryMargin*100), num(p.P95SMUtilPercent),
		num(ev.P95UsedGPUs), hours(p.BusySeconds))
	if len(a.Candidates) == 0 {
		a.Verdict = contract.VerdictKeep
		a.Reason = fmt.Sprintf("No smaller kind offered holds %s: keep %s.", use, held.Description)
		return a
	}
	first := a.Candidates[0]
	a.Verdict = contract.VerdictSmaller
	a.Reason = fmt.Sprintf("%s would do (%s): it saves %s GPU-hours per hour held.", first.Description, use, num(first.SavedPerHour))
	return a
}

// First is the first candidate the user may take (may says which kinds that is: quota, the profiles the user
// is allowed); ok is false when there is none, and the advice is then, for this user, keep.
func First(a contract.RightSize, may func(contract.RightSizeKind) bool) (c contract.RightSizeCandidate, ok bool) {
	for _, c := range a.Candidates {
		if may(c.RightSizeKind) {
			return c, true
		}
	}
	return c, false
}

// SaveableGPUHours is what taking the advice's first candidate would have saved over the time the server held
// its GPU (0 unless the verdict is smaller): the admin totals add these up.
func SaveableGPUHours(a contract.RightSize) float64 {
	if a.Verdict != contract.VerdictSmaller || len(a.Candidates) == 0 {
		return 0
	}
	return a.Candidates[0].SavedPerHour * a.Evidence.HeldSeconds / 3600
}

func num(x float64) string { return fmt.Sprintf("%.3g", x) }

func inGiB(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func hours(s float64) string {
	if s < 3600 {
		return fmt.Sprintf("%.0f min", s/60)
	}
	return fmt.Sprintf("%.1f h", s/3600)
}

func days(d time.Duration) string { return fmt.Sprintf("%.0f days", d.Hours()/24) }
