//go:build chart

package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// z2jhSchemaChart writes a chart that holds nothing but z2jh 4.4.0's values and schema (testdata/z2jh-4.4.0):
// `helm template` of it checks values files against z2jh's schema (additionalProperties false on most objects).
func z2jhSchemaChart(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"values.yaml", "values.schema.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "z2jh-4.4.0", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: jupyterhub\nversion: 4.4.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestZ2JHUserSchedulerFragment: z2jh 4.4.0 accepts the GPU bin-packing fragment as a values file, and refuses
// it with a misspelt key (the check is not vacuous). e2e/binpack checks that the real kube-scheduler accepts
// the configuration z2jh renders from it, and what it does with GPU pods.
func TestZ2JHUserSchedulerFragment(t *testing.T) {
	z2jh := z2jhSchemaChart(t)
	fragment := filepath.Join("gpuhub", "files", "z2jh-user-scheduler-gpu-packing.yaml")
	if out, err := helm(t, "template", "z2jh", z2jh, "--kube-version", kubeVersion, "-f", fragment); err != nil {
		t.Errorf("z2jh 4.4.0 rejects %s: %v\n%s", fragment, err, out)
	}
	b, err := os.ReadFile(fragment)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(b), "pluginConfig:", "pluginConfigs:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := helm(t, "template", "z2jh", z2jh, "--kube-version", kubeVersion, "-f", bad); err == nil || !strings.Contains(out, "pluginConfigs") {
		t.Errorf("z2jh schema accepted scheduling.userScheduler.pluginConfigs (err %v):\n%s", err, out)
	}
}
