//go:build chart

package chart

import (
	"path"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestAgentPodResources: the agent's --pod-resources-socket lies in the read-only mount of the node's
// agent.podResourcesDir; empty turns both off.
func TestAgentPodResources(t *testing.T) {
	type wiring struct {
		Socket, HostPath, MountPath string
		HostPathType                corev1.HostPathType
		ReadOnly                    bool
	}
	cases := map[string]struct {
		set  []string
		want wiring
	}{
		"default": {want: wiring{Socket: "/var/lib/kubelet/pod-resources/kubelet.sock", HostPath: "/var/lib/kubelet/pod-resources",
			MountPath: "/var/lib/kubelet/pod-resources", HostPathType: corev1.HostPathDirectoryOrCreate, ReadOnly: true}},
		"another kubelet root": {set: []string{"--set", "agent.podResourcesDir=/var/lib/k0s/kubelet/pod-resources"},
			want: wiring{Socket: "/var/lib/kubelet/pod-resources/kubelet.sock", HostPath: "/var/lib/k0s/kubelet/pod-resources",
				MountPath: "/var/lib/kubelet/pod-resources", HostPathType: corev1.HostPathDirectoryOrCreate, ReadOnly: true}},
		"off": {set: []string{"--set", "agent.podResourcesDir="}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := rendered(t, tc.set...)["DaemonSet jhub/gpuhub-agent"].(*appsv1.DaemonSet).Spec.Template.Spec
			socket, ok := flagValue(spec.Containers[0].Args, "pod-resources-socket")
			if !ok {
				t.Fatalf("agent args %v lack --pod-resources-socket (the binary's default is the kubelet's path)", spec.Containers[0].Args)
			}
			got := wiring{Socket: socket}
			for _, v := range spec.Volumes {
				if v.HostPath == nil || v.Name != "pod-resources" {
					continue
				}
				got.HostPath = v.HostPath.Path
				if v.HostPath.Type != nil {
					got.HostPathType = *v.HostPath.Type
				}
				for _, m := range spec.Containers[0].VolumeMounts {
					if m.Name == v.Name {
						got.MountPath, got.ReadOnly = m.MountPath, m.ReadOnly
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pod-resources wiring (-want +got):\n%s", diff)
			}
			if got.Socket != "" && path.Dir(got.Socket) != got.MountPath {
				t.Errorf("--pod-resources-socket=%s is not in the mount %s", got.Socket, got.MountPath)
			}
		})
	}

	out, err := helm(t, "template", "gpuhub", "gpuhub", "--kube-version", kubeVersion, "--set", "agent.podResourcesDir=var/lib/kubelet")
	if err == nil || !strings.Contains(out, "podResourcesDir") {
		t.Errorf("a relative agent.podResourcesDir: err %v, want a schema error naming it:\n%s", err, out)
	}
}
