package admit

import (
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
)

// effCache keeps each (user, groups)'s effective policy for the policy in use: merging the entries costs more
// than the rest of a decision, and the answer changes only when the policy or the user's groups do. A reload
// replaces the policy pointer, which empties the cache. The values are shared: read them, never change them.
type effCache struct {
	mu  sync.Mutex
	pol *quota.Policy
	m   map[string]effEntry
}

type effEntry struct {
	eff     quota.Effective
	windows []time.Duration // eff.Windows()
}

// maxEffective bounds the cache (users x group sets seen); past it, it starts over.
const maxEffective = 100_000

func (c *effCache) get(pol *quota.Policy, user string, groups []string) effEntry {
	var buf [128]byte
	b := append(buf[:0], user...)
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
	if ok {
		return ent
	}
	eff := pol.Effective(user, groups)
	ent = effEntry{eff: eff, windows: eff.Windows()}
	c.mu.Lock()
	if c.pol == pol {
		if len(c.m) >= maxEffective {
			clear(c.m)
		}
		c.m[string(b)] = ent
	}
	c.mu.Unlock()
	return ent
}
