//go:build chart

package chart

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// disruption is how a workload of the chart lives through a node drain.
type disruption struct {
	Kind     string // Deployment or DaemonSet
	Replicas int32  // of a Deployment
	Budget   string // its PodDisruptionBudget, "" for none
	Spread   bool   // replicas preferably on different nodes
}

// TestDisruptionBudgets: a PodDisruptionBudget only where a second replica keeps the service up while a drain
// moves the first: gpu-culler and gpu-profiles (2 replicas each by default) with more than one replica, each allowing
// one pod down (maxUnavailable 1) and spread over nodes. None for a single replica, where any budget that keeps a
// pod would block the drain of its node forever: the usage API (one SQLite writer), gpu-quota (reservations in one
// replica's memory) and a single gpu-profiles. None for the agent DaemonSet, which drains leave alone.
func TestDisruptionBudgets(t *testing.T) {
	every := []string{"--set", "quota.enabled=true", "--set", "profiles.enabled=true", "--set", "culler.enabled=true"}
	tests := map[string]struct {
		set  []string
		want map[string]disruption // by component
	}{
		"every service, defaults": {
			set: every,
			want: map[string]disruption{
				"gpu-agent":    {Kind: "DaemonSet"},
				"usage-api":    {Kind: "Deployment", Replicas: 1},
				"gpu-quota":    {Kind: "Deployment", Replicas: 1},
				"gpu-profiles": {Kind: "Deployment", Replicas: 2, Budget: "maxUnavailable 1", Spread: true},
				"gpu-culler":   {Kind: "Deployment", Replicas: 2, Budget: "maxUnavailable 1", Spread: true},
			},
		},
		"one gpu-profiles: no budget, which would block the drain of its node": {
			set: append(slices.Clone(every), "--set", "profiles.replicas=1"),
			want: map[string]disruption{
				"gpu-agent":    {Kind: "DaemonSet"},
				"usage-api":    {Kind: "Deployment", Replicas: 1},
				"gpu-quota":    {Kind: "Deployment", Replicas: 1},
				"gpu-profiles": {Kind: "Deployment", Replicas: 1},
				"gpu-culler":   {Kind: "Deployment", Replicas: 2, Budget: "maxUnavailable 1", Spread: true},
			},
		},
		"two gpu-profiles, one gpu-culler": {
			set: append(slices.Clone(every), "--set", "profiles.replicas=2", "--set", "culler.replicas=1"),
			want: map[string]disruption{
				"gpu-agent":    {Kind: "DaemonSet"},
				"usage-api":    {Kind: "Deployment", Replicas: 1},
				"gpu-quota":    {Kind: "Deployment", Replicas: 1},
				"gpu-profiles": {Kind: "Deployment", Replicas: 2, Budget: "maxUnavailable 1", Spread: true},
				"gpu-culler":   {Kind: "Deployment", Replicas: 1, Spread: true},
			},
		},
		"two gpu-quota replicas: one decides, the other follows": {
			set: append(slices.Clone(every), "--set", "quota.replicas=2"),
			want: map[string]disruption{
				"gpu-agent":    {Kind: "DaemonSet"},
				"usage-api":    {Kind: "Deployment", Replicas: 1},
				"gpu-quota":    {Kind: "Deployment", Replicas: 2, Budget: "maxUnavailable 1", Spread: true},
				"gpu-profiles": {Kind: "Deployment", Replicas: 2, Budget: "maxUnavailable 1", Spread: true},
				"gpu-culler":   {Kind: "Deployment", Replicas: 2, Budget: "maxUnavailable 1", Spread: true},
			},
		},
		"two usage APIs on PostgreSQL": {
			set: []string{"--set", "usage.replicas=2", "--set", "usage.databaseURLSecret=ledger-db"},
			want: map[string]disruption{
				"gpu-agent": {Kind: "DaemonSet"},
				"usage-api": {Kind: "Deployment", Replicas: 2, Budget: "maxUnavailable 1", Spread: true},
			},
		},
		"three gpu-profiles": {
			set: []string{"--set", "profiles.enabled=true", "--set", "profiles.replicas=3"},
			want: map[string]disruption{
				"gpu-agent":    {Kind: "DaemonSet"},
				"usage-api":    {Kind: "Deployment", Replicas: 1},
				"gpu-profiles": {Kind: "Deployment", Replicas: 3, Budget: "maxUnavailable 1", Spread: true},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs := rendered(t, tc.set...)
			got := map[string]disruption{}
			selectors := map[string]*metav1.LabelSelector{}
			for _, o := range objs {
				switch o := o.(type) {
				case *appsv1.Deployment:
					c := o.Labels["app.kubernetes.io/component"]
					got[c] = disruption{Kind: "Deployment", Replicas: *o.Spec.Replicas, Spread: spread(o.Spec.Template.Spec.Affinity, o.Spec.Selector)}
					selectors[c] = o.Spec.Selector
				case *appsv1.DaemonSet:
					got[o.Labels["app.kubernetes.io/component"]] = disruption{Kind: "DaemonSet"}
					selectors[o.Labels["app.kubernetes.io/component"]] = o.Spec.Selector
				}
			}
			for key, o := range objs {
				pdb, ok := o.(*policyv1.PodDisruptionBudget)
				if !ok {
					continue
				}
				c := gpuhubComponent(*pdb.Spec.Selector)
				d, ok := got[c]
				if !ok {
					t.Errorf("%s selects no workload of the chart (%s)", key, metav1.FormatLabelSelector(pdb.Spec.Selector))
					continue
				}
				if diff := cmp.Diff(selectors[c], pdb.Spec.Selector); diff != "" {
					t.Errorf("%s selector (-workload +budget):\n%s", key, diff)
				}
				d.Budget = budget(pdb)
				got[c] = d
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("workloads and their budgets (-want +got):\n%s", diff)
			}
			// Whatever the values, a budget must let a drain take a pod: never one that keeps every replica.
			for c, d := range got {
				if d.Budget != "" && d.Replicas < 2 {
					t.Errorf("%s: budget %q on %d replica(s) blocks every drain of its node", c, d.Budget, d.Replicas)
				}
			}
		})
	}
}

// budget describes a PodDisruptionBudget's limit.
func budget(pdb *policyv1.PodDisruptionBudget) string {
	switch {
	case pdb.Spec.MaxUnavailable != nil && pdb.Spec.MinAvailable == nil:
		return "maxUnavailable " + pdb.Spec.MaxUnavailable.String()
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable == nil:
		return "minAvailable " + pdb.Spec.MinAvailable.String()
	}
	return fmt.Sprintf("maxUnavailable %v, minAvailable %v", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
}

// spread reports whether the affinity prefers to keep the selector's pods on different nodes.
func spread(aff *corev1.Affinity, sel *metav1.LabelSelector) bool {
	if aff == nil || aff.PodAntiAffinity == nil {
		return false
	}
	for _, w := range aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		term := w.PodAffinityTerm
		if term.TopologyKey == "kubernetes.io/hostname" && metav1.FormatLabelSelector(term.LabelSelector) == metav1.FormatLabelSelector(sel) {
			return true
		}
	}
	return false
}
