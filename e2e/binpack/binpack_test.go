package binpack

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuhub/gpuhub/e2e/emulator"
)

var (
	fragmentPath = filepath.Join("..", "..", "chart", "gpuhub", "files", "z2jh-values.yaml")
	z2jhValues   = filepath.Join("..", "..", "chart", "testdata", "z2jh-4.4.0", "values.yaml")
)

func TestMerge(t *testing.T) {
	tests := map[string]struct {
		base, override, want Values
	}{
		"maps merge": {
			base:     Values{"a": Values{"x": 1, "y": 2}},
			override: Values{"a": Values{"y": 3, "z": 4}},
			want:     Values{"a": Values{"x": 1, "y": 3, "z": 4}},
		},
		"lists are replaced": {
			base:     Values{"l": []any{1, 2}},
			override: Values{"l": []any{3}},
			want:     Values{"l": []any{3}},
		},
		"null removes": {
			base:     Values{"a": 1, "b": 2},
			override: Values{"a": nil},
			want:     Values{"b": 2},
		},
		"scalar over map": {
			base:     Values{"a": Values{"x": 1}},
			override: Values{"a": "s"},
			want:     Values{"a": "s"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Merge(tc.base, tc.override)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Merge (-want +got):\n%s", diff)
			}
		})
	}
}

func loadValues(t *testing.T) (z2jh, fragment Values) {
	t.Helper()
	z2jh, err := ReadValues(z2jhValues)
	if err != nil {
		t.Fatal(err)
	}
	fragment, err = ReadValues(fragmentPath)
	if err != nil {
		t.Fatal(err)
	}
	return z2jh, fragment
}

// The profile z2jh renders with the fragment keeps z2jh's plugins (the fragment does not touch them) and takes the
// fragment's pluginConfig whole (Helm replaces lists).
func TestUserSchedulerProfile(t *testing.T) {
	z2jh, fragment := loadValues(t)
	def, err := UserSchedulerProfile(z2jh, "s")
	if err != nil {
		t.Fatal(err)
	}
	got, err := UserSchedulerProfile(Merge(z2jh, fragment), "s")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(def["plugins"], got["plugins"]); diff != "" {
		t.Errorf("plugins (-z2jh default +with fragment):\n%s", diff)
	}
	us := fragment["scheduling"].(Values)["userScheduler"].(Values)
	if diff := cmp.Diff(us["pluginConfig"], got["pluginConfig"]); diff != "" {
		t.Errorf("pluginConfig (-fragment +rendered):\n%s", diff)
	}
	defScoring, err := NodeResourcesFitScoring(def)
	if err != nil {
		t.Fatal(err)
	}
	want := ScoringStrategy{Type: "MostAllocated", Resources: []ScoredResource{{"cpu", 1}, {"memory", 1}}}
	if diff := cmp.Diff(want, defScoring); diff != "" {
		t.Errorf("z2jh 4.4.0's own scoring changed (-want +got); revisit the fragment's comments:\n%s", diff)
	}

	if _, err := UserSchedulerProfile(Merge(z2jh, Values{"scheduling": Values{"userScheduler": Values{"enabled": false}}}), "s"); err == nil {
		t.Error("a disabled user-scheduler rendered a profile")
	}
}

// migResource is how the NVIDIA device plugin names a mixed-strategy MIG profile ("+me" becomes ".me").
var migResource = regexp.MustCompile(`^nvidia\.com/mig-[1-7]g\.[0-9]+gb(\.me)?$`)

