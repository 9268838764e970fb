package replay

import (
	"fmt"
	"time"

	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// Variation is one setting of the idleness model (or the capacity) and the anchor's and gpuhub's numbers under it.
type Variation struct {
	Name    string
	Results []*Result // Kubernetes + idle-culler, gpuhub + waitlist
}

// variation is one change to the main scenario.
type variation struct {
	name   string
	change func(*Config)
}

// variations change one main parameter of the idleness model at a time: the long gaps' shape (the other one,
// same mean), each duration to half and twice its value, fractions to a low and a high value; then the
// capacity to the ample one (where the anchor hardly queues).
func variations(cfg *Config) []variation {
	dur := func(d ipolicy.Duration, f float64) ipolicy.Duration {
		return ipolicy.Duration(time.Duration(float64(d) * f).Round(time.Minute))
	}
	i := cfg.Idleness
	var vs []variation
	if i.AwayShape == AwayPareto {
		vs = append(vs,
			variation{"awayShape exponential (memoryless long gaps, same mean)", func(c *Config) { c.Idleness.AwayShape = AwayExponential }},
			variation{"awayTailIndex 2.5 (lighter tail, same mean)", func(c *Config) { c.Idleness.AwayTailIndex = 2.5 }})
	} else {
		vs = append(vs, variation{fmt.Sprintf("awayShape pareto, tail index %.1f (heavy-tailed long gaps, same mean)", i.AwayTailIndex),
			func(c *Config) { c.Idleness.AwayShape = AwayPareto }})
	}
	vs = append(vs,
		variation{fmt.Sprintf("awayMean %s (long idle gaps half as long)", dur(i.AwayMean, 0.5)), func(c *Config) { c.Idleness.AwayMean = dur(i.AwayMean, 0.5) }},
		variation{fmt.Sprintf("awayMean %s (twice as long)", dur(i.AwayMean, 2)), func(c *Config) { c.Idleness.AwayMean = dur(i.AwayMean, 2) }},
		variation{"tabClosedWhenAway 0.3 (tabs mostly left open)", func(c *Config) { c.Idleness.TabClosedWhenAway = 0.3 }},
		variation{"tabClosedWhenAway 0.9 (tabs mostly closed)", func(c *Config) { c.Idleness.TabClosedWhenAway = 0.9 }},
		variation{fmt.Sprintf("busyMean %s (shorter bursts)", dur(i.BusyMean, 0.5)), func(c *Config) { c.Idleness.BusyMean = dur(i.BusyMean, 0.5) }},
		variation{fmt.Sprintf("busyMean %s (longer bursts)", dur(i.BusyMean, 2)), func(c *Config) { c.Idleness.BusyMean = dur(i.BusyMean, 2) }},
		variation{fmt.Sprintf("awayProbability %.2f", i.AwayProbability/2), func(c *Config) { c.Idleness.AwayProbability = i.AwayProbability / 2 }},
	)
	if a := cfg.Capacity.Ample; a > 0 && a != cfg.Capacity.GPUs {
		vs = append(vs, variation{fmt.Sprintf("capacity.ample: %d GPUs asked (the anchor hardly queues)", a),
			func(c *Config) { c.Capacity.GPUs = a }})
	}
	return vs
}

// Sensitivity replays the anchor and gpuhub + waitlist under each variation.
func Sensitivity(cfg *Config, pol Policies, nodes []TraceNode, pods []TracePod) ([]Variation, error) {
	var out []Variation
	for _, v := range variations(cfg) {
		c := *cfg
		v.change(&c)
		w, err := BuildWorkload(&c, nodes, pods)
		if err != nil {
			return nil, err
		}
		env, err := NewEnv(&c, w, pol)
		if err != nil {
			return nil, err
		}
		rs, err := runAll(env, []Mode{HubCuller, GPUHubWaitlist})
		if err != nil {
			return nil, err
		}
		out = append(out, Variation{Name: v.name, Results: rs})
	}
	return out, nil
}
