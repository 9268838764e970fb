// Package profiles turns the catalog of GPU kinds and the administrator's overrides into KubeSpawner profile
// dicts (Choices), then into one user's form (ForUser): the kinds their groups may not see are left out, those
// over their quota are shown disabled with gpu-quota's words, and exhausted ones disabled with "none free".
// Nothing hides the CPU choice. It is pure: no I/O, no clock; the service passes the inventory, the
// configuration and the quota verdicts in.
//
// Descriptions are plain text: the Hub glue escapes them; nothing here writes HTML.
package profiles

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// LabelProfile marks every pod started from a generated profile with its slug.
const LabelProfile = "gpuhub.io/profile"

// KindStatic is the gpuhub kind of the administrator's static profiles.
const KindStatic = "static"

// Reasons a choice is shown disabled (gpuhub.reason).
const (
	ReasonNoneFree      = "none_free"
	ReasonQuota         = "quota"
	ReasonUnschedulable = "unschedulable"
	// ReasonWaitlist: units are free, but the waitlist holds them for other people (gpu-quota would refuse).
	ReasonWaitlist = "waitlist"
)

// Profile is one KubeSpawner profile dict, plus the "gpuhub" key KubeSpawner ignores (contract C1).
type Profile struct {
	Slug        string    `json:"slug"`
	DisplayName string    `json:"display_name"`
	Description string    `json:"description"`
	Default     bool      `json:"default"`
	Override    KubeSpawn `json:"kubespawner_override"`
	GPUHub      Info      `json:"gpuhub"`
	// Waitlist is WaitlistExhausted on a choice the form offers only to join gpu-quota's waitlist for (the
	// Hub glue adds "offered" on an available one gpu-quota refused for want of a free unit).
	Waitlist string     `json:"gpuhub_waitlist,omitempty"`
	static   staticDict // the administrator's dict, written instead of the fields above
}

// WaitlistExhausted marks a GPU choice with no unit free for the user: the form offers it to join the waitlist.
const WaitlistExhausted = "exhausted"

// exhausted says a GPU choice has no unit free for the user, so waiting in line for one could help: none free,
// or the free ones held for people already waiting. Not a choice the quota rules out, nor one no node could take:
// waiting would not help there.
func (i Info) exhausted() bool {
	if i.Kind == catalog.KindCPU || i.Kind == KindStatic {
		return false
	}
	if !i.Available {
		return i.Reason == ReasonNoneFree || i.Reason == ReasonWaitlist
	}
	return i.Free <= 0
}

type staticDict map[string]any

// KubeSpawn is the profile's kubespawner_override.
type KubeSpawn struct {
	NodeSelector            map[string]string `json:"node_selector,omitempty"`
	ExtraResourceLimits     map[string]string `json:"extra_resource_limits,omitempty"`
	ExtraResourceGuarantees map[string]string `json:"extra_resource_guarantees,omitempty"`
	ExtraLabels             map[string]string `json:"extra_labels"`
	CPULimit                *float64          `json:"cpu_limit,omitempty"`
	CPUGuarantee            *float64          `json:"cpu_guarantee,omitempty"`
	MemLimit                string            `json:"mem_limit,omitempty"`
	MemGuarantee            string            `json:"mem_guarantee,omitempty"`
	Image                   string            `json:"image,omitempty"`
}

// Info is what the form needs beyond KubeSpawner's keys.
type Info struct {
	Kind          string `json:"kind"`
	Class         string `json:"class"`
	Count         int64  `json:"count"`
	Free          int64  `json:"free"`
	Total         int64  `json:"total"`
	Nodes         int    `json:"nodes"`
	Available     bool   `json:"available"`
	Reason        string `json:"reason"`
	ReasonText    string `json:"reasonText"`
	Provisionable bool   `json:"provisionable,omitempty"`
	// HeldForYouUntil is when the unit the waitlist holds for this user's server passes on (their turn).
	HeldForYouUntil time.Time `json:"heldForYouUntil,omitzero"`
	// Recommended marks the choice the usage API's right-size advice recommends for the server the form is for
	// (at most one per form); RecommendedText is the sentence why, also added to the description.
	Recommended     bool   `json:"recommended,omitempty"`
	RecommendedText string `json:"recommendedText,omitempty"`
}

// MarshalJSON writes a static profile as the administrator wrote it, with default and gpuhub set.
func (p Profile) MarshalJSON() ([]byte, error) {
	if p.static != nil {
		m := maps.Clone(map[string]any(p.static))
		m["default"] = p.Default
		m["gpuhub"] = p.GPUHub
		return json.Marshal(m)
	}
	type plain Profile
	return json.Marshal(plain(p))
}

// Choice is a generated (or static) choice before a user's groups and quota apply.
type Choice struct {
	Profile
	// Kind is the catalog's status of the choice's kind (zero for static choices).
	Kind catalog.KindStatus
	// Resources are what the pod asks for: resource -> units (nil for cpu and static).
	Resources map[string]int64
	groups    []string
	order     int
}

