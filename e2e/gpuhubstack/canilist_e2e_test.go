//go:build e2e

package gpuhubstack

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// canIDir holds one golden file per ServiceAccount of the chart, named after its component, and
// every-serviceaccount.txt: what any ServiceAccount may do, left out of the others.
const canIDir = "testdata/can-i"

// TestCanIList shows, for each ServiceAccount of the chart (every service enabled, z2jh's pods in another namespace
// than the release), exactly what it may do: the chart's rendered RBAC is applied to a real API server, and a
// SelfSubjectRulesReview made as the account (what `kubectl auth can-i --list
// --as=system:serviceaccount:<ns>:<sa> -n <namespace>` does, by impersonation) in the release namespace, the
// single-user namespace and an unrelated one is printed as kubectl prints it and compared with
// testdata/can-i/<component>.txt. `go test -tags e2e ./e2e/gpuhubstack -run TestCanIList -args -update` (with
// make e2e's GPUHUB_KUBE_BIN and GPUHUB_HELM) rewrites them; review the diff as a change of the services' rights.
//
// Rows every authenticated account has (the system:basic-user, system:discovery and system:public-info-viewer
// ClusterRoles: selfsubject*reviews, /api, /healthz, /version, ...) are left out of those files: they are what a
// ServiceAccount with no binding at all may do, reviewed the same way and kept in every-serviceaccount.txt, so a
// change of the API server's defaults shows there and not five times.
func TestCanIList(t *testing.T) {
	const release, pods, unrelated = testRelease, testPods, "unrelated"
	c := startChartRBAC(t, unrelated)
	ctx, admin, adminCfg, objs := c.ctx, c.admin, c.adminCfg, c.objs
	namespaces := []struct{ name, what string }{
		{release, "the release namespace"},
		{pods, "the single-user namespace, usage.podNamespace"},
		{unrelated, "any other namespace"},
	}
	accounts := map[string]string{} // component: ServiceAccount
	for _, o := range objs {
		if sa, ok := o.(*corev1.ServiceAccount); ok {
			accounts[sa.Labels["app.kubernetes.io/component"]] = sa.Name
		}
	}
	wantComponents := []string{"gpu-agent", "gpu-culler", "gpu-profiles", "gpu-quota", "usage-api"}
	if diff := cmp.Diff(wantComponents, slices.Sorted(maps.Keys(accounts))); diff != "" {
		t.Errorf("the chart's ServiceAccounts by component (-want +got):\n%s", diff)
	}
	// The baseline: a ServiceAccount no binding names.
	const nobody = "no-bindings"
	if _, err := admin.CoreV1().ServiceAccounts(release).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: nobody}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	review := func(sa, ns string) access {
		t.Helper()
		cfg := rest.CopyConfig(adminCfg)
		// The API server adds system:serviceaccounts, system:serviceaccounts:<ns> and system:authenticated, as for
		// the account's own token.
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + release + ":" + sa}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
			Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("rules review as %s in %s: %v", sa, ns, err)
		}
		if r.Status.Incomplete {
			t.Errorf("rules review as %s in %s is incomplete: %s", sa, ns, r.Status.EvaluationError)
		}
		return accessOf(r.Status)
	}
	every := map[string]access{}
	for _, ns := range namespaces {
		every[ns.name] = review(nobody, ns.name)
	}

	golden := func(file, header string, table func(ns string) string) {
		t.Helper()
		var b strings.Builder
		b.WriteString(header)
		for _, ns := range namespaces {
			fmt.Fprintf(&b, "\n## -n %s (%s)\n%s", ns.name, ns.what, table(ns.name))
		}
		got := b.String()
		path := filepath.Join(canIDir, file)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run the test with -args -update to create it)", err)
		}
		if diff := cmp.Diff(string(want), got); diff != "" {
			t.Errorf("%s: what the account may do changed (-want +got); if that is intended, rerun with -args -update:\n%s", path, diff)
		}
	}
	if *update {
		if err := os.MkdirAll(canIDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	golden("every-serviceaccount.txt",
		"# kubectl auth can-i --list --as=system:serviceaccount:"+release+":"+nobody+" (a ServiceAccount no binding names):\n"+
			"# what every ServiceAccount may do. Left out of the other files here. Written by TestCanIList -update.\n",
		func(ns string) string { return every[ns].table() })
	for component, sa := range accounts {
		golden(component+".txt",
			"# kubectl auth can-i --list --as=system:serviceaccount:"+release+":"+sa+" (the chart's "+component+", every\n"+
				"# service enabled, release "+release+" in namespace "+release+", z2jh in "+pods+"), less what every ServiceAccount\n"+
				"# may do (every-serviceaccount.txt). Written by TestCanIList -update.\n",
			func(ns string) string { return review(sa, ns).without(every[ns]).table() })
	}
	// A golden file of an account the chart no longer has would go on claiming rights nobody holds.
	files, err := filepath.Glob(filepath.Join(canIDir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		if _, ok := accounts[name]; !ok && name != "every-serviceaccount" {
			t.Errorf("%s: the chart has no ServiceAccount of component %s; remove the file", f, name)
		}
	}
}
