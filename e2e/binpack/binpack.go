// Package binpack builds the kube-scheduler configuration that z2jh's user-scheduler runs, from z2jh's default
// values and the values files an admin adds (gpuhub's, chart/gpuhub/files/z2jh-values.yaml), and measures how GPU
// pods sit on nodes: the side-by-side scheduler test of chart/README.md, "GPU bin packing".
package binpack

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Values is a Helm values tree as YAML decodes it.
type Values = map[string]any

// ReadValues reads a values file.
func ReadValues(path string) (Values, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read values: %w", err)
	}
	var v Values
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("parse values %s: %w", path, err)
	}
	if v == nil {
		v = Values{}
	}
	return v, nil
}

// Merge returns base with override laid over it the way Helm combines a chart's values with a -f file: maps
// merge key by key, anything else (lists included) is replaced, and a null in override removes the key.
// Neither argument is changed.
func Merge(base, override Values) Values {
	out := maps.Clone(base)
	if out == nil {
		out = Values{}
	}
	for k, ov := range override {
		if ov == nil {
			delete(out, k)
			continue
		}
		om, oIsMap := ov.(Values)
		bm, bIsMap := out[k].(Values)
		if oIsMap && bIsMap {
			out[k] = Merge(bm, om)
			continue
		}
		out[k] = ov
	}
	return out
}

// UserSchedulerProfile is the KubeSchedulerConfiguration profile z2jh's user-scheduler ConfigMap renders from
// values: the scheduler name, then scheduling.userScheduler.plugins and .pluginConfig, each only when set.
func UserSchedulerProfile(values Values, schedulerName string) (Values, error) {
	us, err := lookup(values, "scheduling", "userScheduler")
	if err != nil {
		return nil, err
	}
	if enabled, _ := us["enabled"].(bool); !enabled {
		return nil, errors.New("scheduling.userScheduler.enabled is not true: z2jh renders no user-scheduler")
	}
	p := Values{"schedulerName": schedulerName}
	if plugins, ok := us["plugins"].(Values); ok && len(plugins) > 0 {
		p["plugins"] = plugins
	}
	if pc, ok := us["pluginConfig"].([]any); ok && len(pc) > 0 {
		p["pluginConfig"] = pc
	}
	return p, nil
}

func lookup(v Values, path ...string) (Values, error) {
	for i, k := range path {
		next, ok := v[k].(Values)
		if !ok {
			return nil, fmt.Errorf("values have no map at %s", strings.Join(path[:i+1], "."))
		}
		v = next
	}
	return v, nil
}

// SchedulerConfig is a KubeSchedulerConfiguration for a local kube-scheduler: the given profiles, the kubeconfig,
// no leader election (z2jh's leader election settings concern its replicas, not scoring).
func SchedulerConfig(kubeconfig string, profiles ...Values) ([]byte, error) {
	ps := make([]any, len(profiles))
	for i, p := range profiles {
		ps[i] = p
	}
	b, err := yaml.Marshal(Values{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"clientConnection": Values{"kubeconfig": kubeconfig},
		"leaderElection":   Values{"leaderElect": false},
		"profiles":         ps,
	})
	if err != nil {
		return nil, fmt.Errorf("encode scheduler config: %w", err)
	}
	return b, nil
}

// ScoredResource is one entry of NodeResourcesFit's scoringStrategy.resources.
type ScoredResource struct {
	Name   string `yaml:"name"`
	Weight int64  `yaml:"weight"`
}

// ScoringStrategy is NodeResourcesFit's scoringStrategy.
type ScoringStrategy struct {
	Type      string           `yaml:"type"`
	Resources []ScoredResource `yaml:"resources"`
}

// NodeResourcesFitScoring reads the NodeResourcesFit scoring strategy out of a profile's pluginConfig.
func NodeResourcesFitScoring(profile Values) (ScoringStrategy, error) {
	pcs, _ := profile["pluginConfig"].([]any)
	for _, pc := range pcs {
		m, _ := pc.(Values)
		if m["name"] != "NodeResourcesFit" {
			continue
		}
		b, err := yaml.Marshal(m["args"])
		if err != nil {
			return ScoringStrategy{}, fmt.Errorf("NodeResourcesFit args: %w", err)
		}
		var args struct {
			ScoringStrategy ScoringStrategy `yaml:"scoringStrategy"`
		}
		if err := yaml.Unmarshal(b, &args); err != nil {
			return ScoringStrategy{}, fmt.Errorf("NodeResourcesFit args: %w", err)
		}
		return args.ScoringStrategy, nil
	}
	return ScoringStrategy{}, errors.New("pluginConfig has no NodeResourcesFit entry")
}

// NodeUse is how much of each counted resource a node has and how much its pods request.
type NodeUse struct {
	Node             string
	Allocatable, Use map[corev1.ResourceName]int64
}

// Occupancy adds up the requests of the pods bound to each node (spec.nodeName), for the given resources, in
// the nodes' order. Pods on other nodes and finished pods are ignored.
func Occupancy(nodes []corev1.Node, pods []corev1.Pod, counted []corev1.ResourceName) []NodeUse {
	idx := map[string]int{}
	out := make([]NodeUse, len(nodes))
	for i, n := range nodes {
		idx[n.Name] = i
		out[i] = NodeUse{Node: n.Name, Allocatable: map[corev1.ResourceName]int64{}, Use: map[corev1.ResourceName]int64{}}
		for _, r := range counted {
			q := n.Status.Allocatable[r]
			out[i].Allocatable[r] = q.Value()
		}
	}
	for _, p := range pods {
		i, ok := idx[p.Spec.NodeName]
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, r := range counted {
			var sum resource.Quantity
			for _, c := range p.Spec.Containers {
				if q, ok := c.Resources.Requests[r]; ok {
					sum.Add(q)
				} else if q, ok := c.Resources.Limits[r]; ok { // extended resources: requests default to limits
					sum.Add(q)
				}
			}
			out[i].Use[r] += sum.Value()
		}
	}
	return out
}

// Summary is how fragmented a set of nodes is, in units: each counted resource times its size (1 for a whole
// GPU; a MIG profile's compute slices, so that 3g.20gb counts 3).
type Summary struct {
	Nodes int
	// Used nodes have at least one unit in use; Fragmented ones are used but not full; Free ones have none in use.
	Used, Fragmented, Free int
	// LargestFree is the most free units on one node.
	LargestFree int64
}

// Summarize counts used, fragmented and free nodes; size gives each resource's units (missing means 1).
func Summarize(use []NodeUse, size map[corev1.ResourceName]int64) Summary {
	s := Summary{Nodes: len(use)}
	for _, u := range use {
		var total, used int64
		for _, r := range slices.Sorted(maps.Keys(u.Allocatable)) {
			w := size[r]
			if w == 0 {
				w = 1
			}
			total += u.Allocatable[r] * w
			used += u.Use[r] * w
		}
		switch {
		case used == 0:
			s.Free++
		case used < total:
			s.Used++
			s.Fragmented++
		default:
			s.Used++
		}
		s.LargestFree = max(s.LargestFree, total-used)
	}
	return s
}
