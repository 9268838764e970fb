package profiles

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

var (
	h100Selector = map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
	l4Selector   = map[string]string{"nvidia.com/gpu.product": "NVIDIA-L4"}
	oneGPU       = map[string]string{"nvidia.com/gpu": "1"}
)

func formChoice(slug, name, kind string, free int64, limits, selector map[string]string, reason, text string) Profile {
	return Profile{Slug: slug, DisplayName: name, Override: KubeSpawn{ExtraResourceLimits: limits, NodeSelector: selector},
		GPUHub: Info{Kind: kind, Class: name, Count: 1, Free: free, Total: 4, Available: reason == "", Reason: reason, ReasonText: text}}
}

// startForm is a user's form: the CPU choice (default), an H100 with none free, a MIG slice with 7 free.
func startForm() []Profile {
	cpu := formChoice("cpu", "CPU only", "cpu", 0, nil, nil, "", "")
	cpu.Default = true
	return []Profile{
		cpu,
		formChoice("gpu-h100-80gb-hbm3", "NVIDIA H100 80GB", "gpu", 0, oneGPU, h100Selector, ReasonNoneFree, "None free right now: all 2 in use."),
		formChoice("mig-a100-sxm4-40gb-1g-5gb", "A100 MIG 1g.5gb <slice>", "mig", 7, map[string]string{"nvidia.com/mig-1g.5gb": "1"},
			map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, "", ""),
	}
}

