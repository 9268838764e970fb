package pending

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// Reasons, as the metrics and the golden file name them. The Event's own reason is always EventReason.
const (
	ReasonNoneFree     = "none_free"    // every unit of the kind is in use: waits (units free up)
	ReasonFragmented   = "fragmented"   // enough units are free, but not on one node: waits
	ReasonCPUMemory    = "cpu_memory"   // the GPU is free, CPU or memory on its nodes is not: waits
	ReasonNotPlaced    = "not_placed"   // the GPU is free and no known cause: waits
	ReasonProvisioning = "provisioning" // a provisionable kind: a node is being added; waits, never ended
	ReasonBlocked      = "blocked"      // every node of the kind is cordoned, not ready or tainted: cannot start
	ReasonNoNodes      = "no_nodes"     // no node offers the kind: cannot start
	ReasonTooBig       = "too_big"      // more units than any schedulable node of the kind has: cannot start
	ReasonPreparing    = "preparing"    // bound; image pull and container creation under way: waits
	ReasonImagePull    = "image_pull"   // bound; the image cannot be pulled (the kubelet retries)
	ReasonContainer    = "container"    // bound; the container cannot be created
	ReasonEnded        = "ended"        // the Event written before the spawn is ended through the Hub
)

// Reasons lists every reason (metrics are initialised with them).
func Reasons() []string {
	return []string{ReasonNoneFree, ReasonFragmented, ReasonCPUMemory, ReasonNotPlaced, ReasonProvisioning,
		ReasonBlocked, ReasonNoNodes, ReasonTooBig, ReasonPreparing, ReasonImagePull, ReasonContainer, ReasonEnded}
}

// Availability is what one GPU kind offers now, as the explainer needs it (the service adapts its catalog).
// Counts are in units of the kind (whole GPUs, MIG slices, shares) and cover schedulable nodes only: a node
// that is cordoned, NotReady or tainted against user pods is in Blocked, not in the counts.
type Availability struct {
	Slug string
	// Unit is one unit of the kind (Count 1); the messages' words come from the shared vocabulary
	// ("whole H100", "MIG 1g.5gb slice on an A100"). When Unit.Kind is empty Description is used instead.
	Unit        gpu.Allocation
	Description string
	Allocatable int64 // units on schedulable nodes
	Free        int64 // of those, not held by a pod
	// SchedulableNodes of the kind; MaxAllocatableOnOneSchedulableNode is the most units one of them has.
	SchedulableNodes                   int
	MaxAllocatableOnOneSchedulableNode int64
	// Blocked are the kind's other nodes: node name -> why, in words ("cordoned", "not ready",
	// "tainted dedicated=ml:NoSchedule").
	Blocked map[string]string
	// Provisionable: the kind's node pool can scale up (cluster autoscaler, Karpenter); spawns wait for it.
	Provisionable bool
	// Certain: the counts describe exactly the nodes the pod may land on (its node selector names every label
	// of the kind), or, from a Lookup that found nothing, no node offers the pod's GPU resource at all. Only a
	// certain answer may end a spawn: a guess never does.
	Certain bool
}

// Capacity answers from memory what the cluster offers; defined here, implemented by the service's catalog.
type Capacity interface {
	// Lookup is the kind a pod asking for resources (GPU resources only) with nodeSelector gets. ok is false
	// when no node offers it and it is not configured as provisionable (a provisionable kind without a node
	// yet answers ok with zero counts and Provisionable set).
	Lookup(resources map[string]int64, nodeSelector map[string]string) (Availability, bool)
	// FreeNow lists the kinds user may choose that have free units, in the order of the spawn form.
	FreeNow(user string) []Availability
}

// Explanation is why one Pending pod waits.
type Explanation struct {
	Reason string
	// Warning: the server cannot start as things are ("cannot start"); else it is waiting (Normal).
	Warning bool
	// Hopeless: nothing can free up for it (no schedulable node of its kind can ever hold it) and the kind is
	// not provisionable. Such a spawn is ended after Options.EndAfter.
	Hopeless bool
	// Cause is the first sentence; Next says what happens next; Free what is free now. A new Reason is a new
	// Event at once; other changes of the words (counts, what is free) wait for Options.MinChange.
	Cause, Next, Free string
}

