package profiles

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// Config is the administrator's overrides (services/gpu-profiles/README.md, "Overrides"): the file that
// --config names, strict YAML. The zero Config is valid: every kind offered as generated, CPU-only first and
// the default.
type Config struct {
	// Default is the slug of the choice selected when the form opens (default "cpu"). When the user cannot
	// have it (not offered, disabled), the CPU choice is.
	Default string `yaml:"default"`
	// Note is shown at the top of the form.
	Note string `yaml:"note"`
	// Defaults apply to every generated choice, the CPU one included, unless a kind says otherwise.
	Defaults Override `yaml:"defaults"`
	// Kinds override choices by kind name (gpu, mig, shared, mps, mig-shared, cpu) or by slug
	// (gpu-h100-80gb-hbm3); a slug's settings win over its kind's.
	Kinds map[string]Override `yaml:"kinds"`
	// StaticProfiles are KubeSpawner profile dicts passed through as written, after the generated ones.
	StaticProfiles []map[string]any `yaml:"staticProfiles"`
	// Tolerations are those of the single-user pods: a node tainted with a taint they tolerate still counts as
	// free. Unset: inventory.DefaultTolerations. The chart gives gpu-quota the same (its --tolerations).
	Tolerations []Toleration `yaml:"tolerations"`
}

// Override is what an administrator may set for a choice. Unset fields inherit (slug < kind < defaults).
type Override struct {
	// Hide removes the choice for everyone (refused for cpu: nothing hides the CPU choice).
	Hide *bool `yaml:"hide"`
	// DisplayName and Description replace the generated ones (plain text; the free count is still shown).
	DisplayName string `yaml:"displayName"`
	Description string `yaml:"description"`
	// Order sorts the choices, smaller first; equal orders keep the generated order. Default 0.
	Order *int `yaml:"order"`
	// Groups, when set, are the only Hub groups whose members see the choice (refused for cpu).
	Groups []string `yaml:"groups"`
	// Provisionable says the kind's node pool can grow (cluster autoscaler, Karpenter): a pending spawn waits
	// for a node instead of ending.
	Provisionable *bool `yaml:"provisionable"`
	// MultiGPU are extra choices of several whole GPUs on one node (2, 4, 8), each offered where one
	// schedulable node has that many (whole-GPU kinds only).
	MultiGPU []int64 `yaml:"multiGPU"`
	// CPU cores and memory (KubeSpawner's syntax: 512M, 4G) as limits and guarantees, and the image.
	CPULimit     *float64 `yaml:"cpuLimit"`
	CPUGuarantee *float64 `yaml:"cpuGuarantee"`
	MemLimit     string   `yaml:"memLimit"`
	MemGuarantee string   `yaml:"memGuarantee"`
	Image        string   `yaml:"image"`
}

// Toleration is one toleration of the single-user pods, as in a pod spec.
type Toleration struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"`
	Value    string `yaml:"value"`
	Effect   string `yaml:"effect"`
}

