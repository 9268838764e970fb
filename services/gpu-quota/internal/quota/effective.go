package quota

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// Level is the kind of entry a value of the effective policy comes from, strongest last.
type Level int

// The levels, from the built-in value that applies when no entry says anything, to the user's own entry.
const (
	Builtin Level = iota
	FromDefault
	FromGroup
	FromUser
)

// Source is where one value of the effective policy comes from.
type Source struct {
	Level Level
	// Names is the user (FromUser), or every group whose entry gives the value (FromGroup: the most generous
	// value, which several groups may share), sorted; empty otherwise.
	Names []string
}

// String names the source as explain prints it: "user alice", "group students", "groups staff and students",
// "default", "built-in".
func (s Source) String() string {
	switch s.Level {
	case FromUser:
		return "user " + strings.Join(s.Names, "")
	case FromGroup:
		if len(s.Names) == 1 {
			return "group " + s.Names[0]
		}
		return "groups " + JoinAnd(s.Names)
	case FromDefault:
		return "default"
	}
	return "built-in"
}

// Setting is one value of the effective policy and where it comes from.
type Setting[T any] struct {
	Value T
	From  Source
}

// Effective is the policy that applies to one user: each field merged from the user's entry, the entries of
// their groups and the default (precedence in services/gpu-quota/README.md), with its source.
type Effective struct {
	User string
	// Groups are the user's Hub groups that have an entry in the policy, sorted.
	Groups        []string
	OnUnavailable Mode

	Exempt   Setting[bool]
	Priority Setting[int]
	MaxGPUs  Setting[Limit]
	// MaxGPUsPerKind has the kinds some entry limits; a kind not in it is unlimited.
	MaxGPUsPerKind map[gpu.Kind]Setting[Limit]
	MaxServers     Setting[Limit]
	// Budgets has the windows some entry sets a budget for (unlimited ones too, when an entry says so).
	Budgets map[time.Duration]Setting[Limit]
	// Weights has every key some entry sets; Weight finds the one that applies to a class.
	Weights map[string]Setting[float64]
	// AllowedKinds is nil when every kind is allowed, empty when none is.
	AllowedKinds Setting[[]gpu.Kind]

	// sorted is Windows and the weight keys in lookup order, computed once by Policy.Effective: a decision
	// reads them for every window and class, and ranging over a map costs more than the rest of that. nil in
	// an Effective made otherwise (computed per call).
	sorted *lookupOrder
}

type lookupOrder struct {
	windows []time.Duration
	weights []weightKey // longest key first
}

type weightKey struct {
	key    string
	weight float64
}

// sortKeys computes e.sorted; the maps must not change afterwards.
func (e *Effective) sortKeys() {
	s := &lookupOrder{windows: e.appendWindows(nil)}
	for key, w := range e.Weights {
		if key != "" { // the map scan never picks an empty key (the policy refuses one anyway)
			s.weights = append(s.weights, weightKey{key: key, weight: w.Value})
		}
	}
	// Longest first, so that the first key that applies to a class is the one Weight picks; equal lengths by
	// name (two different keys of one length cannot both apply).
	slices.SortFunc(s.weights, func(a, b weightKey) int {
		return cmp.Or(cmp.Compare(len(b.key), len(a.key)), strings.Compare(a.key, b.key))
	})
	e.sorted = s
}

// applicable are the entries that apply to one user, strongest first.
type applicable struct {
	user     string
	userE    *Entry
	groups   []string // with an entry, sorted
	groupEs  []*Entry
	defaultE *Entry
}

func (p *Policy) applicable(user string, groups []string) applicable {
	a := applicable{user: user, defaultE: &p.Default}
	if e, ok := p.Users[user]; ok {
		a.userE = &e
	}
	names := slices.Clone(groups)
	slices.Sort(names)
	names = slices.Compact(names)
	for _, g := range names {
		if e, ok := p.Groups[g]; ok {
			a.groups = append(a.groups, g)
			a.groupEs = append(a.groupEs, &e)
		}
	}
	return a
}

