package quota

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// Usage is what a user holds and has used when a decision is made; the service reads it from memory
// (informers, reservations, the cached ledger).
type Usage struct {
	// Held are the GPU allocations of the user's GPU servers: running, starting, and admitted but not yet
	// created (reservations).
	Held []gpu.Allocation
	// Servers is the number of those servers.
	Servers int
	// GPUHours is, per budget window, the GPU-hours allocated to the user within it, by class and unweighted
	// (the weights are the user's own, so Decide applies them). A window that is missing means its usage
	// cannot be read right now: the policy's onUnavailable decides. Effective.Windows lists the windows needed.
	GPUHours map[time.Duration]map[string]float64
}

// Request is the new server's GPU request.
type Request struct {
	// Allocations are what the server will hold (kind, class, GPU-equivalents); none for a CPU-only server.
	Allocations []gpu.Allocation
}

// Reason says why a decision went the way it did; the values are stable (metrics labels, the API, logs).
type Reason string

// Reasons to admit.
const (
	ReasonOK     Reason = "ok"     // within every limit
	ReasonExempt Reason = "exempt" // the user is exempt
	ReasonNoGPU  Reason = "no_gpu" // a CPU-only server: no GPU quota applies
	// ReasonUsageUnavailable: GPU-hours could not be read; admitted under onUnavailable: open, refused
	// under closed.
	ReasonUsageUnavailable Reason = "usage_unavailable"
)

// Reasons to refuse, in the order Decide reports them.
const (
	ReasonKindNotAllowed  Reason = "kind_not_allowed"
	ReasonBudgetExhausted Reason = "budget_exhausted"
	ReasonMaxGPUs         Reason = "max_gpus"
	ReasonMaxGPUsPerKind  Reason = "max_gpus_per_kind"
	ReasonMaxServers      Reason = "max_servers"
)

// Check is one limit a decision looked at, with its numbers.
type Check struct {
	Reason Reason
	// Kind is the GPU kind of kind_not_allowed and max_gpus_per_kind.
	Kind gpu.Kind
	// Window is the budget window of budget_exhausted and usage_unavailable.
	Window time.Duration
	// Limit, Held and Requested are GPU-equivalents (max_gpus, max_gpus_per_kind, and ok) or servers
	// (max_servers); an unlimited Limit is +Inf.
	Limit, Held, Requested float64
	// Budget and Used are weighted GPU-hours in Window (budget_exhausted).
	Budget, Used float64
	// From is the policy entry the limit comes from.
	From Source
	// Message says it to the user in plain words, with what they can do; empty when admitted, and in
	// Decision.Also (only the refusal reported is said).
	Message string
}

// Decision is the answer to an admission request.
type Decision struct {
	Allow bool
	// Check is the reason: the first limit the request crosses, or why it is admitted. Its Message is the
	// message for the user.
	Check
	// Also are the other limits the request crosses, for the log: reasons and numbers, without messages.
	Also []Check
}

// tolerance absorbs float64 rounding in sums of shares such as 3/7 + 3/7 + 1/7.
const tolerance = 1e-9

// Decide is the admission check of a new GPU server: may a user with policy eff, holding and having used u,
// start a server that requests r? It refuses when the request asks for a kind the user may not use, when a
// budget is spent (used >= budget), or when what the user holds plus what the server asks for is over the
// total, per-kind or server limit. Exempt users and CPU-only servers are admitted.
func Decide(eff Effective, u Usage, r Request) Decision {
	if eff.Exempt.Value {
		return Decision{Allow: true, Check: Check{Reason: ReasonExempt, From: eff.Exempt.From}}
	}
	if len(r.Allocations) == 0 {
		return Decision{Allow: true, Check: Check{Reason: ReasonNoGPU}}
	}
	s := situation{eff: eff, u: u, r: r, held: byKind(u.Held), asked: byKind(r.Allocations)}
	var refused []Check
	refused = append(refused, s.kinds()...)
	budgets, unknown := s.budgets()
	refused = append(refused, budgets...)
	refused = append(refused, s.total()...)
	refused = append(refused, s.perKind()...)
	refused = append(refused, s.servers()...)
	if len(refused) > 0 {
		d := Decision{Check: refused[0]}
		d.Message = s.say(d.Check)
		if len(refused) > 1 {
			d.Also = refused[1:]
		}
		return d
	}
	if unknown != nil {
		return Decision{Allow: true, Check: *unknown}
	}
	return Decision{Allow: true, Check: Check{Reason: ReasonOK, Limit: float64(eff.MaxGPUs.Value),
		Held: s.held.total(), Requested: s.asked.total(), From: eff.MaxGPUs.From}}
}

