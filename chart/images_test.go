//go:build chart

package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestImagesHaveDockerfiles: every image the chart runs, with every service enabled, is built by
// images/<name>.Dockerfile, which builds ./services/<name> and names the same image in its build line.
func TestImagesHaveDockerfiles(t *testing.T) {
	objs := rendered(t, "--set", "quota.enabled=true", "--set", "profiles.enabled=true", "--set", "culler.enabled=true",
		"--set-file", "culler.policy=testdata/culler-policy.yaml")
	var images []string
	add := func(spec corev1.PodSpec) {
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			images = append(images, c.Image)
		}
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			add(o.Spec.Template.Spec)
		case *appsv1.DaemonSet:
			add(o.Spec.Template.Spec)
		}
	}
	slices.Sort(images)
	images = slices.Compact(images)
	if len(images) < 5 {
		t.Fatalf("images %v: expected the agent, the usage API, gpu-quota, gpu-profiles and gpu-culler", images)
	}
	ref := regexp.MustCompile(`^ghcr\.io/gpuhub/([a-z0-9-]+):`)
	for _, img := range images {
		m := ref.FindStringSubmatch(img)
		if m == nil {
			t.Errorf("image %q is not ghcr.io/gpuhub/<name>:<tag>", img)
			continue
		}
		name := m[1]
		df, err := os.ReadFile(filepath.Join("..", "images", name+".Dockerfile"))
		if err != nil {
			t.Errorf("image %s: no images/%s.Dockerfile builds it: %v", img, name, err)
			continue
		}
		if !strings.Contains(string(df), "-t ghcr.io/gpuhub/"+name+":") {
			t.Errorf("images/%s.Dockerfile does not say it builds ghcr.io/gpuhub/%s", name, name)
		}
		if !strings.Contains(string(df), "./services/"+name) {
			t.Errorf("images/%s.Dockerfile does not build ./services/%s", name, name)
		}
	}
}
