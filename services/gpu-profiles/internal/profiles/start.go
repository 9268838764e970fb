package profiles

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// StartRequest is the Hub glue's question when a server starts, before its pod is created (POST api/v1/start):
// may the choice the user picked start now? The glue asks with the pod KubeSpawner built for it.
type StartRequest struct {
	User   string   `json:"user"`
	Groups []string `json:"groups"`
	Server string   `json:"server"`
	// Profile is the slug KubeSpawner started; "" when the spawn named none (KubeSpawner took the default).
	Profile string `json:"profile"`
	// DisplayName is the name the Hub showed for the choice, for the message when gpu-profiles no longer has it.
	DisplayName string `json:"displayName"`
	// Live says the Hub had the choice from gpu-profiles (it may be gone since); false for the administrator's
	// Hub-side static list, which is judged by the pod.
	Live bool `json:"live"`
	// Selects are the node labels the Hub's static choice selects on (its kubespawner_override's node_selector).
	Selects []string `json:"selects"`
	// Pod is the pod about to be created, cut to what counts its GPUs: containers' resources and node selector.
	Pod corev1.PodSpec `json:"pod"`
	// Waitlist says the Hub offers joining the waitlist (the spawn form's checkbox, with gpu-quota deployed).
	Waitlist bool `json:"waitlist"`
	// UserOptions are the spawn's user_options when they speak of the waitlist: a spawn asking to join
	// (contract.WaitlistChoiceFrom) passes to gpu-quota, which keeps the line.
	UserOptions map[string]any `json:"userOptions,omitempty"`
}

// joining says the spawn asks to wait in line and the Hub offers the waitlist.
func (r StartRequest) joining() bool {
	return r.Waitlist && contract.WaitlistChoiceFrom(r.UserOptions) != nil
}

// StartAnswer is gpu-profiles' answer: no refusal, or why not and what the user can do.
type StartAnswer struct {
	Refusal *Refusal `json:"refusal,omitempty"`
}

// Refusal is a start refused before any pod exists: the reason (a Reason* constant, "gone" or "other") and the
// message the spawn page shows.
type Refusal struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// ReasonGone is a choice the user was shown that gpu-profiles no longer offers.
const ReasonGone = "gone"

// Start renders the user's choices as the form would and judges the start against them (CheckStart).
func (r *Renderer) Start(ctx context.Context, req StartRequest) (StartAnswer, error) {
	resp, err := r.Render(ctx, Request{User: req.User, Groups: req.Groups, Server: req.Server, start: true})
	if err != nil {
		return StartAnswer{}, err
	}
	return StartAnswer{Refusal: CheckStart(resp.Profiles, req)}, nil
}

// CheckStart refuses a start whose choice is unavailable in the user's form (a race with the form, or an API
// spawn naming it), nil when it may go on to gpu-quota. A choice of the Hub's static list is judged by the
// form's GPU choices asking for the same GPUs as the pod on the same kind of node: refused only when none of
// them is available, since the scheduler may place it on any of them. A spawn joining the waitlist for a
// choice with none free passes: gpu-quota queues it and its refusal says the place in line.
func CheckStart(form []Profile, req StartRequest) *Refusal {
	var info Info
	name := req.DisplayName
	if p, ok := chosen(form, req.Profile); ok {
		info, name = p.GPUHub, p.DisplayName
	} else if req.Live {
		info = Info{Reason: ReasonGone, ReasonText: "This choice is no longer offered."}
	} else {
		match, ok := sameKindAsPod(form, req)
		if !ok {
			return nil
		}
		info = match.GPUHub
	}
	if info.Available {
		return nil
	}
	reason := info.Reason
	switch reason {
	case ReasonNoneFree, ReasonWaitlist, ReasonQuota, ReasonUnschedulable, ReasonGone:
	default:
		reason = "other"
	}
	waitable := info.exhausted()
	if waitable && req.joining() {
		return nil
	}
	text := info.ReasonText
	if text == "" {
		text = "It is not available right now."
	}
	message := name + " is not available. " + text
	if !strings.Contains(strings.ToLower(text), "free now") {
		message += " " + freeNow(form)
	}
	if waitable && req.Waitlist {
		message += ` To wait for one, pick it on the spawn form and tick "Join the waitlist".`
	}
	return &Refusal{Reason: reason, Message: message}
}