// Fits reports whether Decide would find r within the limits that depend on what is asked: the kinds, and the
// total and per-kind GPU-equivalents. Budgets and the server limit are left out: they depend on the usage
// alone, so a caller that has Decide's answer on u for one request and asks about others (the classes a
// refused user could take instead) knows them already, and Fits does not format the messages it would not use.
func Fits(eff Effective, u Usage, r Request) bool {
	f := NewFitter(eff, u)
	return f.Fits(r)
}

// Fitter is Fits for one user's policy and usage and many requests: what the user holds is summed once.
type Fitter struct {
	eff       Effective
	held      kindShares
	heldTotal float64
}

// NewFitter sums what u holds for Fits calls on eff.
func NewFitter(eff Effective, u Usage) Fitter {
	f := Fitter{eff: eff}
	if !eff.Exempt.Value {
		f.held = byKind(u.Held)
		f.heldTotal = f.held.total()
	}
	return f
}

// Fits is Fits(eff, u, r) for the Fitter's eff and u.
func (f *Fitter) Fits(r Request) bool {
	if f.eff.Exempt.Value || len(r.Allocations) == 0 {
		return true
	}
	asked := byKind(r.Allocations)
	if !within(f.heldTotal, asked.total(), f.eff.MaxGPUs.Value) {
		return false
	}
	for _, ks := range asked.list() {
		if !f.eff.Allows(ks.kind) {
			return false
		}
		if limit, ok := f.eff.MaxGPUsPerKind[ks.kind]; ok && !within(f.held.of(ks.kind), ks.share, limit.Value) {
			return false
		}
	}
	return true
}

// within reports whether holding held and asking for requested stays within limit (all GPU-equivalents or
// servers), up to float64 rounding.
func within(held, requested float64, limit Limit) bool {
	return held+requested <= float64(limit)+tolerance
}

// situation is one decision's inputs with the sums it needs.
type situation struct {
	eff         Effective
	u           Usage
	r           Request
	held, asked kindShares
}

// kindShares are GPU-equivalents by kind, in the order messages list kinds (gpu.Kinds(), then any other kind
// by name). A decision sees one to three kinds: they are kept in place (no map, nothing on the heap) and
// summed in a fixed order.
type kindShares struct {
	n     int
	first [8]kindShare
	more  []kindShare // all of them, once there are more than fit in first
}

type kindShare struct {
	kind  gpu.Kind
	share float64
}

// vocabulary is gpu.Kinds() once: the order of kinds in messages.
var vocabulary = gpu.Kinds()

// byKind sums the shares of as by kind.
func byKind(as []gpu.Allocation) kindShares {
	var ks kindShares
	for _, a := range as {
		ks.add(a.Kind, a.Share())
	}
	slices.SortFunc(ks.list(), func(a, b kindShare) int {
		if ra, rb := kindRank(a.kind), kindRank(b.kind); ra != rb {
			return ra - rb
		}
		return strings.Compare(string(a.kind), string(b.kind))
	})
	return ks
}

func (ks *kindShares) add(k gpu.Kind, share float64) {
	l := ks.list()
	for i := range l {
		if l[i].kind == k {
			l[i].share += share
			return
		}
	}
	switch {
	case ks.more != nil:
		ks.more = append(ks.more, kindShare{kind: k, share: share})
	case ks.n == len(ks.first):
		ks.more = append(slices.Clone(ks.first[:]), kindShare{kind: k, share: share})
	default:
		ks.first[ks.n] = kindShare{kind: k, share: share}
		ks.n++
	}
}

// list is the kinds and their shares, in order.
func (ks *kindShares) list() []kindShare {
	if ks.more != nil {
		return ks.more
	}
	return ks.first[:ks.n]
}

// kindRank is k's place in the vocabulary; kinds outside it come after, by name.
func kindRank(k gpu.Kind) int {
	if i := slices.Index(vocabulary, k); i >= 0 {
		return i
	}
	return len(vocabulary)
}

// of is the share of kind k (0 when none is held or asked).
func (ks *kindShares) of(k gpu.Kind) float64 {
	for _, s := range ks.list() {
		if s.kind == k {
			return s.share
		}
	}
	return 0
}

func (ks *kindShares) total() float64 {
	total := 0.0
	for _, s := range ks.list() {
		total += s.share
	}
	return total
}

func ofKind(as []gpu.Allocation, k gpu.Kind) []gpu.Allocation {
	var out []gpu.Allocation
	for _, a := range as {
		if a.Kind == k {
			out = append(out, a)
		}
	}
	return out
}

func (s situation) kinds() []Check {
	var out []Check
	for _, ks := range s.asked.list() {
		k := ks.kind
		if s.eff.Allows(k) {
			continue
		}
		out = append(out, Check{Reason: ReasonKindNotAllowed, Kind: k, Requested: ks.share, From: s.eff.AllowedKinds.From})
	}
	return out
}