// Message is the Event's text.
func (x Explanation) Message() string {
	return joinSentences(x.Cause, x.Next, x.Free)
}

func (x Explanation) key() string { return x.Reason }

func joinSentences(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p)
	}
	return truncate(b.String(), maxMessage)
}

// maxMessage keeps an Event's message well under what any API server accepts.
const maxMessage = 1000

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// explainConfig are the settings the words depend on.
type explainConfig struct {
	endAfter      time.Duration // 0: never ended
	canEnd        bool          // a Hub client is configured
	prepareGrace  time.Duration
	unplacedGrace time.Duration
	maxFree       int
}

// explain decides why p is still Pending; ok is false when there is nothing to say (yet): not a Hub user's
// Pending pod, the scheduler has not looked at it, or a bound pod that is only starting. hopelessSince is
// when the pod was first found hopeless (zero: now), for the time the spawn ends.
func explain(p inventory.Pod, c Capacity, now, hopelessSince time.Time, cfg explainConfig) (Explanation, bool) {
	if p.User == "" || p.Phase != corev1.PodPending || p.Terminating || len(p.Resources) == 0 {
		return Explanation{}, false
	}
	if p.Node != "" {
		return explainBound(p, now, cfg)
	}
	switch {
	case p.Scheduled.Status == corev1.ConditionFalse && p.Scheduled.Reason == corev1.PodReasonUnschedulable:
	case p.Scheduled.Status == "" && !p.Created.IsZero() && now.Sub(p.Created) >= cfg.unplacedGrace:
		// No scheduler has looked at it for a while (none runs, or it is overloaded): say what we know.
	default:
		return Explanation{}, false
	}
	want := units(p.Resources)
	av, ok := c.Lookup(p.Resources, p.NodeSelector)
	if !ok {
		av = Availability{Unit: unitOf(p), Certain: av.Certain}
	}
	// Hopeless needs certainty: an exact kind, no node affinity the counts know nothing of, and no node left out
	// for a taint only (the pod may tolerate it: the catalog judges taints with the configured tolerations).
	certain := av.Certain && !p.NodeAffinity && !taintOnly(av.Blocked)
	x := Explanation{Free: freeNow(c.FreeNow(p.User), av.Slug, cfg.maxFree)}
	if x.Free == "" {
		x.Free = nothingElse
	}
	if ok && av.Provisionable {
		x.Reason = ReasonProvisioning
		x.Cause = fmt.Sprintf("A node with %s is being added for your server.", plural(av))
		x.Next = "Your server starts when the node is ready; this can take several minutes."
		return x, true
	}
	sched := parseScheduler(p.Scheduled.Message)
	switch {
	case !ok || (av.SchedulableNodes == 0 && len(av.Blocked) == 0):
		x.Reason, x.Hopeless, x.Warning = ReasonNoNodes, certain, true
		x.Cause = fmt.Sprintf("Your server cannot start: no node in the cluster has %s.", plural(av))
	case av.SchedulableNodes == 0:
		x.Reason, x.Hopeless, x.Warning = ReasonBlocked, certain, true
		x.Cause = "Your server cannot start: " + blocked(av) + "."
	case av.MaxAllocatableOnOneSchedulableNode < want:
		x.Reason, x.Hopeless, x.Warning = ReasonTooBig, certain, true
		x.Cause = fmt.Sprintf("Your server cannot start: it needs %s on one node, and the largest node with %s has %d.",
			count(av, want), plural(av), av.MaxAllocatableOnOneSchedulableNode)
	case av.Free < want && want == 1:
		x.Reason = ReasonNoneFree
		x.Cause = fmt.Sprintf("No %s is free right now (%d of %d in use).", singular(av), av.Allocatable-av.Free, av.Allocatable)
		x.Next = "Your server starts as soon as one frees up."
	case av.Free < want:
		x.Reason = ReasonNoneFree
		x.Cause = fmt.Sprintf("Your server needs %s on one node and %s (%d of %d in use).",
			count(av, want), freeWords(av.Free), av.Allocatable-av.Free, av.Allocatable)
		x.Next = "It starts as soon as enough free up on one node."
	case sched.gpu && want > 1:
		x.Reason = ReasonFragmented
		x.Cause = fmt.Sprintf("Your server needs %s on one node; %d are free, but not on the same node.", count(av, want), av.Free)
		x.Next = fmt.Sprintf("It starts as soon as one node has %d free.", want)
	case sched.cpu || sched.memory:
		x.Reason = ReasonCPUMemory
		x.Cause = fmt.Sprintf("Your server's GPU is free (%s), but no node with it has enough %s left for your server.",
			count(av, want), cpuMemory(sched))
		x.Next = "It starts as soon as other servers there stop; a choice with less CPU and memory may start sooner."
	default:
		x.Reason = ReasonNotPlaced
		x.Cause = fmt.Sprintf("Your server's GPU is free (%s), but Kubernetes has not placed your server on a node yet.", count(av, want))
		x.Next = "It keeps trying."
	}
	if x.Warning && !x.Hopeless && x.Next == "" {
		x.Next = "It keeps waiting in case this changes; stop the server and pick another choice to start sooner, or ask your admin."
	}
	if x.Hopeless {
		if hopelessSince.IsZero() {
			hopelessSince = now
		}
		switch {
		case cfg.endAfter > 0 && cfg.canEnd:
			x.Next = fmt.Sprintf("Waiting will not help: unless this changes, the spawn ends at %s UTC.",
				hopelessSince.Add(cfg.endAfter).UTC().Format(time.TimeOnly))
		default:
			x.Next = "Waiting will not help: stop the server and pick another choice, or ask your admin."
		}
	}
	return x, true
}

