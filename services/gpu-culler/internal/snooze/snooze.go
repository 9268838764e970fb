// Package snooze is the panel's snooze button: it moves the stop announced on a user's server by the rule's
// snooze period (decide.Snooze), on the pod's notice, written with the pod's resourceVersion so that a pass
// writing at the same moment never loses the snooze (one of the two writes conflicts and re-reads).
package snooze

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
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
	// Class is the GPU class of a user's server as the usage API names it (gpu.Allocation.Class); "" or nil:
	// from the pod's requests and its node's labels, when they name the product.
	Class func(user, server string) string
	// Contended says whether someone waits for a GPU class (the waitlist): a snooze taken then moves the stop by
	// no more than the rule's idleWhenContended (policy.Rule.SnoozeFor). nil: never.
	Contended func(class string) bool
	Decisions *decision.Log
	Logger    *slog.Logger
	Now       func() time.Time
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
	p := s.o.Policy()
	if p == nil {
		return notice.Notice{}, ErrNoPolicy
	}
	pod, ok := s.o.Pods(user, server)
	if !ok {
		return notice.Notice{}, noServer(user, server)
	}
	ns, name := pod.Namespace, pod.Name
	for try := range attempts {
		if try > 0 {
			// The cached pod was older than the API server's: read it fresh.
			var err error
			pod, err = s.o.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return notice.Notice{}, noServer(user, server)
			case err != nil:
				return notice.Notice{}, fmt.Errorf("read pod %s/%s: %w", ns, name, err)
			}
		}
		n, rec, err := s.next(p, pod, user, server)
		if err != nil {
			return notice.Notice{}, err
		}
		err = notices.Write(ctx, s.o.Client, pod, &n)
		switch {
		case err == nil:
			rec.Actor = actor
			if s.o.Decisions != nil {
				s.o.Decisions.Record(rec)
			}
			return n, nil
		case apierrors.IsConflict(err):
			s.o.Logger.Debug("snooze: the pod changed since it was read; reading it again", "user", user, "server", server, "pod", pod.Name)
			continue
		case apierrors.IsNotFound(err):
			return notice.Notice{}, noServer(user, server)
		}
		return notice.Notice{}, err
	}
	return notice.Notice{}, ErrBusy
}

// attempts bounds the writes of one snooze: the pod's cached copy, then fresh reads after a conflict.
const attempts = 4

// next is the notice after the snooze, and the decision to record once it is written.
func (s *Snoozer) next(p *policy.Policy, pod *corev1.Pod, user, server string) (notice.Notice, decision.Record, error) {
	if pod.DeletionTimestamp != nil {
		return notice.Notice{}, decision.Record{}, fmt.Errorf("%w: %s is stopping already", ErrNothing, what(user, server))
	}
	prev, _, ok := notices.FromPod(pod.Annotations)
	if !ok {
		return notice.Notice{}, decision.Record{}, fmt.Errorf("%w: no stop is announced for %s", ErrNothing, what(user, server))
	}
	var labels map[string]string
	if s.o.NodeLabels != nil && pod.Spec.NodeName != "" {
		labels = s.o.NodeLabels(pod.Spec.NodeName)
	}
	r := RuleFor(p, pod, labels)
	now := s.o.Now()
	contended := r.UnderContention(s.contended(user, server, pod, labels))
	next, err := decide.Snooze(r, prev, now, contended)
	switch {
	case errors.Is(err, decide.ErrNotSnoozable) && prev.Reason == decide.ReasonMaxAge:
		return notice.Notice{}, decision.Record{}, fmt.Errorf("%w: %s has run for the longest time allowed, and that stop cannot be snoozed; save your work",
			ErrNothing, what(user, server))
	case errors.Is(err, decide.ErrNotSnoozable):
		return notice.Notice{}, decision.Record{}, fmt.Errorf("%w: the policy allows no snoozes for %s", ErrNothing, what(user, server))
	case errors.Is(err, decide.ErrNoSnoozesLeft):
		return notice.Notice{}, decision.Record{}, fmt.Errorf("%w: the stop of %s was snoozed %d times already, the most allowed; use the server to keep it",
			ErrNothing, what(user, server), prev.Snoozes)
	case err != nil:
		return notice.Notice{}, decision.Record{}, fmt.Errorf("%w: %s: %w", ErrNothing, what(user, server), err)
	}
	n := notices.Notice(next.Reason, message(next, r, now, contended), next.Deadline, next.Since, next.Snoozes, r)
	rec := decision.Record{
		Time: now, User: user, Server: server, Action: decision.ActionSnooze, Reason: string(next.Reason), Message: n.Message,
		Numbers: map[string]float64{
			"snoozes": float64(next.Snoozes), "max_snoozes": float64(r.MaxSnoozes),
			"snooze_seconds":         r.SnoozeFor(contended).Seconds(),
			"deadline_shift_seconds": next.Deadline.Sub(prev.Deadline).Seconds(),
		},
	}
	if contended {
		rec.Numbers["contended"] = 1
	}
	return n, rec, nil
}

