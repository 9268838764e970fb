package replay

import (
	"cmp"
	"maps"
	"math"
	"slices"
)

// bucket is the plot's resolution: idle-but-held GPUs are averaged per hour.
const bucket = 60

// Result is one run's numbers.
type Result struct {
	Mode Mode
	// Label names the setup in the tables (empty: Mode's name).
	Label string
	GPUs  int64
	// Cluster is the capacity and the time-slicing the run had (the same for every setup of a replay).
	Cluster Layout
	// Minutes simulated.
	Minutes int

	heldMin, busyMin, idleMin    float64 // GPU-equivalent-minutes
	waits                        []int
	waitsBySize                  map[int64][]int // by what was asked: whole GPUs, 0 a time-sliced share
	censoredBySize               map[int64]int
	censored                     int
	requests, comebacks          int
	culls, falseCulls            int
	warnings, snoozes, decisions int
	returned                     float64 // GPU-hours
	formViews, admissions        int
	refusals, quotaRefusals      int
	joins, errors                int
	overcommitted                int // node-minutes with more units bound than the node has (never)
	wanted, delivered            map[string]float64
	// The same, counted only in contended minutes (someone waiting for a GPU).
	wantedContended, deliveredContended map[string]float64
	contendedMin                        int
	groupOf                             map[string]string
	idleSeries                          []float64 // idle-but-held GPU-minutes per bucket
	// Right-size advice: verdicts on the servers of users who follow it (until they take it), and sessions that
	// took a share because of it.
	advice     map[string]int
	rightSized int

	// Filled by finish.
	AllocationRate, BusyUtilization float64
	IdleHeldGPUHours, HeldGPUHours  float64
	WaitP50, WaitP99, WaitMean      float64 // minutes (the simulation's step is one minute)
	WaitedShare                     float64 // requests with a time-to-GPU above 0
	// Jain is per group over every minute; JainContended only over the contended minutes (none: empty, and
	// JainContendedMin is NaN).
	Jain, JainContended       map[string]float64
	JainMin, JainContendedMin float64
	ContendedShare            float64 // minutes in which someone waited
	FalseCullRate             float64
}

func newResult(mode Mode, w *Workload, cl Layout) *Result {
	return &Result{Mode: mode, GPUs: cl.GPUs, Cluster: cl, Minutes: w.Minutes, wanted: map[string]float64{}, delivered: map[string]float64{},
		wantedContended: map[string]float64{}, deliveredContended: map[string]float64{},
		waitsBySize: map[int64][]int{}, advice: map[string]int{}, censoredBySize: map[int64]int{}, groupOf: w.GroupOf, idleSeries: make([]float64, (w.Minutes+bucket-1)/bucket)}
}

// waited records one request's time-to-GPU; size is what it asked for (whole GPUs, 0 a share); censored: it was
// never served (its session or the window ended first).
func (m *Result) waited(size int64, minutes int, censored bool) {
	m.waits = append(m.waits, minutes)
	m.waitsBySize[size] = append(m.waitsBySize[size], minutes)
	if censored {
		m.censored++
		m.censoredBySize[size]++
	}
}

// SizeWaits are the requests of one size (whole GPUs; 0 a time-sliced share): how many, how many waited, how
// long those waited on average (minutes), and how many were never served.
type SizeWaits struct {
	Size                       int64
	Requests, Waited, Censored int
	WaitedMean                 float64
}

// WaitsBySize are the requests by what they asked for, smallest first.
func (m *Result) WaitsBySize() []SizeWaits {
	var out []SizeWaits
	for _, size := range slices.Sorted(maps.Keys(m.waitsBySize)) {
		ws := m.waitsBySize[size]
		sw := SizeWaits{Size: size, Requests: len(ws), Censored: m.censoredBySize[size]}
		sum := 0
		for _, w := range ws {
			if w > 0 {
				sw.Waited++
				sum += w
			}
		}
		if sw.Waited > 0 {
			sw.WaitedMean = float64(sum) / float64(sw.Waited)
		}
		out = append(out, sw)
	}
	return out
}

func (m *Result) addIdle(t int, idle float64) { m.idleSeries[t/bucket] += idle }

