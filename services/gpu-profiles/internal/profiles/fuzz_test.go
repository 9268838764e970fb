package profiles_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// FuzzConfig loads arbitrary overrides files (--config) and renders the form from them for the zoo of every GPU
// kind: a file is refused with placed errors or gives a form KubeSpawner can take: it encodes as JSON, the CPU
// choice is on it, slugs are unique and exactly one choice is the default.
func FuzzConfig(f *testing.F) {
	ks := zoo(f)
	_, example := readmeExample(f)
	f.Add(example, "researchers")
	for _, s := range []string{
		"default: gpu-h100-80gb-hbm3\nkinds:\n  gpu: {hide: true}\n",
		"kinds:\n  cpu: {hide: true, groups: [x]}\n",
		"kinds:\n  shared-t4: {groups: [students], order: -1, multiGPU: [2, 0, -4]}\n  gpu: {multiGPU: [2, 4, 8]}\n",
		"staticProfiles:\n  - {slug: big, display_name: Big, kubespawner_override: {image: x}}\n  - {slug: big, display_name: Again}\n",
		"staticProfiles:\n  - {slug: odd, display_name: Odd, 1: 2, nested: {3: 4}}\n",
		"staticProfiles:\n  - {slug: odd, display_name: Odd, default: true}\n",
		"defaults: {cpuLimit: .nan, memLimit: 4G}\n",
		"tolerations: [{operator: Exists}]\n",
		"note: hello\ndefault: cpu\n",
	} {
		f.Add([]byte(s), "students")
	}
	f.Fuzz(func(t *testing.T, data []byte, group string) {
		var cfg profiles.Config
		if err := policy.Decode("profiles.yaml", data, &cfg); err != nil {
			var es policy.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Decode returned %T %v, want placed errors", err, err)
			}
			return
		}
		form := profiles.ForUser(profiles.Visible(profiles.Choices(ks, &cfg), []string{group}), nil, cfg.Default)
		if _, err := json.Marshal(form); err != nil {
			t.Fatalf("the form does not encode: %v", err)
		}
		defaults, cpu := 0, 0
		slugs := map[string]bool{}
		for _, p := range form {
			if p.Default {
				defaults++
			}
			if p.Slug == catalog.SlugCPU {
				cpu++
			}
			if slugs[p.Slug] {
				t.Errorf("slug %q twice on the form", p.Slug)
			}
			slugs[p.Slug] = true
		}
		if cpu != 1 || defaults != 1 {
			t.Errorf("%d CPU choices and %d defaults on the form, want one each: %v", cpu, defaults, slugList(form))
		}
	})
}

func slugList(ps []profiles.Profile) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Slug)
	}
	return out
}
