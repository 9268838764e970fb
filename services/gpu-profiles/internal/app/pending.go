package app

import (
	"context"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/pending"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/kube"
	"github.com/gpuhub/gpuhub/services/internal/leader"
)

// PendingOptions configure the pending-spawn explainer that PendingExplainer starts beside the API.
type PendingOptions struct {
	// Hub ends spawns that nothing can ever place; nil never ends one.
	Hub pending.Hub
	// EndAfter is how long such a spawn waits before it is ended (0: never).
	EndAfter time.Duration
	// LeaseNamespace and LeaseName name the Lease that keeps the explainer to one replica; Identity is this
	// replica (the pod name). An empty LeaseNamespace runs without election (a single replica, tests).
	LeaseNamespace, LeaseName, Identity string
	// OwnerDeployment is gpu-profiles' own Deployment in LeaseNamespace (--owner-deployment): the Lease it
	// creates is owned by it, so the Lease goes when the Deployment goes (helm uninstall); "": no owner.
	OwnerDeployment string
}

// PendingExplainer returns an Options.Extra that explains Hub users' Pending GPU pods on the progress page
// (Events) from the live catalog, and ends hopeless spawns, while this replica holds the Lease.
func PendingExplainer(po PendingOptions) func(ctx context.Context, h Hooks) {
	return func(ctx context.Context, h Hooks) {
		var el *leader.Elector
		isLeader := func() bool { return true }
		if po.LeaseNamespace != "" {
			var err error
			el, err = leader.New(leader.Options{Client: h.Kube, Namespace: po.LeaseNamespace, Name: po.LeaseName, Identity: po.Identity,
				Logger: h.Logger, Registerer: h.Registry, Subsystem: "profiles", OnStartedLeading: func(context.Context) {},
				Owner: kube.NewOwner(kube.OwnerOptions{Client: h.Kube, Namespace: po.LeaseNamespace, Deployment: po.OwnerDeployment,
					Logger: h.Logger}).Ref})
			if err != nil {
				h.Logger.Error("pending-spawn explainer not started: leader election", "err", err)
				return
			}
			isLeader = el.IsLeader
		} else if po.OwnerDeployment != "" {
			h.Logger.Warn("--owner-deployment is ignored without a lease namespace: no Lease is created, nothing is owned", "deployment", po.OwnerDeployment)
		}
		e, err := pending.New(pending.Options{
			Client: h.Kube, Capacity: capacity{cat: h.Catalog, config: h.Config}, Hub: po.Hub, IsLeader: isLeader,
			Synced: func() bool { _, err := h.Catalog.Kinds(); return err == nil },
			Logger: h.Logger, Registerer: h.Registry, MetricsSubsystem: "profiles", EndAfter: po.EndAfter, Host: po.Identity,
			Now: h.Now,
		})
		if err != nil {
			h.Logger.Error("pending-spawn explainer not started", "err", err)
			return
		}
		if _, err := h.Inventory.AddHandlers(e.PodHandler(), nil); err != nil {
			h.Logger.Error("pending-spawn explainer not started: pod events", "err", err)
			return
		}
		if el != nil {
			go func() {
				if err := el.Run(ctx); err != nil {
					h.Logger.Error("leader election stopped", "err", err)
				}
			}()
		}
		if err := e.Run(ctx); err != nil && ctx.Err() == nil {
			h.Logger.Error("pending-spawn explainer stopped", "err", err)
		}
	}
}

// capacity answers the explainer from the catalog (what exists and is free, on nodes a new pod can land on)
// and the configuration (provisionable pools, kinds hidden or limited to groups).
type capacity struct {
	cat    *catalog.Catalog
	config func() *profiles.Config
}

func (c capacity) Lookup(resources map[string]int64, nodeSelector map[string]string) (pending.Availability, bool) {
	if k, ok := c.cat.Lookup(resources, nodeSelector); ok {
		av := c.availability(k)
		// The catalog matched the pod to a kind; its counts are the pod's nodes only when the pod's selector
		// names every label of the kind (a selector without the product label matches any product).
		av.Certain = covers(nodeSelector, k.NodeSelector)
		return av, true
	}
	// No node offers it. A provisionable kind still waits for its first node.
	for _, a := range gpu.Allocations(resources, gpu.Node{Labels: nodeSelector}) {
		if a.Kind == "" {
			continue
		}
		slug := catalog.Slug(a)
		if c.config().Provisionable(string(a.Kind), slug) {
			a.Count = 1
			return pending.Availability{Slug: slug, Unit: a, Provisionable: true}, true
		}
	}
	// The slug above is read from the pod's selector, which may not name what the config does (an unrenamed
	// time-sliced pool looks like whole GPUs): with any provisionable pool configured, never call it certain.
	return pending.Availability{Certain: !anyProvisionable(c.config())}, false
}

// covers reports whether sel names every label of kind with the same value.
func covers(sel, kind map[string]string) bool {
	for k, v := range kind {
		if sel[k] != v {
			return false
		}
	}
	return true
}

func anyProvisionable(cfg *profiles.Config) bool {
	if cfg == nil {
		return false
	}
	if p := cfg.Defaults.Provisionable; p != nil && *p {
		return true
	}
	for _, o := range cfg.Kinds {
		if o.Provisionable != nil && *o.Provisionable {
			return true
		}
	}
	return false
}

// FreeNow lists the GPU kinds with free units in the form's order. The explainer does not know the user's Hub
// groups, so kinds limited to some groups are left out: a message never offers what the user may not see.
func (c capacity) FreeNow(string) []pending.Availability {
	kinds, err := c.cat.Kinds()
	if err != nil {
		return nil
	}
	var out []pending.Availability
	seen := map[string]bool{}
	for _, ch := range profiles.Visible(profiles.Choices(kinds, c.config()), nil) {
		k := ch.Kind
		if k.Slug == "" || k.Kind == catalog.KindCPU || k.Free <= 0 || seen[k.Slug] {
			continue
		}
		seen[k.Slug] = true
		out = append(out, c.availability(k))
	}
	return out
}

func (c capacity) availability(k catalog.KindStatus) pending.Availability {
	var alloc int64
	for _, n := range k.AllocatableOnNodes {
		alloc += n
	}
	unit := k.Unit
	unit.Count = 1
	return pending.Availability{
		Slug: k.Slug, Unit: unit, Description: k.Description, Allocatable: alloc, Free: k.Free,
		SchedulableNodes: k.SchedulableNodes, MaxAllocatableOnOneSchedulableNode: k.MaxAllocatableOnOneSchedulableNode,
		Blocked: k.Blocked, Provisionable: c.config().Provisionable(k.Kind, k.Slug),
	}
}