// chosen is the profile KubeSpawner applies: the slug's, or the default when the spawn named none.
func chosen(form []Profile, slug string) (Profile, bool) {
	for _, p := range form {
		if slug == "" && p.Default || slug != "" && p.Slug == slug {
			if p.DisplayName == "" {
				p.DisplayName = p.Slug
			}
			return p, true
		}
	}
	return Profile{}, false
}

// sameKindAsPod is the first of the form's GPU choices that ask for the pod's GPUs on the same kind of node, ok
// false when the pod asks for no GPU, no choice matches, or one that matches is available. The same kind: no
// label of the two node selectors disagrees, and each label in named (what the static choice selects on, and
// the pod's own GPU labels: its product, say) the choice selects on too, with the pod's value.
func sameKindAsPod(form []Profile, req StartRequest) (Profile, bool) {
	gpus := gpu.PodResources(&corev1.Pod{Spec: req.Pod})
	if len(gpus) == 0 {
		return Profile{}, false
	}
	selector := req.Pod.NodeSelector
	named := map[string]bool{}
	for _, k := range req.Selects {
		named[k] = true
	}
	for k := range selector {
		if strings.HasPrefix(k, "nvidia.com/") { // the GPU feature discovery's labels
			named[k] = true
		}
	}
	var first Profile
	found := false
	for _, p := range form {
		if p.GPUHub.Kind == "" || p.GPUHub.Kind == "cpu" {
			continue
		}
		limits, theirs := p.override()
		if !sameGPUs(limits, gpus) || !agree(theirs, selector, named) {
			continue
		}
		if p.GPUHub.Available {
			return Profile{}, false
		}
		if !found {
			first, found = p, true
		}
	}
	return first, found
}

// override is the profile's GPU limits and node selector: the generated ones, or the administrator's static dict's.
func (p Profile) override() (limits, selector map[string]string) {
	if p.static == nil {
		return p.Override.ExtraResourceLimits, p.Override.NodeSelector
	}
	o, _ := p.static["kubespawner_override"].(map[string]any)
	return stringMap(o["extra_resource_limits"]), stringMap(o["node_selector"])
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := make(map[string]string, len(m))
	for k, x := range m {
		out[k] = fmt.Sprint(x) // YAML may give a number: 1, not "1"
	}
	return out
}

// sameGPUs says the limits ask for exactly the GPUs in gpus (GPU resources with a positive count).
func sameGPUs(limits map[string]string, gpus map[string]int64) bool {
	n := 0
	for k, v := range limits {
		if !gpu.IsGPUResource(k) {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Value() <= 0 {
			continue
		}
		if gpus[k] != q.Value() {
			return false
		}
		n++
	}
	return n == len(gpus)
}

func agree(theirs, pod map[string]string, named map[string]bool) bool {
	for k, v := range theirs {
		if pv, ok := pod[k]; ok && pv != v {
			return false
		}
	}
	for k := range named {
		v, ok := theirs[k]
		if !ok {
			return false
		}
		if pv, ok := pod[k]; ok && pv != v {
			return false
		}
	}
	return true
}

// freeNow names the GPU choices the user could start instead: "Free now: NVIDIA L4 (3 free); …." or that none is.
func freeNow(form []Profile) string {
	var names []string
	for _, p := range form {
		if p.GPUHub.Kind == "" || p.GPUHub.Kind == "cpu" || p.GPUHub.Kind == KindStatic || !p.GPUHub.Available {
			continue
		}
		names = append(names, cmp.Or(p.DisplayName, p.Slug)+" ("+strconv.FormatInt(p.GPUHub.Free, 10)+" free)")
	}
	if len(names) == 0 {
		return "No GPU you may take is free right now; a CPU-only server can start."
	}
	return "Free now: " + strings.Join(names, "; ") + "."
}
