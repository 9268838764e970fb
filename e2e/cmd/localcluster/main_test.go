package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFlags(t *testing.T) {
	type got struct {
		KubeBin, Venv, Password, Topology string
		Port                              int
	}
	tests := map[string]struct {
		args []string
		env  map[string]string
		want got
	}{
		"defaults from GPUHUB_CACHE": {
			env: map[string]string{"GPUHUB_CACHE": "/c"},
			want: got{KubeBin: "/c/kube/v1.36.3/bin", Venv: "/c/venv/hub55", Password: "gpuhub-demo",
				Topology: "e2e/topology.yaml", Port: 8000},
		},
		"env fallback": {
			env:  map[string]string{"GPUHUB_CACHE": "/c", "GPUHUB_KUBE_BIN": "/k", "GPUHUB_DEMO_PORT": "9000", "GPUHUB_DEMO_PASSWORD": "pw"},
			want: got{KubeBin: "/k", Venv: "/c/venv/hub55", Password: "pw", Topology: "e2e/topology.yaml", Port: 9000},
		},
		"flag beats env": {
			args: []string{"--port=0", "--kube-bin=/f", "--topology=t.yaml"},
			env:  map[string]string{"GPUHUB_CACHE": "/c", "GPUHUB_KUBE_BIN": "/k", "GPUHUB_DEMO_PORT": "9000"},
			want: got{KubeBin: "/f", Venv: "/c/venv/hub55", Password: "gpuhub-demo", Topology: "t.yaml", Port: 0},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := parseFlags(tc.args, func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			g := got{KubeBin: o.Stack.KubeBinDir, Venv: o.Stack.Venv, Password: o.Stack.Password,
				Topology: o.Stack.Topology, Port: o.Stack.ProxyPort}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := parseFlags([]string{"--log-level=loud"}, func(string) string { return "" }); err == nil {
		t.Error("bad log level accepted")
	}
}