const nothingElse = "Nothing else is free right now."

// taintOnly reports whether some blocked node is left out only for a taint.
func taintOnly(blocked map[string]string) bool {
	for _, why := range blocked {
		if strings.HasPrefix(why, "tainted") {
			return true
		}
	}
	return false
}

// endMessage is the Warning written just before the spawn is ended.
func endMessage(x Explanation) string {
	next := "Pick another choice instead."
	if x.Free == nothingElse {
		next = "Nothing else is free right now: try again later, pick a CPU-only server, or ask your admin."
	}
	free := x.Free
	if free == nothingElse {
		free = ""
	}
	return joinSentences("Your spawn was ended: waiting would not help.", gpu.Capitalize(strings.TrimPrefix(x.Cause, "Your server cannot start: ")),
		next, free)
}

// waitingReasons a bound pod's containers report when they cannot start without help.
var (
	imagePullReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable", "SignatureValidationFailed"}
	containerReasons = []string{"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "PreCreateHookError", "PreStartHookError", "CrashLoopBackOff"}
)

// explainBound is a pod on a node that has not started: image pulling and container creation. A pod that is
// only starting says nothing for prepareGrace, so that a quick start shows no extra line.
func explainBound(p inventory.Pod, now time.Time, cfg explainConfig) (Explanation, bool) {
	for _, w := range p.Waiting {
		if slices.Contains(imagePullReasons, w.Reason) {
			return Explanation{Reason: ReasonImagePull, Warning: true,
				Cause: "Your server has its GPU, but its image cannot be downloaded (the node keeps retrying).",
				Next:  "If this lasts, stop the server and ask your admin to check the image of your choice."}, true
		}
	}
	for _, w := range p.Waiting {
		if slices.Contains(containerReasons, w.Reason) {
			return Explanation{Reason: ReasonContainer, Warning: true,
				Cause: fmt.Sprintf("Your server has its GPU, but its container %q cannot start (%s).", w.Container, w.Reason),
				Next:  "Stop the server to free the GPU and ask your admin."}, true
		}
	}
	since := p.Scheduled.Since
	if since.IsZero() {
		since = p.Created
	}
	if since.IsZero() || now.Sub(since) < cfg.prepareGrace {
		return Explanation{}, false
	}
	return Explanation{Reason: ReasonPreparing,
		Cause: "Your server has its GPU and is being prepared: its image is being downloaded and its containers started.",
		Next:  "The first start on a node can take a few minutes for a large image."}, true
}

// units is how many units of its kind a pod asks for (a pod asks for one GPU resource).
func units(res map[string]int64) int64 {
	var n int64
	for k, v := range res {
		if gpu.IsGPUResource(k) {
			n += v
		}
	}
	return n
}

// unitOf is one unit of what the pod asks for, from its nodeSelector's labels (when no node offers it).
func unitOf(p inventory.Pod) gpu.Allocation {
	as := gpu.Allocations(p.Resources, gpu.Node{Labels: p.NodeSelector})
	if len(as) == 0 {
		return gpu.Allocation{}
	}
	a := as[0]
	a.Count = 1
	return a
}

// count is n units in words: "one whole H100", "two MIG 1g.5gb slices on an A100".
func count(av Availability, n int64) string {
	if av.Unit.Kind == "" {
		return fmt.Sprintf("%d × %s", n, av.Description)
	}
	u := av.Unit
	u.Count = n
	return u.Units()
}

// singular is the name of one unit: "whole H100", "MIG 1g.5gb slice on an A100".
func singular(av Availability) string {
	if av.Unit.Kind == "" {
		return av.Description
	}
	return strings.TrimPrefix(count(av, 1), "one ")
}

// plural is the units in general: "whole H100s", "time-sliced shares of a T4".
func plural(av Availability) string {
	if av.Unit.Kind == "" {
		return av.Description
	}
	return strings.TrimPrefix(count(av, 2), "two ")
}

func freeWords(n int64) string {
	switch n {
	case 0:
		return "none is free right now"
	case 1:
		return "only 1 is free right now"
	}
	return fmt.Sprintf("only %d are free right now", n)
}

func cpuMemory(s schedulerVerdict) string {
	switch {
	case s.cpu && s.memory:
		return "CPU and memory"
	case s.cpu:
		return "CPU"
	}
	return "memory"
}

// blocked says why no node of the kind takes pods: "the only node with whole H100s (gpu-h100-0) is cordoned",
// "every node with whole H100s is out of service (gpu-h100-0 is cordoned, gpu-h100-1 is not ready)".
func blocked(av Availability) string {
	names := make([]string, 0, len(av.Blocked))
	for n := range av.Blocked {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 1 {
		return fmt.Sprintf("the only node with %s (%s) is %s", plural(av), names[0], av.Blocked[names[0]])
	}
	const show = 3
	parts := make([]string, 0, show+1)
	for i, n := range names {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-show))
			break
		}
		parts = append(parts, n+" is "+av.Blocked[n])
	}
	return fmt.Sprintf("every node with %s is out of service (%s)", plural(av), strings.Join(parts, ", "))
}

// freeNow says what else is free: "Free now: six MIG 1g.5gb slices on an A100 and three time-sliced shares
// of a T4." At most maxFree kinds are named.
func freeNow(avs []Availability, except string, maxFree int) string {
	var parts []string
	more := 0
	for _, a := range avs {
		if a.Free <= 0 || (except != "" && a.Slug == except) {
			continue
		}
		if len(parts) == maxFree {
			more++
			continue
		}
		parts = append(parts, count(a, a.Free))
	}
	switch {
	case len(parts) == 0:
		return ""
	case more > 0:
		parts = append(parts, fmt.Sprintf("%d more kind%s", more, pluralS(more)))
	}
	if len(parts) == 1 {
		return "Free now: " + parts[0] + "."
	}
	return "Free now: " + strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1] + "."
}

func pluralS(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
