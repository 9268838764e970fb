//go:build chart

package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestQuotaTolerations: the single-user pods' tolerations are one setting, gpu-profiles' overrides
// (profiles.config's tolerations); gpu-quota gets the same list (--tolerations), so that a GPU on a node tainted
// against those pods is free for neither service. Without the key gpu-quota keeps its defaults, as gpu-profiles
// does.
func TestQuotaTolerations(t *testing.T) {
	tests := map[string]struct {
		config string
		want   *[]corev1.Toleration // nil: no --tolerations
	}{
		"no overrides":              {config: "{}\n"},
		"overrides without the key": {config: "# the form as generated\ndefault: cpu\n"},
		"none":                      {config: "tolerations: []\n", want: &[]corev1.Toleration{}},
		"a team's nodes and every NoExecute taint": {
			config: "tolerations:\n  - {key: team, operator: Equal, value: ml, effect: NoSchedule}\n  - {operator: Exists, effect: NoExecute}\n",
			want: &[]corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule},
				{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "profiles.yaml")
			if err := os.WriteFile(path, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			objs := rendered(t, "--set", "quota.enabled=true", "--set", "profiles.enabled=true", "--set-file", "profiles.config="+path)
			args := objs["Deployment jhub/gpuhub-quota"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args
			text, ok := flagValue(args, "tolerations")
			var got *[]corev1.Toleration
			if ok {
				got = &[]corev1.Toleration{}
				if err := json.Unmarshal([]byte(text), got); err != nil {
					t.Fatalf("--tolerations=%s: %v", text, err)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("gpu-quota's tolerations (-want +got):\n%s", diff)
			}
		})
	}
}
