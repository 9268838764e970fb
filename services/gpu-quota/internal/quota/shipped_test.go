package quota

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// TestShippedPolicies: every policy gpuhub ships or shows loads without an error: make demo's, the chart's
// default, and the examples in the READMEs (a policy that does not load keeps gpu-quota from starting).
func TestShippedPolicies(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	load := func(name string, data []byte) {
		t.Helper()
		var p Policy
		if err := policy.Decode(name, data, &p); err != nil {
			t.Errorf("%s does not load:\n%v", name, err)
		}
	}
	for _, f := range []string{"e2e/hub/quota-demo.yaml", "chart/testdata/quota-policy.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		load(f, data)
	}
	values, err := os.ReadFile(filepath.Join(root, "chart/gpuhub/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Quota struct {
			Policy string `yaml:"policy"`
		} `yaml:"quota"`
	}
	if err := yaml.Unmarshal(values, &v); err != nil || v.Quota.Policy == "" {
		t.Fatalf("chart values: no quota.policy (%v)", err)
	}
	load("chart/gpuhub/values.yaml quota.policy", []byte(v.Quota.Policy))
	// YAML examples in the READMEs that look like a policy (they have a groups: or default: key).
	block := regexp.MustCompile("(?s)```yaml\n(.*?)```|<<'POLICY'\n(.*?)\nPOLICY\n")
	isPolicy := regexp.MustCompile(`(?m)^(groups|default|onUnavailable):`)
	for _, f := range []string{"README.md", "services/gpu-quota/README.md", "chart/README.md"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range block.FindAllSubmatch(data, -1) {
			text := m[1] // a yaml block, or a heredoc in a shell example
			if len(text) == 0 {
				text = m[2]
			}
			if isPolicy.Match(text) {
				n++
				load(f+" example", text)
			}
		}
		if n == 0 {
			t.Errorf("%s: no policy example found", f)
		}
	}
}
