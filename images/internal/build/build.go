// Package build makes gpuhub's service images without a Docker engine or a registry, by following the
// recipe in images/<name>.Dockerfile: the build stage's `go build` runs on this machine with the same
// environment and flags, and the final stage's base is replaced by its equivalent made from Debian packages
// (see Bases). Every other instruction of the final stage (COPY, USER, ENTRYPOINT, CMD, EXPOSE, ENV, WORKDIR,
// LABEL) is applied as Docker would; an instruction that cannot be reproduced here is an error.
package build

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
	"github.com/gpuhub/gpuhub/images/internal/oci"
)

// Options says where the sources, the Debian packages and the results are.
type Options struct {
	Context string      // the repository root: Docker's build context
	Debs    *DebianDebs // Debian packages for the bases
	Go      string      // the go command
	Arch    string      // GOARCH of the images
	Logger  *slog.Logger
}

// Image builds the image of one Dockerfile into an OCI layout at outDir and returns its reference.
func Image(ctx context.Context, opts Options, df *dockerfile.File, outDir string) (string, error) {
	if df.BuildTag == "" {
		return "", fmt.Errorf("%s: no `docker build ... -t REF` comment names the image", df.Path)
	}
	work, err := os.MkdirTemp("", "gpuhub-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)

	// Build stages: their filesystem is a directory under work; only `go build` and `go mod download` run.
	stageRoots := map[string]string{}
	final := df.Final()
	for _, st := range df.Stages[:len(df.Stages)-1] {
		root := filepath.Join(work, "stage-"+st.Name)
		stageRoots[st.Name] = root
		env := []string{}
		for _, in := range st.Instructions {
			switch in.Cmd {
			case "WORKDIR", "COPY":
				// The build context is the repository itself; go build reads it in place.
			case "ENV":
				env = append(env, in.Args...)
			case "RUN":
				if err := runGo(ctx, opts, root, env, in); err != nil {
					return "", fmt.Errorf("%s:%d: %w", df.Path, in.Line, err)
				}
			default:
				return "", fmt.Errorf("%s:%d: %s in a build stage is not reproduced here", df.Path, in.Line, in.Cmd)
			}
		}
	}

	base, ok := Bases[final.From]
	if !ok {
		return "", fmt.Errorf("%s: final stage FROM %s has no Debian-built equivalent (known: %s)", df.Path, final.From, strings.Join(baseNames(), ", "))
	}
	baseLayer, cfg, err := base.Build(opts.Debs)
	if err != nil {
		return "", fmt.Errorf("base %s: %w", final.From, err)
	}
	cfg.Labels = map[string]string{"org.opencontainers.image.base.name": final.From + " (Debian-built equivalent: " + base.Name + ")"}
	var top oci.Layer
	for _, in := range final.Instructions {
		switch in.Cmd {
		case "COPY":
			files, err := copyFiles(opts.Context, stageRoots, cfg.WorkingDir, in)
			if err != nil {
				return "", fmt.Errorf("%s:%d: %w", df.Path, in.Line, err)
			}
			top = append(top, files...)
		case "USER":
			cfg.User = in.Args[0]
		case "ENTRYPOINT":
			cfg.Entrypoint, cfg.Cmd = in.Args, nil // Docker resets CMD when ENTRYPOINT is set
		case "CMD":
			cfg.Cmd = in.Args
		case "EXPOSE":
			if cfg.ExposedPorts == nil {
				cfg.ExposedPorts = map[string]struct{}{}
			}
			for _, p := range in.Args {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				cfg.ExposedPorts[p] = struct{}{}
			}
		case "ENV":
			cfg.Env = setEnv(cfg.Env, in.Args)
		case "WORKDIR":
			cfg.WorkingDir = path.Join(cfg.WorkingDir, in.Args[0])
		case "LABEL":
			for _, kv := range in.Args {
				k, v, _ := strings.Cut(kv, "=")
				cfg.Labels[k] = v
			}
		default:
			return "", fmt.Errorf("%s:%d: %s in the final stage needs a container runtime; not reproduced here", df.Path, in.Line, in.Cmd)
		}
	}
	img := oci.Image{Ref: df.BuildTag, Config: cfg, Layers: []oci.Layer{baseLayer, top}}
	digest, err := oci.Write(outDir, opts.Arch, img)
	if err != nil {
		return "", err
	}
	opts.Logger.Info("image built", "ref", img.Ref, "digest", digest, "layout", outDir)
	return img.Ref, nil
}

// runGo runs a build stage's RUN when it is `go mod download` (nothing to do: the module cache is here) or
// `[VAR=value ...] go build ARGS`, with -o moved under the stage's root.
func runGo(ctx context.Context, opts Options, root string, env []string, in dockerfile.Instruction) error {
	w, err := shellWords(in.Args[0])
	if err != nil {
		return err
	}
	for len(w) > 0 && strings.Contains(w[0], "=") && !strings.HasPrefix(w[0], "-") {
		env = append(env, w[0])
		w = w[1:]
	}
	switch {
	case len(w) >= 3 && w[0] == "go" && w[1] == "mod" && w[2] == "download":
		return nil
	case len(w) >= 2 && w[0] == "go" && w[1] == "build":
	default:
		return fmt.Errorf("RUN %q: only `go build` and `go mod download` are reproduced here", in.Args[0])
	}
	args := append([]string{}, w[1:]...)
	for i := range args {
		if args[i] == "-o" && i+1 < len(args) && path.IsAbs(args[i+1]) {
			args[i+1] = filepath.Join(root, args[i+1])
			if err := os.MkdirAll(filepath.Dir(args[i+1]), 0o755); err != nil {
				return err
			}
		}
	}
	cmd := exec.CommandContext(ctx, opts.Go, args...)
	cmd.Dir = opts.Context
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+opts.Arch)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	opts.Logger.Info("go build", "env", strings.Join(env, " "), "args", strings.Join(w[2:], " "))
	return cmd.Run()
}

