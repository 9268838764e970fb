// Command buildimages builds gpuhub's service images from images/<name>.Dockerfile without a Docker engine or
// a registry (see images/internal/build): each as an OCI image layout in OUT/<name>/ and an OCI archive
// OUT/<name>.tar that `ctr images import`, podman and skopeo load.
//
//	go run ./images/cmd/buildimages -out out/images gpu-quota gpu-culler
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/gpuhub/gpuhub/images/internal/build"
	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
	"github.com/gpuhub/gpuhub/images/internal/oci"
)

func main() { os.Exit(run()) }

func run() int {
	cache := os.Getenv("GPUHUB_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "gpuhub")
	}
	out := flag.String("out", envOr("GPUHUB_IMAGES", "out/images"), "where the layouts and archives go (env GPUHUB_IMAGES)")
	debs := flag.String("debs", filepath.Join(cache, "debs"), "where Debian packages for the bases are kept")
	dir := flag.String("dockerfiles", "images", "folder of <name>.Dockerfile recipes")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH of the images")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: buildimages [flags] [name ...]\n\nWith no name, builds every image whose recipe has a Debian-built base (the Go services).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	names := flag.Args()
	if len(names) == 0 {
		all, err := filepath.Glob(filepath.Join(*dir, "*.Dockerfile"))
		if err != nil {
			logger.Error("list recipes", "err", err)
			return 1
		}
		for _, p := range all {
			df, err := dockerfile.ParseFile(p)
			if err != nil {
				logger.Error("parse recipe", "err", err)
				return 1
			}
			if _, ok := build.Bases[df.Final().From]; ok {
				names = append(names, strings.TrimSuffix(filepath.Base(p), ".Dockerfile"))
			} else {
				logger.Info("skipped: its base has no Debian-built equivalent yet", "recipe", p, "from", df.Final().From)
			}
		}
	}
	opts := build.Options{Context: ".", Debs: build.NewDebianDebs(ctx, *debs), Go: envOr("GO", "go"), Arch: *arch, Logger: logger}
	for i, name := range names {
		logger.Info("building", "image", name, "step", fmt.Sprintf("%d/%d", i+1, len(names)))
		df, err := dockerfile.ParseFile(filepath.Join(*dir, name+".Dockerfile"))
		if err != nil {
			logger.Error("parse recipe", "err", err)
			return 1
		}
		layout := filepath.Join(*out, name)
		if _, err := build.Image(ctx, opts, df, layout); err != nil {
			logger.Error("build failed", "image", name, "err", err)
			return 1
		}
		if err := archive(layout, layout+".tar"); err != nil {
			logger.Error("archive", "image", name, "err", err)
			return 1
		}
	}
	return 0
}

func archive(layout, dest string) error {
	f, err := os.Create(dest)
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
