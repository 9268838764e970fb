//go:build chart

package chart

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestOwnerDeployment: gpu-quota, gpu-profiles and gpu-culler are each told their own Deployment
// (--owner-deployment), in the namespace of their Lease, and their Role there lets them get that Deployment and
// no other: the Lease (and gpu-culler's stops ConfigMap) they create at run time name it as owner, so helm
// uninstall, which deletes the Deployment, leaves none of them behind.
func TestOwnerDeployment(t *testing.T) {
	objs := rendered(t, "--set", "quota.enabled=true", "--set", "profiles.enabled=true", "--set", "culler.enabled=true",
		"--set", "usage.podNamespace=z2jh", "--set-file", "culler.policy=testdata/culler-policy.yaml")
	tests := map[string]struct {
		deployment, role string
	}{
		"gpu-quota":    {deployment: "gpuhub-quota", role: "gpuhub-quota-lease"},
		"gpu-profiles": {deployment: "gpuhub-profiles", role: "gpuhub-profiles-lease"},
		"gpu-culler":   {deployment: "gpuhub-culler", role: "gpuhub-culler-state"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dep, ok := objs["Deployment jhub/"+tc.deployment].(*appsv1.Deployment)
			if !ok {
				t.Fatalf("no Deployment jhub/%s", tc.deployment)
			}
			args := dep.Spec.Template.Spec.Containers[0].Args
			type wiring struct{ Owner, LeaseNamespace string }
			var got wiring
			got.Owner, _ = flagValue(args, "owner-deployment")
			got.LeaseNamespace, _ = flagValue(args, "lease-namespace")
			if diff := cmp.Diff(wiring{Owner: tc.deployment, LeaseNamespace: "jhub"}, got); diff != "" {
				t.Errorf("%s's owner (-want +got):\n%s", name, diff)
			}

			role, ok := objs["Role jhub/"+tc.role].(*rbacv1.Role)
			if !ok {
				t.Fatalf("no Role jhub/%s", tc.role)
			}
			var deployments []rbacv1.PolicyRule
			for _, r := range role.Rules {
				for _, res := range r.Resources {
					if res == "deployments" || res == "*" {
						deployments = append(deployments, r)
					}
				}
			}
			want := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"},
				ResourceNames: []string{tc.deployment}, Verbs: []string{"get"}}}
			if diff := cmp.Diff(want, deployments); diff != "" {
				t.Errorf("Role %s's rules on Deployments (-want +got):\n%s", tc.role, diff)
			}
			// The Role is bound to the Deployment's ServiceAccount.
			rb, ok := objs["RoleBinding jhub/"+tc.role].(*rbacv1.RoleBinding)
			if !ok || rb.RoleRef.Name != tc.role || len(rb.Subjects) != 1 ||
				rb.Subjects[0].Name != dep.Spec.Template.Spec.ServiceAccountName || rb.Subjects[0].Namespace != "jhub" {
				t.Errorf("RoleBinding jhub/%s does not bind %s to the ServiceAccount of Deployment %s", tc.role, tc.role, tc.deployment)
			}
		})
	}
}
