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
	"sync"
)

// Kind is how a GPU is handed to a pod. The string values are stored in the ledger: never change them.
type Kind string

const (
	// KindGPU is a whole physical GPU (nvidia.com/gpu without sharing).
	KindGPU Kind = "gpu"
	// KindMIG is a MIG instance (nvidia.com/mig-<profile> under the mixed strategy, or nvidia.com/gpu under the
	// single strategy).
	KindMIG Kind = "mig"
	// KindShared is a time-sliced replica of a whole GPU (nvidia.com/gpu.shared with renameByDefault, or
	// nvidia.com/gpu with replicas > 1 and sharing strategy time-slicing).
	KindShared Kind = "shared"
	// KindMPS is an MPS share of a whole GPU: the same resources as KindShared under sharing strategy mps.
	KindMPS Kind = "mps"
	// KindSharedMIG is a time-sliced replica of a MIG instance (nvidia.com/mig-<profile>[.shared] with the
	// nvidia.com/mig-<profile>.replicas label > 1, or the single strategy's nvidia.com/gpu[.shared] shared).
	KindSharedMIG Kind = "mig-shared"
)

// MIG reports whether units of this kind are MIG instances (alone or time-sliced).
func (k Kind) MIG() bool { return k == KindMIG || k == KindSharedMIG }

// Replicated reports whether pods share one unit of this kind (time-slicing or MPS).
func (k Kind) Replicated() bool { return k == KindShared || k == KindMPS || k == KindSharedMIG }

// Kinds lists every Kind, whole GPUs first: the order in which policies, messages and tables list them.
func Kinds() []Kind { return []Kind{KindGPU, KindMIG, KindShared, KindMPS, KindSharedMIG} }

// Known reports whether k is one of Kinds (a policy file or an API names a kind that exists).
func (k Kind) Known() bool {
	switch k {
	case KindGPU, KindMIG, KindShared, KindMPS, KindSharedMIG:
		return true
	}
	return false
}

// Resource names and node labels (NVIDIA device plugin and GPU Feature Discovery).
const (
	domain            = "nvidia.com/"
	ResourceGPU       = "nvidia.com/gpu"
	ResourceGPUShared = "nvidia.com/gpu.shared"
	migResourcePrefix = "nvidia.com/mig-"
	// sharedSuffix is what renameByDefault appends to a replicated resource's name.
	sharedSuffix = ".shared"

	LabelProduct         = "nvidia.com/gpu.product"
	LabelMemoryMiB       = "nvidia.com/gpu.memory"
	LabelCount           = "nvidia.com/gpu.count"
	LabelReplicas        = "nvidia.com/gpu.replicas"
	LabelSharingStrategy = "nvidia.com/gpu.sharing-strategy"
	LabelMIGStrategy     = "nvidia.com/mig.strategy"

	// Values of the sharing-strategy labels.
	SharingNone        = "none"
	SharingTimeSlicing = "time-slicing"
	SharingMPS         = "mps"
	// MIGStrategySingle advertises every MIG instance of a node, all of one profile, as nvidia.com/gpu.
	MIGStrategySingle = "single"
)

// GFD labels every resource it describes with <resource>.<attribute>, e.g. nvidia.com/mig-1g.5gb.replicas, and
// the single strategy's MIG instances under nvidia.com/gpu.<attribute>.
const (
	attrProduct  = "product"
	attrMemory   = "memory"
	attrReplicas = "replicas"
	attrSharing  = "sharing-strategy"
	attrSlicesGI = "slices.gi"
)