// resolve picks one field: the user's value; else the most generous of the groups' (better(a, b) > 0 when a
// is more generous), naming every group that gives it; else the default's; else builtin.
func resolve[T any](a applicable, get func(*Entry) (T, bool), better func(x, y T) int, builtin T) Setting[T] {
	if a.userE != nil {
		if v, ok := get(a.userE); ok {
			return Setting[T]{Value: v, From: Source{Level: FromUser, Names: []string{a.user}}}
		}
	}
	var best Setting[T]
	found := false
	for i, e := range a.groupEs {
		v, ok := get(e)
		if !ok {
			continue
		}
		switch {
		case !found || better(v, best.Value) > 0:
			best = Setting[T]{Value: v, From: Source{Level: FromGroup, Names: []string{a.groups[i]}}}
			found = true
		case better(v, best.Value) == 0:
			best.From.Names = append(best.From.Names, a.groups[i])
		}
	}
	if found {
		return best
	}
	if v, ok := get(a.defaultE); ok {
		return Setting[T]{Value: v, From: Source{Level: FromDefault}}
	}
	return Setting[T]{Value: builtin}
}

func higher[T cmp.Ordered](x, y T) int { return cmp.Compare(x, y) }
func lower[T cmp.Ordered](x, y T) int  { return cmp.Compare(y, x) }

func moreTrue(x, y bool) int {
	switch {
	case x == y:
		return 0
	case x:
		return 1
	}
	return -1
}

func ptr[T any](p *T) (T, bool) {
	if p == nil {
		var zero T
		return zero, false
	}
	return *p, true
}

// Effective merges the entries that apply to user, a member of the Hub groups groups: field by field, the
// user's entry wins; else the most generous of the groups' entries that set the field (highest limit or
// budget, lowest weight, union of allowed kinds, exempt if any group is, highest priority); else the default;
// else unlimited (every kind allowed, weight 1, not exempt, priority 0). Per-kind limits, budgets (per window)
// and weights (per key) merge key by key.
func (p *Policy) Effective(user string, groups []string) Effective {
	a := p.applicable(user, groups)
	eff := Effective{
		User:          user,
		Groups:        a.groups,
		OnUnavailable: p.Unavailable(),
		Exempt:        resolve(a, func(e *Entry) (bool, bool) { return ptr(e.Exempt) }, moreTrue, false),
		Priority:      resolve(a, func(e *Entry) (int, bool) { return ptr(e.Priority) }, higher[int], 0),
		MaxGPUs:       resolve(a, func(e *Entry) (Limit, bool) { return ptr(e.MaxGPUs) }, higher[Limit], Unlimited),
		MaxServers:    resolve(a, func(e *Entry) (Limit, bool) { return ptr(e.MaxServers) }, higher[Limit], Unlimited),
		AllowedKinds:  allowedKinds(a),
	}
	for _, k := range keys(a, func(e *Entry) []gpu.Kind { return sortedKeys(e.MaxGPUsPerKind) }) {
		if eff.MaxGPUsPerKind == nil {
			eff.MaxGPUsPerKind = map[gpu.Kind]Setting[Limit]{}
		}
		eff.MaxGPUsPerKind[k] = resolve(a, func(e *Entry) (Limit, bool) {
			v, ok := e.MaxGPUsPerKind[k]
			return v, ok
		}, higher[Limit], Unlimited)
	}
	for _, w := range keys(a, budgetWindows) {
		if eff.Budgets == nil {
			eff.Budgets = map[time.Duration]Setting[Limit]{}
		}
		eff.Budgets[w] = resolve(a, func(e *Entry) (Limit, bool) { return budgetFor(e, w) }, higher[Limit], Unlimited)
	}
	for _, key := range keys(a, func(e *Entry) []string { return sortedKeys(e.Weights) }) {
		if eff.Weights == nil {
			eff.Weights = map[string]Setting[float64]{}
		}
		eff.Weights[key] = resolve(a, func(e *Entry) (float64, bool) {
			v, ok := e.Weights[key]
			return v, ok
		}, lower[float64], 1)
	}
	eff.sortKeys()
	return eff
}

