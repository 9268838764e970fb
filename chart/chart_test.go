//go:build chart

// Package chart tests the Helm chart by rendering it with the helm binary named in $HELM.
package chart

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// kubeVersion is the release the local cluster runs; helm built from source defaults to an old one.
const kubeVersion = "1.36.3"

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		t.Fatal("HELM is not set: run `make chart-test`, which installs helm")
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return errb.String(), err
	}
	return out.String(), nil
}

// TestRender compares rendered manifests with golden files, one per values case.
func TestRender(t *testing.T) {
	tests := map[string][]string{
		"default":   nil,
		"simulated": {"--set", "agent.backend=simulated", "--set", "usage.adminGroups={gpu-admins,staff}"},
		"postgres":  {"--set", "usage.databaseURLSecret=gpuhub-db", "--set", "networkPolicy.enabled=false"},
	}
	for name, extra := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"template", "gpuhub", "gpuhub", "--namespace", "jhub", "--kube-version", kubeVersion}, extra...)
			got, err := helm(t, args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, got)
			}
			golden := filepath.Join("testdata", name+".yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run `make chart-test UPDATE=1` to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("rendered manifests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSchemaRejects checks that values.schema.json turns typos and bad values into errors at install time.
func TestSchemaRejects(t *testing.T) {
	tests := map[string]struct {
		set     string
		wantErr string
	}{
		"unknown key":     {set: "agent.backnd=nvml", wantErr: "backnd"},
		"bad backend":     {set: "agent.backend=dcgm", wantErr: "backend"},
		"bad interval":    {set: "usage.interval=often", wantErr: "interval"},
		"bad log format":  {set: "logFormat=xml", wantErr: "logFormat"},
		"bad api url":     {set: "hub.apiURL=hub:8081", wantErr: "apiURL"},
		"bad service key": {set: "usage.serviceName=GPU Usage", wantErr: "serviceName"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := helm(t, "template", "gpuhub", "gpuhub", "--kube-version", kubeVersion, "--set", tc.set)
			if err == nil {
				t.Fatalf("helm template --set %s succeeded, want a schema error", tc.set)
			}
			if !strings.Contains(out, tc.wantErr) {
				t.Errorf("error does not name %q:\n%s", tc.wantErr, out)
			}
		})
	}
}
