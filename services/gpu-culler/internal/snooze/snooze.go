// Package snooze is the panel's snooze button: it moves the stop announced on a user's server by the rule's
// snooze period (decide.Snooze), on the pod's notice, written with the pod's resourceVersion so that a pass
// writing at the same moment never loses the snooze (one of the two writes conflicts and re-reads).
package snooze

import (
	"context"
	"errors"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// LabelProfile is the pod label with the server's gpu-profiles slug (gpu-profiles sets it through KubeSpawner).
const LabelProfile = "gpuhub.io/profile"

// Errors of a snooze; the API answers ErrNoServer with 404, ErrNothing (wrapping decide's reason) and ErrBusy
// with 409, ErrNoPolicy with 503. Their messages are plain words for the user.
var (
	ErrNoServer = errors.New("no such running server")
	ErrNothing  = errors.New("nothing to snooze")
	ErrBusy     = errors.New("the culler changed this server's notice at the same moment; try again")
	ErrNoPolicy = errors.New("the culler has no policy loaded yet; try again in a minute")
)

// Options configure a Snoozer.
type Options struct {
	Client kubernetes.Interface
	// Pods finds a user's server's pod (the pod informer's copy; "" is the default server).
	Pods func(user, server string) (*corev1.Pod, bool)
	// Policy is the policy in force.
	Policy func() *policy.Policy
	// NodeLabels are a node's labels, for the GPU kind of a pod (gpu.Allocations); nil: none known.
	NodeLabels func(node string) map[string]string
	Decisions  *decision.Log
	Logger     *slog.Logger
	Now        func() time.Time
}

// Snoozer snoozes announced stops.
type Snoozer struct {
	o Options
}

// New returns a Snoozer.
func New(o Options) *Snoozer {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Snoozer{o: o}
}

// Snooze moves the stop announced on user's server and returns the notice as written. actor is who asked:
// the user, or an admin acting for them (the decision record names them).
func (s *Snoozer) Snooze(ctx context.Context, actor, user, server string) (notice.Notice, error) {
	return notice.Notice{}, errors.New("not implemented")
}

// RuleFor is the rule of the server running in pod under p: its GPU kind from the pod's GPU requests and its
// node's labels ("" for a CPU-only pod), its profile from LabelProfile.
func RuleFor(p *policy.Policy, pod *corev1.Pod, nodeLabels map[string]string) policy.Rule {
	return p.Rule(Kind(pod, nodeLabels), pod.Labels[LabelProfile])
}

// Kind is the GPU kind a pod holds: that of its first GPU allocation (by resource name), "" when it holds none.
func Kind(pod *corev1.Pod, nodeLabels map[string]string) gpu.Kind {
	as := gpu.Allocations(gpu.PodResources(pod), gpu.Node{Labels: nodeLabels})
	if len(as) == 0 {
		return ""
	}
	return as[0].Kind
}
