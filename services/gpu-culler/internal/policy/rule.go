package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// Rule is the policy that applies to one server, every field resolved (Policy.Rule).
type Rule struct {
	// CPU is true for a CPU-only server: idle by Hub activity alone, no GPU fields.
	CPU     bool
	Kind    gpu.Kind // "" for CPU-only
	Profile string   // the gpu-profiles slug, "" when unknown

	DryRun     bool
	StaleAfter time.Duration
	Exempt     Exempt

	// IdlePeriod is the time idle before the stop (GPU idle; Hub inactivity for CPU-only servers); 0 is off.
	IdlePeriod time.Duration
	// IdleWhenContended is the idle period while someone waits for this kind; 0 when not set.
	IdleWhenContended time.Duration
	Utilization       float64 // percent, GPU idle below it
	MemoryTolerance   int64   // bytes
	// HubIdlePeriod is the Hub inactivity a GPU server also needs to count as idle; 0: Hub activity is not
	// considered.
	HubIdlePeriod time.Duration
	Warn          time.Duration
	Snooze        time.Duration
	MaxSnoozes    int
	MaxAge        time.Duration // 0: no limit
	Action        Action

	// From says where each rule field comes from, by its key in the file: "profiles.<slug>", "kinds.<kind>",
	// "gpu", "cpu" or "built-in".
	From map[string]string
}

// Source names for Rule.From.
const (
	FromBuiltin = "built-in"
	FromGPU     = "gpu"
	FromCPU     = "cpu"
)

// IdlePeriodFor is the idle period that applies: IdleWhenContended while the kind is contended (when set).
func (r Rule) IdlePeriodFor(contended bool) time.Duration {
	if r.UnderContention(contended) {
		return r.IdleWhenContended
	}
	return r.IdlePeriod
}

// UnderContention reports whether the contended idle period applies: the kind is contended and the rule has
// idleWhenContended.
func (r Rule) UnderContention(contended bool) bool {
	return contended && r.IdleWhenContended > 0
}

// SnoozeFor is how far one snooze moves the stop: while the kind is contended (and the rule has
// idleWhenContended), no further than idleWhenContended, so that a snooze does not outlast the shorter period
// the one waiting is promised.
func (r Rule) SnoozeFor(contended bool) time.Duration {
	if r.UnderContention(contended) {
		return min(r.Snooze, r.IdleWhenContended)
	}
	return r.Snooze
}

// named is one entry in precedence order, strongest first, with the path it has in the file.
type named struct {
	path  []string
	entry *Entry
}

func (n named) String() string { return strings.Join(n.path, ".") }

// chain is the entries that apply to a server of kind and profile, strongest first: the profile's, the
// kind's, then gpu. An entry the file does not have is left out.
func (p *Policy) chain(kind gpu.Kind, profile string) []named {
	var c []named
	if e, ok := p.Profiles[profile]; ok && profile != "" {
		c = append(c, named{[]string{"profiles", profile}, &e})
	}
	if e, ok := p.Kinds[kind]; ok {
		c = append(c, named{[]string{"kinds", string(kind)}, &e})
	}
	return append(c, named{[]string{"gpu"}, &p.GPU})
}

// pick is the value of the first entry in c that sets the field, with its source; else builtin.
func pick[T any](c []named, get func(*Entry) *T, builtin T) (T, string) {
	for _, n := range c {
		if v := get(n.entry); v != nil {
			return *v, n.String()
		}
	}
	return builtin, FromBuiltin
}

