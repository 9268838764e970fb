package kube

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DeploymentOwner reads the Deployment namespace/name and returns an ownerReference to it (apps/v1, its name and
// UID) for the objects a service creates at run time (its Lease, gpu-culler's stops ConfigMap): when the
// Deployment is deleted (helm uninstall), the garbage collector deletes them too. Neither controller nor
// blockOwnerDeletion is set: the Deployment does not manage them, and a background deletion needs no blocking
// (blockOwnerDeletion would also need update rights on the Deployment's finalizers).
func DeploymentOwner(ctx context.Context, client kubernetes.Interface, namespace, name string) (*metav1.OwnerReference, error) {
	d, err := client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the owner Deployment %s/%s: %w", namespace, name, err)
	}
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID}, nil
}

// WithOwner returns refs with ref added, and true, unless refs already hold a reference with ref's UID (then refs
// as they are, and false). refs is not modified.
func WithOwner(refs []metav1.OwnerReference, ref metav1.OwnerReference) ([]metav1.OwnerReference, bool) {
	if slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == ref.UID }) {
		return refs, false
	}
	return append(slices.Clip(refs), ref), true
}

// OwnerOptions configure an Owner.
type OwnerOptions struct {
	Client kubernetes.Interface
	// Namespace and Deployment name the service's own Deployment (--owner-deployment); an empty Deployment
	// means no owner, as before owners existed. Owned objects must be in the same Namespace: an ownerReference
	// never crosses namespaces.
	Namespace, Deployment string
	Logger                *slog.Logger
	// GiveUpAfter bounds the lookup while the API server cannot be reached (default 1 min). Backoff is the
	// first wait between tries (default 1 s), doubled after each up to 10 s.
	GiveUpAfter, Backoff time.Duration
}

// Owner looks the service's Deployment up once, when Ref is first called, and answers every later call from
// that result.
type Owner struct {
	o    OwnerOptions
	mu   sync.Mutex
	done bool
	ref  *metav1.OwnerReference
}

// NewOwner returns an Owner; nothing is read before Ref.
func NewOwner(o OwnerOptions) *Owner {
	if o.GiveUpAfter <= 0 {
		o.GiveUpAfter = time.Minute
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Owner{o: o}
}

// Ref is the ownerReference to the Deployment, or nil: none named, or the Deployment could not be read. The
// first call reads it, retrying with backoff while the API server does not answer, for at most GiveUpAfter;
// concurrent callers wait for that call. A Deployment that does not exist, or that the service may not read, is
// not retried (the API server has answered; waiting changes nothing).
//
// Without the Deployment the service runs without an owner, as it did before owners existed, rather than not at
// all: the owner only lets helm uninstall remove the Lease and ConfigMap, and refusing to start over it would
// turn an API-server outage at start into an outage of the service. That is said once in the log; a later start
// adds the owner to the objects that lack it. A nil *Owner has no owner.
func (w *Owner) Ref(ctx context.Context) *metav1.OwnerReference {
	if w == nil || w.o.Deployment == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return w.ref
	}
	ref, err := w.lookup(ctx)
	if err != nil && ctx.Err() != nil {
		return nil // the caller stops; the next caller tries again
	}
	w.done, w.ref = true, ref
	if err != nil {
		w.o.Logger.Error("running without an owner: the Lease (and ConfigMap) this service creates will not be removed with its Deployment (helm uninstall leaves them behind)",
			"deployment", w.o.Namespace+"/"+w.o.Deployment, "err", err)
		return nil
	}
	w.o.Logger.Info("objects this service creates are owned by its Deployment", "deployment", w.o.Namespace+"/"+w.o.Deployment, "uid", ref.UID)
	return ref
}

func (w *Owner) lookup(ctx context.Context) (*metav1.OwnerReference, error) {
	lctx, cancel := context.WithTimeout(ctx, w.o.GiveUpAfter)
	defer cancel()
	wait := w.o.Backoff
	for {
		ref, err := DeploymentOwner(lctx, w.o.Client, w.o.Namespace, w.o.Deployment)
		switch {
		case err == nil:
			return ref, nil
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%w (is --owner-deployment the name of this service's Deployment, in --lease-namespace?)", err)
		case apierrors.IsForbidden(err):
			return nil, fmt.Errorf("%w (the service's Role needs get on this Deployment)", err)
		}
		w.o.Logger.Warn("cannot read the owner Deployment yet; retrying", "deployment", w.o.Namespace+"/"+w.o.Deployment,
			"err", err, "retry_in", wait.String())
		t := time.NewTimer(wait)
		select {
		case <-lctx.Done():
			t.Stop()
			return nil, fmt.Errorf("gave up after %s: %w", w.o.GiveUpAfter, err)
		case <-t.C:
		}
		wait = min(2*wait, 10*time.Second)
	}
}
