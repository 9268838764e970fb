package admit

import (
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
)

// TestFreeLocked: the units of a class free for a request about (user, server) "s" of "u", from what the nodes
// offer, what others hold and keep, what the server itself holds or has reserved, and the waitlist, on an
// engine built by hand (the corner cases are hard to reach through the informers).
func TestFreeLocked(t *testing.T) {
	const class = "gpu H100-80GB-HBM3"
	now := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	waiting := func(user string) waitlist.Entry {
		return waitlist.Entry{User: user, Server: "", Class: class, JoinedAt: now.Add(-time.Minute)}
	}
	heldFor := func(user, server string, until time.Time) waitlist.Entry {
		en := waiting(user)
		en.Server, en.HeldAt, en.HeldUntil = server, now.Add(-time.Minute), until
		return en
	}
	for _, tc := range []struct {
		name string
		// capacity is what the nodes offer; othersHeld and othersKept what other servers' active pods hold and
		// their reservations keep; ownPod and ownReserved what (u, s)'s own pod holds and reservation keeps.
		capacity, othersHeld, othersKept, ownPod, ownReserved int64
		waitlist                                              []waitlist.Entry
		blocked                                               []string // users whose entries are blocked by quota
		want                                                  int64
	}{
		{name: "all free", capacity: 2, want: 2},
		{name: "held and kept by others", capacity: 4, othersHeld: 2, othersKept: 1, want: 1},
		{name: "none left", capacity: 2, othersHeld: 1, othersKept: 1, want: 0},
		{name: "more held than the nodes offer now", capacity: 1, othersHeld: 3, want: 0},
		{name: "the server's own pod is given back", capacity: 1, ownPod: 1, want: 1},
		{name: "the server's own reservation is given back", capacity: 2, othersHeld: 1, ownReserved: 1, want: 1},
		{name: "own pod on an overcommitted node", capacity: 1, othersHeld: 1, ownPod: 1, want: 0},
		{name: "someone waits ahead", capacity: 2, othersHeld: 1, waitlist: []waitlist.Entry{waiting("w1")}, want: 0},
		{name: "two free, one waits ahead", capacity: 2, waitlist: []waitlist.Entry{waiting("w1")}, want: 1},
		{name: "the one ahead is blocked by quota", capacity: 1, waitlist: []waitlist.Entry{waiting("w1")}, blocked: []string{"w1"}, want: 1},
		{name: "the free unit is held for another", capacity: 1, waitlist: []waitlist.Entry{heldFor("w1", "", now.Add(time.Minute))}, want: 0},
		{name: "a hold past its time counts for nobody", capacity: 1, waitlist: []waitlist.Entry{heldFor("w1", "", now.Add(-time.Second))}, want: 1},
		{name: "the unit is held for this server, others wait", capacity: 1,
			waitlist: []waitlist.Entry{heldFor("u", "s", now.Add(time.Minute)), waiting("w1")}, want: 1},
		{name: "a restart keeps its own reservation while others wait", capacity: 1, ownReserved: 1,
			waitlist: []waitlist.Entry{waiting("w1")}, want: 1},
		{name: "a restart keeps its own pod's unit, no more, while others wait", capacity: 2, ownPod: 1,
			waitlist: []waitlist.Entry{waiting("w1")}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{o: Options{Waitlist: WaitlistOptions{Enabled: true}}, ix: newIndex(), res: newReservations()}
			e.ix.capacity[class] = tc.capacity
			e.ix.held[class] = tc.othersHeld + tc.ownPod
			if tc.othersKept+tc.ownReserved > 0 {
				e.res.reserved[class] = tc.othersKept + tc.ownReserved
			}
			unit := func(n int64) classified {
				return classified{allocs: []gpu.Allocation{{Kind: gpu.KindGPU, Count: n, Numerator: 1, Denominator: 1}}, classes: []string{class}}
			}
			if tc.ownPod > 0 {
				e.ix.byUser["u"] = []*podEntry{{key: "jhub/jupyter-u-s", pod: inventory.Pod{User: "u", Server: "s"}, classified: unit(tc.ownPod), active: true}}
			}
			if tc.ownReserved > 0 {
				e.res.byUser["u"] = map[string]*reservation{"s": {user: "u", server: "s", classified: unit(tc.ownReserved)}}
			}
			e.wl.st = waitlist.State{Entries: tc.waitlist}
			e.wl.blocked = map[wlKey]string{}
			for _, u := range tc.blocked {
				e.wl.blocked[wlKey{u, ""}] = "over quota"
			}
			if got := e.freeLocked(class, "u", "s", now); got != tc.want {
				t.Errorf("freeLocked = %d, want %d", got, tc.want)
			}
		})
	}
}
