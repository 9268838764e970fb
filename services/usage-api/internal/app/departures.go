package app

import (
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// departures follows the Hub users' GPU pods that stop holding between two ticks (deleted, or no longer Running:
// their containers ended) and tells each tick when each went, so that the ledger charges a pod up to its end, not
// only up to the last tick that saw it. That tick may be more than an interval before the end: a tick reads the
// pods after it polled the agents (which may take an interval), and starts late when the one before it overran (a
// slow commit). The zero value is ready; watch starts it.
type departures struct {
	once sync.Once
	err  error
	now  func() time.Time

	mu sync.Mutex
	// gone are the departures not yet handed to a tick, by pod UID.
	gone map[string]usage.Departure
	// held are the pods the last tick listed as holding; missed the pods a tick found gone before the informer
	// told, with the first such tick: a pod went before it, however late its departure is told.
	held   map[string]bool
	missed map[string]time.Time
}

// maxDepartures bounds the departures kept between two ticks; a pod beyond it is charged up to its last tick.
const maxDepartures = 10000

// missedMemory is how long a pod a tick found gone waits for its departure to be told; one whose end the
// informer never tells (a relist found it gone) is charged up to its last tick.
const missedMemory = 10 * time.Minute

// watch registers the handlers on the inventory's pod informer, once; now is the clock of the departures.
func (d *departures) watch(inv *inventory.Inventory, now func() time.Time) error {
	d.once.Do(func() {
		d.now = now
		_, err := inv.AddHandlers(cache.ResourceEventHandlerFuncs{UpdateFunc: d.updated, DeleteFunc: d.deleted}, nil)
		if err != nil {
			d.err = fmt.Errorf("watch pod departures: %w", err)
		}
	})
	return d.err
}

// updated records a pod that stopped holding (its phase left Running) as it was while it held.
func (d *departures) updated(oldObj, newObj any) {
	o, ok := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if !ok || !ok2 {
		return
	}
	before, ok := inventory.PodFrom(o)
	after, _ := inventory.PodFrom(n)
	if ok && before.Allocated() && !after.Allocated() {
		d.record(before)
	}
}

// deleted records a pod deleted while it held. A deletion found by a relist (DeletedFinalStateUnknown) happened
// at an unknown time before it: that pod is charged up to the last tick that saw it.
func (d *departures) deleted(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if gp, ok := inventory.PodFrom(p); ok && gp.Allocated() {
		d.record(gp)
	}
}

func (d *departures) record(p inventory.Pod) {
	if p.User == "" || p.UID == "" {
		return // not a Hub user's: the ledger does not charge it
	}
	at := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone == nil {
		d.gone = map[string]usage.Departure{}
	}
	if _, ok := d.gone[p.UID]; ok || len(d.gone) >= maxDepartures {
		return // the first end told stands (a pod that ended, then was deleted)
	}
	d.gone[p.UID] = usage.Departure{Pod: p, At: at}
}

// take hands a tick at now, which listed pods, the departures to charge: those of pods it does not list as
// holding, each when the informer told or, if earlier, at the first tick that found the pod gone. A departure
// of a pod it still lists (told between its list and now) waits for the next tick.
func (d *departures) take(pods []inventory.Pod, now time.Time) []usage.Departure {
	listed := make(map[string]bool, len(pods))
	for _, p := range pods {
		if p.Allocated() && p.UID != "" {
			listed[p.UID] = true
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.missed == nil {
		d.missed = map[string]time.Time{}
	}
	for uid := range d.held {
		if _, ok := d.missed[uid]; !ok && !listed[uid] {
			d.missed[uid] = now
		}
	}
	for uid := range listed {
		delete(d.missed, uid)
	}
	var out []usage.Departure
	for uid, dep := range d.gone {
		if listed[uid] {
			continue
		}
		if m, ok := d.missed[uid]; ok && m.Before(dep.At) {
			dep.At = m
		}
		out = append(out, dep)
		delete(d.gone, uid)
		delete(d.missed, uid)
	}
	for uid, t := range d.missed {
		if now.Sub(t) > missedMemory {
			delete(d.missed, uid)
		}
	}
	d.held = listed
	sort.Slice(out, func(i, j int) bool { return out[i].Pod.UID < out[j].Pod.UID })
	return out
}