// Rule is the rule of a server: kind is the GPU kind it holds, "" for a CPU-only server; profile is its
// gpu-profiles slug, "" when unknown. For a GPU server each field comes from, in this order: the profile's
// entry, the kind's entry, gpu, the built-in value. A profile's slug names its kind, so a profile rule of a
// kind other than the server's does not apply.
func (p *Policy) Rule(kind gpu.Kind, profile string) Rule {
	r := Rule{
		Kind: kind, Profile: profile, DryRun: p.DryRun, Exempt: p.Exempt,
		StaleAfter: durOr(p.StaleAfter, DefaultStaleAfter), From: map[string]string{},
	}
	if kind == "" {
		r.CPU = true
		c := []named{{[]string{"cpu"}, &Entry{Common: p.CPU.Common}}}
		if p.CPU.IdlePeriod != nil {
			r.IdlePeriod, r.From["idlePeriod"] = p.CPU.IdlePeriod.Std(), FromCPU
		} else {
			r.From["idlePeriod"] = FromBuiltin
		}
		r.common(c)
		return r
	}
	if profile != "" && slugKind(profile) != kind {
		profile = "" // a profile of another kind says nothing about this server
	}
	c := p.chain(kind, profile)
	var d ipolicy.Duration
	var src string
	d, src = pick(c, func(e *Entry) *ipolicy.Duration { return e.IdlePeriod }, ipolicy.Duration(DefaultIdlePeriod))
	r.IdlePeriod, r.From["idlePeriod"] = d.Std(), src
	d, src = pick(c, func(e *Entry) *ipolicy.Duration { return e.IdleWhenContended }, 0)
	r.IdleWhenContended, r.From["idleWhenContended"] = d.Std(), src
	d, src = pick(c, func(e *Entry) *ipolicy.Duration { return e.HubIdlePeriod }, 0)
	r.HubIdlePeriod, r.From["hubIdlePeriod"] = d.Std(), src
	u, src := pick(c, func(e *Entry) *Percent { return e.Utilization }, Percent(DefaultUtilization))
	r.Utilization, r.From["utilization"] = float64(u), src
	m, src := pick(c, func(e *Entry) *Bytes { return e.MemoryTolerance }, Bytes(DefaultMemoryTolerance))
	r.MemoryTolerance, r.From["memoryTolerance"] = int64(m), src
	r.common(c)
	return r
}

func (r *Rule) common(c []named) {
	var d ipolicy.Duration
	var src string
	d, src = pick(c, func(e *Entry) *ipolicy.Duration { return e.Warn }, ipolicy.Duration(DefaultWarn))
	r.Warn, r.From["warn"] = d.Std(), src
	d, src = pick(c, func(e *Entry) *ipolicy.Duration { return e.Snooze }, ipolicy.Duration(DefaultSnooze))
	r.Snooze, r.From["snooze"] = d.Std(), src
	d, src = pick(c, func(e *Entry) *ipolicy.Duration { return e.MaxAge }, 0)
	r.MaxAge, r.From["maxAge"] = d.Std(), src
	r.MaxSnoozes, r.From["maxSnoozes"] = pick(c, func(e *Entry) *int { return e.MaxSnoozes }, DefaultMaxSnoozes)
	r.Action, r.From["action"] = pick(c, func(e *Entry) *Action { return e.Action }, Stop)
}

func durOr(d *ipolicy.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Std()
}

// EveryPeriod is how often a pass runs.
func (p *Policy) EveryPeriod() time.Duration { return durOr(p.Every, DefaultEvery) }

// Workers is how many Hub requests a pass makes at once.
func (p *Policy) Workers() int {
	if p.Concurrency == nil {
		return DefaultConcurrency
	}
	return *p.Concurrency
}

// slugPrefixes are the kinds' slug prefixes, longest first (mig-shared- before mig-).
var slugPrefixes = []struct {
	prefix string
	kind   gpu.Kind
}{
	{"mig-shared-", gpu.KindSharedMIG},
	{"mig-", gpu.KindMIG},
	{"shared-", gpu.KindShared},
	{"mps-", gpu.KindMPS},
	{"gpu-", gpu.KindGPU},
}

// slugKind is the kind a gpu-profiles slug is of ("" for cpu and slugs of no kind).
func slugKind(slug string) gpu.Kind {
	for _, p := range slugPrefixes {
		if strings.HasPrefix(slug, p.prefix) && len(slug) > len(p.prefix) {
			return p.kind
		}
	}
	return ""
}

