package replay

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Activity bits of one minute of a session.
const (
	actBusy uint8 = 1 << iota // the server's GPU is busy (a cell runs)
	actTab                    // the browser tab is open (JupyterLab polls: Hub activity)
)

// Session is one trace pod as a notebook server: who, what it asks for, when the user wants it, and its GPU
// activity minute by minute. Times are minutes from the window's start (the simulation's step).
type Session struct {
	ID          int
	Pod         string
	User, Group string
	// Start is when the user asks for the server; End when they are done with it (exclusive, > Start).
	Start, End int
	GPUs       int64
	Milli      int
	act        []uint8 // minute t is act[t-Start]
}

func (s *Session) at(t int) uint8 {
	if t < s.Start || t >= s.End {
		return 0
	}
	return s.act[t-s.Start]
}

// Busy reports whether the server's GPU would be busy at minute t (were it running).
func (s *Session) Busy(t int) bool { return s.at(t)&actBusy != 0 }

// HubActive reports whether the Hub would see activity at minute t: the tab open, or the kernel running a cell
// (jupyter-server reports kernel activity as the server's last_activity).
func (s *Session) HubActive(t int) bool { return s.at(t) != 0 }

// TabOpen reports whether the user's browser tab is open at minute t.
func (s *Session) TabOpen(t int) bool { return s.at(t)&actTab != 0 }

// Fractional reports whether the trace asked for part of one GPU.
func (s *Session) Fractional() bool { return s.GPUs == 1 && s.Milli < 1000 }

// Workload is what every run replays: the sessions, the capacity, the users and their groups.
type Workload struct {
	Sessions []*Session // by Start, then pod name
	Nodes    []TraceNode
	Minutes  int // the window's length
	Users    []string
	GroupOf  map[string]string
	// Skipped counts trace GPU pods outside the window or the sample.
	Skipped int
}

// BuildWorkload maps the trace to sessions: pods sampled by a hash of their name (Trace.Fraction), each to a
// user by a hash of its name, users to groups by a hash of theirs, activity drawn from the idleness model with
// a generator seeded by the seed and the pod's name; capacity is a seeded subset of the trace's nodes.
func BuildWorkload(cfg *Config, nodes []TraceNode, pods []TracePod) (*Workload, error) {
	seed := strconv.FormatUint(cfg.Seed, 10)
	w := &Workload{GroupOf: map[string]string{}}
	for i := range cfg.Users.Count {
		u := fmt.Sprintf("user%03d", i)
		w.Users = append(w.Users, u)
		x, acc := unit(seed, "group", u), 0.0
		w.GroupOf[u] = cfg.Users.Groups[len(cfg.Users.Groups)-1].Name
		for _, g := range cfg.Users.Groups {
			acc += g.Share
			if x < acc {
				w.GroupOf[u] = g.Name
				break
			}
		}
	}
	var maxGPUs int64
	for _, p := range pods {
		if p.Deleted <= cfg.Trace.From || unit(seed, "sample", p.Name) >= cfg.Trace.Fraction {
			w.Skipped++
			continue
		}
		start := int((max(p.Created, cfg.Trace.From) - cfg.Trace.From) / 60)
		end := int((p.Deleted - cfg.Trace.From + 59) / 60)
		if end <= start {
			end = start + 1
		}
		u := w.Users[hash64(seed, "user", p.Name)%uint64(len(w.Users))]
		s := &Session{Pod: p.Name, User: u, Group: w.GroupOf[u], Start: start, End: end, GPUs: p.GPUs, Milli: p.Milli}
		s.act = activity(cfg, s)
		w.Sessions = append(w.Sessions, s)
		w.Minutes = max(w.Minutes, end)
		maxGPUs = max(maxGPUs, p.GPUs)
	}
	if len(w.Sessions) == 0 {
		return nil, fmt.Errorf("no pod of the trace falls in the window from %d s with fraction %g", cfg.Trace.From, cfg.Trace.Fraction)
	}
	slices.SortFunc(w.Sessions, func(a, b *Session) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Pod, b.Pod))
	})
	for i, s := range w.Sessions {
		s.ID = i
	}
	w.Nodes = pickNodes(seed, nodes, capacityFor(cfg), maxGPUs)
	return w, nil
}

