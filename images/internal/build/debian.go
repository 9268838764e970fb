package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
	"github.com/gpuhub/gpuhub/images/internal/oci"
)

// debianRoots are the Debian images made here with mmdebstrap (minbase: essential packages and apt, what
// Docker's debian:*-slim images hold, less their trimmed documentation).
var debianRoots = map[string][]string{
	"debian:bookworm-slim": {"--variant=minbase", "bookworm"},
	"debian:bookworm":      {"--variant=minbase", "bookworm"},
}

// debianRoot returns the cached root filesystem tarball of ref, making it with mmdebstrap when missing.
func debianRoot(ctx context.Context, opts Options, ref string) (string, error) {
	args := debianRoots[ref]
	sum := sha256.Sum256([]byte(strings.Join(args, " ")))
	out := filepath.Join(opts.Cache, "debian", strings.ReplaceAll(ref, ":", "-")+"-"+hex.EncodeToString(sum[:6])+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	opts.Logger.Info("mmdebstrap: making a Debian root filesystem (once; cached)", "image", ref, "tarball", out)
	tmp := out + ".partial"
	cmd := exec.CommandContext(ctx, "mmdebstrap", append(append([]string{"--quiet", "--format=tar"}, args...), tmp)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("mmdebstrap %s: %w (Debian's mmdebstrap package; make images installs it)", strings.Join(args, " "), err)
	}
	return out, os.Rename(tmp, out)
}

// Equivalents maps an upstream image to the Dockerfile under images/bases that makes its Debian-built
// equivalent; what differs from the upstream image is said in that file.
var Equivalents = map[string]string{
	"quay.io/jupyter/base-notebook:2025-12-01": "base-notebook.Dockerfile",
	"python:3.12-slim-bookworm":                "python-slim-bookworm.Dockerfile",
	"python:3.12-bookworm":                     "python-bookworm.Dockerfile",
	"node:18-bookworm-slim":                    "node-bookworm-slim.Dockerfile",
}

// equivalent builds (or takes from the cache) the Debian-built equivalent of ref.
func equivalent(ctx context.Context, opts Options, ref string) (*oci.Loaded, error) {
	name, ok := Equivalents[ref]
	if !ok {
		return nil, fmt.Errorf("no Debian-built equivalent (distroless: %s; Debian: debian:bookworm-slim; images/bases: %s)", strings.Join(baseNames(), ", "), strings.Join(equivalentNames(), ", "))
	}
	p := filepath.Join(opts.Bases, name)
	df, err := dockerfile.ParseFile(p)
	if err != nil {
		return nil, err
	}
	df.BuildTag = ref
	key, err := InputKey(df, opts.Bases, opts.Bases)
	if err != nil {
		return nil, err
	}
	layout := filepath.Join(opts.Cache, "equivalents", strings.TrimSuffix(name, ".Dockerfile")+"-"+key)
	if img, err := oci.Read(layout); err == nil {
		opts.Logger.Info("equivalent from the cache", "image", ref, "layout", layout)
		return img, PruneOthers(layout)
	}
	opts.Logger.Info("building the Debian-built equivalent", "image", ref, "recipe", p)
	sub := opts
	sub.Context = opts.Bases
	img, err := build(ctx, sub, df)
	if err != nil {
		return nil, err
	}
	if _, err := oci.Write(layout, opts.Arch, img); err != nil {
		return nil, err
	}
	if err := PruneOthers(layout); err != nil {
		return nil, err
	}
	return oci.Read(layout)
}

func equivalentNames() []string {
	var out []string
	for k := range Equivalents {
		out = append(out, k)
	}
	return out
}

// InputKey is a digest of what an image built from df depends on, apart from the registries' contents at
// build time (pinned in the recipes): the Dockerfile, the files its COPY instructions take from the build
// context, and the equivalents it starts from, recursively.
func InputKey(df *dockerfile.File, context, bases string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "builder 1\n")
	data, err := os.ReadFile(df.Path)
	if err != nil {
		return "", err
	}
	h.Write(data)
	for _, s := range df.Stages {
		if name, ok := Equivalents[s.From]; ok {
			sub, err := dockerfile.ParseFile(filepath.Join(bases, name))
			if err != nil {
				return "", err
			}
			k, err := InputKey(sub, bases, bases)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "from %s %s\n", s.From, k)
		}
		for _, in := range s.Instructions {
			if in.Cmd != "COPY" || in.Flags["from"] != "" {
				continue
			}
			for _, src := range in.Args[:len(in.Args)-1] {
				matches, err := filepath.Glob(filepath.Join(context, filepath.FromSlash(src)))
				if err != nil {
					return "", err
				}
				for _, m := range matches {
					if err := filepath.Walk(m, func(p string, fi os.FileInfo, err error) error {
						if err != nil || !fi.Mode().IsRegular() {
							return err
						}
						data, err := os.ReadFile(p)
						if err != nil {
							return err
						}
						fmt.Fprintf(h, "copy %s %o %d\n", p, fi.Mode().Perm(), len(data))
						h.Write(data)
						return nil
					}); err != nil {
						return "", err
					}
				}
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// PruneOthers removes the cached entries beside keyed (NAME-KEY) with the same NAME and another KEY: what
// earlier inputs built, which a build will not ask for again.
func PruneOthers(keyed string) error {
	base := filepath.Base(keyed)
	name := base[:strings.LastIndex(base, "-")+1]
	others, err := filepath.Glob(filepath.Join(filepath.Dir(keyed), name+"*"))
	if err != nil {
		return err
	}
	for _, o := range others {
		rest := strings.TrimPrefix(filepath.Base(o), name)
		if o == keyed || strings.Contains(rest, "-") {
			continue // itself, or another name that starts the same (python-bookworm vs python-slim-bookworm)
		}
		if err := os.RemoveAll(o); err != nil {
			return err
		}
	}
	return nil
}
