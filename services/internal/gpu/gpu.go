// Package gpu is the one GPU vocabulary of gpuhub: the NVIDIA device plugin's resource names, the GPU Feature
// Discovery labels, how a pod holds a GPU (kinds), how many GPU-equivalents that is, and the names people read.
// It is the only package that knows nvidia.com/... strings; the agent, the usage API and the services that act
// on their numbers all ask it. It is pure (no I/O, no clock) so that the rules are table-tested and documented
// in one place (services/usage-api/README.md, "Share model").
package gpu

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Kind is how a GPU is handed to a pod.
type Kind string

const (
	// KindGPU is a whole physical GPU (nvidia.com/gpu without sharing).
	KindGPU Kind = "gpu"
	// KindMIG is a MIG instance (nvidia.com/mig-<g>g.<mem>gb, or nvidia.com/gpu under the single MIG strategy).
	KindMIG Kind = "mig"
	// KindShared is a time-sliced (or MPS) replica of a GPU (nvidia.com/gpu.shared, or nvidia.com/gpu on a
	// node whose device plugin advertises replicas > 1).
	KindShared Kind = "shared"
)

// Resource names and node labels (NVIDIA device plugin and GPU Feature Discovery).
const (
	domain            = "nvidia.com/"
	ResourceGPU       = "nvidia.com/gpu"
	ResourceGPUShared = "nvidia.com/gpu.shared"
	migResourcePrefix = "nvidia.com/mig-"

	LabelProduct         = "nvidia.com/gpu.product"
	LabelMemoryMiB       = "nvidia.com/gpu.memory"
	LabelCount           = "nvidia.com/gpu.count"
	LabelReplicas        = "nvidia.com/gpu.replicas"
	LabelSharingStrategy = "nvidia.com/gpu.sharing-strategy"
	LabelMIGStrategy     = "nvidia.com/mig.strategy"
)

// Allocation is one kind of GPU a pod holds, with its share in GPU-equivalents.
type Allocation struct {
	Kind     Kind
	Resource string // the extended resource requested, e.g. nvidia.com/mig-3g.20gb
	Count    int64  // how many units of Resource
	Product  string // GPU product as the node labels name it, dashes turned to spaces ("NVIDIA A100-SXM4-40GB")
	Profile  string // MIG profile ("3g.20gb"), empty otherwise
	// Numerator/Denominator is the share of one unit: 1/1 (whole GPU), g/slices (MIG), 1/replicas (shared).
	Numerator, Denominator int64
	// Assumed is set when a number came from a default rather than from the node's labels.
	Assumed string
	// MemoryTotalBytes of one unit, from node labels; 0 when unknown.
	MemoryTotalBytes uint64
}

// Share returns the GPU-equivalents of all units: Count * Numerator / Denominator.
func (a Allocation) Share() float64 {
	if a.Denominator == 0 {
		return 0
	}
	return float64(a.Count*a.Numerator) / float64(a.Denominator)
}

// UnitShare returns the GPU-equivalents of one unit.
func (a Allocation) UnitShare() float64 {
	if a.Denominator == 0 {
		return 0
	}
	return float64(a.Numerator) / float64(a.Denominator)
}

// Class names the GPU kind for accounting: kind, short product and profile ("mig A100-SXM4-40GB 3g.20gb").
// The ledger and the metrics aggregate by Class.
func (a Allocation) Class() string {
	p := ShortProduct(a.Product)
	if p == "" {
		p = "unknown"
	}
	if a.Kind == KindMIG {
		return fmt.Sprintf("%s %s %s", a.Kind, p, a.Profile)
	}
	return fmt.Sprintf("%s %s", a.Kind, p)
}

// Description is a one-line human explanation of one unit of the allocation.
func (a Allocation) Description() string {
	p := ShortProduct(a.Product)
	if p == "" {
		p = "GPU of unknown model"
	}
	var s string
	switch a.Kind {
	case KindMIG:
		s = fmt.Sprintf("MIG %s on %s, %d/%d of a GPU", a.Profile, withArticle(familyName(p)), a.Numerator, a.Denominator)
	case KindShared:
		s = fmt.Sprintf("1 of %d time-sliced shares of %s", a.Denominator, withArticle(familyName(p)))
	default:
		s = fmt.Sprintf("Whole %s", p)
	}
	if a.Assumed != "" {
		s += " (" + a.Assumed + ")"
	}
	return s
}