// contended says whether someone waits for the GPU class of the server in pod.
func (s *Snoozer) contended(user, server string, pod *corev1.Pod, nodeLabels map[string]string) bool {
	if s.o.Contended == nil {
		return false
	}
	class := ""
	if s.o.Class != nil {
		class = s.o.Class(user, server)
	}
	if class == "" {
		class = Class(pod, nodeLabels)
	}
	return class != "" && s.o.Contended(class)
}

// message is the notice's text until the next pass writes decide's countdown; contended: the snooze was taken
// while someone waits for the server's GPU class.
func message(n decide.Notice, r policy.Rule, now time.Time, contended bool) string {
	left := r.MaxSnoozes - n.Snoozes
	more := "no snoozes left"
	switch {
	case left == 1:
		more = "1 snooze left"
	case left > 1:
		more = fmt.Sprintf("%d snoozes left", left)
	}
	msg := fmt.Sprintf("Snoozed: this server now stops at %s unless you use it (%s).", clock(n.Deadline, now), more)
	if short := r.SnoozeFor(contended); short < r.Snooze {
		msg += fmt.Sprintf(" Someone is waiting for this kind of GPU, so a snooze lasts %s.", decide.Words(short))
	}
	return msg
}

// clock writes t as "15:10 UTC", with the date when it is not today ("Jan 2 15:10 UTC"), as decide does.
func clock(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04 UTC")
	}
	return t.Format("Jan 2 15:04 UTC")
}

func what(user, server string) string {
	if server == "" {
		return user + "'s default server"
	}
	return fmt.Sprintf("%s's server %q", user, server)
}

func noServer(user, server string) error {
	return fmt.Errorf("%w: %s is not running; start it from the Hub home", ErrNoServer, what(user, server))
}

// RuleFor is the rule of the server running in pod under p: its GPU kind from the pod's GPU requests and its
// node's labels ("" for a CPU-only pod), its profile from LabelProfile.
func RuleFor(p *policy.Policy, pod *corev1.Pod, nodeLabels map[string]string) policy.Rule {
	return p.Rule(Kind(pod, nodeLabels), pod.Labels[LabelProfile])
}

// Class is the GPU class a pod holds (gpu.Allocation.Class, as the usage API and the waitlist name it): that of
// its first GPU allocation, "" when it holds none or its node's labels do not name the product.
func Class(pod *corev1.Pod, nodeLabels map[string]string) string {
	as := gpu.Allocations(gpu.PodResources(pod), gpu.Node{Labels: nodeLabels})
	if len(as) == 0 || as[0].Product == "" {
		return ""
	}
	return as[0].Class()
}

// Kind is the GPU kind a pod holds: that of its first GPU allocation (by resource name), "" when it holds none.
func Kind(pod *corev1.Pod, nodeLabels map[string]string) gpu.Kind {
	as := gpu.Allocations(gpu.PodResources(pod), gpu.Node{Labels: nodeLabels})
	if len(as) == 0 {
		return ""
	}
	return as[0].Kind
}
