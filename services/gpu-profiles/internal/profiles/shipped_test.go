package profiles_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// TestShippedConfigs loads every overrides file gpuhub ships or shows: make demo's, the chart's default and its
// golden-file case. A file that does not load would keep gpu-profiles from starting.
func TestShippedConfigs(t *testing.T) {
	files := []string{"../../../../e2e/hub/profiles-demo.yaml", "../../../../chart/testdata/profiles-config.yaml"}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			if err := policy.Load(f, &profiles.Config{}); err != nil {
				t.Errorf("%s does not load:\n%v", f, err)
			}
		})
	}
	t.Run("chart default", func(t *testing.T) {
		values, err := os.ReadFile("../../../../chart/gpuhub/values.yaml")
		if err != nil {
			t.Fatal(err)
		}
		// profiles.config is the block scalar under "  config: |" (indented four spaces).
		m := regexp.MustCompile(`(?m)^  config: \|\n((?:    .*\n|\n)+)`).FindSubmatch(values)
		if m == nil {
			t.Fatal("chart/gpuhub/values.yaml has no profiles.config block")
		}
		text := regexp.MustCompile(`(?m)^    `).ReplaceAll(m[1], nil)
		if err := policy.Decode("values.yaml profiles.config", text, &profiles.Config{}); err != nil {
			t.Errorf("the chart's default overrides do not load:\n%v", err)
		}
	})
}
