// Package notice is how an acting gpuhub service tells a user what is about to happen to their server: it
// annotates the user's pod with gpuhub.io/notice-<service> (JSON), and the usage API surfaces every pending
// notice in the user's `me`, so the panel polls one endpoint. A notice is set before the action it announces.
package notice

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Prefix starts every notice annotation key.
const Prefix = "gpuhub.io/notice-"

// Key is the annotation key of service's notice.
func Key(service string) string { return Prefix + service }

// Kinds of notices.
const (
	KindBudget = "budget" // over a GPU-hour budget
	KindLimit  = "limit"  // over a concurrent limit (an admin lowered it)
	KindIdle   = "idle"   // the GPU sits idle
	KindQueue  = "queue"  // waitlist
)

// Notice is one pending notice.
type Notice struct {
	Service string `json:"service"`
	Kind    string `json:"kind"`
	Reason  string `json:"reason"`
	// Message says it in plain words, with the deadline and what the user can do.
	Message string `json:"message"`
	// Deadline is when the announced action happens; zero when none is scheduled.
	Deadline  time.Time `json:"deadline,omitzero"`
	Snoozable bool      `json:"snoozable"`
	CreatedAt time.Time `json:"createdAt"`
	// Stops says the announced action falls on this pod's server at Deadline, announced since StopsSince: a
	// service acts on a server only a full grace after a notice said so for that server.
	Stops      bool      `json:"stops,omitempty"`
	StopsSince time.Time `json:"stopsSince,omitzero"`
	// Snoozes is how many times the user moved Deadline (the panel's snooze button), of MaxSnoozes allowed.
	Snoozes    int `json:"snoozes,omitempty"`
	MaxSnoozes int `json:"maxSnoozes,omitempty"`
}

// Parse reads the notices among a pod's annotations (key -> JSON), sorted by service. A value that is not a
// notice is skipped and reported in errs (someone else wrote the annotation by hand).
func Parse(annotations map[string]string) (out []Notice, errs []error) {
	for k, v := range annotations {
		if !strings.HasPrefix(k, Prefix) {
			continue
		}
		var n Notice
		if err := json.Unmarshal([]byte(v), &n); err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", k, err))
			continue
		}
		if n.Service == "" {
			n.Service = strings.TrimPrefix(k, Prefix)
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Service < out[j].Service })
	return out, errs
}

// Set writes n on the pod (a JSON merge patch of one annotation; RBAC: pods patch).
func Set(ctx context.Context, c kubernetes.Interface, namespace, pod string, n Notice) error {
	v, err := json.Marshal(n)
	if err != nil {
		return err
	}
	return patch(ctx, c, namespace, pod, Key(n.Service), string(v))
}

// Clear removes service's notice from the pod; a pod without one is left alone by the API server.
func Clear(ctx context.Context, c kubernetes.Interface, namespace, pod, service string) error {
	return patch(ctx, c, namespace, pod, Key(service), nil)
}

func patch(ctx context.Context, c kubernetes.Interface, namespace, pod, key string, value any) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	if err != nil {
		return err
	}
	if _, err := c.CoreV1().Pods(namespace).Patch(ctx, pod, types.MergePatchType, body, metav1PatchOptions); err != nil {
		return fmt.Errorf("annotate pod %s/%s with %s: %w", namespace, pod, key, err)
	}
	return nil
}

var metav1PatchOptions = metav1.PatchOptions{FieldManager: "gpuhub"}
