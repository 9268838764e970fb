// Package noticestest makes client-go's fake clientset keep resourceVersions the way the API server does, for
// the unit tests of code that writes with optimistic concurrency: every create, update and patch of the named
// resources sets a new resourceVersion, and an update or patch that carries a resourceVersion other than the
// stored one fails with 409 Conflict. (The fake's tracker keeps no resourceVersion of its own; the real
// semantics are tested against a real API server in e2e.)
package noticestest

import (
	"encoding/json"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Versioned installs the reactors on c for resources ("pods", "configmaps"). Call it before the first write;
// objects given to fake.NewClientset keep the resourceVersion they were built with.
func Versioned(c *fake.Clientset, resources ...string) {
	var mu sync.Mutex // one write at a time, as etcd orders them
	next := 1000
	react := k8stesting.ObjectReaction(c.Tracker())
	for _, res := range resources {
		for _, verb := range []string{"create", "update", "patch"} {
			c.PrependReactor(verb, res, func(a k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				var sent string
				switch a := a.(type) {
				case k8stesting.PatchAction:
					var body struct {
						Metadata struct {
							ResourceVersion string `json:"resourceVersion"`
						} `json:"metadata"`
					}
					_ = json.Unmarshal(a.GetPatch(), &body)
					sent = body.Metadata.ResourceVersion
				case k8stesting.UpdateAction:
					if m, err := meta.Accessor(a.GetObject()); err == nil {
						sent = m.GetResourceVersion()
					}
				}
				if verb != "create" && sent != "" {
					name := nameOf(a)
					cur, err := c.Tracker().Get(a.GetResource(), a.GetNamespace(), name)
					if err != nil {
						return true, nil, err
					}
					if m, _ := meta.Accessor(cur); m.GetResourceVersion() != sent {
						return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), name,
							errorf("the object has been modified; please apply your changes to the latest version and try again"))
					}
				}
				_, obj, err := react(a)
				if err != nil {
					return true, nil, err
				}
				obj = obj.DeepCopyObject()
				m, _ := meta.Accessor(obj)
				next++
				m.SetResourceVersion(strconv.Itoa(next))
				if err := c.Tracker().Update(a.GetResource(), obj, a.GetNamespace()); err != nil {
					return true, nil, err
				}
				return true, obj, nil
			})
		}
	}
}

func nameOf(a k8stesting.Action) string {
	switch a := a.(type) {
	case k8stesting.PatchAction:
		return a.GetName()
	case k8stesting.UpdateAction:
		if m, err := meta.Accessor(a.GetObject()); err == nil {
			return m.GetName()
		}
	}
	return ""
}

type errorf string

func (e errorf) Error() string { return string(e) }
