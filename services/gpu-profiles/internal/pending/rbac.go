package pending

import rbacv1 "k8s.io/api/rbac/v1"

// Rules are the RBAC rules the Explainer needs in the namespace of the user pods, and nothing more: it
// creates Events and refreshes their count (patch). It never reads Events (the pod informer tells it
// everything). The chart's gpu-profiles Role must grant them (the pod and node reads are the inventory's).
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}
}
