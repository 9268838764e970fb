package emulator

import (
	"bytes"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Topology is the node inventory (e2e/topology.yaml).
type Topology struct {
	Nodes []NodeSpec `yaml:"nodes"`
}

// NodeSpec is one emulated node.
type NodeSpec struct {
	Name      string            `yaml:"name"`
	Labels    map[string]string `yaml:"labels"`
	Resources map[string]string `yaml:"resources"`
	Reserved  map[string]string `yaml:"reserved"`
	GPUs      []GPU             `yaml:"gpus"`
}

// GPU is a physical GPU of a node, for the simulated GPU backend.
type GPU struct {
	UUID      string `yaml:"uuid"`
	Product   string `yaml:"product"`
	MemoryMiB int64  `yaml:"memoryMiB"`
	Replicas  int    `yaml:"replicas,omitempty"`
	MIG       []MIG  `yaml:"mig,omitempty"`
}

// MIG is a MIG device of a GPU.
type MIG struct {
	Profile       string `yaml:"profile"`
	UUID          string `yaml:"uuid"`
	GPUInstanceID int    `yaml:"gpuInstanceId"`
	MemoryMiB     int64  `yaml:"memoryMiB"`
}

// LoadTopology reads and validates a topology file.
func LoadTopology(path string) (*Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read topology: %w", err)
	}
	return ParseTopology(data)
}

// ParseTopology parses and validates a topology document; unknown fields are errors.
func ParseTopology(data []byte) (*Topology, error) {
	var t Topology
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("parse topology: %w", err)
	}
	if len(t.Nodes) == 0 {
		return nil, fmt.Errorf("topology has no nodes")
	}
	if len(t.Nodes) > 250 {
		return nil, fmt.Errorf("topology has %d nodes, at most 250 fit the loopback address plan", len(t.Nodes))
	}
	seen := map[string]bool{}
	for _, n := range t.Nodes {
		if n.Name == "" {
			return nil, fmt.Errorf("topology: node without a name")
		}
		if seen[n.Name] {
			return nil, fmt.Errorf("topology: duplicate node %q", n.Name)
		}
		seen[n.Name] = true
		if _, _, err := n.capacity(); err != nil {
			return nil, err
		}
	}
	return &t, nil
}

// capacity returns status.capacity and status.allocatable.
func (n NodeSpec) capacity() (capacity, allocatable corev1.ResourceList, err error) {
	capacity, allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	for k, v := range n.Resources {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, nil, fmt.Errorf("node %s: resource %s=%q: %w", n.Name, k, v, err)
		}
		capacity[corev1.ResourceName(k)] = q
		allocatable[corev1.ResourceName(k)] = q.DeepCopy()
	}
	for k, v := range n.Reserved {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, nil, fmt.Errorf("node %s: reserved %s=%q: %w", n.Name, k, v, err)
		}
		a, ok := allocatable[corev1.ResourceName(k)]
		if !ok {
			return nil, nil, fmt.Errorf("node %s: reserved %s has no capacity", n.Name, k)
		}
		a.Sub(q)
		allocatable[corev1.ResourceName(k)] = a
	}
	return capacity, allocatable, nil
}
