package inventory

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gpuhub/gpuhub/services/internal/golden"
)

func readObject[T any](t testing.TB, name string) *T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// agentFields are what Agents reads of a pod.
type agentFields struct {
	Labels                   map[string]string
	ServiceAccount, Node, IP string
	Phase                    corev1.PodPhase
	Deleting                 bool
	Namespace, Name          string
}

func agentView(p *corev1.Pod) agentFields {
	return agentFields{Labels: p.Labels, ServiceAccount: p.Spec.ServiceAccountName, Node: p.Spec.NodeName, IP: p.Status.PodIP,
		Phase: p.Status.Phase, Deleting: p.DeletionTimestamp != nil, Namespace: p.Namespace, Name: p.Name}
}

func TestTrimPodKeepsWhatIsRead(t *testing.T) {
	for _, name := range []string{"singleuser-pod", "pending-pod", "agent-pod"} {
		t.Run(name, func(t *testing.T) {
			full := readObject[corev1.Pod](t, name+".json")
			trimmed := trimPod(full.DeepCopy())

			wantPod, wantOK := PodFrom(full)
			gotPod, gotOK := PodFrom(trimmed)
			if gotOK != wantOK {
				t.Fatalf("PodFrom ok: trimmed %v, full %v", gotOK, wantOK)
			}
			if diff := cmp.Diff(wantPod, gotPod); diff != "" {
				t.Errorf("PodFrom (-full +trimmed):\n%s", diff)
			}
			if diff := cmp.Diff(agentView(full), agentView(trimmed)); diff != "" {
				t.Errorf("agent fields (-full +trimmed):\n%s", diff)
			}
			if again := trimPod(trimmed.DeepCopy()); !equality.Semantic.DeepEqual(again, trimmed) {
				t.Errorf("trimming twice changes the pod: %s", cmp.Diff(trimmed, again))
			}
			b, _ := json.Marshal(trimmed)
			for _, gone := range []string{"do-not-keep-this-token", "managedFields", "kubectl.kubernetes.io/restartedAt", "volumes", "tolerations"} {
				if strings.Contains(string(b), gone) {
					t.Errorf("the trimmed pod still has %q", gone)
				}
			}
			golden.JSON(t, name+".trimmed.json", trimmed)
		})
	}
}

func TestTrimNodeKeepsWhatIsRead(t *testing.T) {
	full := readObject[corev1.Node](t, "gpu-node.json")
	trimmed := trimNode(full.DeepCopy())
	if diff := cmp.Diff(NodeFrom(full), NodeFrom(trimmed)); diff != "" {
		t.Errorf("NodeFrom (-full +trimmed):\n%s", diff)
	}
	if again := trimNode(trimmed.DeepCopy()); !equality.Semantic.DeepEqual(again, trimmed) {
		t.Errorf("trimming twice changes the node: %s", cmp.Diff(trimmed, again))
	}
	golden.JSON(t, "gpu-node.trimmed.json", trimmed)
}

func TestTrimObjectPassesOtherTypes(t *testing.T) {
	svc := &corev1.Service{}
	got, err := trimObject(svc)
	if err != nil || got != svc {
		t.Errorf("trimObject(service) = %v, %v; want it unchanged", got, err)
	}
}

// BenchmarkCachedPodBytes reports the heap a cached single-user pod holds, full and trimmed: what 10,000 of
// them cost gpu-quota in memory and in every collection's mark phase.
func BenchmarkCachedPodBytes(b *testing.B) {
	src, err := os.ReadFile(filepath.Join("testdata", "singleuser-pod.json"))
	if err != nil {
		b.Fatal(err)
	}
	const n = 2000
	for _, tc := range []struct {
		name string
		keep func(*corev1.Pod) *corev1.Pod
	}{
		{"full", func(p *corev1.Pod) *corev1.Pod { p.ManagedFields = nil; return p }},
		{"trimmed", trimPod},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				pods := make([]*corev1.Pod, n)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i := range pods {
					p := new(corev1.Pod)
					if err := json.Unmarshal(src, p); err != nil {
						b.Fatal(err)
					}
					pods[i] = tc.keep(p)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perPod = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(pods)
			}
			b.ReportMetric(perPod, "heap-B/pod")
		})
	}
}
