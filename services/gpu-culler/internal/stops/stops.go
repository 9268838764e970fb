// Package stops keeps each user's last stop by the culler (contract C4), so that the Hub home and the panel can
// say why a server is gone ("Stopped at 15:10 UTC: GPU idle for 1 h 7 min.") after the culler stopped it, on
// whichever replica answers. The store is one ConfigMap in the culler's namespace: key = the user name in hex
// (ConfigMap keys allow [-._a-zA-Z0-9]), value = the Stop as JSON. Entries older than MaxAge, and beyond
// MaxEntries (the oldest first), are dropped on every write, which keeps the ConfigMap far under its 1 MiB.
// The leader writes (Record, Clear); every replica serves reads (Last) from an informer's copy.
//
// The culler creates the ConfigMap (the chart does not render it, so that an upgrade never empties it). With an
// owner (Options.Owner: gpu-culler's Deployment) it carries an ownerReference to it, set when it is created and
// added at the next write to one without it, so that the garbage collector deletes it with the Deployment
// (helm uninstall), while an upgrade, which keeps the Deployment, keeps it.
package stops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/internal/kube"
)

// Bounds of the store.
const (
	MaxAge     = 7 * 24 * time.Hour
	MaxEntries = 2000
	// DefaultName is the ConfigMap's name (--stops-configmap).
	DefaultName = "gpu-culler-stops"
)

// Stop is one stop by the culler.
type Stop struct {
	User    string    `json:"user"`
	Server  string    `json:"server"` // "" is the default server
	At      time.Time `json:"at"`
	Reason  string    `json:"reason"`  // idle, max_age
	Message string    `json:"message"` // what the user reads
}

// Options configure a Store.
type Options struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string // DefaultName when empty
	Logger    *slog.Logger
	Now       func() time.Time
	// Resync is how often the informer hands its copy to the cache again (no API request): it repairs a cache
	// that a write of this store overwrote with an older copy than the watch had brought. Default 1 min.
	Resync time.Duration
	// Owner, if set, is asked at each write (kube.Owner.Ref answers from its first lookup): a reference it
	// returns is put on the ConfigMap that lacks it. It must be in Namespace. nil: no owner.
	Owner func(ctx context.Context) *metav1.OwnerReference
}

// Store is the stops ConfigMap with a cached copy.
type Store struct {
	o Options

	mu sync.RWMutex
	// writeMu serializes update.
	writeMu sync.Mutex
	byUser  map[string]Stop
	synced  bool
}

// New returns a store; Run fills its cache.
func New(o Options) *Store {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
	return &Store{o: o, byUser: map[string]Stop{}}
}

// Key is a user's key in the ConfigMap: the name in hex, or, for a name too long for a key (over 126 bytes),
// "sha256-" and the hex of its hash (the value names the user).
func Key(user string) string {
	if len(user) <= 126 {
		return hex.EncodeToString([]byte(user))
	}
	sum := sha256.Sum256([]byte(user))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// Run watches the ConfigMap (list and watch of the one name) and keeps the cache, until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	cms := s.o.Client.CoreV1().ConfigMaps(s.o.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", s.o.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return cms.Watch(ctx, o)
		},
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, s.o.Client), ObjectType: &corev1.ConfigMap{}, ResyncPeriod: s.o.Resync,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.load(obj) },
			UpdateFunc: func(_, obj any) { s.load(obj) },
			DeleteFunc: func(any) { s.replace(map[string]Stop{}) },
		},
	})
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
			s.mu.Lock()
			s.synced = true
			s.mu.Unlock()
		}
	}()
	ctrl.RunWithContext(ctx)
	return nil
}

// Synced says whether the cache has the ConfigMap (or knows there is none).
func (s *Store) Synced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}

func (s *Store) load(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	s.replace(s.decode(cm))
}

func (s *Store) replace(m map[string]Stop) {
	s.mu.Lock()
	s.byUser = m
	s.mu.Unlock()
}

// decode reads the entries of cm by user; an entry that does not decode is skipped (and dropped at the next write).
func (s *Store) decode(cm *corev1.ConfigMap) map[string]Stop {
	out := make(map[string]Stop, len(cm.Data))
	for k, v := range cm.Data {
		var st Stop
		if err := json.Unmarshal([]byte(v), &st); err != nil || st.User == "" || Key(st.User) != k {
			s.o.Logger.Warn("skipping an entry of the stops ConfigMap that is not a stop", "configmap", s.o.Name, "key", k)
			continue
		}
		out[st.User] = st
	}
	return out
}

