package build

import (
	"path/filepath"
	"strings"

	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
)

// Recipe is one image `make images` builds: its Dockerfile, Docker's build context, and the reference
// when the Dockerfile's comment does not name one.
type Recipe struct {
	Name, Dockerfile, Context, Tag string
}

// Recipes lists every image, in build order:
//   - dir/<name>.Dockerfile: gpuhub's images (the services, the single-user image with the GPU panel),
//     built from the repository root;
//   - dir/z2jh/<name>.Dockerfile: images z2jh runs whose recipe is not in z2jh's repository
//     (configurable-http-proxy), built from dir/z2jh;
//   - k8s-hub: z2jh's own hub recipe (its images/hub folder, z2jhHub), tagged z2jhTag.
func Recipes(dir, z2jhHub, z2jhTag string) ([]Recipe, error) {
	var out []Recipe
	for _, sub := range []struct{ glob, context string }{
		{filepath.Join(dir, "*.Dockerfile"), "."},
		{filepath.Join(dir, "z2jh", "*.Dockerfile"), filepath.Join(dir, "z2jh")},
	} {
		paths, err := filepath.Glob(sub.glob)
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			out = append(out, Recipe{Name: strings.TrimSuffix(filepath.Base(p), ".Dockerfile"), Dockerfile: p, Context: sub.context})
		}
	}
	return append(out, Recipe{Name: "k8s-hub", Dockerfile: filepath.Join(z2jhHub, "Dockerfile"), Context: z2jhHub, Tag: z2jhTag}), nil
}

// Parse parses the recipe's Dockerfile, with its reference set.
func (r Recipe) Parse() (*dockerfile.File, error) {
	df, err := dockerfile.ParseFile(r.Dockerfile)
	if err != nil {
		return nil, err
	}
	if r.Tag != "" {
		df.BuildTag = r.Tag
	}
	return df, nil
}

// Known says whether the builder can start a stage of df FROM from.
func Known(df *dockerfile.File, from string) bool {
	_, equiv := Equivalents[from]
	return from == "scratch" || strings.HasPrefix(from, "golang:") || df.Stage(from) != nil || Bases[from].Build != nil || debianRoots[from] != nil || equiv
}