func (m *Result) finish(r *run) {
	// Servers still up or waiting at the end: the window closes on them (counted as they stand).
	for _, sv := range r.waiting {
		m.waited(r.size(sv), m.Minutes-sv.askedAt, true)
	}
	for _, sv := range r.bound {
		m.waited(r.size(sv), m.Minutes-sv.askedAt, true)
	}
	for _, sv := range r.culled {
		m.returned += sv.share * float64(m.Minutes-sv.culledAt) / 60
	}
	capMin := float64(m.GPUs) * float64(m.Minutes)
	m.AllocationRate, m.BusyUtilization = m.heldMin/capMin, m.busyMin/capMin
	m.IdleHeldGPUHours, m.HeldGPUHours = m.idleMin/60, m.heldMin/60
	m.WaitP50, m.WaitP99 = percentile(m.waits, 0.50), percentile(m.waits, 0.99)
	m.WaitMean, m.WaitedShare = mean(m.waits), waitedShare(m.waits)
	m.Jain, m.JainMin = jainByGroup(m.wanted, m.delivered, m.groupOf)
	m.JainContended, m.JainContendedMin = jainByGroup(m.wantedContended, m.deliveredContended, m.groupOf)
	m.ContendedShare = float64(m.contendedMin) / float64(m.Minutes)
	if m.culls > 0 {
		m.FalseCullRate = float64(m.falseCulls) / float64(m.culls)
	}
	for i := range m.idleSeries {
		m.idleSeries[i] /= bucket
	}
}

// jainByGroup is Jain's index per group over x = delivered/wanted of each user who wanted something, and the
// lowest (NaN when no user wanted anything).
func jainByGroup(wanted, delivered map[string]float64, groupOf map[string]string) (map[string]float64, float64) {
	xs := map[string][]float64{}
	for _, u := range slices.Sorted(maps.Keys(wanted)) {
		if w := wanted[u]; w > 0 {
			xs[groupOf[u]] = append(xs[groupOf[u]], delivered[u]/w)
		}
	}
	out, lowest := map[string]float64{}, math.NaN()
	for g, x := range xs {
		out[g] = jain(x)
		if math.IsNaN(lowest) || out[g] < lowest {
			lowest = out[g]
		}
	}
	return out, lowest
}

func mean(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0
	for _, x := range xs {
		sum += x
	}
	return float64(sum) / float64(len(xs))
}

func waitedShare(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	n := 0
	for _, x := range xs {
		if x > 0 {
			n++
		}
	}
	return float64(n) / float64(len(xs))
}

// percentile is the nearest-rank percentile of xs (0 when empty).
func percentile(xs []int, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.SortFunc(s, cmp.Compare[int])
	i := max(int(math.Ceil(p*float64(len(s))))-1, 0)
	return float64(s[i])
}

// jain is Jain's fairness index (sum x)^2 / (n sum x^2): 1 when everyone gets the same share of what they asked.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// Counts are a run's event counts, for the report and the invariants.
type Counts struct {
	Requests, Comebacks, Waits, Censored  int
	Culls, FalseCulls, Warnings, Snoozes  int
	Decisions, FormViews, Admissions      int
	Refusals, QuotaRefusals, Joins, Error int
	Overcommitted                         int
	ReturnedGPUHours                      float64
}

// Counts are the run's counts.
func (m *Result) Counts() Counts {
	return Counts{Requests: m.requests, Comebacks: m.comebacks, Waits: len(m.waits), Censored: m.censored,
		Culls: m.culls, FalseCulls: m.falseCulls, Warnings: m.warnings, Snoozes: m.snoozes, Decisions: m.decisions,
		FormViews: m.formViews, Admissions: m.admissions, Refusals: m.refusals, QuotaRefusals: m.quotaRefusals,
		Joins: m.joins, Error: m.errors, Overcommitted: m.overcommitted, ReturnedGPUHours: m.returned}
}

// IdleSeries is the mean idle-but-held GPUs per hour.
func (m *Result) IdleSeries() []float64 { return m.idleSeries }

// Name is the setup's name in the tables.
func (m *Result) Name() string {
	if m.Label != "" {
		return m.Label
	}
	return m.Mode.String()
}

// Advice is the right-size advice given in the run (by verdict, to users who follow it, until they take it)
// and the sessions that took a share because of it.
func (m *Result) Advice() (byVerdict map[string]int, rightSized int) { return m.advice, m.rightSized }