func TestFragment(t *testing.T) {
	_, fragment := loadValues(t)
	p, err := UserSchedulerProfile(fragment, "s")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NodeResourcesFitScoring(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != "MostAllocated" {
		t.Errorf("scoringStrategy.type = %q, want MostAllocated", s.Type)
	}
	weights := map[string]int64{}
	gpuWeight := int64(0)
	for _, r := range s.Resources {
		if _, dup := weights[r.Name]; dup {
			t.Errorf("%s listed twice", r.Name)
		}
		weights[r.Name] = r.Weight
		if r.Weight < 1 || r.Weight > 100 {
			t.Errorf("%s weight %d: kube-scheduler accepts 1-100", r.Name, r.Weight)
		}
		gpu := strings.HasPrefix(r.Name, "nvidia.com/")
		switch {
		case r.Name == "cpu" || r.Name == "memory":
			if r.Weight != 1 {
				t.Errorf("%s weight %d, want 1 (z2jh's, so CPU-only pods pack as before)", r.Name, r.Weight)
			}
		case !gpu:
			t.Errorf("unexpected resource %s", r.Name)
		case r.Name != "nvidia.com/gpu" && r.Name != "nvidia.com/gpu.shared" && !migResource.MatchString(r.Name):
			t.Errorf("%s is not a device plugin GPU resource name", r.Name)
		case gpuWeight != 0 && r.Weight != gpuWeight:
			t.Errorf("%s weight %d, want %d like the other GPU resources", r.Name, r.Weight, gpuWeight)
		default:
			gpuWeight = r.Weight
		}
	}
	// The trade-off the fragment's comments explain (scores are whole numbers, the weighted mean rounded down):
	// one GPU of 8 (12.5%) outweighs cpu and memory each 50 points apart, and 12.5 points of cpu+memory (two small
	// notebooks) still move a GPU pod's score by a point.
	cpuMem := weights["cpu"] + weights["memory"]
	if gpuWeight*125 <= 500*cpuMem {
		t.Errorf("GPU weight %d: one GPU of 8 no longer outweighs cpu and memory 50 points apart", gpuWeight)
	}
	if 125 < 10*(gpuWeight+cpuMem) {
		t.Errorf("GPU weight %d: cpu and memory can no longer break ties between GPU nodes", gpuWeight)
	}
	for _, want := range []string{"cpu", "memory", "nvidia.com/gpu", "nvidia.com/gpu.shared",
		"nvidia.com/mig-1g.5gb", "nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-4g.20gb",
		"nvidia.com/mig-7g.40gb", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-7g.80gb"} {
		if _, ok := weights[want]; !ok {
			t.Errorf("%s is not scored", want)
		}
	}
	// Every GPU resource of the local cluster's topology is scored (the README's caveat: the list must match
	// the cluster's profiles).
	topo, err := emulator.LoadTopology(filepath.Join("..", "topology.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range topo.Nodes {
		for r, q := range n.Resources {
			if strings.HasPrefix(r, "nvidia.com/") && q != "0" {
				if _, ok := weights[r]; !ok {
					t.Errorf("node %s of e2e/topology.yaml has %s, which the fragment does not score", n.Name, r)
				}
			}
		}
	}
}

func TestSummarize(t *testing.T) {
	node := func(name string, res corev1.ResourceList) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: res}}
	}
	pod := func(nodeName string, phase corev1.PodPhase, res corev1.ResourceList) corev1.Pod {
		return corev1.Pod{
			Spec:   corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: res}}}},
			Status: corev1.PodStatus{Phase: phase},
		}
	}
	gpus := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(n, resource.DecimalSI)}
	}
	mig := func(small, big int64) corev1.ResourceList {
		return corev1.ResourceList{"nvidia.com/mig-1g.5gb": *resource.NewQuantity(small, resource.DecimalSI),
			"nvidia.com/mig-3g.20gb": *resource.NewQuantity(big, resource.DecimalSI)}
	}
	tests := map[string]struct {
		nodes   []corev1.Node
		pods    []corev1.Pod
		counted []corev1.ResourceName
		size    map[corev1.ResourceName]int64
		want    Summary
	}{
		"whole GPUs": {
			nodes: []corev1.Node{node("a", gpus(4)), node("b", gpus(4)), node("c", gpus(4))},
			pods: []corev1.Pod{pod("a", "", gpus(4)), pod("b", corev1.PodPending, gpus(1)),
				pod("c", corev1.PodSucceeded, gpus(2)), pod("elsewhere", "", gpus(1)), pod("", "", gpus(1))},
			counted: []corev1.ResourceName{"nvidia.com/gpu"},
			want:    Summary{Nodes: 3, Used: 2, Fragmented: 1, Free: 1, LargestFree: 4},
		},
		"MIG slices": {
			nodes:   []corev1.Node{node("a", mig(8, 2)), node("b", mig(8, 2))},
			pods:    []corev1.Pod{pod("a", "", mig(0, 1)), pod("b", "", mig(8, 2))},
			counted: []corev1.ResourceName{"nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb"},
			size:    map[corev1.ResourceName]int64{"nvidia.com/mig-3g.20gb": 3},
			want:    Summary{Nodes: 2, Used: 2, Fragmented: 1, Free: 0, LargestFree: 11},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Summarize(Occupancy(tc.nodes, tc.pods, tc.counted), tc.size)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
		})
	}
}
