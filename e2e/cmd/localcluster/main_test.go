package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFlags(t *testing.T) {
	type got struct {
		KubeBin, Venv, Password, Topology string
		Helm, UsageAPI                    string
		Port, UsagePort                   int
		Quota, Policy                     string
		Profiles, ProfilesConfig          string
		Culler, CullerPolicy              string
		CullerPort                        int
		Prometheus                        string
		PrometheusPort                    int
	}
	tests := map[string]struct {
		args []string
		env  map[string]string
		want got
	}{
		"defaults from GPUHUB_CACHE": {
			env: map[string]string{"GPUHUB_CACHE": "/c"},
			want: got{KubeBin: "/c/kube/v1.36.3/bin", Venv: "/c/venv/hub55", Password: "gpuhub-demo",
				Topology: "e2e/topology.yaml", Port: 8000, Helm: "/c/bin/helm-v3.22.0", UsageAPI: "bin/usage-api",
				Quota: "bin/gpu-quota", Policy: "e2e/hub/quota-demo.yaml", Profiles: "bin/gpu-profiles", ProfilesConfig: "e2e/hub/profiles-demo.yaml",
				Culler: "bin/gpu-culler", CullerPolicy: "e2e/hub/culler-demo.yaml", Prometheus: "prometheus"},
		},
		"env fallback": {
			env: map[string]string{"GPUHUB_CACHE": "/c", "GPUHUB_KUBE_BIN": "/k", "GPUHUB_DEMO_PORT": "9000", "GPUHUB_DEMO_PASSWORD": "pw",
				"GPUHUB_HELM": "/h", "GPUHUB_USAGE_API": "/u", "GPUHUB_USAGE_PORT": "9001",
				"GPUHUB_GPU_QUOTA": "/q", "GPUHUB_QUOTA_POLICY": "/p.yaml", "GPUHUB_GPU_PROFILES": "/gp", "GPUHUB_PROFILES_CONFIG": "/o.yaml",
				"GPUHUB_GPU_CULLER": "/gc", "GPUHUB_CULLER_POLICY": "/c.yaml", "GPUHUB_CULLER_PORT": "9002",
				"GPUHUB_PROMETHEUS": "/usr/bin/prometheus", "GPUHUB_PROMETHEUS_PORT": "9090"},
			want: got{KubeBin: "/k", Venv: "/c/venv/hub55", Password: "pw", Topology: "e2e/topology.yaml", Port: 9000,
				Helm: "/h", UsageAPI: "/u", UsagePort: 9001, Quota: "/q", Policy: "/p.yaml", Profiles: "/gp", ProfilesConfig: "/o.yaml",
				Culler: "/gc", CullerPolicy: "/c.yaml", CullerPort: 9002, Prometheus: "/usr/bin/prometheus", PrometheusPort: 9090},
		},
		"flag beats env": {
			args: []string{"--port=0", "--kube-bin=/f", "--topology=t.yaml", "--helm=/hf", "--usage-port=0", "--quota-policy=mine.yaml",
				"--profiles-config=o.yaml", "--culler-policy=c.yaml"},
			env: map[string]string{"GPUHUB_CACHE": "/c", "GPUHUB_KUBE_BIN": "/k", "GPUHUB_DEMO_PORT": "9000", "GPUHUB_HELM": "/h", "GPUHUB_USAGE_PORT": "9001",
				"GPUHUB_QUOTA_POLICY": "/p.yaml", "GPUHUB_CULLER_POLICY": "/c.yaml"},
			want: got{KubeBin: "/f", Venv: "/c/venv/hub55", Password: "gpuhub-demo", Topology: "t.yaml", Port: 0,
				Helm: "/hf", UsageAPI: "bin/usage-api", Quota: "bin/gpu-quota", Policy: "mine.yaml", Profiles: "bin/gpu-profiles", ProfilesConfig: "o.yaml",
				Culler: "bin/gpu-culler", CullerPolicy: "c.yaml", Prometheus: "prometheus"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := parseFlags(tc.args, func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			g := got{KubeBin: o.Stack.KubeBinDir, Venv: o.Stack.Venv, Password: o.Stack.Password,
				Topology: o.Stack.Topology, Port: o.Stack.ProxyPort, Helm: o.GPUHub.Chart.Helm, UsageAPI: o.GPUHub.UsageAPI,
				UsagePort: o.GPUHub.Port, Quota: o.GPUHub.Quota.Binary, Policy: o.GPUHub.Quota.Policy,
				Profiles: o.GPUHub.Profiles.Binary, ProfilesConfig: o.GPUHub.Profiles.Config,
				Culler: o.GPUHub.Culler.Binary, CullerPolicy: o.GPUHub.Culler.Policy, CullerPort: o.GPUHub.Culler.Port,
				Prometheus: o.Prometheus.Binary, PrometheusPort: o.Prometheus.Port}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := parseFlags([]string{"--log-level=loud"}, func(string) string { return "" }); err == nil {
		t.Error("bad log level accepted")
	}
}
