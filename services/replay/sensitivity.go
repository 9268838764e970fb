package replay

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// Variation is one setting of the idleness model (or the cluster, or gpuhub's policy) and the anchor's and
// gpuhub's numbers under it.
type Variation struct {
	Name    string
	Results []*Result // Kubernetes + idle-culler, gpuhub (every part)
}

// sensitivityModes are the setups each variation replays.
var sensitivityModes = []Mode{HubCuller, GPUHub}

// variation is one change to the main scenario: to the model (change) or to gpuhub's policies (policy).
type variation struct {
	name   string
	change func(*Config)
	policy func(*Policies) error
}

func vary(name string, change func(*Config)) variation { return variation{name: name, change: change} }

// variations change one main parameter at a time: the cluster's time-slicing (on or off, for every setup
// alike), then the idleness model: the long gaps' shape (the other one, same mean), each duration to half and
// twice its value, fractions to a low and a high value; gpuhub's idle period; then the capacity to the ample one
// (where the anchor hardly queues).
func variations(cfg *Config) []variation {
	dur := func(d ipolicy.Duration, f float64) ipolicy.Duration {
		return ipolicy.Duration(time.Duration(float64(d) * f).Round(time.Minute))
	}
	i := cfg.Idleness
	var vs []variation
	if cfg.Capacity.SharedFraction > 0 {
		vs = append(vs, vary("capacity.sharedFraction 0 (no time-slicing: whole GPUs in every setup)",
			func(c *Config) { c.Capacity.SharedFraction = 0 }))
	} else {
		vs = append(vs, vary("capacity.sharedFraction 0.25 (a quarter of the nodes time-sliced in every setup)",
			func(c *Config) { c.Capacity.SharedFraction = 0.25 }))
	}
	if i.AwayShape == AwayPareto {
		vs = append(vs,
			vary("awayShape exponential (memoryless long gaps, same mean)", func(c *Config) { c.Idleness.AwayShape = AwayExponential }),
			vary("awayTailIndex 2.5 (lighter tail, same mean)", func(c *Config) { c.Idleness.AwayTailIndex = 2.5 }))
	} else {
		vs = append(vs, vary(fmt.Sprintf("awayShape pareto, tail index %.1f (heavy-tailed long gaps, same mean)", i.AwayTailIndex),
			func(c *Config) { c.Idleness.AwayShape = AwayPareto }))
	}
	vs = append(vs,
		vary(fmt.Sprintf("awayMean %s (long idle gaps half as long)", dur(i.AwayMean, 0.5)), func(c *Config) { c.Idleness.AwayMean = dur(i.AwayMean, 0.5) }),
		vary(fmt.Sprintf("awayMean %s (twice as long)", dur(i.AwayMean, 2)), func(c *Config) { c.Idleness.AwayMean = dur(i.AwayMean, 2) }),
		vary("tabClosedWhenAway 0.3 (tabs mostly left open)", func(c *Config) { c.Idleness.TabClosedWhenAway = 0.3 }),
		vary("tabClosedWhenAway 0.9 (tabs mostly closed)", func(c *Config) { c.Idleness.TabClosedWhenAway = 0.9 }),
		vary(fmt.Sprintf("busyMean %s (shorter bursts)", dur(i.BusyMean, 0.5)), func(c *Config) { c.Idleness.BusyMean = dur(i.BusyMean, 0.5) }),
		vary(fmt.Sprintf("busyMean %s (longer bursts)", dur(i.BusyMean, 2)), func(c *Config) { c.Idleness.BusyMean = dur(i.BusyMean, 2) }),
		vary(fmt.Sprintf("awayProbability %.2f", i.AwayProbability/2), func(c *Config) { c.Idleness.AwayProbability = i.AwayProbability / 2 }),
	)
	// gpuhub's own knob against false culls: a longer GPU idle period, at the price of idle GPU-hours (the model
	// and the anchor unchanged).
	vs = append(vs, variation{name: "gpu-culler gpu.idlePeriod 2h (policy, not model: fewer false culls, more idle)",
		change: func(*Config) {}, policy: func(p *Policies) error { return setCullerGPUIdle(p, "2h") }})
	if a := cfg.Capacity.Ample; a > 0 && a != cfg.Capacity.GPUs {
		vs = append(vs, vary(fmt.Sprintf("capacity.ample: %d GPUs asked (the anchor hardly queues)", a),
			func(c *Config) { c.Capacity.GPUs = a }))
	}
	return vs
}

// rightSizeVariations change the right-size setup's two shares, one at a time (the share that follows the
// advice, the share whose work fits a share), then both at 1: the most the advice can do on this cluster.
func rightSizeVariations(cfg *Config) []variation {
	rs := cfg.RightSize
	var vs []variation
	for _, f := range []float64{0.25, 1} {
		if f != rs.Follow {
			vs = append(vs, vary(fmt.Sprintf("rightSize.follow %g", f), func(c *Config) { c.RightSize.Follow = f }))
		}
	}
	for _, f := range []float64{0.1, 0.5} {
		if f != rs.Fit {
			vs = append(vs, vary(fmt.Sprintf("rightSize.fit %g", f), func(c *Config) { c.RightSize.Fit = f }))
		}
	}
	vs = append(vs, vary("rightSize.follow 1 and fit 1 (every user follows, every one-GPU user's work fits a share: the bound)",
		func(c *Config) { c.RightSize.Follow, c.RightSize.Fit = 1, 1 }))
	return vs
}

// setCullerGPUIdle sets gpu.idlePeriod in the culler policy file (which the culler's own parser then reads).
func setCullerGPUIdle(p *Policies, d string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(p.Culler, &doc); err != nil {
		return fmt.Errorf("%s: %w", p.CullerName, err)
	}
	set := false
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		top := doc.Content[0].Content
		for i := 0; i+1 < len(top); i += 2 {
			if top[i].Value != "gpu" || top[i+1].Kind != yaml.MappingNode {
				continue
			}
			gpu := top[i+1].Content
			for j := 0; j+1 < len(gpu); j += 2 {
				if gpu[j].Value == "idlePeriod" {
					gpu[j+1].Value, set = d, true
				}
			}
		}
	}
	if !set {
		return fmt.Errorf("%s has no gpu.idlePeriod to change", p.CullerName)
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return err
	}
	p.Culler = out
	return nil
}
