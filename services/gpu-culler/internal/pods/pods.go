// Package pods is gpu-culler's view of the single-user pods: an informer on the pods KubeSpawner labels
// component=singleuser-server, indexed by the Hub user and server their annotations name. The pass reads a
// server's notice and kind here, never with a request of its own.
package pods

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// Selector selects KubeSpawner's single-user pods.
const Selector = "component=singleuser-server"

const (
	byServer = "server"
	byUser   = "user"
)

// Index is the informer and its indexes.
type Index struct {
	inf cache.SharedIndexInformer
}

// New builds the informer on namespace ("" = all namespaces); Start runs it.
func New(client kubernetes.Interface, namespace string) (*Index, error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = Selector }))
	inf := f.Core().V1().Pods().Informer()
	err := inf.AddIndexers(cache.Indexers{
		byServer: func(obj any) ([]string, error) {
			p, ok := obj.(*corev1.Pod)
			if !ok || p.Annotations[inventory.AnnotationUser] == "" {
				return nil, nil
			}
			return []string{serverKey(p.Annotations[inventory.AnnotationUser], p.Annotations[inventory.AnnotationServer])}, nil
		},
		byUser: func(obj any) ([]string, error) {
			p, ok := obj.(*corev1.Pod)
			if !ok || p.Annotations[inventory.AnnotationUser] == "" {
				return nil, nil
			}
			return []string{p.Annotations[inventory.AnnotationUser]}, nil
		},
	})
	if err != nil {
		return nil, err
	}
	return &Index{inf: inf}, nil
}

func serverKey(user, server string) string { return user + "\x00" + server }

// Start runs the informer until ctx ends.
func (x *Index) Start(ctx context.Context) { go x.inf.Run(ctx.Done()) }

// WaitForSync waits until the first list is in, or ctx ends.
func (x *Index) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), x.inf.HasSynced) {
		return errors.New("the single-user pods were not listed before the context ended")
	}
	return nil
}

// Synced is nil once the first list is in.
func (x *Index) Synced(context.Context) error {
	if !x.inf.HasSynced() {
		return errors.New("the single-user pods are not listed yet")
	}
	return nil
}

// Pod is the live pod of user's server ("" = default), the newest one not being deleted if several.
func (x *Index) Pod(user, server string) (*corev1.Pod, bool) {
	objs, _ := x.inf.GetIndexer().ByIndex(byServer, serverKey(user, server))
	var best *corev1.Pod
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok || p.DeletionTimestamp != nil {
			continue
		}
		if best == nil || p.CreationTimestamp.After(best.CreationTimestamp.Time) {
			best = p
		}
	}
	return best, best != nil
}

// UserPods are all of user's pods.
func (x *Index) UserPods(user string) []*corev1.Pod {
	objs, _ := x.inf.GetIndexer().ByIndex(byUser, user)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}