// withArticle puts "a" or "an" before a model name as it is spoken: letters such as A, H or M start with a
// vowel sound ("an A100", "an H100"), others do not ("a T4", "a B200").
func withArticle(name string) string {
	if name == "" {
		return name
	}
	switch name[0] {
	case 'A', 'E', 'F', 'H', 'I', 'L', 'M', 'N', 'O', 'R', 'S', 'X', 'a', 'e', 'i', 'o', 'u':
		return "an " + name
	}
	return "a " + name
}

// ShortProduct strips the vendor and the GFD suffixes: "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb" -> "A100-SXM4-40GB".
func ShortProduct(product string) string {
	p := strings.ReplaceAll(product, " ", "-")
	p = strings.TrimPrefix(p, "NVIDIA-")
	p = strings.TrimPrefix(p, "Tesla-")
	if i := strings.Index(p, "-MIG-"); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimSuffix(p, "-SHARED")
	return p
}

// familyName is the model without form factor and memory: "A100-SXM4-40GB" -> "A100", "Tesla-T4" -> "T4".
func familyName(short string) string {
	if i := strings.IndexByte(short, '-'); i > 0 {
		return short[:i]
	}
	return short
}

// migSlicesByFamily is the number of GPU-instance compute slices of a whole GPU, used when the node has no
// nvidia.com/mig-<profile>.slices.gi label to say how many slices a profile takes. A30 has 4; every other
// MIG-capable GPU to date (A100, H100, H200, GH200, B200) has 7.
var migSlicesByFamily = map[string]int64{
	"A100": 7, "A800": 7, "H100": 7, "H800": 7, "H200": 7, "H20": 7, "GH200": 7, "B200": 7, "GB200": 7, "A30": 4,
}

const defaultMIGSlices = 7

var migProfileRe = regexp.MustCompile(`^(\d+)g\.(\d+)gb(\+\w+)?$`)

// Node is what the share model needs to know about a node: its labels.
type Node struct {
	Labels map[string]string
}

// productName keeps GFD's dashes except the first, so "NVIDIA-A100-SXM4-40GB" reads "NVIDIA A100-SXM4-40GB".
func productName(label string) string {
	label = BaseProduct(label)
	if rest, ok := strings.CutPrefix(label, "NVIDIA-"); ok {
		return "NVIDIA " + rest
	}
	return label
}

// IsGPUResource reports whether name is an NVIDIA GPU resource the share model understands.
func IsGPUResource(name string) bool {
	return name == ResourceGPU || name == ResourceGPUShared || strings.HasPrefix(name, migResourcePrefix)
}