var slugRe = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Validate checks what the decoder cannot: kinds, slugs, bounds, and that every rule the file makes (gpu,
// each kind, each profile, cpu) warns before it stops. policy.Decode calls it and places each error on its
// node.
func (p *Policy) Validate() []error {
	var errs []error
	if p.Every != nil && (p.Every.Std() < minEvery || p.Every.Std() > 24*time.Hour) {
		errs = append(errs, ipolicy.Errorf([]string{"every"}, "a pass runs every 10s to 24h, not %s", p.Every))
	}
	if p.Concurrency != nil && (*p.Concurrency < 1 || *p.Concurrency > maxConcurrency) {
		errs = append(errs, ipolicy.Errorf([]string{"concurrency"}, "from 1 to %d Hub requests at once, not %d", maxConcurrency, *p.Concurrency))
	}
	if p.StaleAfter != nil && (p.StaleAfter.Std() < 10*time.Second || p.StaleAfter.Std() > time.Hour) {
		errs = append(errs, ipolicy.Errorf([]string{"staleAfter"}, "from 10s to 1h (telemetry older than that is not acted on), not %s", p.StaleAfter))
	}
	for i, u := range p.Exempt.Users {
		if strings.TrimSpace(u) == "" {
			errs = append(errs, ipolicy.Errorf([]string{"exempt", "users", strconv.Itoa(i)}, "a user name cannot be empty"))
		}
	}
	for i, g := range p.Exempt.Groups {
		if strings.TrimSpace(g) == "" {
			errs = append(errs, ipolicy.Errorf([]string{"exempt", "groups", strconv.Itoa(i)}, "a group name cannot be empty"))
		}
	}
	for _, k := range sortedKeys(p.Exempt.Annotations) {
		if k == "" || strings.ContainsAny(k, " \t") {
			errs = append(errs, ipolicy.KeyErrorf([]string{"exempt", "annotations", k}, "%q is not an annotation key", k))
		}
	}

	errs = append(errs, p.GPU.validate([]string{"gpu"})...)
	errs = append(errs, p.check(p.Rule(gpu.KindGPU, ""), []string{"gpu"})...)
	for _, k := range sortedKeys(p.Kinds) {
		at := []string{"kinds", string(k)}
		if !k.Known() {
			errs = append(errs, ipolicy.KeyErrorf(at, "unknown GPU kind %q; the kinds are %s", k, gpu.KindList()))
			continue
		}
		e := p.Kinds[k]
		errs = append(errs, e.validate(at)...)
		errs = append(errs, p.check(p.Rule(k, ""), at)...)
	}
	for _, slug := range sortedKeys(p.Profiles) {
		at := []string{"profiles", slug}
		kind := slugKind(slug)
		switch {
		case slug == "cpu":
			errs = append(errs, ipolicy.KeyErrorf(at, "CPU-only servers have their own rule: write it under cpu"))
			continue
		case !slugRe.MatchString(slug) || kind == "":
			errs = append(errs, ipolicy.KeyErrorf(at,
				"%q is not a gpu-profiles slug: lowercase words and dashes that start with a kind (gpu-, mig-, shared-, mps-, mig-shared-), as in gpu-h100-80gb-hbm3", slug))
			continue
		}
		e := p.Profiles[slug]
		errs = append(errs, e.validate(at)...)
		errs = append(errs, p.check(p.Rule(kind, slug), at)...)
	}
	cpu := Entry{Common: p.CPU.Common, IdlePeriod: p.CPU.IdlePeriod}
	errs = append(errs, cpu.validate([]string{"cpu"})...)
	errs = append(errs, p.check(p.Rule("", ""), []string{"cpu"})...)
	return errs
}

// validate checks an entry's own values.
func (e Entry) validate(at []string) []error {
	var errs []error
	path := func(key string) []string { return append(slices.Clone(at), key) }
	for _, d := range []struct {
		key string
		v   *ipolicy.Duration
	}{{"idlePeriod", e.IdlePeriod}, {"idleWhenContended", e.IdleWhenContended}, {"hubIdlePeriod", e.HubIdlePeriod},
		{"warn", e.Warn}, {"snooze", e.Snooze}, {"maxAge", e.MaxAge}} {
		if d.v != nil && d.v.Std() > maxPeriod {
			errs = append(errs, ipolicy.Errorf(path(d.key), "no longer than a year (366d), not %s", d.v))
		}
	}
	if e.IdleWhenContended != nil && e.IdleWhenContended.Std() == 0 {
		errs = append(errs, ipolicy.Errorf(path("idleWhenContended"), "a period such as 20m; leave it out for the idle period"))
	}
	if e.MaxSnoozes != nil && (*e.MaxSnoozes < 0 || *e.MaxSnoozes > maxSnoozes) {
		errs = append(errs, ipolicy.Errorf(path("maxSnoozes"), "from 0 to %d snoozes, not %d", maxSnoozes, *e.MaxSnoozes))
	}
	return errs
}

// check reports what makes the resolved rule r of the entry at `at` unworkable, where that entry sets one of
// the fields involved (a gpu entry's mistake is reported once, at gpu, not again at every kind).
func (p *Policy) check(r Rule, at []string) []error {
	var errs []error
	here := strings.Join(at, ".")
	sets := func(keys ...string) bool {
		for _, k := range keys {
			if r.From[k] == here {
				return true
			}
		}
		return false
	}
	// place puts the error on the first of keys this entry sets.
	place := func(keys ...string) []string {
		for _, k := range keys {
			if r.From[k] == here {
				return append(slices.Clone(at), k)
			}
		}
		return at
	}
	if r.Warn == 0 && sets("warn") {
		errs = append(errs, ipolicy.Errorf(place("warn"), "a server is always warned before it stops: a period such as 10m"))
	}
	if r.IdlePeriod > 0 && r.Warn >= r.IdlePeriod && sets("warn", "idlePeriod") {
		errs = append(errs, ipolicy.Errorf(place("warn", "idlePeriod"),
			"the warning (warn %s) must start after the server becomes idle: shorter than idlePeriod %s", fmtD(r.Warn), fmtD(r.IdlePeriod)))
	}
	if r.IdleWhenContended > 0 {
		switch {
		case r.IdlePeriod > 0 && r.IdleWhenContended > r.IdlePeriod && sets("idleWhenContended", "idlePeriod"):
			errs = append(errs, ipolicy.Errorf(place("idleWhenContended", "idlePeriod"),
				"idleWhenContended %s is longer than idlePeriod %s: it is the shorter period for a kind someone waits for", fmtD(r.IdleWhenContended), fmtD(r.IdlePeriod)))
		case r.Warn >= r.IdleWhenContended && sets("idleWhenContended", "warn"):
			errs = append(errs, ipolicy.Errorf(place("idleWhenContended", "warn"),
				"the warning (warn %s) must start after the server becomes idle: shorter than idleWhenContended %s", fmtD(r.Warn), fmtD(r.IdleWhenContended)))
		}
	}
	if r.MaxAge > 0 && r.Warn >= r.MaxAge && sets("maxAge", "warn") {
		errs = append(errs, ipolicy.Errorf(place("maxAge", "warn"),
			"the warning (warn %s) must start after the server starts: shorter than maxAge %s", fmtD(r.Warn), fmtD(r.MaxAge)))
	}
	if r.MaxSnoozes > 0 && r.Snooze == 0 && sets("snooze", "maxSnoozes") {
		errs = append(errs, ipolicy.Errorf(place("snooze", "maxSnoozes"), "a snooze moves the stop by a period such as 1h; for no snoozes write maxSnoozes: 0"))
	}
	return errs
}

func fmtD(d time.Duration) string { return ipolicy.FormatDuration(d) }

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Exempts says whether the exemptions cover a server, and why ("user alice", "group staff", "admin",
// "annotation gpuhub.io/cull=never"); "" when they do not.
func (x Exempt) Exempts(user string, groups []string, admin bool, annotations map[string]string) string {
	if slices.Contains(x.Users, user) {
		return "user " + user
	}
	for _, g := range x.Groups {
		if slices.Contains(groups, g) {
			return "group " + g
		}
	}
	if x.Admins && admin {
		return "admin"
	}
	for _, k := range sortedKeys(x.Annotations) {
		if v, ok := annotations[k]; ok && (x.Annotations[k] == "*" || x.Annotations[k] == v) {
			return fmt.Sprintf("annotation %s=%s", k, v)
		}
	}
	return ""
}
