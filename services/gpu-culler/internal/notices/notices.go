// Package notices is the culler's notice on a single-user pod (annotation gpuhub.io/notice-gpu-culler, contract
// C2): read back into the decide.Notice a pass and a snooze decide on, built from a decision, and written with
// the pod's resourceVersion, so that a pass and a snooze racing on one pod never overwrite each other: the
// second write gets a Conflict (apierrors.IsConflict) and re-reads.
package notices

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// Service is the culler's Hub service name, the suffix of its notice annotation.
const Service = "gpu-culler"

// Key is the annotation that holds the culler's notice.
var Key = notice.Key(Service)

// FromPod reads the culler's notice among a pod's annotations: as decide sees it, and as written. ok is false
// when there is none, or when the value is not a notice (then the pass writes a good one over it).
func FromPod(annotations map[string]string) (decide.Notice, notice.Notice, bool) {
	v, ok := annotations[Key]
	if !ok {
		return decide.Notice{}, notice.Notice{}, false
	}
	var n notice.Notice
	if err := json.Unmarshal([]byte(v), &n); err != nil || n.Deadline.IsZero() {
		return decide.Notice{}, notice.Notice{}, false
	}
	if n.Service == "" {
		n.Service = Service
	}
	d := decide.Notice{Reason: decide.Reason(n.Reason), Since: n.StopsSince, Deadline: n.Deadline, Snoozes: n.Snoozes}
	if d.Since.IsZero() {
		d.Since = n.CreatedAt // a notice written by hand without stopsSince was shown from its creation
	}
	return d, n, true
}

// Build is the notice of a Warn, or of a Skip held by a snooze (Reason snoozed), as a pass writes it: prev is
// the notice already on the pod (zero when none); it keeps when the stop was first shown and the snoozes taken.
func Build(d decide.Decision, r policy.Rule, prev decide.Notice, now time.Time) notice.Notice {
	since := prev.Since
	if since.IsZero() {
		since = now
	}
	reason := d.Reason
	if reason == decide.ReasonSnoozed || reason == decide.ReasonDryRun {
		// The snooze holds a stop whose cause is the notice's own (only idle stops are snoozable).
		reason = prev.Reason
		if reason == "" {
			reason = decide.ReasonIdle
		}
	}
	return Notice(reason, d.Message, d.Deadline, since, prev.Snoozes, r)
}

// Notice is the culler's notice of a stop for reason at deadline, shown since since, after snoozes snoozes.
func Notice(reason decide.Reason, message string, deadline, since time.Time, snoozes int, r policy.Rule) notice.Notice {
	return notice.Notice{
		Service: Service, Kind: notice.KindIdle, Reason: string(reason), Message: message,
		Deadline: deadline.UTC(), Snoozable: Snoozable(reason, snoozes, r), CreatedAt: since.UTC(),
		Stops: true, StopsSince: since.UTC(), Snoozes: snoozes, MaxSnoozes: r.MaxSnoozes,
	}
}

// Snoozable says whether the user can still snooze a stop for reason after snoozes snoozes (decide.Snooze's
// rule, for the panel's button).
func Snoozable(reason decide.Reason, snoozes int, r policy.Rule) bool {
	return reason == decide.ReasonIdle && r.Snooze > 0 && snoozes < r.MaxSnoozes
}

// Write sets n as the culler's notice on pod, or removes it when n is nil, with a JSON merge patch that carries
// pod's resourceVersion: when the pod changed since it was read the API server answers 409 Conflict, and the
// returned error satisfies apierrors.IsConflict. A pod read without a resourceVersion is patched without the
// precondition. RBAC: pods patch.
func Write(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, n *notice.Notice) error {
	var value any // nil: JSON null removes the key
	if n != nil {
		v := *n
		v.Service = Service
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		value = string(b)
	}
	meta := map[string]any{"annotations": map[string]any{Key: value}}
	if pod.ResourceVersion != "" {
		meta["resourceVersion"] = pod.ResourceVersion
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: Service})
	if err != nil {
		what := "set"
		if n == nil {
			what = "clear"
		}
		return fmt.Errorf("%s the culler's notice on pod %s/%s: %w", what, pod.Namespace, pod.Name, err)
	}
	return nil
}

// OnServer is the culler's notice on one of a user's servers, for the API's me.
type OnServer struct {
	Server string
	Notice notice.Notice
}

// FromPods collects the culler's notices on pods (one user's single-user pods), sorted by server; pods being
// deleted are left out (their server is stopping already).
func FromPods(pods []*corev1.Pod) []OnServer {
	var out []OnServer
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if _, n, ok := FromPod(p.Annotations); ok {
			out = append(out, OnServer{Server: p.Annotations[AnnotationServer], Notice: n})
		}
	}
	slices.SortFunc(out, func(a, b OnServer) int { return strings.Compare(a.Server, b.Server) })
	return out
}

// AnnotationServer is KubeSpawner's annotation with the server's name ("" for the default server).
const AnnotationServer = "hub.jupyter.org/servername"