// budgets checks every budget window with a limit. unknown is the first window whose usage cannot be read
// when onUnavailable is open (admitted, and said so); under closed it is a refusal in refused.
func (s situation) budgets() (refused []Check, unknown *Check) {
	var windows [8]time.Duration
	for _, w := range s.eff.appendWindows(windows[:0]) {
		b := s.eff.Budgets[w]
		hours, ok := s.u.GPUHours[w]
		if !ok && b.Value == 0 {
			// A budget of 0 is spent whatever the usage: no need to read it.
			ok, hours = true, map[string]float64{}
		}
		if !ok {
			c := Check{Reason: ReasonUsageUnavailable, Window: w, Budget: float64(b.Value), From: b.From}
			if s.eff.OnUnavailable == Closed {
				refused = append(refused, c)
			} else if unknown == nil {
				unknown = &c
			}
			continue
		}
		used := s.eff.Weighted(hours)
		budget := float64(b.Value)
		if used < budget-tolerance {
			continue
		}
		refused = append(refused, Check{Reason: ReasonBudgetExhausted, Window: w, Budget: budget, Used: used, From: b.From})
	}
	return refused, unknown
}

// weighted reports whether a weight other than 1 applies to some of hours.
func (s situation) weighted(hours map[string]float64) bool {
	for class, h := range hours {
		if w, _ := s.eff.Weight(class); w != 1 && h > 0 {
			return true
		}
	}
	return false
}

func (s situation) total() []Check {
	limit := s.eff.MaxGPUs
	c := Check{Reason: ReasonMaxGPUs, Limit: float64(limit.Value), Held: s.held.total(), Requested: s.asked.total(), From: limit.From}
	if within(c.Held, c.Requested, limit.Value) {
		return nil
	}
	return []Check{c}
}

