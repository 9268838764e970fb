package admit

import (
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
)

// effCache keeps each (user, groups)'s effective policy for the policy in use: merging the entries costs more
// than the rest of a decision, and the answer changes only when the policy or the user's groups do. A reload
// replaces the policy pointer, which empties the cache. The values are shared: read them, never change them.
//
// A user without an entry of their own has the effective policy of their groups, but for its User: those
// users share one entry per set of groups, so 64 spawns at once read a few entries the processor keeps in
// its cache instead of one each among 10,000.
type effCache struct {
	mu  sync.Mutex
	pol *quota.Policy
	m   map[string]effEntry
}

type effEntry struct {
	eff     quota.Effective
	windows []time.Duration // eff.Windows()
}

// maxEffective bounds the cache (group sets and users with an entry of their own, seen); past it, it starts
// over.
const maxEffective = 100_000

func (c *effCache) get(pol *quota.Policy, user string, groups []string) effEntry {
	var buf [128]byte
	_, own := pol.Users[user]
	b := buf[:0]
	if own {
		b = append(b, user...)
	}
	for _, g := range groups {
		b = append(b, 0)
		b = append(b, g...)
	}
	c.mu.Lock()
	if c.pol != pol {
		c.pol, c.m = pol, map[string]effEntry{}
	}
	ent, ok := c.m[string(b)] // no allocation for a hit
	c.mu.Unlock()
	if !ok {
		name := ""
		if own {
			name = user
		}
		eff := pol.Effective(name, groups)
		ent = effEntry{eff: eff, windows: eff.Windows()}
		c.mu.Lock()
		if c.pol == pol {
			if len(c.m) >= maxEffective {
				clear(c.m)
			}
			c.m[string(b)] = ent
		}
		c.mu.Unlock()
	}
	ent.eff.User = user
	return ent
}