// Last is user's last stop by the culler within MaxAge, from the cache.
func (s *Store) Last(user string) (Stop, bool) {
	s.mu.RLock()
	st, ok := s.byUser[user]
	s.mu.RUnlock()
	if !ok || s.o.Now().Sub(st.At) > MaxAge {
		return Stop{}, false
	}
	return st, true
}

// Record keeps each of sts as its user's last stop (the leader, after the Hub accepted the stops), in one write;
// never over a later stop of the same user (a leader that lost its Lease mid-pass still writes the stops it
// made, after the new leader may have written a newer one).
func (s *Store) Record(ctx context.Context, sts ...Stop) error {
	for i := range sts {
		if sts[i].User == "" {
			return errors.New("record a stop: no user")
		}
		sts[i].At = sts[i].At.UTC()
	}
	if len(sts) == 0 {
		return nil
	}
	return s.update(ctx, func(m map[string]Stop) bool {
		changed := false
		for _, st := range sts {
			if old, ok := m[st.User]; ok && old.At.After(st.At) {
				continue
			}
			m[st.User], changed = st, true
		}
		return changed
	})
}

// Clear forgets user's last stop when it was of server: the pass calls it once that server runs again. It
// asks the API server only when the cache has such a stop.
func (s *Store) Clear(ctx context.Context, user, server string) error {
	if st, ok := s.cached(user); !ok || st.Server != server {
		return nil
	}
	return s.update(ctx, func(m map[string]Stop) bool {
		if st, ok := m[user]; !ok || st.Server != server {
			return false
		}
		delete(m, user)
		return true
	})
}

func (s *Store) cached(user string) (Stop, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.byUser[user]
	return st, ok
}

// attempts bounds the read-modify-write retries on a conflict (another replica's write in between).
const attempts = 5

// update applies change to the ConfigMap's entries (read fresh from the API server), prunes and writes them
// with the resourceVersion read; change returns false when there is nothing to write.
func (s *Store) update(ctx context.Context, change func(map[string]Stop) bool) error {
	// This replica's writes one at a time: concurrent ones would only conflict with each other.
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	cms := s.o.Client.CoreV1().ConfigMaps(s.o.Namespace)
	var owner *metav1.OwnerReference
	if s.o.Owner != nil {
		owner = s.o.Owner(ctx)
	}
	var err error
	for range attempts {
		var cm *corev1.ConfigMap
		cm, err = cms.Get(ctx, s.o.Name, metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		switch {
		case create:
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.o.Name, Namespace: s.o.Namespace,
				Labels: map[string]string{"app.kubernetes.io/component": "gpu-culler"}}}
		case err != nil:
			return fmt.Errorf("read configmap %s/%s: %w", s.o.Namespace, s.o.Name, err)
		}
		m := s.decode(cm)
		if !change(m) {
			s.replace(m)
			return nil
		}
		cm = cm.DeepCopy()
		cm.Data = s.encode(m)
		if owner != nil {
			cm.OwnerReferences, _ = kube.WithOwner(cm.OwnerReferences, *owner)
		}
		if create {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: "gpu-culler"})
		} else {
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "gpu-culler"})
		}
		switch {
		case err == nil:
			s.replace(s.decode(cm)) // read-your-writes before the watch brings it
			return nil
		case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
			continue
		}
		return fmt.Errorf("write configmap %s/%s: %w", s.o.Namespace, s.o.Name, err)
	}
	return fmt.Errorf("write configmap %s/%s: changed by someone else %d times in a row: %w", s.o.Namespace, s.o.Name, attempts, err)
}

// encode drops stops older than MaxAge and, beyond MaxEntries, the oldest.
func (s *Store) encode(m map[string]Stop) map[string]string {
	now := s.o.Now()
	keep := make([]Stop, 0, len(m))
	for _, st := range m {
		if now.Sub(st.At) <= MaxAge {
			keep = append(keep, st)
		}
	}
	slices.SortFunc(keep, func(a, b Stop) int { return b.At.Compare(a.At) })
	if len(keep) > MaxEntries {
		keep = keep[:MaxEntries]
	}
	out := make(map[string]string, len(keep))
	for _, st := range keep {
		b, _ := json.Marshal(st)
		out[Key(st.User)] = string(b)
	}
	return out
}