func (s situation) perKind() []Check {
	var out []Check
	for _, ks := range s.asked.list() {
		k := ks.kind
		limit, ok := s.eff.MaxGPUsPerKind[k]
		if !ok {
			continue
		}
		c := Check{Reason: ReasonMaxGPUsPerKind, Kind: k, Limit: float64(limit.Value), Held: s.held.of(k),
			Requested: ks.share, From: limit.From}
		if within(c.Held, c.Requested, limit.Value) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// overMessage explains a GPU-equivalents limit crossed, in total (kind "") or for one kind.
func (s situation) overMessage(c Check, held []gpu.Allocation, k gpu.Kind) string {
	what := "GPUs"
	limitText := gpu.Amount(c.Limit)
	asked := s.r.Allocations
	if k != "" {
		what = k.Plural()
		limitText = amountOfKind(c.Limit, k)
		asked = ofKind(asked, k)
	}
	askedText := fmt.Sprintf("%s (%s)", gpu.Amount(c.Requested), gpu.JoinUnits(asked))
	switch {
	case c.Limit <= tolerance:
		other := "a CPU-only profile"
		if k != "" {
			other = "another kind of GPU or a CPU-only profile"
		}
		return fmt.Sprintf("This server asks for %s, but %s may not use %s. Pick %s.", askedText, Who(c.From), what, other)
	case c.Requested > c.Limit+tolerance:
		return fmt.Sprintf("This server asks for %s, but %s may use at most %s at a time. Pick a smaller GPU profile or a CPU-only one.",
			askedText, Who(c.From), limitText)
	case c.Held >= c.Limit-tolerance:
		return fmt.Sprintf("You already use %s (%s); %s may use at most %s at a time. %s or pick a CPU-only profile.",
			gpu.Amount(c.Held), gpu.JoinUnits(held), Who(c.From), limitText, stopOther(s.u.Servers))
	}
	return fmt.Sprintf("You already use %s (%s) and this server asks for another %s; %s may use at most %s at a time. "+
		"%s, or pick a smaller GPU profile (up to %s) or a CPU-only one.",
		gpu.Amount(c.Held), gpu.JoinUnits(held), gpu.Amount(c.Requested), Who(c.From), limitText,
		stopOther(s.u.Servers), gpu.Amount(c.Limit-c.Held))
}

// amountOfKind is a per-kind limit in words: "2 whole GPUs", "3/7 of a GPU in MIG slices".
func amountOfKind(limit float64, k gpu.Kind) string {
	if k == gpu.KindGPU && limit == math.Trunc(limit) && limit >= 1 {
		if limit == 1 {
			return "1 whole GPU"
		}
		return gpu.FormatGPUs(limit) + " whole GPUs"
	}
	return gpu.Amount(limit) + " in " + k.Plural()
}

func (s situation) servers() []Check {
	limit := s.eff.MaxServers
	c := Check{Reason: ReasonMaxServers, Limit: float64(limit.Value), Held: float64(s.u.Servers), Requested: 1, From: limit.From}
	if within(c.Held, c.Requested, limit.Value) {
		return nil
	}
	return []Check{c}
}

// say is the message of refusal c, in plain words, with what the user can do. Decide writes it for the
// refusal it reports; the others (Decision.Also) are for the log, which takes their reasons and numbers.
func (s situation) say(c Check) string {
	switch c.Reason {
	case ReasonKindNotAllowed:
		msg := fmt.Sprintf("This server asks for %s, but %s may not use %s.",
			gpu.JoinUnits(ofKind(s.r.Allocations, c.Kind)), Who(c.From), c.Kind.Plural())
		allowed := s.eff.AllowedKinds.Value
		if len(allowed) == 0 {
			return msg + " Pick a CPU-only profile."
		}
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = a.Plural()
		}
		return msg + fmt.Sprintf(" You may use %s: pick one of those profiles or a CPU-only one.", joinOr(names))
	case ReasonUsageUnavailable:
		return "The quota service cannot check your GPU-hours right now, so GPU servers cannot start. " +
			"Try again in a few minutes, or pick a CPU-only profile."
	case ReasonBudgetExhausted:
		last, per := windowWords(c.Window)
		if c.Budget == 0 {
			return fmt.Sprintf("This server needs GPU time, but %s %s a budget of 0 GPU-hours %s. Pick a CPU-only profile.",
				Who(c.From), have(c.From), per)
		}
		unit := "GPU-hours"
		if hoursText(c.Used) == "1" {
			unit = "GPU-hour"
		}
		if s.weighted(s.u.GPUHours[c.Window]) {
			unit += " (weighted by kind of GPU)"
		}
		return fmt.Sprintf("You have used %s %s in %s; %s may use %s %s. "+
			"GPU servers can start again as your older use leaves that window; until then, pick a CPU-only profile.",
			hoursText(c.Used), unit, last, Who(c.From), hoursText(c.Budget), per)
	case ReasonMaxGPUs:
		return s.overMessage(c, s.u.Held, "")
	case ReasonMaxGPUsPerKind:
		return s.overMessage(c, ofKind(s.u.Held, c.Kind), c.Kind)
	case ReasonMaxServers:
		if c.Limit < 1 {
			return fmt.Sprintf("This server needs a GPU, but %s may not run GPU servers. Pick a CPU-only profile.", Who(c.From))
		}
		return fmt.Sprintf("You already run %s; %s may run at most %s at a time. %s or pick a CPU-only profile.",
			GPUServers(s.u.Servers), Who(c.From), GPUServers(int(c.Limit)), stopOther(s.u.Servers))
	}
	return ""
}

// Who names whom a limit is for, as the subject of "... may use at most": "you", "students", "each user".
func Who(s Source) string {
	switch s.Level {
	case FromUser:
		return "you"
	case FromGroup:
		return JoinAnd(s.Names)
	}
	return "each user"
}

func have(s Source) string {
	if s.Level == FromDefault || s.Level == Builtin {
		return "has"
	}
	return "have"
}

func stopOther(servers int) string {
	if servers > 1 {
		return "Stop one of your other GPU servers"
	}
	return "Stop your other GPU server"
}

// GPUServers counts GPU servers in words: "1 GPU server", "3 GPU servers".
func GPUServers(n int) string {
	if n == 1 {
		return "1 GPU server"
	}
	return strconv.Itoa(n) + " GPU servers"
}

// windowWords names a budget window as in "in the last 24 hours" and "2 GPU-hours per 24 hours".
func windowWords(w time.Duration) (last, per string) {
	var span string
	switch {
	case w == time.Hour:
		return "the last hour", "per hour"
	case w%(24*time.Hour) == 0 && w > 24*time.Hour:
		span = fmt.Sprintf("%d days", w/(24*time.Hour))
	default:
		span = fmt.Sprintf("%d hours", w/time.Hour)
	}
	return "the last " + span, "per " + span
}

// hoursText writes GPU-hours with at most two decimals: 2, 2.5, 0.25.
// hoursText writes GPU-hours for people: two decimals from 1 up, two significant digits below (a budget of
// 0.004 must not read "0"), and "under 0.001" for what would need an exponent.
func hoursText(h float64) string {
	switch {
	case h == 0 || math.Abs(h) >= 1:
		return strconv.FormatFloat(math.Round(h*100)/100, 'f', -1, 64)
	case math.Abs(h) < 0.001:
		return "under 0.001"
	default:
		return strconv.FormatFloat(h, 'g', 2, 64)
	}
}

func joinOr(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}
