package contract

import (
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// Right-size verdicts (RightSize.Verdict).
const (
	// VerdictKeep: what the server held is the smallest offered kind that fits its measured use.
	VerdictKeep = "keep"
	// VerdictSmaller: at least one offered kind is smaller (costs less) and fits; Candidates lists them.
	VerdictSmaller = "smaller"
	// VerdictNotEnoughData: too little busy time (or too few samples) was measured to advise anything.
	VerdictNotEnoughData = "not-enough-data"
)

// RightSize is the right-size advice for one server (issue 38), from its measured GPU use against the kinds
// the cluster offers (services/internal/rightsize). The usage API serves it in GET me/right-size and
// users/{name}/right-size; gpu-profiles and the panel read it.
type RightSize struct {
	User   string `json:"user"`
	Server string `json:"server"`
	// Verdict is keep, smaller or not-enough-data.
	Verdict string `json:"verdict"`
	// Reason says the verdict in one sentence with its numbers.
	Reason string `json:"reason"`
	// Caveats say what weakens the evidence (simulated samples, a profile not updated for a long time); the
	// advice stands but must be shown with them.
	Caveats   []string `json:"caveats"`
	Simulated bool     `json:"simulated"`
	Stale     bool     `json:"stale"`
	// Held is the kind the server held while it was measured.
	Held RightSizeKind `json:"held"`
	// Candidates are the offered kinds smaller than Held that fit the evidence, smallest (cheapest) first: a
	// consumer takes the first one the user may take. Empty unless Verdict is smaller.
	Candidates []RightSizeCandidate `json:"candidates"`
	Evidence   RightSizeEvidence    `json:"evidence"`
}

// RightSizeKind is one kind of GPU unit a server can hold, as the advice compares them.
type RightSizeKind struct {
	Kind        gpu.Kind `json:"kind"`
	Class       string   `json:"class"`
	Description string   `json:"description"`
	// MemoryBytes is the GPU memory one unit can count on (a time-sliced replica: its fair part, memory /
	// replicas).
	MemoryBytes uint64 `json:"memoryBytes"`
	// ComputeGPUs is the GPU time one unit is guaranteed, in GPU-equivalents of its model (whole 1, MIG g/slices,
	// time-sliced 1/replicas).
	ComputeGPUs float64 `json:"computeGPUs"`
	// CostPerHour is what one hour of the unit costs against a budget, in GPU-hours (its weight where the
	// project sets one, else ComputeGPUs).
	CostPerHour float64 `json:"costPerHour"`
}

// RightSizeCandidate is one smaller kind that fits, with what it would save.
type RightSizeCandidate struct {
	RightSizeKind
	// SavedPerHour is Held's CostPerHour minus this kind's: budget GPU-hours saved per hour held.
	SavedPerHour float64 `json:"savedPerHour"`
	// FreeNow is how many units of this kind a new server could be given now (free on nodes it can land on);
	// absent when the usage API has no view of the cluster yet.
	FreeNow *int64 `json:"freeNow,omitempty"`
}

// RightSizeEvidence is the measured use the advice stands on, and the thresholds it was judged by.
type RightSizeEvidence struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// BusySeconds is the time the server's GPU was busy (utilization at or above the usage API's idle line);
	// only busy time counts towards the percentiles of SM utilization.
	BusySeconds float64 `json:"busySeconds"`
	// HeldSeconds is the time the server held its GPU over the period, busy or not.
	HeldSeconds float64 `json:"heldSeconds"`
	// UnknownSeconds is held time whose utilization was unknown (stale telemetry, MIG without DCGM): left out.
	UnknownSeconds float64 `json:"unknownSeconds"`
	// ContendedSeconds is the busy time during which another server on the same physical GPU was busy too:
	// time-sliced and MPS replicas, which the agent measures per pod; 0 for other kinds (not known).
	ContendedSeconds float64 `json:"contendedSeconds"`
	Samples          int64   `json:"samples"`
	PeakMemoryBytes  uint64  `json:"peakMemoryBytes"`
	P95MemoryBytes   uint64  `json:"p95MemoryBytes"`
	P95SMUtilPercent float64 `json:"p95SMUtilPercent"`
	// P95UsedGPUs is P95SMUtilPercent as GPU time of the model (times the held unit's utilization scale): the
	// compute a candidate must guarantee.
	P95UsedGPUs float64 `json:"p95UsedGPUs"`
	// NeedMemoryBytes is the peak with the margin: the memory a candidate must hold.
	NeedMemoryBytes   uint64  `json:"needMemoryBytes"`
	MemoryMarginRatio float64 `json:"memoryMarginRatio"`
	MinBusySeconds    float64 `json:"minBusySeconds"`
	MinSamples        int64   `json:"minSamples"`
}

// RightSizeResponse is the body of GET me/right-size and users/{name}/right-size: the advice for each of the
// user's servers (and GPU class it ran on) measured over the period.
type RightSizeResponse struct {
	User string `json:"user"`
	// Period is 24h, 7d or 30d; From is the start of the first UTC day counted (profiles are kept by UTC day, so
	// 24h counts yesterday and today).
	Period  string      `json:"period"`
	From    time.Time   `json:"from"`
	AsOf    time.Time   `json:"asOf"`
	Servers []RightSize `json:"servers"`
}

// RightSizeSavings is the body of GET right-size (admins and reader services): the GPU-hours that taking every
// server's advice (its first candidate) would have saved over the period, by user, Hub group or GPU kind.
type RightSizeSavings struct {
	Period string    `json:"period"`
	From   time.Time `json:"from"`
	AsOf   time.Time `json:"asOf"`
	// By is user, group or kind; a user in several groups counts in each, one in none under "(no group)".
	By   string                `json:"by"`
	Rows []RightSizeSavingsRow `json:"rows"`
	// SaveableGPUHours and HeldGPUHours are the totals over all servers (not the sum of group rows).
	SaveableGPUHours float64 `json:"saveableGPUHours"`
	HeldGPUHours     float64 `json:"heldGPUHours"`
}

// RightSizeSavingsRow is one user, group or kind.
type RightSizeSavingsRow struct {
	Key string `json:"key"`
	// SaveableGPUHours is what the advice would have saved; HeldGPUHours what the servers held, in GPU-hours.
	SaveableGPUHours float64 `json:"saveableGPUHours"`
	HeldGPUHours     float64 `json:"heldGPUHours"`
	// Servers is how many servers (and classes) were measured; Smaller how many of them were advised smaller.
	Servers int `json:"servers"`
	Smaller int `json:"smaller"`
	// Simulated and Stale count the servers whose advice is from simulated GPUs, or whose newest sample is older
	// than rightsize.StaleAfter: they are in the totals, and these say how much of them they are.
	Simulated int `json:"simulated"`
	Stale     int `json:"stale"`
}