func podAsking(limits, selector map[string]string) corev1.PodSpec {
	res := corev1.ResourceList{}
	for k, v := range limits {
		res[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return corev1.PodSpec{NodeSelector: selector, Containers: []corev1.Container{{Name: "notebook", Resources: corev1.ResourceRequirements{Limits: res}}}}
}

const (
	h100NoneFree = "NVIDIA H100 80GB is not available. None free right now: all 2 in use. Free now: A100 MIG 1g.5gb <slice> (7 free)."
	joinHint     = ` To wait for one, pick it on the spawn form and tick "Join the waitlist".`
)

var join = map[string]any{"profile": "x", "gpuhub_waitlist": true}

func TestCheckStart(t *testing.T) {
	l4 := formChoice("gpu-l4", "NVIDIA L4", "gpu", 3, oneGPU, l4Selector, "", "")
	pool := map[string]string{"cloud.example.com/pool": "gpu"}
	h100Pod := podAsking(oneGPU, h100Selector)
	withL4 := append(startForm(), l4)
	quotaOut := formChoice("gpu-t4", "T4", "gpu", 3, oneGPU, map[string]string{"nvidia.com/gpu.product": "Tesla-T4"}, ReasonQuota, "Over your quota.")
	heldText := "None free for you right now: the free MIG 1g.5gb slice on an A100 is held for the next person on the waitlist."
	held := formChoice("mig-a100-sxm4-40gb-1g-5gb", "A100 MIG 1g.5gb", "mig", 0, map[string]string{"nvidia.com/mig-1g.5gb": "1"}, nil, ReasonWaitlist, heldText)
	static := Profile{Slug: "team", DisplayName: "Team image", GPUHub: Info{Kind: KindStatic, Available: true},
		static: staticDict{"slug": "team", "kubespawner_override": map[string]any{"extra_resource_limits": map[string]any{"nvidia.com/gpu": 1}}}}

	cases := []struct {
		name string
		form []Profile
		req  StartRequest
		want *Refusal
	}{
		{name: "an available choice", form: startForm(), req: StartRequest{Profile: "mig-a100-sxm4-40gb-1g-5gb", Live: true}},
		{name: "the default (CPU)", form: startForm(), req: StartRequest{}},
		{name: "a default that is unavailable", form: func() []Profile {
			f := startForm()
			f[0].Default, f[1].Default = false, true
			return f
		}(), req: StartRequest{Live: true}, want: &Refusal{Reason: ReasonNoneFree, Message: h100NoneFree}},
		{name: "none free, with what is free instead", form: startForm(), req: StartRequest{Profile: "gpu-h100-80gb-hbm3", Live: true, Pod: h100Pod},
			want: &Refusal{Reason: ReasonNoneFree, Message: h100NoneFree}},
		{name: "none free, waitlist offered: how to join", form: startForm(),
			req:  StartRequest{Profile: "gpu-h100-80gb-hbm3", Live: true, Waitlist: true},
			want: &Refusal{Reason: ReasonNoneFree, Message: h100NoneFree + joinHint}},
		{name: "none free, asking to join without a waitlist offered", form: startForm(),
			req:  StartRequest{Profile: "gpu-h100-80gb-hbm3", Live: true, UserOptions: join},
			want: &Refusal{Reason: ReasonNoneFree, Message: h100NoneFree}},
		{name: "none free, joining: gpu-quota decides", form: startForm(),
			req: StartRequest{Profile: "gpu-h100-80gb-hbm3", Live: true, Waitlist: true, UserOptions: join}},
		{name: "held for others, joining: gpu-quota decides", form: []Profile{startForm()[0], held},
			req: StartRequest{Profile: held.Slug, Live: true, Waitlist: true, UserOptions: join}},
		{name: "held for others, not joining", form: []Profile{startForm()[0], held},
			req: StartRequest{Profile: held.Slug, Live: true, Waitlist: true},
			want: &Refusal{Reason: ReasonWaitlist, Message: "A100 MIG 1g.5gb is not available. " + heldText +
				" No GPU you may take is free right now; a CPU-only server can start." + joinHint}},
		{name: "over quota: no line to wait in", form: append(startForm(), quotaOut),
			req:  StartRequest{Profile: "gpu-t4", Live: true, Waitlist: true, UserOptions: join},
			want: &Refusal{Reason: ReasonQuota, Message: "T4 is not available. Over your quota. Free now: A100 MIG 1g.5gb <slice> (7 free)."}},
		{name: "gone since the form", form: startForm()[:2], req: StartRequest{Profile: "mig-a100-sxm4-40gb-1g-5gb", DisplayName: "A100 MIG", Live: true},
			want: &Refusal{Reason: ReasonGone, Message: "A100 MIG is not available. This choice is no longer offered. No GPU you may take is free right now; a CPU-only server can start."}},
		{name: "another reason is other", form: []Profile{formChoice("x", "X", "gpu", 0, oneGPU, nil, "odd", "")}, req: StartRequest{Profile: "x", Live: true},
			want: &Refusal{Reason: "other", Message: "X is not available. It is not available right now. No GPU you may take is free right now; a CPU-only server can start."}},
		{name: "words that already say what is free", form: []Profile{formChoice("x", "X", "gpu", 0, oneGPU, nil, ReasonUnschedulable, "Free now: nothing.")},
			req: StartRequest{Profile: "x", Live: true}, want: &Refusal{Reason: ReasonUnschedulable, Message: "X is not available. Free now: nothing."}},

		// The Hub's static choices, judged by the pod against every live choice of the same kind.
		{name: "static H100: the only live H100 has none free", form: startForm(),
			req:  StartRequest{Profile: "h100", DisplayName: "H100 <static>", Selects: []string{"nvidia.com/gpu.product"}, Pod: h100Pod},
			want: &Refusal{Reason: ReasonNoneFree, Message: "H100 <static> is not available. None free right now: all 2 in use. Free now: A100 MIG 1g.5gb <slice> (7 free)."}},
		{name: "static, any GPU, an L4 is free", form: withL4, req: StartRequest{Profile: "any-gpu", DisplayName: "any-gpu", Pod: podAsking(oneGPU, nil)}},
		{name: "static, any GPU, only the H100", form: startForm(), req: StartRequest{Profile: "any-gpu", DisplayName: "any-gpu", Pod: podAsking(oneGPU, nil)},
			want: &Refusal{Reason: ReasonNoneFree, Message: "any-gpu is not available. None free right now: all 2 in use. Free now: A100 MIG 1g.5gb <slice> (7 free)."}},
		{name: "static L4", form: withL4, req: StartRequest{Profile: "l4", Selects: []string{"nvidia.com/gpu.product"}, Pod: podAsking(oneGPU, l4Selector)}},
		{name: "static H100 with an L4 free", form: withL4, req: StartRequest{Profile: "h100", DisplayName: "H100",
			Selects: []string{"nvidia.com/gpu.product"}, Pod: h100Pod},
			want: &Refusal{Reason: ReasonNoneFree, Message: "H100 is not available. None free right now: all 2 in use. Free now: A100 MIG 1g.5gb <slice> (7 free); NVIDIA L4 (3 free)."}},
		{name: "static on a pool no live choice selects on: not gpu-profiles' call", form: withL4,
			req: StartRequest{Profile: "pool-gpu", Selects: []string{"cloud.example.com/pool"}, Pod: podAsking(oneGPU, pool)}},
		{name: "static without a GPU", form: startForm(), req: StartRequest{Profile: "images", Pod: podAsking(nil, nil)}},
		{name: "static H100 joining", form: startForm(), req: StartRequest{Profile: "h100", Selects: []string{"nvidia.com/gpu.product"}, Pod: h100Pod,
			Waitlist: true, UserOptions: join}},
		{name: "gpu-profiles' own static choice with the same GPUs is available", form: append(startForm()[:2], static),
			req: StartRequest{Profile: "any-gpu", Pod: podAsking(oneGPU, nil)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckStart(tc.form, tc.req)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
		})
	}
}