// capacityFor is the GPUs of the subset: Capacity.GPUs scaled with the sample, at least 8 (the largest request).
func capacityFor(cfg *Config) int64 {
	return max(int64(math.Ceil(float64(cfg.Capacity.GPUs)*cfg.Trace.Fraction)), 8)
}

// pickNodes takes the nodes in a seeded order until their GPUs reach want; when none of them holds the largest
// request, the last one taken gives way to the next node in that order that does.
func pickNodes(seed string, nodes []TraceNode, want, largest int64) []TraceNode {
	order := slices.Clone(nodes)
	slices.SortFunc(order, func(a, b TraceNode) int {
		return cmp.Or(cmp.Compare(hash64(seed, "node", a.Name), hash64(seed, "node", b.Name)), cmp.Compare(a.Name, b.Name))
	})
	var out []TraceNode
	var total int64
	next := 0
	for next < len(order) && total < want {
		out = append(out, order[next])
		total += order[next].GPUs
		next++
	}
	if !slices.ContainsFunc(out, func(n TraceNode) bool { return n.GPUs >= largest }) {
		if i := slices.IndexFunc(order[next:], func(n TraceNode) bool { return n.GPUs >= largest }); i >= 0 {
			out[len(out)-1] = order[next+i]
		}
	}
	slices.SortFunc(out, func(a, b TraceNode) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// activity draws a session's minutes: idle gaps and busy bursts in turn, starting with a short gap (the user
// opens the notebook). A gap is long (away) with AwayProbability, drawn from AwayShape, and then the tab is
// closed with TabClosedWhenAway; short gaps keep the tab open; a burst runs with the tab closed with TabClosedWhenBusy.
func activity(cfg *Config, s *Session) []uint8 {
	m := cfg.Idleness
	rng := rand.New(rand.NewPCG(cfg.Seed, hash64("activity", s.Pod)))
	n := s.End - s.Start
	// Draws are capped at the session's length: a Pareto draw can be longer than any session.
	whole := func(x float64) int { return max(1, int(math.Round(min(x, float64(n))))) }
	minutes := func(mean time.Duration) int { return whole(rng.ExpFloat64() * mean.Minutes()) }
	away := func() int {
		if m.AwayShape != AwayPareto {
			return minutes(m.AwayMean.Std())
		}
		return whole(lomax(rng, m.AwayTailIndex, m.AwayMean.Std().Minutes()))
	}
	act := make([]uint8, n)
	t, busy := 0, false
	for t < n {
		var d int
		var tab bool
		switch {
		case busy:
			d, tab = minutes(m.BusyMean.Std()), rng.Float64() >= m.TabClosedWhenBusy
		case t > 0 && rng.Float64() < m.AwayProbability:
			d, tab = away(), rng.Float64() >= m.TabClosedWhenAway
		default:
			d, tab = minutes(m.ThinkMean.Std()), true
		}
		var bits uint8
		if busy {
			bits |= actBusy
		}
		if tab {
			bits |= actTab
		}
		for i := t; i < min(t+d, n); i++ {
			act[i] = bits
		}
		t += d
		busy = !busy
	}
	return act
}

// lomax draws from a Pareto distribution shifted to start at 0 (Lomax) with tail index alpha > 1 and the given
// mean: P(X > x) = (1 + x/scale)^-alpha, mean = scale/(alpha-1). Its hazard alpha/(scale+x) falls as the gap
// grows: the longer someone has been away, the longer they are likely to stay away.
func lomax(rng *rand.Rand, alpha, mean float64) float64 {
	scale := mean * (alpha - 1)
	u := 1 - rng.Float64() // in (0, 1]
	return scale * (math.Pow(u, -1/alpha) - 1)
}