// Choices are every choice the configuration lets anyone see, in display order: the CPU choice, then each
// kind (a multi-GPU choice right after its single one), then the static profiles, sorted by their order.
func Choices(kinds []catalog.KindStatus, cfg *Config) []Choice {
	if cfg == nil {
		cfg = &Config{}
	}
	var out []Choice
	for _, k := range kinds {
		if k.Kind == catalog.KindCPU {
			out = append(out, cpuChoice(k, cfg))
			continue
		}
		o := cfg.For(k.Kind, k.Slug)
		if o.hidden() {
			continue
		}
		out = append(out, gpuChoice(k, 1, o))
		if k.Kind != string(gpu.KindGPU) {
			continue
		}
		for _, n := range slices.Sorted(slices.Values(slices.Compact(slices.Sorted(slices.Values(o.MultiGPU))))) {
			// Offered only where one schedulable node can hold n: a request that can never be placed is no choice.
			if n > 1 && k.MaxAllocatableOnOneSchedulableNode >= n {
				// The single kind's settings, but not its words: they describe one GPU.
				mo := cfg.For(k.Kind, k.Slug)
				mo.DisplayName, mo.Description = "", ""
				mo = cfg.Kinds[multiSlug(k.Slug, n)].merge(mo)
				if !mo.hidden() {
					out = append(out, gpuChoice(k, n, mo))
				}
			}
		}
	}
	if !slices.ContainsFunc(out, func(c Choice) bool { return c.Slug == catalog.SlugCPU }) {
		out = append([]Choice{cpuChoice(catalog.KindStatus{Slug: catalog.SlugCPU, Kind: catalog.KindCPU}, cfg)}, out...)
	}
	for _, p := range cfg.StaticProfiles {
		slug, _ := p["slug"].(string)
		// The administrator's profile wins over a generated one of the same slug.
		out = slices.DeleteFunc(out, func(c Choice) bool { return c.Slug == slug && c.Slug != catalog.SlugCPU })
		name, _ := p["display_name"].(string)
		desc, _ := p["description"].(string)
		order := 0
		if cfg.Kinds[slug].Order != nil {
			order = *cfg.Kinds[slug].Order
		}
		out = append(out, Choice{Profile: Profile{Slug: slug, DisplayName: name, Description: desc, static: staticDict(p),
			GPUHub: Info{Kind: KindStatic, Available: true}}, order: order})
	}
	slices.SortStableFunc(out, func(a, b Choice) int { return cmp.Compare(a.order, b.order) })
	return out
}

func multiSlug(slug string, n int64) string { return slug + "-x" + strconv.FormatInt(n, 10) }

func cpuChoice(k catalog.KindStatus, cfg *Config) Choice {
	o := cfg.For(catalog.KindCPU, catalog.SlugCPU)
	p := Profile{Slug: catalog.SlugCPU, DisplayName: "CPU only", Description: "No GPU: for work that does not need one.",
		GPUHub: Info{Kind: catalog.KindCPU, Nodes: k.SchedulableNodes, Available: true}}
	p.Override = kubeSpawn(o, nil, nil, catalog.SlugCPU)
	if o.DisplayName != "" {
		p.DisplayName = o.DisplayName
	}
	if o.Description != "" {
		p.Description = o.Description
	}
	return Choice{Profile: p, Kind: k, order: o.order()}
}

func kubeSpawn(o Override, sel map[string]string, res map[string]int64, slug string) KubeSpawn {
	ks := KubeSpawn{NodeSelector: sel, ExtraLabels: map[string]string{LabelProfile: slug},
		CPULimit: o.CPULimit, CPUGuarantee: o.CPUGuarantee, MemLimit: o.MemLimit, MemGuarantee: o.MemGuarantee, Image: o.Image}
	if len(res) > 0 {
		ks.ExtraResourceLimits, ks.ExtraResourceGuarantees = map[string]string{}, map[string]string{}
		for r, n := range res {
			// Extended resources cannot be overcommitted: limit and guarantee are equal (KubeSpawner wants strings).
			ks.ExtraResourceLimits[r] = strconv.FormatInt(n, 10)
			ks.ExtraResourceGuarantees[r] = strconv.FormatInt(n, 10)
		}
	}
	return ks
}