var (
	slugRe = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	memRe  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?[KMGT]?$`)
)

// Validate is the policy package's hook: what the values mean.
func (c *Config) Validate() []error {
	var errs []error
	if c.Default != "" && !slugRe.MatchString(c.Default) {
		errs = append(errs, policy.Errorf([]string{"default"}, "%q is not a slug (lowercase letters, digits and dashes, as in gpu-h100-80gb-hbm3)", c.Default))
	}
	errs = append(errs, c.Defaults.validate([]string{"defaults"}, "")...)
	if c.Defaults.Hide != nil || len(c.Defaults.Groups) > 0 || len(c.Defaults.MultiGPU) > 0 {
		errs = append(errs, policy.Errorf([]string{"defaults"}, "hide, groups and multiGPU are set per kind, not in defaults"))
	}
	for key, o := range c.Kinds {
		path := []string{"kinds", key}
		if !gpu.Kind(key).Known() && key != catalog.KindCPU && !slugRe.MatchString(key) {
			errs = append(errs, policy.KeyErrorf(path, "%q is neither a kind (gpu, mig, shared, mps, mig-shared, cpu) nor a slug (gpu-h100-80gb-hbm3)", key))
			continue
		}
		errs = append(errs, o.validate(path, key)...)
	}
	seen := map[string]int{}
	for i, p := range c.StaticProfiles {
		path := []string{"staticProfiles", strconv.Itoa(i)}
		slug, _ := p["slug"].(string)
		if !slugRe.MatchString(slug) {
			errs = append(errs, policy.Errorf(path, "a static profile needs a slug of lowercase letters, digits and dashes (KubeSpawner selects it by slug)"))
		} else if slug == catalog.SlugCPU {
			errs = append(errs, policy.Errorf(append(path, "slug"), "cpu is the generated CPU choice's slug; set its text and resources under kinds.cpu"))
		} else if j, dup := seen[slug]; dup {
			errs = append(errs, policy.Errorf(append(path, "slug"), "slug %q is already used by staticProfiles.%d", slug, j))
		} else {
			seen[slug] = i
		}
		if s, _ := p["display_name"].(string); strings.TrimSpace(s) == "" {
			errs = append(errs, policy.Errorf(path, "a static profile needs a display_name (the text of its choice on the form)"))
		}
		if _, ok := p["gpuhub"]; ok {
			errs = append(errs, policy.KeyErrorf(append(path, "gpuhub"), "the gpuhub key is gpu-profiles' own; remove it"))
		}
		// The form goes to the Hub as JSON: a key YAML reads as a number or a boolean (1: x, yes: x) would make
		// every form fail to encode.
		if _, err := json.Marshal(p); err != nil {
			errs = append(errs, policy.Errorf(path, "a static profile must be what JSON can hold (quote keys such as 1 or yes): %v", err))
		}
	}
	for i, t := range c.Tolerations {
		for _, p := range inventory.CheckToleration(t.toleration()) {
			path := []string{"tolerations", strconv.Itoa(i)}
			if p.Field != "" {
				path = append(path, p.Field)
			}
			errs = append(errs, policy.Errorf(path, "%s", p.Message))
		}
	}
	return errs
}

func (o Override) validate(path []string, key string) []error {
	var errs []error
	if key == catalog.KindCPU && (o.Hide != nil && *o.Hide || len(o.Groups) > 0) {
		errs = append(errs, policy.Errorf(path, "nothing hides the CPU choice: remove hide and groups from cpu"))
	}
	if len(o.MultiGPU) > 0 && key != "" && key != string(gpu.KindGPU) && !strings.HasPrefix(key, "gpu-") {
		errs = append(errs, policy.Errorf(append(path, "multiGPU"), "multiGPU is for whole GPUs only (kind gpu or a gpu-... slug)"))
	}
	for i, n := range o.MultiGPU {
		if n < 2 || n > 64 {
			errs = append(errs, policy.Errorf(append(path, "multiGPU", strconv.Itoa(i)), "a multi-GPU choice is 2 to 64 GPUs, found %d", n))
		}
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"cpuLimit", o.CPULimit}, {"cpuGuarantee", o.CPUGuarantee}} {
		// !(v > 0) also refuses .nan, which no pod spec (and no JSON form) can hold; .inf is no count of cores.
		if f.v != nil && (!(*f.v > 0) || math.IsInf(*f.v, 1)) {
			errs = append(errs, policy.Errorf(append(path, f.name), "CPU cores are a number more than 0, found %v", *f.v))
		}
	}
	for _, f := range []struct{ name, v string }{{"memLimit", o.MemLimit}, {"memGuarantee", o.MemGuarantee}} {
		if f.v != "" && !memRe.MatchString(f.v) {
			errs = append(errs, policy.Errorf(append(path, f.name), "memory is a number of bytes with K, M, G or T (as in 512M or 4G), found %q", f.v))
		}
	}
	for i, g := range o.Groups {
		if strings.TrimSpace(g) == "" {
			errs = append(errs, policy.Errorf(append(path, "groups", strconv.Itoa(i)), "a group name cannot be empty"))
		}
	}
	return errs
}

// merge lays o over base: o's set fields win.
func (o Override) merge(base Override) Override {
	out := base
	if o.Hide != nil {
		out.Hide = o.Hide
	}
	if o.DisplayName != "" {
		out.DisplayName = o.DisplayName
	}
	if o.Description != "" {
		out.Description = o.Description
	}
	if o.Order != nil {
		out.Order = o.Order
	}
	if o.Groups != nil {
		out.Groups = o.Groups
	}
	if o.Provisionable != nil {
		out.Provisionable = o.Provisionable
	}
	if o.MultiGPU != nil {
		out.MultiGPU = o.MultiGPU
	}
	if o.CPULimit != nil {
		out.CPULimit = o.CPULimit
	}
	if o.CPUGuarantee != nil {
		out.CPUGuarantee = o.CPUGuarantee
	}
	if o.MemLimit != "" {
		out.MemLimit = o.MemLimit
	}
	if o.MemGuarantee != "" {
		out.MemGuarantee = o.MemGuarantee
	}
	if o.Image != "" {
		out.Image = o.Image
	}
	return out
}

// For is the override in effect for the choice slug of kind: defaults, then the kind's, then the slug's.
// A multi-GPU choice (gpu-...-x2) takes its single-GPU kind's settings except displayName and description.
func (c *Config) For(kind, slug string) Override {
	if c == nil {
		return Override{}
	}
	o := c.Defaults
	o = c.Kinds[kind].merge(o)
	if slug != kind {
		o = c.Kinds[slug].merge(o)
	}
	return o
}

// Provisionable reports whether the configuration marks the kind of slug as one whose node pool can grow
// (for the pending explainer). A nil Config provisions nothing.
func (c *Config) Provisionable(kind, slug string) bool {
	p := c.For(kind, slug).Provisionable
	return p != nil && *p
}

// TolerationsOrDefault are the tolerations the catalog counts free nodes with (inventory.Node.Blocked).
func (c *Config) TolerationsOrDefault() []corev1.Toleration {
	if c == nil || c.Tolerations == nil {
		return catalog.DefaultTolerations()
	}
	out := make([]corev1.Toleration, 0, len(c.Tolerations))
	for _, t := range c.Tolerations {
		out = append(out, t.toleration())
	}
	return out
}

func (t Toleration) toleration() corev1.Toleration {
	return corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}
}

func (o Override) hidden() bool { return o.Hide != nil && *o.Hide }

func (o Override) order() int {
	if o.Order == nil {
		return 0
	}
	return *o.Order
}

// visibleTo reports whether a member of groups sees a choice limited to o.Groups.
func (o Override) visibleTo(groups []string) bool {
	if len(o.Groups) == 0 {
		return true
	}
	for _, g := range groups {
		if slices.Contains(o.Groups, g) {
			return true
		}
	}
	return false
}

// String is for errors and logs.
func (t Toleration) String() string { return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect) }
