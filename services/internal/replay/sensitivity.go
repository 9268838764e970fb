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

// variations change one main parameter of the idleness model at a time, to half and twice its value (fractions
// to a low and a high value), and the capacity to less.
func variations(cfg *Config) []struct {
	name   string
	change func(*Config)
} {
	dur := func(d ipolicy.Duration, f float64) ipolicy.Duration {
		return ipolicy.Duration(time.Duration(float64(d) * f).Round(time.Minute))
	}
	i := cfg.Idleness
	return []struct {
		name   string
		change func(*Config)
	}{
		{fmt.Sprintf("awayMean %s (long idle gaps half as long)", dur(i.AwayMean, 0.5)), func(c *Config) { c.Idleness.AwayMean = dur(i.AwayMean, 0.5) }},
		{fmt.Sprintf("awayMean %s (twice as long)", dur(i.AwayMean, 2)), func(c *Config) { c.Idleness.AwayMean = dur(i.AwayMean, 2) }},
		{"tabClosedWhenAway 0.3 (tabs mostly left open)", func(c *Config) { c.Idleness.TabClosedWhenAway = 0.3 }},
		{"tabClosedWhenAway 0.9 (tabs mostly closed)", func(c *Config) { c.Idleness.TabClosedWhenAway = 0.9 }},
		{fmt.Sprintf("busyMean %s (shorter bursts)", dur(i.BusyMean, 0.5)), func(c *Config) { c.Idleness.BusyMean = dur(i.BusyMean, 0.5) }},
		{fmt.Sprintf("busyMean %s (longer bursts)", dur(i.BusyMean, 2)), func(c *Config) { c.Idleness.BusyMean = dur(i.BusyMean, 2) }},
		{fmt.Sprintf("awayProbability %.2f", i.AwayProbability/2), func(c *Config) { c.Idleness.AwayProbability = i.AwayProbability / 2 }},
		{fmt.Sprintf("capacity %d GPUs (more contention)", cfg.Capacity.GPUs*3/4), func(c *Config) { c.Capacity.GPUs = cfg.Capacity.GPUs * 3 / 4 }},
	}
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
