package build

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
)

// Recipe is one image `make images` builds: its Dockerfile, Docker's build context, and the reference
// when the Dockerfile's comment does not name one.
type Recipe struct {
	Name, Dockerfile, Context, Tag string
	// Sealed: the recipe's go build reads nothing but its build context and the modules its go.sum pins, so
	// the image can be cached by its inputs (and the Go version) like an image without a Go build.
	Sealed bool
}

// Recipes lists every image, in build order:
//   - dir/<name>.Dockerfile: gpuhub's images (the services, the single-user image with the GPU panel),
//     built from the repository root;
//   - dir/z2jh/<name>.Dockerfile: images z2jh runs whose recipe is not in z2jh's repository, or cannot be
//     followed here (configurable-http-proxy, kube-scheduler, network-tools), built from dir/z2jh;
//   - z2jh's own recipes, unchanged, each from its folder of z2jhImages (z2jh's images/) and tagged
//     quay.io/jupyterhub/<name>:z2jhVersion: k8s-hub (images/hub) and k8s-image-awaiter (images/image-awaiter).
//
// A recipe whose `docker build ... -t REF CONTEXT` comment names another context (a path from the repository
// root, dir's parent) is built from that one: kube-scheduler's is the repository root, where its build module
// e2e/userschedulerbuild is.
func Recipes(dir, z2jhImages, z2jhVersion string) ([]Recipe, error) {
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
			context := sub.context
			named, err := commentContext(p)
			if err != nil {
				return nil, err
			}
			if named != "" {
				context = filepath.Join(dir, "..", filepath.FromSlash(named))
			}
			out = append(out, Recipe{Name: strings.TrimSuffix(filepath.Base(p), ".Dockerfile"), Dockerfile: p, Context: context})
		}
	}
	for _, z := range []struct {
		name, folder string
		sealed       bool
	}{{"k8s-hub", "hub", false}, {"k8s-image-awaiter", "image-awaiter", true}} {
		context := filepath.Join(z2jhImages, z.folder)
		out = append(out, Recipe{
			Name: z.name, Dockerfile: filepath.Join(context, "Dockerfile"), Context: context,
			Tag: "quay.io/jupyterhub/" + z.name + ":" + z2jhVersion, Sealed: z.sealed,
		})
	}
	return out, nil
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

// commentContext returns the build context the Dockerfile's `docker build ... -t REF CONTEXT` comment ends
// with, or "" when no comment names one.
func commentContext(dockerfilePath string) (string, error) {
	f, err := os.Open(dockerfilePath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		w := strings.Fields(strings.TrimPrefix(line, "#"))
		if !strings.HasPrefix(line, "#") || len(w) < 3 || w[0] != "docker" || w[1] != "build" {
			continue
		}
		if last := w[len(w)-1]; !strings.HasPrefix(last, "-") && w[len(w)-2] != "-t" && w[len(w)-2] != "-f" {
			return last, nil
		}
	}
	return "", sc.Err()
}