// copyFiles applies COPY: from a build stage's root (--from) or from the build context.
func copyFiles(context string, stageRoots map[string]string, workDir string, in dockerfile.Instruction) (oci.Layer, error) {
	srcRoot := context
	if from := in.Flags["from"]; from != "" {
		root, ok := stageRoots[from]
		if !ok {
			return nil, fmt.Errorf("COPY --from=%s: no such build stage", from)
		}
		srcRoot = root
	}
	uid, gid := 0, 0
	if own := in.Flags["chown"]; own != "" {
		if _, err := fmt.Sscanf(strings.Replace(own, ":", " ", 1), "%d %d", &uid, &gid); err != nil {
			return nil, fmt.Errorf("COPY --chown=%s: only numeric UID:GID is reproduced here", own)
		}
	}
	srcs, dest := in.Args[:len(in.Args)-1], in.Args[len(in.Args)-1]
	if !path.IsAbs(dest) {
		dest = path.Join("/", workDir, dest)
	}
	var out oci.Layer
	for _, src := range srcs {
		matches, err := filepath.Glob(filepath.Join(srcRoot, filepath.FromSlash(src)))
		if err != nil {
			return nil, err
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("COPY %s: no such file", src)
		}
		toDir := strings.HasSuffix(dest, "/") || len(matches) > 1 || len(srcs) > 1
		for _, m := range matches {
			err := filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				info, err := d.Info()
				if err != nil {
					return err
				}
				rel, err := filepath.Rel(m, p)
				if err != nil {
					return err
				}
				target := dest
				switch {
				case rel != ".":
					target = path.Join(dest, filepath.ToSlash(rel)) // a directory's contents
				case toDir && !info.IsDir():
					target = path.Join(dest, filepath.Base(m))
				}
				f := oci.File{Path: target, UID: uid, GID: gid, Mode: info.Mode().Perm()}
				switch {
				case info.IsDir():
					f.Mode |= fs.ModeDir
				case info.Mode().IsRegular():
					if f.Data, err = os.ReadFile(p); err != nil {
						return err
					}
				default:
					return fmt.Errorf("COPY %s: %s is neither a file nor a directory", src, p)
				}
				out = append(out, f)
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func setEnv(env, kvs []string) []string {
	for _, kv := range kvs {
		k, _, _ := strings.Cut(kv, "=")
		replaced := false
		for i, e := range env {
			if strings.HasPrefix(e, k+"=") {
				env[i], replaced = kv, true
			}
		}
		if !replaced {
			env = append(env, kv)
		}
	}
	return env
}

// shellWords splits a shell command line of words, single and double quotes (no expansions).
func shellWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	var quote rune
	inWord := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune("|&;<>()$`\\*?", r):
			return nil, fmt.Errorf("RUN %q: shell syntax %q is not reproduced here", s, r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote in RUN")
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
