package emulator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPodPhase: the kubelet's phase rule. A container in back-off after it ran counts as stopped, so a
// crash-looping container with restartPolicy Always keeps its pod Running (before, the emulator reported
// such a pod Pending, and readers that list Running agents lost a killed agent until it was back).
func TestPodPhase(t *testing.T) {
	tests := map[string]struct {
		policy                               corev1.RestartPolicy
		running, waiting, stopped, succeeded int
		want                                 corev1.PodPhase
	}{
		"never started":                    {policy: corev1.RestartPolicyAlways, waiting: 1, want: corev1.PodPending},
		"one running, one not yet started": {policy: corev1.RestartPolicyAlways, running: 1, waiting: 1, want: corev1.PodPending},
		"running":                          {policy: corev1.RestartPolicyAlways, running: 1, want: corev1.PodRunning},
		"running, one restarting":          {policy: corev1.RestartPolicyAlways, running: 1, stopped: 1, want: corev1.PodRunning},
		"crash loop, restart always":       {policy: corev1.RestartPolicyAlways, stopped: 1, want: corev1.PodRunning},
		"crash loop, default policy":       {stopped: 1, want: corev1.PodRunning},
		"restarting a failure, on failure": {policy: corev1.RestartPolicyOnFailure, stopped: 1, want: corev1.PodRunning},
		"all succeeded, on failure":        {policy: corev1.RestartPolicyOnFailure, stopped: 2, succeeded: 2, want: corev1.PodSucceeded},
		"all succeeded, never":             {policy: corev1.RestartPolicyNever, stopped: 1, succeeded: 1, want: corev1.PodSucceeded},
		"one failed, never":                {policy: corev1.RestartPolicyNever, stopped: 2, succeeded: 1, want: corev1.PodFailed},
		"no containers":                    {policy: corev1.RestartPolicyAlways, want: corev1.PodPending},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := podPhase(tc.policy, tc.running, tc.waiting, tc.stopped, tc.succeeded); got != tc.want {
				t.Errorf("phase = %s, want %s", got, tc.want)
			}
		})
	}
}
