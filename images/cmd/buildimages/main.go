// Command buildimages builds the images gpuhub runs and tests with, without a Docker engine or a registry
// (see images/internal/build): each as an OCI image layout OUT/<name>/ and an OCI archive OUT/<name>.tar that
// `ctr images import`, podman and skopeo load.
//
//   - images/<name>.Dockerfile: gpuhub's images (the services, the single-user image with the GPU panel);
//   - images/z2jh/<name>.Dockerfile: images z2jh runs whose upstream recipe is not in z2jh's repository
//     (configurable-http-proxy, the user-scheduler's kube-scheduler) or cannot be followed here
//     (network-tools: Alpine's packages);
//   - k8s-hub and k8s-image-awaiter: z2jh 4.4.0's own recipes, unchanged (its images/hub and
//     images/image-awaiter, under -z2jh).
//
// Images without a Go build are cached by their inputs (recipe, copied files, bases) under -cache, and so is
// z2jh's image-awaiter, whose go build reads only its own folder and pinned modules (with the Go version in
// the key): its recipe's `go build -a` would otherwise recompile the standard library on every run.
//
//	go run ./images/cmd/buildimages -out out/images gpu-quota k8s-hub
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/gpuhub/gpuhub/images/internal/build"
	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
	"github.com/gpuhub/gpuhub/images/internal/oci"
)

func main() { os.Exit(run()) }

func run() int {
	cacheRoot := os.Getenv("GPUHUB_CACHE")
	if cacheRoot == "" {
		home, _ := os.UserHomeDir()
		cacheRoot = filepath.Join(home, ".cache", "gpuhub")
	}
	out := flag.String("out", envOr("GPUHUB_IMAGES", "out/images"), "where the layouts and archives go (env GPUHUB_IMAGES)")
	cache := flag.String("cache", filepath.Join(cacheRoot, "images"), "root filesystems, base equivalents and built images kept between runs")
	dir := flag.String("dockerfiles", "images", "folder of the recipes (<name>.Dockerfile, bases/, z2jh/)")
	z2jhImages := flag.String("z2jh", envOr("GPUHUB_Z2JH_IMAGES", "../shared/data/z2jh-4.4.0/images"), "z2jh's images folder (its hub/ and image-awaiter/ recipes; env GPUHUB_Z2JH_IMAGES)")
	z2jhVersion := flag.String("z2jh-version", "4.4.0", "the tag of z2jh's images, the version of its released chart")
	list := flag.Bool("list", false, "print the image names and exit")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH of the images")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: buildimages [flags] [name ...]\n\nWith no name, builds every image.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	recipes, err := build.Recipes(*dir, *z2jhImages, *z2jhVersion)
	if err != nil {
		logger.Error("list recipes", "err", err)
		return 1
	}
	if *list {
		for _, r := range recipes {
			fmt.Println(r.Name)
		}
		return 0
	}
	if names := flag.Args(); len(names) > 0 {
		recipes = slices.DeleteFunc(recipes, func(r build.Recipe) bool { return !slices.Contains(names, r.Name) })
		if len(recipes) != len(names) {
			logger.Error("unknown image name", "asked", strings.Join(names, " "))
			return 2
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		runc = "runc" // only RUN in a root filesystem needs it; the error comes then
	}
	opts := build.Options{
		Debs: build.NewDebianDebs(ctx, filepath.Join(cacheRoot, "debs")), Go: envOr("GO", "go"), Runc: runc,
		Cache: *cache, Bases: filepath.Join(*dir, "bases"), Arch: *arch, Logger: logger,
	}
	for i, r := range recipes {
		logger.Info("building", "image", r.Name, "step", fmt.Sprintf("%d/%d", i+1, len(recipes)), "recipe", r.Dockerfile)
		if err := buildOne(ctx, opts, r, *out, *cache); err != nil {
			logger.Error("build failed", "image", r.Name, "err", err)
			return 1
		}
	}
	return 0
}

func buildOne(ctx context.Context, opts build.Options, r build.Recipe, outDir, cache string) error {
	df, err := r.Parse()
	if err != nil {
		return err
	}
	opts.Context = r.Context
	layout := filepath.Join(outDir, r.Name)
	goBuild := slices.ContainsFunc(df.Stages, func(s *dockerfile.Stage) bool { return strings.HasPrefix(s.From, "golang:") })
	if goBuild && !r.Sealed {
		// Go's own build cache makes these fast; their inputs are the whole module.
		if _, err := build.Image(ctx, opts, df, layout); err != nil {
			return err
		}
	} else {
		key, err := build.InputKey(df, r.Context, opts.Bases)
		if err != nil {
			return err
		}
		if goBuild {
			v, err := exec.CommandContext(ctx, opts.Go, "env", "GOVERSION").Output()
			if err != nil {
				return fmt.Errorf("go env GOVERSION: %w", err)
			}
			key += "-" + strings.TrimSpace(string(v))
		}
		cached := filepath.Join(cache, "built", r.Name+"-"+key)
		if _, err := oci.Read(cached); err != nil {
			if _, err := build.Image(ctx, opts, df, cached); err != nil {
				return err
			}
		} else {
			opts.Logger.Info("unchanged inputs: taken from the cache", "image", r.Name, "layout", cached)
		}
		if err := build.PruneOthers(cached); err != nil {
			return err
		}
		if err := os.RemoveAll(layout); err != nil {
			return err
		}
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return err
		}
		if err := os.CopyFS(layout, os.DirFS(cached)); err != nil {
			return err
		}
	}
	f, err := os.Create(layout + ".tar")
	if err != nil {
		return err
	}
	if err := oci.Archive(layout, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