// Allocations returns the GPU allocations of a pod that requests resources (name -> count) on node. Resources
// other than GPUs are ignored; the result is sorted by resource name so that output is stable.
func Allocations(resources map[string]int64, node Node) []Allocation {
	names := make([]string, 0, len(resources))
	for name, n := range resources {
		if n > 0 && IsGPUResource(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	out := make([]Allocation, 0, len(names))
	for _, name := range names {
		out = append(out, allocation(name, resources[name], node))
	}
	return out
}

func allocation(resource string, count int64, node Node) Allocation {
	a := Allocation{
		Resource: resource, Count: count, Product: productName(node.Labels[LabelProduct]),
		Numerator: 1, Denominator: 1, Kind: KindGPU,
	}
	switch {
	case strings.HasPrefix(resource, migResourcePrefix):
		a.Kind = KindMIG
		a.Profile = strings.TrimPrefix(resource, migResourcePrefix)
		migShare(&a, node)
	case resource == ResourceGPUShared:
		a.Kind = KindShared
		sharedShare(&a, node)
		a.MemoryTotalBytes = labelMiB(node.Labels[LabelMemoryMiB])
	case migSingleProfile(node) != "":
		// Under the single MIG strategy every nvidia.com/gpu is a MIG device of the one profile the node has.
		a.Kind = KindMIG
		a.Profile = migSingleProfile(node)
		migShare(&a, node)
	case replicas(node) > 1:
		// Time-slicing without renameByDefault: nvidia.com/gpu is a replica.
		a.Kind = KindShared
		sharedShare(&a, node)
		a.MemoryTotalBytes = labelMiB(node.Labels[LabelMemoryMiB])
	default:
		a.MemoryTotalBytes = labelMiB(node.Labels[LabelMemoryMiB])
	}
	return a
}

func migSingleProfile(node Node) string {
	if node.Labels[LabelMIGStrategy] != "single" {
		return ""
	}
	p := node.Labels[LabelProduct]
	if i := strings.Index(p, "-MIG-"); i >= 0 {
		return p[i+len("-MIG-"):]
	}
	return ""
}

func migShare(a *Allocation, node Node) {
	var g int64
	if v, err := strconv.ParseInt(node.Labels[LabelMIGSlicesGI(a.Profile)], 10, 64); err == nil && v > 0 {
		g = v
	} else if m := migProfileRe.FindStringSubmatch(a.Profile); m != nil {
		g, _ = strconv.ParseInt(m[1], 10, 64)
	}
	total, ok := migSlicesByFamily[familyName(ShortProduct(a.Product))]
	if !ok {
		total = defaultMIGSlices
		a.Assumed = fmt.Sprintf("assumed %d slices per GPU", total)
	}
	if g <= 0 || g > total {
		// An unparseable profile holds at least one slice; never more than the GPU.
		g = min(max(g, 1), total)
		a.Assumed = "profile slices unknown"
	}
	a.Numerator, a.Denominator = g, total
	a.MemoryTotalBytes = labelMiB(node.Labels[LabelMIGMemoryMiB(a.Profile)])
}

func sharedShare(a *Allocation, node Node) {
	r := replicas(node)
	if r < 1 {
		// Without the replicas label a shared unit is charged as a whole GPU: an upper bound, never an invention
		// in the user's favour that would hide use.
		r = 1
		a.Assumed = "replicas unknown, charged as a whole GPU"
	}
	a.Numerator, a.Denominator = 1, r
}

func replicas(node Node) int64 {
	if s := node.Labels[LabelSharingStrategy]; s == "none" {
		return 1
	}
	r, err := strconv.ParseInt(node.Labels[LabelReplicas], 10, 64)
	if err != nil {
		return 0
	}
	return r
}

func labelMiB(s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return v << 20
}

// IsNVIDIAName reports whether a label or resource name is in the nvidia.com domain, whatever it means.
func IsNVIDIAName(name string) bool { return strings.HasPrefix(name, domain) }

// MIGResource is the mixed-strategy resource of a MIG profile: "3g.20gb" -> "nvidia.com/mig-3g.20gb".
func MIGResource(profile string) string { return migResourcePrefix + profile }

// MIGProfile is the profile a mixed-strategy MIG resource names: "nvidia.com/mig-3g.20gb" -> "3g.20gb", true.
func MIGProfile(resource string) (string, bool) {
	return strings.CutPrefix(resource, migResourcePrefix)
}

// LabelMIGMemoryMiB is the GFD label with the memory of one instance of a MIG profile, in MiB.
func LabelMIGMemoryMiB(profile string) string { return migResourcePrefix + profile + ".memory" }

// LabelMIGSlicesGI is the GFD label with the GPU-instance slices a MIG profile takes.
func LabelMIGSlicesGI(profile string) string { return migResourcePrefix + profile + ".slices.gi" }

// MIGProfilesLabelled lists the MIG profiles a node's GFD labels describe (a nvidia.com/mig-<profile>.count
// label each), sorted.
func MIGProfilesLabelled(labels map[string]string) []string {
	var out []string
	for k := range labels {
		if rest, ok := strings.CutPrefix(k, migResourcePrefix); ok {
			if p, ok := strings.CutSuffix(rest, ".count"); ok {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// BaseProduct is the card a GFD product label names, without the suffixes GFD adds for sharing: "-SHARED"
// (time-slicing or MPS) and "-MIG-<profile>" (single strategy): "Tesla-T4-SHARED" -> "Tesla-T4".
func BaseProduct(label string) string {
	label = strings.TrimSuffix(label, "-SHARED")
	if i := strings.Index(label, "-MIG-"); i >= 0 {
		label = label[:i]
	}
	return label
}
