package admit

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// TestResolveKey: resolve's cache key names the GPU resources asked for (counts above 0) and the whole selector,
// sorted, so that requests with the same content share an entry and any difference in content does not.
func TestResolveKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  map[string]int64
		sel  map[string]string
		want string
	}{
		{name: "nothing", want: "|"},
		{name: "CPU only", res: map[string]int64{"cpu": 2, "memory": 1 << 30}, want: "|"},
		{name: "a zero count is not asked", res: map[string]int64{"nvidia.com/gpu": 0}, want: "|"},
		{name: "whole GPU", res: map[string]int64{"nvidia.com/gpu": 2, "cpu": 4},
			sel:  map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
			want: "nvidia.com/gpu=2;|nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3;"},
		{name: "sorted", res: map[string]int64{"nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-1g.5gb": 2},
			sel:  map[string]string{"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
			want: "nvidia.com/mig-1g.5gb=2;nvidia.com/mig-3g.20gb=1;|nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB;nvidia.com/mig.strategy=mixed;"},
		{name: "every label of the selector", res: map[string]int64{"nvidia.com/gpu.shared": 1},
			sel:  map[string]string{"zone": "a", "nvidia.com/gpu.product": "Tesla-T4-SHARED", "a": ""},
			want: "nvidia.com/gpu.shared=1;|a=;nvidia.com/gpu.product=Tesla-T4-SHARED;zone=a;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendResolveKey(nil, tc.res, tc.sel)); got != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
		})
	}
}

// TestIndexUserPods: a user's pods stay listed under them as pods come, change and go, whichever of several is
// removed, and a pod whose user changes moves to its new user.
func TestIndexUserPods(t *testing.T) {
	ix := newIndex()
	add := func(name, user string) {
		ix.upsertPod("jhub/"+name, inventory.Pod{Namespace: "jhub", Name: name, User: user, Phase: corev1.PodPending})
	}
	names := func(user string) []string {
		var out []string
		for _, p := range ix.byUser[user] {
			out = append(out, p.pod.Name)
		}
		return out
	}
	add("a", "u")
	add("b", "u")
	add("c", "u")
	add("d", "v")
	ix.removePod("jhub/b") // the middle one
	if diff := cmp.Diff([]string{"a", "c"}, names("u")); diff != "" {
		t.Errorf("after removing b (-want +got):\n%s", diff)
	}
	add("a", "u") // changed: listed once, at the end
	if diff := cmp.Diff([]string{"c", "a"}, names("u")); diff != "" {
		t.Errorf("after updating a (-want +got):\n%s", diff)
	}
	add("c", "v") // its user changed
	if diff := cmp.Diff([]string{"a"}, names("u")); diff != "" {
		t.Errorf("u after c moved (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"d", "c"}, names("v")); diff != "" {
		t.Errorf("v after c moved (-want +got):\n%s", diff)
	}
	ix.removePod("jhub/a")
	if _, ok := ix.byUser["u"]; ok {
		t.Errorf("u has no pod left but is still listed: %v", names("u"))
	}
	ix.removePod("jhub/unknown") // nothing to do
	if diff := cmp.Diff([]string{"d", "c"}, names("v")); diff != "" {
		t.Errorf("v after removing an unknown pod (-want +got):\n%s", diff)
	}
}
