// Package cluster keeps node-local views of the Kubernetes objects the agent
// needs: the pods bound to its node and the Node itself (for the simulated
// backend's inventory). Reads come from informer caches, never a LIST per sample.
package cluster

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// JupyterHub annotations KubeSpawner sets on single-user pods. The username
// annotation is the raw name; the label of the same name is an escaped slug.
const (
	AnnotationUser   = "hub.jupyter.org/username"
	AnnotationServer = "hub.jupyter.org/servername"
)

const uidIndex = "uid"

// Pod is what the agent needs to know about a pod.
type Pod struct {
	UID       string
	Namespace string
	Name      string
	User      string
	Server    string
	// GPUResources is the pod's effective GPU request (gpu.PodResources).
	GPUResources map[string]int64
	Created      time.Time
}

// Watcher holds the informers for one node.
type Watcher struct {
	factory informers.SharedInformerFactory
	nodes   informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	node    cache.SharedIndexInformer
	name    string
}

// NewWatcher watches the pods with spec.nodeName=node and the Node named node.
func NewWatcher(client kubernetes.Interface, node string, resync time.Duration) (*Watcher, error) {
	if node == "" {
		return nil, fmt.Errorf("node name is empty: set --node-name or NODE_NAME (downward API spec.nodeName)")
	}
	podSel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	nodeSel := fields.OneTermEqualSelector("metadata.name", node).String()
	w := &Watcher{
		name: node,
		factory: informers.NewSharedInformerFactoryWithOptions(client, resync,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = podSel })),
		nodes: informers.NewSharedInformerFactoryWithOptions(client, resync,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = nodeSel })),
	}
	w.pods = w.factory.Core().V1().Pods().Informer()
	if err := w.pods.AddIndexers(cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		return []string{string(p.UID)}, nil
	}}); err != nil {
		return nil, fmt.Errorf("add pod uid index: %w", err)
	}
	w.node = w.nodes.Core().V1().Nodes().Informer()
	return w, nil
}

// Start runs the informers until ctx is done.
func (w *Watcher) Start(ctx context.Context) {
	w.factory.Start(ctx.Done())
	w.nodes.Start(ctx.Done())
}

// WaitForSync blocks until both caches are synced or ctx is done.
func (w *Watcher) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), w.pods.HasSynced, w.node.HasSynced)
}

// HasSynced reports whether both caches are synced.
func (w *Watcher) HasSynced() bool {
	return w.pods.HasSynced() && w.node.HasSynced()
}

// Pod returns the pod with the given UID, if it is on this node.
func (w *Watcher) Pod(uid string) (Pod, bool) {
	objs, err := w.pods.GetIndexer().ByIndex(uidIndex, uid)
	if err != nil || len(objs) == 0 {
		return Pod{}, false
	}
	p, ok := objs[0].(*corev1.Pod)
	if !ok {
		return Pod{}, false
	}
	return FromPod(p), true
}

// Pods returns the pods on this node that have not terminated, sorted by UID.
func (w *Watcher) Pods() []Pod {
	var out []Pod
	for _, obj := range w.pods.GetStore().List() {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, FromPod(p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}

// Node returns this node's object from the cache.
func (w *Watcher) Node() (*corev1.Node, bool) {
	obj, ok, err := w.node.GetStore().GetByKey(w.name)
	if err != nil || !ok {
		return nil, false
	}
	n, ok := obj.(*corev1.Node)
	return n, ok
}

// FromPod extracts a Pod from the API object.
func FromPod(p *corev1.Pod) Pod {
	out := Pod{
		UID:       string(p.UID),
		Namespace: p.Namespace,
		Name:      p.Name,
		User:      p.Annotations[AnnotationUser],
		Server:    p.Annotations[AnnotationServer],
		Created:   p.CreationTimestamp.Time,
	}
	out.GPUResources = gpu.PodResources(p)
	return out
}
