package replay

import (
	"fmt"
	"strings"
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
	// and the anchor unchanged). Three steps show the trade-off (WriteIdleFrontier).
	for _, f := range IdleFrontier {
		vs = append(vs, variation{name: idleVariationName(f), change: func(*Config) {},
			policy: func(p *Policies) error { return scaleCullerIdle(p, f) }})
	}
	if a := cfg.Capacity.Ample; a > 0 && a != cfg.Capacity.GPUs {
		vs = append(vs, vary(fmt.Sprintf("capacity.ample: %d GPUs asked (the anchor hardly queues)", a),
			func(c *Config) { c.Capacity.GPUs = a }))
	}
	return vs
}

// IdleFrontier are the factors by which the sensitivity table multiplies every GPU idle period of gpu-culler's
// policy (gpu.idlePeriod and each kind's), besides the main policy's.
var IdleFrontier = []int{2, 4, 8}

// idleVariationName names the sensitivity row of gpu-culler's idle periods times factor.
func idleVariationName(factor int) string {
	return fmt.Sprintf("gpu-culler idle periods x%d (policy, not model: fewer false culls, more idle)", factor)
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

// scaleCullerIdle multiplies every GPU idle period of the culler policy file by factor: gpu.idlePeriod and each
// kind's and profile's idlePeriod (not idleWhenContended, not the Hub's), which the culler's own parser then reads.
func scaleCullerIdle(p *Policies, factor int) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(p.Culler, &doc); err != nil {
		return fmt.Errorf("%s: %w", p.CullerName, err)
	}
	nodes := gpuIdleNodes(&doc)
	if len(nodes) == 0 {
		return fmt.Errorf("%s has no gpu.idlePeriod to change", p.CullerName)
	}
	for _, v := range nodes {
		d, err := ipolicy.ParseDuration(v.Value)
		if err != nil {
			return fmt.Errorf("%s: %w", p.CullerName, err)
		}
		v.Value = ipolicy.Duration(d * time.Duration(factor)).String()
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return err
	}
	p.Culler = out
	return nil
}

// cullerIdlePeriods are the GPU idle periods of the culler policy file as it writes them: gpu.idlePeriod, then
// each kind's and profile's ("1h, shared 30m").
func cullerIdlePeriods(p Policies) string {
	var doc yaml.Node
	if yaml.Unmarshal(p.Culler, &doc) != nil {
		return ""
	}
	var parts []string
	for i, v := range gpuIdleNodes(&doc) {
		if i == 0 {
			parts = append(parts, v.Value)
			continue
		}
		parts = append(parts, v.Tag+" "+v.Value)
	}
	return strings.Join(parts, ", ")
}

// gpuIdleNodes are the value nodes of gpu.idlePeriod and of each kinds.<kind>.idlePeriod and
// profiles.<slug>.idlePeriod of a culler policy document, gpu's first (none without gpu.idlePeriod); each
// override's Tag is set to its kind or slug, for naming it (cullerIdlePeriods).
func gpuIdleNodes(doc *yaml.Node) []*yaml.Node {
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	idle := func(m *yaml.Node) *yaml.Node {
		for j := 0; m.Kind == yaml.MappingNode && j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == "idlePeriod" && m.Content[j+1].Kind == yaml.ScalarNode {
				return m.Content[j+1]
			}
		}
		return nil
	}
	var base *yaml.Node
	var overrides []*yaml.Node
	top := doc.Content[0].Content
	for i := 0; i+1 < len(top); i += 2 {
		switch k, v := top[i].Value, top[i+1]; {
		case k == "gpu":
			base = idle(v)
		case (k == "kinds" || k == "profiles") && v.Kind == yaml.MappingNode:
			for j := 0; j+1 < len(v.Content); j += 2 {
				if n := idle(v.Content[j+1]); n != nil {
					n.Tag = v.Content[j].Value
					overrides = append(overrides, n)
				}
			}
		}
	}
	if base == nil {
		return nil
	}
	return append([]*yaml.Node{base}, overrides...)
}
