package inventory

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// What a new single-user pod can use: the one rule every service counts free GPU units by (gpu-quota's
// admission and waitlist, gpu-profiles' catalog). A unit is free only on a node that takes new pods (Blocked
// is empty); units on a cordoned, NotReady or tainted node are allocatable but never free.

// DefaultTolerations are the taints single-user pods tolerate out of the box: z2jh gives every user pod a
// toleration of its dedicated-node taints (scheduling.userPods.tolerations), and GPU node pools of managed
// clusters (GKE, AKS) taint GPU nodes with nvidia.com/gpu, which the ExtendedResourceToleration admission
// plugin (on in those clusters) tolerates on every pod that requests an nvidia.com/gpu resource. A cluster
// whose GPU pods do not get that toleration configures its own (gpu-profiles' overrides, gpu-quota's
// --tolerations).
func DefaultTolerations() []corev1.Toleration {
	return []corev1.Toleration{
		{Key: "hub.jupyter.org/dedicated", Operator: corev1.TolerationOpEqual, Value: "user", Effect: corev1.TaintEffectNoSchedule},
		{Key: "hub.jupyter.org_dedicated", Operator: corev1.TolerationOpEqual, Value: "user", Effect: corev1.TaintEffectNoSchedule},
		{Key: gpu.ResourceGPU, Operator: corev1.TolerationOpExists},
	}
}

// Blocked says why a new pod with tolerations cannot land on n ("cordoned", "not ready", "tainted
// key=value:NoSchedule"), empty when it can. Only NoSchedule and NoExecute taints keep pods off.
func (n Node) Blocked(tolerations []corev1.Toleration) string {
	switch {
	case n.Unschedulable:
		return "cordoned"
	case !n.Ready:
		return "not ready"
	}
	for i := range n.Taints {
		t := &n.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerated(t, tolerations) {
			return "tainted " + taintString(t)
		}
	}
	return ""
}

// Units are the GPU units n offers, one allocation per resource (Count = units), classified by n's labels.
func (n Node) Units() []gpu.Allocation {
	return gpu.Allocations(n.Allocatable, gpu.Node{Labels: n.Labels})
}

// Equal reports whether n and o are the same GPU view: labels, allocatable, and everything Blocked reads. A
// node update that changes none of them (a status heartbeat) changes nothing a count of free units depends on.
func (n Node) Equal(o Node) bool {
	return n.Name == o.Name && n.Unschedulable == o.Unschedulable && n.Ready == o.Ready &&
		maps.Equal(n.Labels, o.Labels) && maps.Equal(n.Allocatable, o.Allocatable) &&
		slices.EqualFunc(n.Taints, o.Taints, func(x, y corev1.Taint) bool {
			return x.Key == y.Key && x.Value == y.Value && x.Effect == y.Effect
		})
}

// BlockedWords says why the nodes of blocked (node -> Blocked's answer) take no new pods, naming at most
// three, in name order: "gpu-h100-0 is cordoned, gpu-h100-1 is not ready, 2 more nodes cannot take new
// servers". Empty for none.
func BlockedWords(blocked map[string]string) string {
	names := slices.Sorted(maps.Keys(blocked))
	var parts []string
	for i, n := range names {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more nodes cannot take new servers", len(names)-3))
			break
		}
		parts = append(parts, n+" is "+blocked[n])
	}
	return strings.Join(parts, ", ")
}

// tolerated applies the pod spec's rules: an empty effect tolerates every effect, an empty key with Exists
// every taint, Exists any value, Equal (or no operator) the same value.
func tolerated(t *corev1.Taint, tolerations []corev1.Toleration) bool {
	for _, tol := range tolerations {
		if tol.Effect != "" && tol.Effect != t.Effect {
			continue
		}
		if tol.Key == "" {
			if tol.Operator == corev1.TolerationOpExists {
				return true
			}
			continue
		}
		if tol.Key != t.Key {
			continue
		}
		switch tol.Operator {
		case corev1.TolerationOpExists:
			return true
		case "", corev1.TolerationOpEqual:
			if tol.Value == t.Value {
				return true
			}
		}
	}
	return false
}

func taintString(t *corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// TolerationProblem is one thing wrong with a configured toleration: Field is "operator" or "effect", or
// empty for the toleration as a whole.
type TolerationProblem struct {
	Field, Message string
}

// CheckToleration says what is wrong with a toleration an administrator configured for the single-user pods
// (nothing: nil). Blocked reads only what passes.
func CheckToleration(t corev1.Toleration) []TolerationProblem {
	var out []TolerationProblem
	switch t.Operator {
	case "", corev1.TolerationOpEqual, corev1.TolerationOpExists:
	default:
		out = append(out, TolerationProblem{"operator", fmt.Sprintf("operator is Equal or Exists, found %q", t.Operator)})
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute, corev1.TaintEffectPreferNoSchedule:
	default:
		out = append(out, TolerationProblem{"effect", fmt.Sprintf("effect is NoSchedule, NoExecute, PreferNoSchedule or empty (all), found %q", t.Effect)})
	}
	if t.Key == "" && t.Operator != corev1.TolerationOpExists {
		out = append(out, TolerationProblem{"", "a toleration without a key must have operator: Exists (it tolerates every taint)"})
	}
	return out
}

// ParseTolerations reads tolerations written as JSON, a list of pod-spec tolerations
// ([{"key":"team","operator":"Equal","value":"ml","effect":"NoSchedule"}]), as a flag gives them. Empty text
// is nil (the caller's default); "[]" is none.
func ParseTolerations(text string) ([]corev1.Toleration, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	out := []corev1.Toleration{}
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("tolerations: a JSON list of tolerations ([{\"key\", \"operator\", \"value\", \"effect\"}]): %w", err)
	}
	var problems []string
	for i, t := range out {
		for _, p := range CheckToleration(t) {
			at := fmt.Sprintf("tolerations[%d]", i)
			if p.Field != "" {
				at += "." + p.Field
			}
			problems = append(problems, at+": "+p.Message)
		}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return out, nil
}

// HoldsUnits reports whether the pod's GPU units are taken on its node as the scheduler counts them: bound and
// not finished. A bound Pending pod holds its devices while its containers start (Allocated, which the ledger
// charges, waits for Running).
func (p Pod) HoldsUnits() bool {
	return p.Node != "" && p.Phase != corev1.PodSucceeded && p.Phase != corev1.PodFailed
}

// FreeUnits counts, per class (gpu.Allocation.Class), the units a new single-user pod with tolerations could be
// given now: on each node it can land on (Blocked is empty), the node's units less those its pods hold. A class
// that only blocked nodes offer has no entry.
func FreeUnits(nodes map[string]Node, pods []Pod, tolerations []corev1.Toleration) map[string]int64 {
	held := map[string]map[string]int64{} // node -> resource -> units
	for _, p := range pods {
		if !p.HoldsUnits() {
			continue
		}
		h := held[p.Node]
		if h == nil {
			h = map[string]int64{}
			held[p.Node] = h
		}
		for r, n := range p.Resources {
			h[r] += n
		}
	}
	free := map[string]int64{}
	for name, n := range nodes {
		if n.Blocked(tolerations) != "" {
			continue
		}
		for _, a := range n.Units() {
			free[a.Class()] += max(a.Count-held[name][a.Resource], 0)
		}
	}
	return free
}
