package inventory

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Condition is a pod condition as the services read it.
type Condition struct {
	Status  corev1.ConditionStatus // "" when the pod has no such condition
	Reason  string
	Message string    // the writer's raw text (for the scheduler: per-node reasons); classify it, never show it
	Since   time.Time // lastTransitionTime
}

// Waiting is a container that waits to run.
type Waiting struct {
	Container string
	Init      bool
	Reason    string // ContainerCreating, PodInitializing, ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ...
}

func podScheduled(p *corev1.Pod) Condition {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return Condition{Status: c.Status, Reason: c.Reason, Message: c.Message, Since: c.LastTransitionTime.UTC()}
		}
	}
	return Condition{}
}

// podWaiting lists the waiting containers only while the pod is Pending: afterwards a waiting container is a
// restart, not a start.
func podWaiting(p *corev1.Pod) []Waiting {
	if p.Status.Phase != corev1.PodPending {
		return nil
	}
	var out []Waiting
	add := func(statuses []corev1.ContainerStatus, init bool) {
		for _, c := range statuses {
			if w := c.State.Waiting; w != nil {
				out = append(out, Waiting{Container: c.Name, Init: init, Reason: w.Reason})
			}
		}
	}
	add(p.Status.InitContainerStatuses, true)
	add(p.Status.ContainerStatuses, false)
	return out
}
