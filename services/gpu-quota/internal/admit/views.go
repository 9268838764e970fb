package admit

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/usagecache"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/notice"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// Service is gpu-quota's name as a Hub service: its notices are gpuhub.io/notice-gpu-quota.
const Service = "gpu-quota"

// UserView is one user holding GPU pods, as the enforcement loop sees them. Effective is shared with the
// engine's cache: read it, never change it.
type UserView struct {
	Name string
	// Groups are the user's Hub groups from the directory.
	Groups    []string
	Effective quota.Effective
	// Usage holds the allocations of the user's active GPU pods (running or pending, not terminating; not
	// reservations: nothing runs there yet), their number as Servers, and the GPU-hours of the policy's
	// budget windows (a window is missing when it cannot be read).
	Usage quota.Usage
	// Pods are those active GPU pods, sorted by namespace/name.
	Pods []inventory.Pod
}

// Views is every user holding active GPU pods, sorted by name, for the enforcement loop. It fails when the
// data cannot be trusted (informers not synced or their watches broken, the Hub directory never read, no
// policy): enforcement must never act on missing or stale data.
func (e *Engine) Views() ([]UserView, error) {
	pol := e.o.Policy()
	if pol == nil {
		return nil, errors.New("no policy loaded")
	}
	if err := e.o.Synced(); err != nil {
		return nil, err
	}
	if err := e.o.Healthy(); err != nil {
		return nil, err
	}
	dir, err := e.o.Directory()
	if dir == nil {
		return nil, fmt.Errorf("hub users and groups not read yet: %w", err)
	}
	now := e.o.Now()
	var readAt time.Time
	if e.o.DirectoryReadAt != nil {
		readAt = e.o.DirectoryReadAt()
	}
	if e.o.DirectoryMaxAge > 0 && !readAt.IsZero() && now.Sub(readAt) > e.o.DirectoryMaxAge {
		return nil, fmt.Errorf("hub users and groups last read %s ago (at %s): too old to act on", now.Sub(readAt).Round(time.Second),
			readAt.UTC().Format(time.RFC3339))
	}
	e.toldMu.Lock()
	told := make(map[string]toldGroups, len(e.told))
	for u, t := range e.told {
		if t.at.After(readAt) {
			told[u] = *t
		} else {
			delete(e.told, u) // the directory has caught up
		}
	}
	e.toldMu.Unlock()

	type snap struct {
		name    string
		pods    []inventory.Pod
		usage   quota.Usage
		running []usagecache.Held
	}
	var users []snap
	e.mu.Lock()
	for name, pods := range e.ix.byUser {
		s := snap{name: name}
		for _, p := range pods {
			if !p.active || len(p.allocs) == 0 {
				continue
			}
			s.pods = append(s.pods, p.pod)
			s.usage.Held = append(s.usage.Held, p.allocs...)
			s.usage.Servers++
			if p.pod.Allocated() {
				s.running = appendHeld(s.running, p)
			}
		}
		if len(s.pods) > 0 {
			users = append(users, s)
		}
	}
	e.mu.Unlock()

	out := make([]UserView, 0, len(users))
	pace := yield.Pass{Behind: e.o.Behind} // one CPU: let admissions run between users
	for _, s := range users {
		pace.Item()
		// The freshest groups: those the Hub sent with an admission after the directory's last read, else the
		// directory's; a user in neither is not judged (the Hub has not told us who they are yet).
		groups, known := dir[s.name]
		if t, ok := told[s.name]; ok {
			groups, known = t.groups, true
		}
		if !known {
			continue
		}
		ent := e.effective.get(pol, s.name, groups)
		eff := ent.eff
		if len(ent.windows) > 0 && e.o.Hours != nil {
			s.usage.GPUHours = e.o.Hours.GPUHours(s.name, ent.windows, s.running, now)
		}
		slices.SortFunc(s.pods, func(a, b inventory.Pod) int {
			return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
		})
		out = append(out, UserView{Name: s.name, Groups: slices.Clone(groups), Effective: eff, Usage: s.usage, Pods: s.pods})
	}
	slices.SortFunc(out, func(a, b UserView) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// QuotaStatus is one user's quota as the usage API shows it in the panel (GET api/v1/users/{name}/quota).
// Unlimited limits are null.
type QuotaStatus struct {
	User       string         `json:"user"`
	Exempt     bool           `json:"exempt"`
	Concurrent Concurrent     `json:"concurrent"`
	Budgets    []BudgetStatus `json:"budgets"`
	// Notice is the pending gpu-quota notice on one of the user's pods (the earliest deadline), or null.
	Notice *notice.Notice `json:"notice"`
}

// Concurrent are the limits on what the user holds at once, and what they hold (pods and reservations).
type Concurrent struct {
	MaxGPUs    *float64 `json:"maxGPUs"`
	HeldGPUs   float64  `json:"heldGPUs"`
	MaxServers *float64 `json:"maxServers"`
	Servers    int      `json:"servers"`
}

// Budget statuses.
const (
	BudgetOK          = "ok"
	BudgetExhausted   = "exhausted"
	BudgetUnavailable = "unavailable" // the numbers are null
)

// BudgetStatus is one budget window: weighted GPU-hours allowed, used and left.
type BudgetStatus struct {
	Window            string   `json:"window"`
	WindowSeconds     int64    `json:"windowSeconds"`
	GPUHours          *float64 `json:"gpuHours"`
	UsedGPUHours      *float64 `json:"usedGPUHours"`
	RemainingGPUHours *float64 `json:"remainingGPUHours"`
	Status            string   `json:"status"`
}

// UserQuota is name's quota now, with their groups from the directory. An exempt user has no limits (null)
// and no budgets. It fails (wrapping ErrUnavailable) when no policy is loaded, the informers are not synced or
// the Hub directory was never read.
func (e *Engine) UserQuota(name string) (QuotaStatus, error) {
	pol := e.o.Policy()
	if pol == nil {
		return QuotaStatus{}, fmt.Errorf("%w: no policy loaded", ErrUnavailable)
	}
	if err := e.o.Synced(); err != nil {
		return QuotaStatus{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	dir, err := e.o.Directory()
	if dir == nil {
		return QuotaStatus{}, fmt.Errorf("%w: hub users and groups not read yet: %w", ErrUnavailable, err)
	}
	ent := e.effective.get(pol, name, dir[name])
	eff := ent.eff
	now := e.o.Now()
	e.mu.Lock()
	e.res.expire(now)
	u := e.usageLocked(ent.windows, name, nil, now) // no server is being started: count them all
	var notices []notice.Notice
	for _, p := range e.ix.byUser[name] {
		if p.active && p.pod.Notices[notice.Key(Service)] != "" {
			ns, _ := notice.Parse(map[string]string{notice.Key(Service): p.pod.Notices[notice.Key(Service)]})
			notices = append(notices, ns...)
		}
	}
	e.mu.Unlock()

	q := QuotaStatus{User: name, Exempt: eff.Exempt.Value, Budgets: []BudgetStatus{}}
	q.Concurrent.HeldGPUs = round(sumShares(u.Held))
	q.Concurrent.Servers = u.Servers
	if len(notices) > 0 {
		// The earliest deadline first; a notice without one last.
		slices.SortFunc(notices, func(a, b notice.Notice) int {
			if a.Deadline.IsZero() != b.Deadline.IsZero() {
				if a.Deadline.IsZero() {
					return 1
				}
				return -1
			}
			return a.Deadline.Compare(b.Deadline)
		})
		q.Notice = &notices[0]
	}
	if q.Exempt {
		return q, nil
	}
	q.Concurrent.MaxGPUs = limit(float64(eff.MaxGPUs.Value))
	q.Concurrent.MaxServers = limit(float64(eff.MaxServers.Value))
	for _, w := range ent.windows {
		budget := float64(eff.Budgets[w].Value)
		b := BudgetStatus{Window: windowName(w), WindowSeconds: int64(w / time.Second), GPUHours: limit(budget), Status: BudgetUnavailable}
		if hours, ok := u.GPUHours[w]; ok {
			used := eff.Weighted(hours)
			b.UsedGPUHours = limit(used)
			b.RemainingGPUHours = limit(max(budget-used, 0))
			b.Status = BudgetOK
			if used >= budget-1e-9 {
				b.Status = BudgetExhausted
			}
		}
		q.Budgets = append(q.Budgets, b)
	}
	return q, nil
}

// limit is a number for JSON, 4 decimals; nil when unlimited.
func limit(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	r := round(v)
	return &r
}

// windowName writes a budget window as the policy does: 24h, 36h, 7d, 30d.
func windowName(w time.Duration) string { return usagecache.Param(w) }

// Explanation is the answer of GET api/v1/explain (the effective policy of one user and why): gpu-quota's wire
// types, declared once in services/internal/contract for `gpuhub policy explain`.
type (
	Explanation    = contract.Explanation
	EffectiveValue = contract.EffectiveValue
	Sourced        = contract.Sourced
)

// Explain is user's effective policy; groups nil: the directory's (empty when it was never read or does not
// know the user).
func (e *Engine) Explain(user string, groups []string) (Explanation, error) {
	pol := e.o.Policy()
	if pol == nil {
		return Explanation{}, fmt.Errorf("%w: no policy loaded", ErrUnavailable)
	}
	if groups == nil {
		if dir, _ := e.o.Directory(); dir != nil {
			groups = dir[user]
		}
	}
	if groups == nil {
		groups = []string{}
	}
	return Explanation{User: user, Groups: groups, Text: pol.Explain(user, groups), Effective: effectiveValue(pol.Effective(user, groups))}, nil
}

func effectiveValue(eff quota.Effective) EffectiveValue {
	lim := func(s quota.Setting[quota.Limit]) Sourced {
		var v any
		if p := limit(float64(s.Value)); p != nil {
			v = *p
		}
		return Sourced{Value: v, From: s.From.String()}
	}
	out := EffectiveValue{
		Exempt:         Sourced{Value: eff.Exempt.Value, From: eff.Exempt.From.String()},
		Priority:       Sourced{Value: eff.Priority.Value, From: eff.Priority.From.String()},
		MaxGPUs:        lim(eff.MaxGPUs),
		MaxServers:     lim(eff.MaxServers),
		MaxGPUsPerKind: map[string]Sourced{},
		Budgets:        map[string]Sourced{},
		Weights:        map[string]Sourced{},
		OnUnavailable:  string(eff.OnUnavailable),
	}
	for k, s := range eff.MaxGPUsPerKind {
		out.MaxGPUsPerKind[string(k)] = lim(s)
	}
	for w, s := range eff.Budgets {
		out.Budgets[windowName(w)] = lim(s)
	}
	for k, s := range eff.Weights {
		out.Weights[k] = Sourced{Value: s.Value, From: s.From.String()}
	}
	var kinds any
	if eff.AllowedKinds.Value != nil {
		kinds = eff.AllowedKinds.Value
	}
	out.AllowedKinds = Sourced{Value: kinds, From: eff.AllowedKinds.From.String()}
	return out
}