// keys is the union of the keys that the applicable entries set for one per-key field.
func keys[K cmp.Ordered](a applicable, of func(*Entry) []K) []K {
	var out []K
	for _, e := range append([]*Entry{a.userE, a.defaultE}, a.groupEs...) {
		if e != nil {
			out = append(out, of(e)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func budgetWindows(e *Entry) []time.Duration {
	out := make([]time.Duration, 0, len(e.Budgets))
	for _, b := range e.Budgets {
		out = append(out, b.Window.Std())
	}
	return out
}

func budgetFor(e *Entry, w time.Duration) (Limit, bool) {
	for _, b := range e.Budgets {
		if b.Window.Std() == w && b.GPUHours != nil {
			return *b.GPUHours, true
		}
	}
	return 0, false
}

// allowedKinds: the user's list; else the union of the lists of the groups that have one; else the default's;
// else every kind (nil).
func allowedKinds(a applicable) Setting[[]gpu.Kind] {
	if a.userE != nil && a.userE.AllowedKinds != nil {
		return Setting[[]gpu.Kind]{Value: inVocabularyOrder(a.userE.AllowedKinds), From: Source{Level: FromUser, Names: []string{a.user}}}
	}
	var union []gpu.Kind
	var names []string
	for i, e := range a.groupEs {
		if e.AllowedKinds != nil {
			union = append(union, e.AllowedKinds...)
			names = append(names, a.groups[i])
		}
	}
	if names != nil {
		return Setting[[]gpu.Kind]{Value: inVocabularyOrder(union), From: Source{Level: FromGroup, Names: names}}
	}
	if a.defaultE.AllowedKinds != nil {
		return Setting[[]gpu.Kind]{Value: inVocabularyOrder(a.defaultE.AllowedKinds), From: Source{Level: FromDefault}}
	}
	return Setting[[]gpu.Kind]{}
}

// inVocabularyOrder lists the kinds of ks once each, in the order of gpu.Kinds; never nil.
func inVocabularyOrder(ks []gpu.Kind) []gpu.Kind {
	out := []gpu.Kind{}
	for _, k := range gpu.Kinds() {
		if slices.Contains(ks, k) {
			out = append(out, k)
		}
	}
	return out
}

// Allows reports whether the effective policy lets the user use kind k at all.
func (e Effective) Allows(k gpu.Kind) bool {
	return e.AllowedKinds.Value == nil || slices.Contains(e.AllowedKinds.Value, k)
}

// Weight is the billing weight of a GPU-hour of class ("mig A100-SXM4-40GB 3g.20gb"), and the weights key it
// comes from: the longest key that is the class or its start at a word boundary ("mig A100-SXM4-40GB",
// "mig"); 1 and "" when none is.
func (e Effective) Weight(class string) (float64, string) {
	if e.sorted != nil {
		for _, k := range e.sorted.weights {
			if class == k.key || len(class) > len(k.key) && class[len(k.key)] == ' ' && strings.HasPrefix(class, k.key) {
				return k.weight, k.key
			}
		}
		return 1, ""
	}
	best, weight := "", 1.0
	for key, s := range e.Weights {
		if (class == key || strings.HasPrefix(class, key+" ")) && len(key) > len(best) {
			best, weight = key, s.Value
		}
	}
	return weight, best
}

// Weighted is the weighted GPU-hours of hours by class.
func (e Effective) Weighted(hoursByClass map[string]float64) float64 {
	var buf [8]string // a user's classes: a few; sorted on the stack
	classes := buf[:0]
	for class := range hoursByClass {
		classes = append(classes, class)
	}
	slices.Sort(classes) // a fixed order: the same sum every time
	total := 0.0
	for _, class := range classes {
		w, _ := e.Weight(class)
		total += w * hoursByClass[class]
	}
	return total
}

// Windows are the budget windows with a limit, shortest first: the GPU-hours Decide needs in Usage.
func (e Effective) Windows() []time.Duration { return e.appendWindows(nil) }

// appendWindows appends Windows to out.
func (e Effective) appendWindows(out []time.Duration) []time.Duration {
	if e.sorted != nil {
		return append(out, e.sorted.windows...)
	}
	start := len(out)
	for w, s := range e.Budgets {
		if !s.Value.IsUnlimited() {
			out = append(out, w)
		}
	}
	slices.Sort(out[start:])
	return out
}

// JoinAnd joins items as a sentence does: "a", "a and b", "a, b and c".
func JoinAnd(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}