func gpuChoice(k catalog.KindStatus, n int64, o Override) Choice {
	slug := k.Slug
	if n > 1 {
		slug = multiSlug(k.Slug, n)
	}
	res := map[string]int64{k.Resource: n}
	// The total is what the nodes a new pod can land on hold: units on a cordoned or tainted node are no
	// choice for the user.
	free, total := k.FreeSets(n), k.AllocatableSets(n)
	name := displayName(k.Unit, n)
	if base := catalog.Slug(k.Unit); k.Slug != base {
		// A second pool of the same kind, advertised differently: tell the two apart.
		name += " (pool " + strings.TrimPrefix(k.Slug, base+"-") + ")"
	}
	p := Profile{Slug: slug, DisplayName: name, Description: description(k.Unit, n),
		Override: kubeSpawn(o, maps.Clone(k.NodeSelector), res, slug),
		GPUHub: Info{Kind: k.Kind, Class: k.Class, Count: n, Free: free, Total: total, Nodes: k.Nodes, Available: true,
			Provisionable: o.Provisionable != nil && *o.Provisionable}}
	if o.DisplayName != "" {
		p.DisplayName = o.DisplayName
	}
	if o.Description != "" {
		p.Description = o.Description
	}
	return Choice{Profile: p, Kind: k, Resources: res, groups: o.Groups, order: o.order()}
}

// Product is the GPU's name as people read it: "NVIDIA H100 80GB HBM3", "NVIDIA T4".
func Product(a gpu.Allocation) string {
	p := gpu.ShortProduct(a.Product)
	if p == "" {
		return "GPU of unknown model"
	}
	return "NVIDIA " + strings.ReplaceAll(p, "-", " ")
}

func displayName(a gpu.Allocation, n int64) string {
	p := Product(a)
	switch a.Kind {
	case gpu.KindMIG:
		return fmt.Sprintf("%s, MIG %s slice (%d/%d GPU%s)", p, a.Profile, a.Numerator, a.Denominator, memoryNote(a))
	case gpu.KindSharedMIG:
		return fmt.Sprintf("%s, time-sliced share of a MIG %s slice (%s GPU)", p, a.Profile, fraction(a))
	case gpu.KindShared:
		return fmt.Sprintf("%s, time-sliced share (%s GPU)", p, fraction(a))
	case gpu.KindMPS:
		return fmt.Sprintf("%s, MPS share (%s GPU)", p, fraction(a))
	}
	if n > 1 {
		return fmt.Sprintf("%dx %s (%d whole GPUs)", n, p, n)
	}
	return p + " (whole GPU)"
}

func memoryNote(a gpu.Allocation) string {
	if m := memoryGB(a); m > 0 {
		return fmt.Sprintf(", %d GB", m)
	}
	return ""
}

func fraction(a gpu.Allocation) string { return fmt.Sprintf("%d/%d", a.Numerator, a.Denominator) }

// memoryGB is the memory of one unit in GB: a MIG profile's name says it ("3g.20gb"); a whole GPU's from its
// GFD label in MiB, rounded. 0 when unknown.
func memoryGB(a gpu.Allocation) int64 {
	if a.Kind.MIG() {
		if gb := gpu.MIGProfileMemoryGB(a.Profile); gb > 0 {
			return gb
		}
	}
	return int64(math.Round(float64(a.MemoryTotalBytes) / (1 << 30)))
}

func withMemory(a gpu.Allocation, format string) string {
	m := memoryGB(a)
	if m <= 0 {
		return ""
	}
	return fmt.Sprintf(format, m)
}

func description(a gpu.Allocation, n int64) string {
	p := Product(a)
	switch a.Kind {
	case gpu.KindMIG:
		return fmt.Sprintf("A MIG %s slice of %s: %d/%d of the GPU%s, isolated from other users.",
			a.Profile, gpu.WithArticle(p), a.Numerator, a.Denominator, withMemory(a, " with %d GB of memory of its own"))
	case gpu.KindSharedMIG:
		return fmt.Sprintf("A time-sliced share of a MIG %s slice of %s: up to %d users take turns on the slice%s (%s of the GPU each). "+
			"No memory isolation: the others on the slice can use up its memory.",
			a.Profile, gpu.WithArticle(p), a.Replicas, withMemory(a, " and its %d GB of memory"), fraction(a))
	case gpu.KindShared:
		return fmt.Sprintf("A time-sliced share of %s%s: up to %d users take turns on the GPU (%s of its time each). "+
			"No memory isolation: the others sharing it can use up its memory.",
			gpu.WithArticle(p), withMemory(a, " with %d GB of memory"), a.Replicas, fraction(a))
	case gpu.KindMPS:
		return fmt.Sprintf("An MPS share of %s%s: up to %d users run on the GPU at once, each limited to %s of it. "+
			"No memory isolation: an error in one user's program can stop the others'.",
			gpu.WithArticle(p), withMemory(a, " with %d GB of memory"), a.Replicas, fraction(a))
	}
	unit, units := p+" GPU", p+" GPUs"
	if gpu.ShortProduct(a.Product) == "" {
		unit, units = "GPU of unknown model", "GPUs of unknown model"
	}
	if n > 1 {
		return fmt.Sprintf("%s whole %s on one node%s, yours alone.", gpu.Capitalize(gpu.CountWord(n)), units, withMemory(a, ", %d GB of memory each"))
	}
	return fmt.Sprintf("A whole %s%s, yours alone.", unit, withMemory(a, " with %d GB of memory"))
}
