//go:build chart

package chart

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUsageReaders: the usage API lets each service the chart runs read what it needs and no more. gpu-quota
// (GPU-hours) and gpu-culler (every GPU server's telemetry) are reader services (--reader-services: every user's
// GPU-hours, telemetry and advice); gpu-profiles reads each user's right-size advice only (--advice-readers), and
// its pods still reach the usage API through the NetworkPolicy.
func TestUsageReaders(t *testing.T) {
	const absent = "(not passed)" // the usage API's own default then
	type wiring struct {
		Readers, Advice string
		ProfilesReach   bool // the usage API's NetworkPolicy admits gpu-profiles' pods
	}
	profilesPods := "app.kubernetes.io/component=gpu-profiles,app.kubernetes.io/instance=gpuhub,app.kubernetes.io/name=gpuhub"
	for name, tc := range map[string]struct {
		set  []string
		want wiring
	}{
		"default": {nil, wiring{Readers: absent, Advice: absent}},
		"gpu-profiles alone": {[]string{"--set", "profiles.enabled=true"},
			wiring{Readers: absent, Advice: "gpu-profiles", ProfilesReach: true}},
		"gpu-quota and gpu-profiles": {[]string{"--set", "quota.enabled=true", "--set", "profiles.enabled=true"},
			wiring{Readers: "gpu-quota", Advice: "gpu-profiles", ProfilesReach: true}},
		"every service": {[]string{"--set", "quota.enabled=true", "--set", "profiles.enabled=true", "--set", "culler.enabled=true"},
			wiring{Readers: "gpu-quota,gpu-culler", Advice: "gpu-profiles", ProfilesReach: true}},
		"gpu-culler alone": {[]string{"--set", "culler.enabled=true"}, wiring{Readers: "gpu-culler", Advice: absent}},
		"gpu-profiles under another name": {[]string{"--set", "profiles.enabled=true", "--set", "profiles.serviceName=spawn-forms"},
			wiring{Readers: absent, Advice: "spawn-forms", ProfilesReach: true}},
	} {
		t.Run(name, func(t *testing.T) {
			objs := rendered(t, tc.set...)
			args := objs["Deployment jhub/gpuhub-usage"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args
			flag := func(name string) string {
				if v, ok := flagValue(args, name); ok {
					return v
				}
				return absent
			}
			got := wiring{Readers: flag("reader-services"), Advice: flag("advice-readers")}
			for _, peer := range objs["NetworkPolicy jhub/gpuhub-usage"].(*networkingv1.NetworkPolicy).Spec.Ingress[0].From {
				got.ProfilesReach = got.ProfilesReach || metav1.FormatLabelSelector(peer.PodSelector) == profilesPods
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("the usage API's readers (-want +got):\n%s", diff)
			}
		})
	}
}
