package gpuhubstack

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestAgentTargets(t *testing.T) {
	agent := func(name, node, ip string, ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "hub", Labels: map[string]string{
				"app.kubernetes.io/component": "gpu-agent", "app.kubernetes.io/part-of": "gpuhub"}},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Ports: ports}}},
			Status: corev1.PodStatus{PodIP: ip},
		}
	}
	http9400 := corev1.ContainerPort{Name: "http", ContainerPort: 9400}
	notAgent := agent("jupyter-alice", "gpu-a100-0", "127.0.1.9", corev1.ContainerPort{Name: "http", ContainerPort: 8888})
	notAgent.Labels = map[string]string{"component": "singleuser-server"}
	client := fake.NewClientset(
		agent("gpuhub-agent-b", "gpu-h100-0", "127.0.1.3", http9400),
		agent("gpuhub-agent-a", "gpu-a100-0", "127.0.1.2", corev1.ContainerPort{Name: "debug", ContainerPort: 6060}, http9400),
		agent("gpuhub-agent-c", "gpu-t4-0", "", http9400), // no IP yet: not scraped
		notAgent,
	)
	got, err := AgentTargets(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	want := []AgentTarget{{Address: "127.0.1.2:9400", Node: "gpu-a100-0", Pod: "gpuhub-agent-a"},
		{Address: "127.0.1.3:9400", Node: "gpu-h100-0", Pod: "gpuhub-agent-b"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AgentTargets (-want +got):\n%s", diff)
	}
}

func TestServiceTargets(t *testing.T) {
	tests := map[string]struct {
		opts Options
		want map[string][]string
	}{
		"the usage API alone": {
			opts: Options{Port: 9001},
			want: map[string][]string{"usage-api": {"127.0.0.1:9001"}},
		},
		"every service as make demo runs them": {
			opts: Options{Port: 9001, Quota: QuotaOptions{Binary: "q", Port: 9002}, Profiles: ProfilesOptions{Binary: "p", Port: 9003},
				Culler: CullerOptions{Binary: "c", Port: 9004}},
			want: map[string][]string{"usage-api": {"127.0.0.1:9001"}, "gpu-quota": {"127.0.0.1:9002"},
				"gpu-profiles": {"127.0.0.1:9003"}, "gpu-culler": {"127.0.0.1:9004"}},
		},
		"culler replicas each on their port, not the Service's": {
			opts: Options{Port: 9001, Culler: CullerOptions{Binary: "c", Port: 9004, Replicas: 2, ReplicaPorts: []int{9005, 9006}}},
			want: map[string][]string{"usage-api": {"127.0.0.1:9001"}, "gpu-culler": {"127.0.0.1:9005", "127.0.0.1:9006"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ServiceTargets(tc.opts)); diff != "" {
				t.Errorf("ServiceTargets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPrometheusConfig: the demo's scrape configuration (golden; prometheus_e2e_test.go runs promtool check
// config on what PrometheusConfig writes and a Prometheus on it).
func TestPrometheusConfig(t *testing.T) {
	got, err := PrometheusConfig(ScrapeTargets{
		Services: ServiceTargets(Options{Port: 9001, Quota: QuotaOptions{Binary: "q", Port: 9002},
			Profiles: ProfilesOptions{Binary: "p", Port: 9003}, Culler: CullerOptions{Binary: "c", Port: 9004}}),
		Agents: []AgentTarget{{Address: "127.0.1.2:9400", Node: "gpu-a100-0", Pod: "gpuhub-agent-x7k2p"},
			{Address: "127.0.1.3:9400", Node: "gpu-h100-0", Pod: "gpuhub-agent-z9q4m"}},
		Rules: "/repo/chart/gpuhub/files/prometheus-rules.yaml",
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "prometheus.yml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestPrometheusConfig -args -update)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}
