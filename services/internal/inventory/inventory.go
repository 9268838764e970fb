// Package inventory watches pods and nodes through shared informers and answers, from memory, which pods hold
// GPUs, what the nodes' GPU labels and capacities are, and where the gpu-agents run. No API call per question.
// Every gpuhub service that reads the cluster uses it (the usage API, gpu-quota, ...).
package inventory

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// Annotations and labels set by KubeSpawner and the chart.
const (
	AnnotationUser   = "hub.jupyter.org/username"
	AnnotationServer = "hub.jupyter.org/servername"
	LabelComponent   = "app.kubernetes.io/component"
	LabelInstance    = "app.kubernetes.io/instance"
	AgentComponent   = "gpu-agent"
)

// The chart's agents for release "gpuhub" (chart/gpuhub/templates/agent.yaml); the chart passes its own
// release's values to the usage API.
const (
	DefaultAgentSelector       = LabelComponent + "=" + AgentComponent + "," + LabelInstance + "=gpuhub"
	DefaultAgentServiceAccount = "gpuhub-agent"
)

// Pod is a pod that holds GPU resources (or an agent pod).
type Pod struct {
	UID, Namespace, Name string
	Node                 string
	User, Server         string // from KubeSpawner's annotations; empty for pods not spawned by the Hub
	Phase                corev1.PodPhase
	Ready                bool
	IP                   string
	// GPU resources the pod holds: gpu.PodResources, resource name -> count.
	Resources map[string]int64
	// NodeSelector is the pod's spec.nodeSelector: before it is bound, the GPU product it asked for (GFD labels).
	NodeSelector map[string]string
	// Terminating is set once the pod is being deleted (it still holds its GPUs until it is gone).
	Terminating bool
	// Notices are the gpuhub notice annotations (gpuhub.io/notice-<service>), key -> raw JSON value.
	Notices map[string]string
	// Started is when the pod started holding them (its phase became Running): the earliest container start
	// still in its status, else status.startTime; zero when unknown. The ledger charges a pod first seen after
	// an outage from here.
	Started time.Time
	// Created is metadata.creationTimestamp.
	Created time.Time
	// Scheduled is the PodScheduled condition (Status "" while the scheduler has not looked at the pod). A
	// Pending pod it could not place has Status False and Reason Unschedulable (corev1.PodReasonUnschedulable).
	Scheduled Condition
	// Waiting are the containers (init containers first) waiting to run, with their reasons (ContainerCreating,
	// PodInitializing, ErrImagePull, ImagePullBackOff, ...): why a bound pod is still Pending.
	Waiting []Waiting
	// NodeAffinity is set when the pod has required node affinity: its node selector alone does not say where it
	// may run.
	NodeAffinity bool
}

// Allocated reports whether the pod holds its GPUs: bound to a node and Running. Pending pods hold nothing.
func (p Pod) Allocated() bool { return p.Node != "" && p.Phase == corev1.PodRunning }

// Node is a node's GPU view.
type Node struct {
	Name        string
	Labels      map[string]string
	Allocatable map[string]int64 // GPU resources only
	// Unschedulable is spec.unschedulable (cordoned); Ready is the NodeReady condition; Taints are spec.taints.
	// New pods land only on a Ready, uncordoned node whose NoSchedule/NoExecute taints they tolerate (Blocked).
	Unschedulable bool
	Ready         bool
	Taints        []corev1.Taint
}

// PodFrom converts a Kubernetes pod; ok is false when it holds no GPU resource.
func PodFrom(p *corev1.Pod) (Pod, bool) {
	res := gpu.PodResources(p)
	if len(res) == 0 {
		return Pod{}, false
	}
	return Pod{
		UID: string(p.UID), Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName,
		User: p.Annotations[AnnotationUser], Server: p.Annotations[AnnotationServer],
		Phase: p.Status.Phase, Ready: podReady(p), IP: p.Status.PodIP, Resources: res, Started: podStarted(p),
		NodeSelector: p.Spec.NodeSelector, Terminating: p.DeletionTimestamp != nil, Notices: notices(p.Annotations),
		Created: p.CreationTimestamp.UTC(), Scheduled: podScheduled(p), Waiting: podWaiting(p),
		NodeAffinity: p.Spec.Affinity != nil && p.Spec.Affinity.NodeAffinity != nil &&
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil,
	}, true
}

// NoticePrefix starts the annotation keys of notices to the user (gpuhub.io/notice-<service>).
const NoticePrefix = notice.Prefix

