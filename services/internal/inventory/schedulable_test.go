package inventory

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// readyNode is a Ready, uncordoned, untainted node as NodeFrom reads it, changed by change.
func readyNode(change func(*corev1.Node)) Node {
	n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	n.Name = "n"
	if change != nil {
		change(n)
	}
	return NodeFrom(n)
}

func withTaint(key, value string, effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

func TestBlocked(t *testing.T) {
	tests := map[string]struct {
		change      func(*corev1.Node)
		tolerations []corev1.Toleration // nil: DefaultTolerations
		want        string
	}{
		"ready": {want: ""},
		"cordoned wins over a taint": {change: func(n *corev1.Node) {
			n.Spec.Unschedulable = true
			withTaint("team", "vision", corev1.TaintEffectNoSchedule)(n)
		}, want: "cordoned"},
		"not ready":                   {change: func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, want: "not ready"},
		"no Ready condition":          {change: func(n *corev1.Node) { n.Status.Conditions = nil }, want: "not ready"},
		"PreferNoSchedule is a wish":  {change: withTaint("spot", "", corev1.TaintEffectPreferNoSchedule), want: ""},
		"z2jh's dedicated user nodes": {change: withTaint("hub.jupyter.org/dedicated", "user", corev1.TaintEffectNoSchedule), want: ""},
		"z2jh's dedicated user nodes, the underscore spelling": {
			change: withTaint("hub.jupyter.org_dedicated", "user", corev1.TaintEffectNoSchedule), want: ""},
		"managed clusters' nvidia.com/gpu taint": {change: withTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule), want: ""},
		"another team's NoExecute taint": {change: withTaint("team", "vision", corev1.TaintEffectNoExecute),
			want: "tainted team=vision:NoExecute"},
		"a taint without a value": {change: withTaint("maintenance", "", corev1.TaintEffectNoSchedule), want: "tainted maintenance:NoSchedule"},
		"the first untolerated taint": {change: func(n *corev1.Node) {
			withTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule)(n)
			withTaint("b", "2", corev1.TaintEffectNoSchedule)(n)
			withTaint("a", "1", corev1.TaintEffectNoSchedule)(n)
		}, want: "tainted b=2:NoSchedule"},
		"no tolerations: the GPU taint keeps pods off": {change: withTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule),
			tolerations: []corev1.Toleration{}, want: "tainted nvidia.com/gpu=present:NoSchedule"},
		"Equal with another value": {change: withTaint("team", "vision", corev1.TaintEffectNoSchedule),
			tolerations: []corev1.Toleration{{Key: "team", Value: "nlp", Effect: corev1.TaintEffectNoSchedule}}, want: "tainted team=vision:NoSchedule"},
		"Equal with the value, any effect": {change: withTaint("team", "vision", corev1.TaintEffectNoExecute),
			tolerations: []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpEqual, Value: "vision"}}, want: ""},
		"another effect only": {change: withTaint("team", "vision", corev1.TaintEffectNoExecute),
			tolerations: []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			want:        "tainted team=vision:NoExecute"},
		"Exists without a key tolerates all": {change: withTaint("team", "vision", corev1.TaintEffectNoSchedule),
			tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, want: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tol := tc.tolerations
			if tol == nil {
				tol = DefaultTolerations()
			}
			if got := readyNode(tc.change).Blocked(tol); got != tc.want {
				t.Errorf("Blocked = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNodeEqual(t *testing.T) {
	base := func(n *corev1.Node) {
		n.Labels = map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
		n.Spec.Taints = []corev1.Taint{{Key: "team", Value: "vision", Effect: corev1.TaintEffectNoSchedule}}
	}
	then := func(change func(*corev1.Node)) func(*corev1.Node) {
		return func(n *corev1.Node) { base(n); change(n) }
	}
	tests := map[string]struct {
		change func(*corev1.Node)
		want   bool
	}{
		"a heartbeat":          {change: then(func(n *corev1.Node) { n.Status.Conditions[0].Message = "kubelet is posting ready status" }), want: true},
		"a taint's time added": {change: then(func(n *corev1.Node) { n.Spec.Taints[0].TimeAdded = &metav1.Time{Time: time.Unix(1e9, 0)} }), want: true},
		"cordoned":             {change: then(func(n *corev1.Node) { n.Spec.Unschedulable = true })},
		"not ready":            {change: then(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown })},
		"a taint more":         {change: then(withTaint("a", "", corev1.TaintEffectNoExecute))},
		"a taint's effect":     {change: then(func(n *corev1.Node) { n.Spec.Taints[0].Effect = corev1.TaintEffectNoExecute })},
		"a label":              {change: then(func(n *corev1.Node) { n.Labels["nvidia.com/gpu.count"] = "8" })},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := readyNode(base).Equal(readyNode(tc.change)); got != tc.want {
				t.Errorf("Equal = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBlockedWords(t *testing.T) {
	tests := map[string]struct {
		blocked map[string]string
		want    string
	}{
		"none": {want: ""},
		"one":  {blocked: map[string]string{"gpu-h100-0": "cordoned"}, want: "gpu-h100-0 is cordoned"},
		"three, by name": {blocked: map[string]string{"c": "not ready", "a": "cordoned", "b": "tainted team=vision:NoSchedule"},
			want: "a is cordoned, b is tainted team=vision:NoSchedule, c is not ready"},
		"five": {blocked: map[string]string{"a": "cordoned", "b": "cordoned", "c": "cordoned", "d": "not ready", "e": "not ready"},
			want: "a is cordoned, b is cordoned, c is cordoned, 2 more nodes cannot take new servers"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, BlockedWords(tc.blocked)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseTolerations(t *testing.T) {
	tests := map[string]struct {
		text    string
		want    []corev1.Toleration
		wantErr string
	}{
		"empty: the caller's default": {text: " ", want: nil},
		"null: the caller's default":  {text: "null", want: nil},
		"none":                        {text: "[]", want: []corev1.Toleration{}},
		"a team's nodes": {text: `[{"key":"team","operator":"Equal","value":"ml","effect":"NoSchedule"},{"operator":"Exists"}]`,
			want: []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule},
				{Operator: corev1.TolerationOpExists}}},
		"not JSON":      {text: "team=ml:NoSchedule", wantErr: "tolerations: a JSON list"},
		"unknown field": {text: `[{"key":"team","operatr":"Exists"}]`, wantErr: "unknown field"},
		"every problem named": {text: `[{"key":"team","operator":"In","effect":"NoRun"},{"value":"x"}]`,
			wantErr: `tolerations[0].operator: operator is Equal or Exists, found "In"; tolerations[0].effect: effect is NoSchedule, NoExecute, PreferNoSchedule or empty (all), found "NoRun"; tolerations[1]: a toleration without a key must have operator: Exists (it tolerates every taint)`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseTolerations(tc.text)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFreeUnits(t *testing.T) {
	h100 := map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
	gpuNode := func(name string, units int64, change func(*corev1.Node)) Node {
		n := readyNode(change)
		n.Name, n.Labels, n.Allocatable = name, h100, map[string]int64{"nvidia.com/gpu": units}
		return n
	}
	whole := gpuNode("x", 1, nil).Units()[0].Class()
	mig := Node{Labels: h100, Allocatable: map[string]int64{"nvidia.com/mig-1g.10gb": 1}}.Units()[0].Class()
	pod := func(node string, phase corev1.PodPhase, res string, n int64) Pod {
		return Pod{Node: node, Phase: phase, Resources: map[string]int64{res: n}}
	}
	tests := map[string]struct {
		nodes map[string]Node
		pods  []Pod
		want  map[string]int64
	}{
		"units less what running and bound pending pods hold": {
			nodes: map[string]Node{"a": gpuNode("a", 4, nil), "b": gpuNode("b", 2, nil)},
			pods: []Pod{pod("a", corev1.PodRunning, "nvidia.com/gpu", 1), pod("a", corev1.PodPending, "nvidia.com/gpu", 1),
				pod("b", corev1.PodRunning, "nvidia.com/gpu", 2)},
			want: map[string]int64{whole: 2},
		},
		"finished and unbound pods hold nothing": {
			nodes: map[string]Node{"a": gpuNode("a", 2, nil)},
			pods: []Pod{pod("a", corev1.PodSucceeded, "nvidia.com/gpu", 1), pod("a", corev1.PodFailed, "nvidia.com/gpu", 1),
				pod("", corev1.PodPending, "nvidia.com/gpu", 1)},
			want: map[string]int64{whole: 2},
		},
		"cordoned, not ready and untolerated-tainted nodes offer nothing": {
			nodes: map[string]Node{
				"cordoned":  gpuNode("cordoned", 1, func(n *corev1.Node) { n.Spec.Unschedulable = true }),
				"notready":  gpuNode("notready", 1, func(n *corev1.Node) { n.Status.Conditions = nil }),
				"tainted":   gpuNode("tainted", 1, withTaint("team", "ml", corev1.TaintEffectNoSchedule)),
				"tolerated": gpuNode("tolerated", 1, withTaint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule)),
			},
			want: map[string]int64{whole: 1},
		},
		"classes apart; a node fuller than its units counts none": {
			nodes: map[string]Node{
				"a":   gpuNode("a", 1, nil),
				"mig": {Name: "mig", Ready: true, Labels: h100, Allocatable: map[string]int64{"nvidia.com/mig-1g.10gb": 7}},
			},
			pods: []Pod{pod("a", corev1.PodRunning, "nvidia.com/gpu", 2), pod("mig", corev1.PodRunning, "nvidia.com/mig-1g.10gb", 3)},
			want: map[string]int64{whole: 0, mig: 4},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, FreeUnits(tc.nodes, tc.pods, DefaultTolerations())); diff != "" {
				t.Errorf("FreeUnits (-want +got):\n%s", diff)
			}
		})
	}
}
