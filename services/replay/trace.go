package replay

import (
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// The trace's files (Alibaba cluster-trace-gpu-v2023, Weng et al., USENIX ATC '23).
const (
	NodeFile = "openb_node_list_gpu_node.csv"
	PodFile  = "openb_pod_list_default.csv"
)

// Citation is the paper the trace comes with; every output names it.
const Citation = `Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation ` +
	`Gradient Descent", USENIX ATC '23 (trace: alibaba/clusterdata, cluster-trace-gpu-v2023)`

// TraceNode is one GPU node of the trace.
type TraceNode struct {
	Name  string
	GPUs  int64
	Model string // P100, T4, V100M16, V100M32, A10, G2, G3 (G* undisclosed)
}

// TracePod is one GPU pod of the trace: times in trace seconds.
type TracePod struct {
	Name             string
	GPUs             int64
	Milli            int // gpu_milli: < 1000 a fractional request of one GPU
	Created, Deleted int64
}

// ReadTrace reads the trace's nodes and its pods that ask for a GPU.
func ReadTrace(dir string) ([]TraceNode, []TracePod, error) {
	var nodes []TraceNode
	err := readCSV(filepath.Join(dir, NodeFile), []string{"sn", "gpu", "model"}, func(f map[string]string) error {
		n, err := strconv.ParseInt(f["gpu"], 10, 64)
		if err != nil {
			return err
		}
		nodes = append(nodes, TraceNode{Name: f["sn"], GPUs: n, Model: f["model"]})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var pods []TracePod
	err = readCSV(filepath.Join(dir, PodFile), []string{"name", "num_gpu", "gpu_milli", "creation_time", "deletion_time"}, func(f map[string]string) error {
		var p TracePod
		var err error
		p.Name = f["name"]
		if p.GPUs, err = strconv.ParseInt(f["num_gpu"], 10, 64); err != nil {
			return err
		}
		if p.GPUs == 0 {
			return nil // CPU-only pods are not part of a GPU study
		}
		if p.Milli, err = strconv.Atoi(f["gpu_milli"]); err != nil {
			return err
		}
		if p.Created, err = strconv.ParseInt(f["creation_time"], 10, 64); err != nil {
			return err
		}
		if p.Deleted, err = strconv.ParseInt(f["deletion_time"], 10, 64); err != nil {
			return err
		}
		pods = append(pods, p)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(nodes) == 0 || len(pods) == 0 {
		return nil, nil, fmt.Errorf("trace in %s: no GPU nodes or no GPU pods", dir)
	}
	return nodes, pods, nil
}

func readCSV(path string, need []string, row func(map[string]string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open the trace (pass --trace DIR, the folder of %s and %s): %w", NodeFile, PodFile, err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	head, err := r.Read()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, n := range need {
		if _, ok := col[n]; !ok {
			return fmt.Errorf("%s: no column %q", path, n)
		}
	}
	line := 1
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		line++
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		f := make(map[string]string, len(need))
		for _, n := range need {
			f[n] = rec[col[n]]
		}
		if err := row(f); err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
	}
}

// hash64 is the deterministic hash every mapping uses (FNV-1a of the parts).
func hash64(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// mixed is hash64 through splitmix64's finalizer: FNV-1a's high bits hardly change when only the last
// characters of a part do (openb-node-0200 ... 0209 all fall within 0.001 of each other under unit), so draws
// over similar names need the mix.
func mixed(parts ...string) uint64 {
	x := hash64(parts...)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// unit is a hash as a number in [0, 1).
func unit(parts ...string) float64 { return float64(hash64(parts...)>>11) / (1 << 53) }