func notices(annotations map[string]string) map[string]string {
	var out map[string]string
	for k, v := range annotations {
		if strings.HasPrefix(k, NoticePrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// podStarted is the earliest start of the pod's containers still recorded (running, terminated, or the
// instance before a restart), else status.startTime (which also counts image pulls, so only a fallback).
func podStarted(p *corev1.Pod) time.Time {
	var first time.Time
	see := func(t metav1.Time) {
		if !t.IsZero() && (first.IsZero() || t.Time.Before(first)) {
			first = t.UTC()
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if r := c.State.Running; r != nil {
			see(r.StartedAt)
		}
		if t := c.State.Terminated; t != nil {
			see(t.StartedAt)
		}
		if t := c.LastTerminationState.Terminated; t != nil {
			see(t.StartedAt)
		}
	}
	if first.IsZero() && p.Status.StartTime != nil {
		first = p.Status.StartTime.UTC()
	}
	return first
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeFrom converts a Kubernetes node.
func NodeFrom(n *corev1.Node) Node {
	return Node{Name: n.Name, Labels: n.Labels, Allocatable: gpu.NodeAllocatable(n),
		Unschedulable: n.Spec.Unschedulable, Ready: nodeReady(n), Taints: n.Spec.Taints}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Options configure an Inventory.
type Options struct {
	Client kubernetes.Interface
	// Namespace of the singleuser pods; empty watches every namespace.
	Namespace string
	// AgentNamespace of the gpu-agent pods (the chart's release namespace); empty means every namespace.
	AgentNamespace string
	// AgentSelector selects the agent pods by label; default DefaultAgentSelector.
	AgentSelector labels.Selector
	// AgentServiceAccount is the ServiceAccount an agent pod must run as; default DefaultAgentServiceAccount.
	// Labels can be copied by anyone who may create a pod; the usage API sends its agent token only to pods
	// that also run as the agents' ServiceAccount in AgentNamespace.
	AgentServiceAccount string
	Resync              time.Duration
	// UnhealthyAfter is how long an informer's list/watch calls may keep failing before Healthy fails
	// (default 1 min): short outages (an apiserver restart) are ridden out on the cache.
	UnhealthyAfter time.Duration
	// Now is the clock of the informer health (default time.Now).
	Now func() time.Time
	// MetricsSubsystem names the service in the informer metrics, gpuhub_<subsystem>_informer_* (default "usage").
	MetricsSubsystem string
	// NoAgents leaves out the gpu-agent pod informer (services that never call the agents).
	NoAgents bool
}

// Inventory holds the informers.
type Inventory struct {
	factories []informers.SharedInformerFactory
	pods      listerscorev1.PodLister
	agents    listerscorev1.PodLister
	agentSel  labels.Selector
	agentSA   string
	nodes     listerscorev1.NodeLister
	synced    []cache.InformerSynced
	// podInformer and nodeInformer take the event handlers of services that keep their own index (AddHandlers).
	podInformer, nodeInformer cache.SharedIndexInformer

	health         []*informerHealth // pods, nodes, agents
	now            func() time.Time
	unhealthyAfter time.Duration
	metrics        *healthMetrics
}

// New builds the informers; call Start.
func New(opts Options) *Inventory {
	inv := &Inventory{now: opts.Now, unhealthyAfter: opts.UnhealthyAfter, agentSel: opts.AgentSelector, agentSA: opts.AgentServiceAccount}
	if inv.agentSel == nil {
		sel, err := labels.Parse(DefaultAgentSelector)
		if err != nil {
			panic(err) // a constant
		}
		inv.agentSel = sel
	}
	if inv.agentSA == "" {
		inv.agentSA = DefaultAgentServiceAccount
	}
	if inv.now == nil {
		inv.now = time.Now
	}
	if inv.unhealthyAfter <= 0 {
		inv.unhealthyAfter = time.Minute
	}
	subsystem := opts.MetricsSubsystem
	if subsystem == "" {
		subsystem = "usage"
	}
	inv.metrics = newHealthMetrics(inv, subsystem)
	health := func(name string) *informerHealth {
		h := &informerHealth{now: inv.now, errors: inv.metrics.errors.WithLabelValues(name), state: InformerHealth{Name: name}}
		inv.health = append(inv.health, h)
		return h
	}
	podHealth, nodeHealth := health("pods"), health("nodes")

	podFactory := informers.NewSharedInformerFactoryWithOptions(observedClient{Interface: opts.Client, pods: podHealth, nodes: nodeHealth}, opts.Resync,
		informers.WithNamespace(opts.Namespace), informers.WithTransform(trimObject))
	podInf := podFactory.Core().V1().Pods()
	inv.pods = podInf.Lister()
	nodeInf := podFactory.Core().V1().Nodes()
	inv.nodes = nodeInf.Lister()
	inv.synced = append(inv.synced, podInf.Informer().HasSynced, nodeInf.Informer().HasSynced)
	inv.podInformer, inv.nodeInformer = podInf.Informer(), nodeInf.Informer()
	inv.factories = append(inv.factories, podFactory)

	_ = podInf.Informer().SetWatchErrorHandlerWithContext(podHealth.watchErrorHandler)
	_ = nodeInf.Informer().SetWatchErrorHandlerWithContext(nodeHealth.watchErrorHandler)
	if opts.NoAgents {
		return inv
	}

	// Agents are few; their own informer is filtered by label so it never lists user pods.
	agentHealth := health("agents")
	agentFactory := informers.NewSharedInformerFactoryWithOptions(observedClient{Interface: opts.Client, pods: agentHealth}, opts.Resync,
		informers.WithNamespace(opts.AgentNamespace), informers.WithTransform(trimObject),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = inv.agentSel.String() }))
	agentInf := agentFactory.Core().V1().Pods()
	inv.agents = agentInf.Lister()
	inv.synced = append(inv.synced, agentInf.Informer().HasSynced)
	inv.factories = append(inv.factories, agentFactory)

	// Set before Start (it fails afterwards).
	_ = agentInf.Informer().SetWatchErrorHandlerWithContext(agentHealth.watchErrorHandler)
	return inv
}

// AddHandlers registers event handlers on the pod and node informers (either may be nil), for a service that
// keeps its own index of them up to date event by event instead of listing the cache per question (gpu-quota's
// admission). Handlers registered after Start first get an add for every object already in the cache. synced
// reports whether those initial adds have all been delivered.
func (inv *Inventory) AddHandlers(pods, nodes cache.ResourceEventHandler) (synced func() bool, err error) {
	var regs []cache.ResourceEventHandlerRegistration
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{{inv.podInformer, pods}, {inv.nodeInformer, nodes}} {
		if h.h == nil {
			continue
		}
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return nil, fmt.Errorf("inventory: add event handler: %w", err)
		}
		regs = append(regs, reg)
	}
	return func() bool {
		for _, r := range regs {
			if !r.HasSynced() {
				return false
			}
		}
		return true
	}, nil
}

// Start starts the informers; they stop with ctx.
func (inv *Inventory) Start(ctx context.Context) {
	for _, f := range inv.factories {
		f.Start(ctx.Done())
	}
}

// WaitForSync blocks until the caches are filled or ctx ends.
func (inv *Inventory) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), inv.synced...) {
		return fmt.Errorf("inventory: informer caches did not sync: %w", ctx.Err())
	}
	return nil
}