// Allocation is one kind of GPU a pod holds, with its share in GPU-equivalents.
type Allocation struct {
	Kind     Kind
	Resource string // the extended resource requested, e.g. nvidia.com/mig-3g.20gb
	Count    int64  // how many units of Resource
	Product  string // GPU product as the node labels name it, first dash a space ("NVIDIA A100-SXM4-40GB")
	Profile  string // MIG profile ("3g.20gb"), empty otherwise
	// Numerator/Denominator is the share of one unit in GPU-equivalents ("held"): 1/1 (whole GPU), g/slices
	// (MIG), 1/replicas (time-sliced or MPS), g/(slices x replicas) (time-sliced MIG).
	Numerator, Denominator int64
	// Replicas is how many pods share one unit: 1 unless Kind.Replicated().
	Replicas int64
	// Assumed is set when a number came from a default rather than from the node's labels.
	Assumed string
	// MemoryTotalBytes of one unit (of the whole GPU or MIG instance, shared or not), from node labels; 0 when
	// unknown.
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

// UtilizationScale says what a utilization number measured for one unit is a fraction of, in physical GPUs:
// used GPUs = utilization/100 x UtilizationScale. It is 1 where the number is already a fraction of the physical
// GPU's time (whole GPU; time-sliced and MPS replicas, whose NVML per-process utilization is of the whole GPU),
// and g/slices where it is a fraction of a MIG instance (MIG and time-sliced MIG; DCGM measures the instance).
// It is never divided by the replicas: a pod alone on a 4-way time-sliced GPU that keeps it busy uses 1 GPU
// while it holds 1/4.
func (a Allocation) UtilizationScale() float64 {
	if a.Denominator == 0 {
		return 0
	}
	if a.Kind.MIG() {
		return float64(a.Numerator*max(a.Replicas, 1)) / float64(a.Denominator)
	}
	return 1
}

// Class names the GPU kind for accounting: kind, short product and profile ("mig A100-SXM4-40GB 3g.20gb").
// The ledger and the metrics aggregate by Class. Each name is built once and kept (names).
func (a Allocation) Class() string {
	k := nameKey{kind: a.Kind, product: a.Product, profile: a.Profile}
	if name, ok := classNames.lookup(k); ok {
		return name
	}
	p := ShortProduct(a.Product)
	if p == "" {
		p = "unknown"
	}
	var name string
	if a.Kind.MIG() {
		name = fmt.Sprintf("%s %s %s", a.Kind, p, a.Profile)
	} else {
		name = fmt.Sprintf("%s %s", a.Kind, p)
	}
	classNames.store(k, name)
	return name
}

// names keeps the strings built from an allocation's fields: the usage API names every unit of every pod at each
// tick, and a string built each time was tens of thousands of allocations per tick at 20,000 pods (more garbage
// collection under its requests) and as many copies of a few strings held in its view and ledger. At most
// maxNames are kept: a cluster has a few dozen; past the bound (labels that change without end) a name is built
// each time, as before.
type names struct {
	mu sync.RWMutex
	m  map[nameKey]string
}

// nameKey is what a name depends on (Description: all of it; Class: kind, product and profile).
type nameKey struct {
	kind                             Kind
	product, profile, assumed        string
	numerator, denominator, replicas int64
}

const maxNames = 4096

var classNames, descriptions names

func (n *names) lookup(k nameKey) (string, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	s, ok := n.m[k]
	return s, ok
}

func (n *names) store(k nameKey, s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil {
		n.m = map[nameKey]string{}
	}
	if len(n.m) < maxNames {
		n.m[k] = s
	}
}

// Description is a one-line human explanation of one unit of the allocation, built once and kept (names).
func (a Allocation) Description() string {
	k := nameKey{kind: a.Kind, product: a.Product, profile: a.Profile, assumed: a.Assumed,
		numerator: a.Numerator, denominator: a.Denominator, replicas: a.Replicas}
	if s, ok := descriptions.lookup(k); ok {
		return s
	}
	s := a.describe()
	descriptions.store(k, s)
	return s
}

func (a Allocation) describe() string {
	p := ShortProduct(a.Product)
	if p == "" {
		p = "GPU of unknown model"
	}
	var s string
	switch a.Kind {
	case KindMIG:
		s = fmt.Sprintf("MIG %s on %s, %d/%d of a GPU", a.Profile, WithArticle(familyName(p)), a.Numerator, a.Denominator)
	case KindSharedMIG:
		s = fmt.Sprintf("1 of %d time-sliced shares of MIG %s on %s, %d/%d of a GPU",
			a.Replicas, a.Profile, WithArticle(familyName(p)), a.Numerator, a.Denominator)
	case KindShared:
		s = fmt.Sprintf("1 of %d time-sliced shares of %s", a.Denominator, WithArticle(familyName(p)))
	case KindMPS:
		s = fmt.Sprintf("1 of %d MPS shares of %s", a.Denominator, WithArticle(familyName(p)))
	default:
		s = fmt.Sprintf("Whole %s", p)
	}
	if a.Assumed != "" {
		s += " (" + a.Assumed + ")"
	}
	return s
}

// WithArticle puts "a" or "an" before a phrase as its first word is spoken. A model name or initialism is said
// letter by letter, and letters such as A, H, M or R start with a vowel sound ("an A100", "an H100", "an MPS
// share", "an RTX"), others do not ("a T4", "a B200"); a word, and MIG, which is said as one, goes by its first
// letter ("a MIG slice", "an idle GPU", "a time-sliced share").
func WithArticle(phrase string) string {
	if phrase == "" {
		return phrase
	}
	word, _, _ := strings.Cut(phrase, " ")
	if vowelSound(word) {
		return "an " + phrase
	}
	return "a " + phrase
}

// spokenAsWord are the initialisms said as a word.
var spokenAsWord = map[string]bool{"MIG": true}

func vowelSound(word string) bool {
	if isInitialism(word) && !spokenAsWord[word] {
		return strings.ContainsRune("AEFHILMNORSX", rune(word[0]))
	}
	return strings.ContainsRune("AEIOUaeiou", rune(word[0]))
}

// isInitialism: capitals and digits only ("H100", "MPS", "L40S", "3g.20gb" is not one).
func isInitialism(word string) bool {
	for _, r := range word {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return word[0] >= 'A' && word[0] <= 'Z'
}

// ShortProduct strips the vendor and the GFD suffixes: "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb" -> "A100-SXM4-40GB".
func ShortProduct(product string) string {
	p := BaseProduct(strings.ReplaceAll(product, " ", "-"))
	p = strings.TrimPrefix(p, "NVIDIA-")
	p = strings.TrimPrefix(p, "Tesla-")
	return p
}

// familyName is the model without form factor and memory: "A100-SXM4-40GB" -> "A100", "Tesla-T4" -> "T4".
func familyName(short string) string {
	if i := strings.IndexByte(short, '-'); i > 0 {
		return short[:i]
	}
	return short
}

// migSlicesByFamily is the number of GPU-instance compute slices of a whole GPU. A30 has 4; every other
// MIG-capable GPU to date (A100, H100, H200, GH200, B200) has 7.
var migSlicesByFamily = map[string]int64{
	"A100": 7, "A800": 7, "H100": 7, "H800": 7, "H200": 7, "H20": 7, "GH200": 7, "B200": 7, "GB200": 7, "A30": 4,
}

const defaultMIGSlices = 7

// migProfileRe reads a MIG profile as the device plugin names it: [<c>c.]<g>g.<gb>gb, then attributes the
// plugin turns from "+me" into ".me" (and "+me.all", "-me", "+gfx"): "3g.20gb", "1c.3g.20gb", "1g.10gb.me".
var migProfileRe = regexp.MustCompile(`^(?:\d+c\.)?(\d+)g\.(\d+)gb(?:[.+-][a-z][a-z.,]*)?$`)

// MIGProfileSlices is the GPU-instance slices a MIG profile name takes ("3g.20gb" -> 3), 0 when unreadable.
func MIGProfileSlices(profile string) int64 {
	m := migProfileRe.FindStringSubmatch(profile)
	if m == nil {
		return 0
	}
	g, _ := strconv.ParseInt(m[1], 10, 64)
	return g
}

// MIGProfileMemoryGB is the memory a MIG profile name states, in GB ("3g.20gb" -> 20), 0 when unreadable.
func MIGProfileMemoryGB(profile string) int64 {
	m := migProfileRe.FindStringSubmatch(profile)
	if m == nil {
		return 0
	}
	gb, _ := strconv.ParseInt(m[2], 10, 64)
	return gb
}

// Node is what the share model needs to know about a node: its labels.
type Node struct {
	Labels map[string]string
}

// label is the GFD label of one attribute of a resource: label("nvidia.com/mig-1g.5gb", "replicas").
func (n Node) label(resource, attr string) string { return n.Labels[resource+"."+attr] }

// productName keeps GFD's dashes except the first, so "NVIDIA-A100-SXM4-40GB" reads "NVIDIA A100-SXM4-40GB".
func productName(label string) string {
	label = BaseProduct(label)
	if rest, ok := strings.CutPrefix(label, "NVIDIA-"); ok {
		return "NVIDIA " + rest
	}
	return label
}

// IsGPUResource reports whether name is an NVIDIA GPU resource the share model understands: nvidia.com/gpu,
// nvidia.com/mig-<profile>, and each of them renamed with .shared.
func IsGPUResource(name string) bool {
	base := strings.TrimSuffix(name, sharedSuffix)
	return base == ResourceGPU || strings.HasPrefix(base, migResourcePrefix) && len(base) > len(migResourcePrefix)
}

// Allocations returns the GPU allocations of a pod that requests resources (name -> count) on node. Resources
// other than GPUs are ignored; the result is sorted by resource name so that output is stable. The same call
// with a node's allocatable resources describes what the node offers.
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

// allocation applies the rules of the table in services/usage-api/README.md ("Share model"). GFD labels a
// resource under its name before renaming (nvidia.com/gpu.replicas describes nvidia.com/gpu.shared too).
func allocation(resource string, count int64, node Node) Allocation {
	base, renamed := strings.CutSuffix(resource, sharedSuffix)
	a := Allocation{Resource: resource, Count: count, Kind: KindGPU, Numerator: 1, Denominator: 1, Replicas: 1}
	product := node.label(base, attrProduct)
	if product == "" {
		product = node.Labels[LabelProduct]
	}
	a.Product = productName(product)

	profile, mig := strings.CutPrefix(base, migResourcePrefix)
	if !mig && node.Labels[LabelMIGStrategy] == MIGStrategySingle {
		profile = singleStrategyProfile(product)
		mig = profile != ""
	}
	strategy := node.label(base, attrSharing)
	replicas, known := parseReplicas(node.label(base, attrReplicas))
	shared := renamed || strategy != SharingNone && replicas > 1
	if shared {
		if !known || replicas < 1 {
			// An upper bound, never an invention in the user's favour that would hide use.
			replicas = 1
			a.Assumed = "replicas unknown, charged as a whole GPU"
			if mig {
				a.Assumed = "replicas unknown, charged as a whole MIG instance"
			}
		}
		a.Replicas = replicas
	}
	a.MemoryTotalBytes = labelMiB(node.label(base, attrMemory))

	switch {
	case mig:
		a.Kind, a.Profile = KindMIG, profile
		if shared {
			a.Kind = KindSharedMIG
		}
		migShare(&a, node.label(base, attrSlicesGI))
		a.Denominator *= a.Replicas
	case shared:
		// MPS is not offered on MIG devices by the device plugin; on whole GPUs the strategy tells the two apart.
		a.Kind = KindShared
		if strategy == SharingMPS {
			a.Kind = KindMPS
		}
		a.Denominator = a.Replicas
	}
	return a
}

// singleStrategyProfile reads the MIG profile of the single strategy's product label
// ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", with "-SHARED" when time-sliced without renaming); empty for a whole GPU.
func singleStrategyProfile(product string) string {
	i := strings.Index(product, "-MIG-")
	if i < 0 {
		return ""
	}
	return strings.TrimSuffix(product[i+len("-MIG-"):], "-SHARED")
}

func migShare(a *Allocation, slicesLabel string) {
	g, err := strconv.ParseInt(slicesLabel, 10, 64)
	if err != nil || g <= 0 {
		g = MIGProfileSlices(a.Profile)
	}
	total, ok := migSlicesByFamily[familyName(ShortProduct(a.Product))]
	if !ok {
		total = defaultMIGSlices
		a.Assumed = joinAssumed(a.Assumed, fmt.Sprintf("assumed %d slices per GPU", total))
	}
	if g <= 0 || g > total {
		// An unparseable profile holds at least one slice; never more than the GPU.
		g = min(max(g, 1), total)
		a.Assumed = joinAssumed(a.Assumed, "profile slices unknown")
	}
	a.Numerator, a.Denominator = g, total
}

func joinAssumed(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// maxReplicas bounds a replicas label that could only be a mistake, so that fractions cannot overflow.
const maxReplicas = 1 << 20

// parseReplicas reads a replicas label; known is false when it is missing, not a number or absurd.
func parseReplicas(s string) (n int64, known bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n <= maxReplicas
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

// MIGProfile is the profile a mixed-strategy MIG resource names, time-sliced or not: "nvidia.com/mig-3g.20gb"
// and "nvidia.com/mig-3g.20gb.shared" -> "3g.20gb", true.
func MIGProfile(resource string) (string, bool) {
	p, ok := strings.CutPrefix(strings.TrimSuffix(resource, sharedSuffix), migResourcePrefix)
	return p, ok && p != ""
}

// LabelMIGMemoryMiB is the GFD label with the memory of one instance of a MIG profile, in MiB.
func LabelMIGMemoryMiB(profile string) string { return migResourcePrefix + profile + ".memory" }

// LabelMIGSlicesGI is the GFD label with the GPU-instance slices a MIG profile takes.
func LabelMIGSlicesGI(profile string) string { return migResourcePrefix + profile + ".slices.gi" }

// BaseProduct is the card a GFD product label names, without the suffixes GFD adds for sharing: "-SHARED"
// (time-slicing or MPS) and "-MIG-<profile>" (single strategy): "Tesla-T4-SHARED" -> "Tesla-T4".
func BaseProduct(label string) string {
	label = strings.TrimSuffix(label, "-SHARED")
	if i := strings.Index(label, "-MIG-"); i >= 0 {
		label = label[:i]
	}
	return label
}