// Synced is the readiness check.
func (inv *Inventory) Synced(context.Context) error {
	for _, s := range inv.synced {
		if !s() {
			return fmt.Errorf("informer caches not synced yet")
		}
	}
	return nil
}

// GPUPods returns every pod holding GPU resources, sorted by namespace/name.
func (inv *Inventory) GPUPods() ([]Pod, error) {
	all, err := inv.pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list pods from cache: %w", err)
	}
	out := make([]Pod, 0, len(all)/2)
	for _, p := range all {
		if gp, ok := PodFrom(p); ok {
			out = append(out, gp)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// Nodes returns every node by name.
func (inv *Inventory) Nodes() (map[string]Node, error) {
	all, err := inv.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list nodes from cache: %w", err)
	}
	out := make(map[string]Node, len(all))
	for _, n := range all {
		out[n.Name] = NodeFrom(n)
	}
	return out, nil
}

// Agent is a running gpu-agent pod.
type Agent struct {
	Pod, Node, IP string
}

// Agents returns the running agent pods that have an IP, sorted by node: pods matching the agent selector that
// run as the agents' ServiceAccount (the usage API sends them its agent token).
func (inv *Inventory) Agents() ([]Agent, error) {
	if inv.agents == nil {
		return nil, nil
	}
	all, err := inv.agents.List(inv.agentSel)
	if err != nil {
		return nil, fmt.Errorf("list agent pods from cache: %w", err)
	}
	var out []Agent
	for _, p := range all {
		if p.Spec.ServiceAccountName != inv.agentSA {
			continue
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		out = append(out, Agent{Pod: p.Namespace + "/" + p.Name, Node: p.Spec.NodeName, IP: p.Status.PodIP})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}
