// Package build makes container images without a Docker engine or a registry, by following a Dockerfile:
//
//   - a stage FROM golang:* is this machine's Go toolchain: its `go build` RUNs run here with the recipe's
//     environment and flags, in the build context's directory whose go.mod the recipe copied into the
//     stage's WORKDIR (the build context is read in place);
//   - a stage FROM a distroless image starts from an equivalent made from Debian packages (Bases);
//   - a stage FROM debian:bookworm(-slim) starts from a Debian root filesystem made by mmdebstrap;
//   - a stage FROM another upstream image starts from its Debian-built equivalent, itself a Dockerfile under
//     images/bases (Equivalents), built the same way first;
//   - RUN runs in a real container (runc) on the stage's root filesystem, with the host's network so that
//     apt-get, pip and npm reach their registries, and RUN --mount=type=cache as bind mounts;
//   - COPY, USER, ENTRYPOINT, CMD, EXPOSE, ENV, WORKDIR, LABEL act as in Docker.
//
// The image has two layers: the final stage's starting root filesystem and what the stage changed.
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

// Options says where the sources, the Debian packages, the caches and the results are.
type Options struct {
	Context string      // Docker's build context (the repository root for images/*.Dockerfile)
	Debs    *DebianDebs // Debian packages for the distroless bases
	Go      string      // the go command
	Runc    string      // the runc command, for RUN in a root filesystem
	Cache   string      // root filesystems and equivalents kept between builds ($GPUHUB_CACHE/images)
	Bases   string      // folder of the equivalents' Dockerfiles (images/bases)
	Arch    string      // GOARCH of the images
	Logger  *slog.Logger
}

// stage is a stage being built: a root filesystem directory, its configuration, and what it started from.
type stage struct {
	root   string
	hostGo bool
	cfg    oci.Config
	start  oci.Layer          // the root filesystem at FROM: the image's lower layer
	before map[string]fileKey // its state, to find what the stage changed
	// modules maps, in a Go toolchain stage, each directory a COPY put a go.mod in to the build context's
	// directory that go.mod came from: where a `go build` in that WORKDIR runs here.
	modules map[string]string
}

// Image builds the image of df into an OCI layout at outDir and returns its reference.
func Image(ctx context.Context, opts Options, df *dockerfile.File, outDir string) (string, error) {
	if df.BuildTag == "" {
		return "", fmt.Errorf("%s: no `docker build ... -t REF` comment names the image", df.Path)
	}
	img, err := build(ctx, opts, df)
	if err != nil {
		return "", err
	}
	digest, err := oci.Write(outDir, opts.Arch, img)
	if err != nil {
		return "", err
	}
	opts.Logger.Info("image built", "ref", img.Ref, "digest", digest, "layout", outDir)
	return img.Ref, nil
}

func build(ctx context.Context, opts Options, df *dockerfile.File) (oci.Image, error) {
	work, err := os.MkdirTemp("", "gpuhub-image-")
	if err != nil {
		return oci.Image{}, err
	}
	defer os.RemoveAll(work)

	stages := map[string]*stage{}
	var st *stage
	for i, s := range df.Stages {
		st, err = from(ctx, opts, df, s, stages, filepath.Join(work, fmt.Sprintf("stage-%d", i)))
		if err != nil {
			return oci.Image{}, fmt.Errorf("%s: FROM %s: %w", df.Path, s.From, err)
		}
		stages[s.Name] = st
		for _, in := range s.Instructions {
			if err := apply(ctx, opts, st, stages, in); err != nil {
				return oci.Image{}, fmt.Errorf("%s:%d: %s: %w", df.Path, in.Line, in.Cmd, err)
			}
		}
	}
	if st.hostGo {
		return oci.Image{}, fmt.Errorf("%s: the final stage is a Go toolchain stage, not an image", df.Path)
	}
	top, err := changes(st.root, st.before)
	if err != nil {
		return oci.Image{}, err
	}
	st.cfg.Labels = withLabel(st.cfg.Labels, "org.opencontainers.image.base.name", df.Final().From)
	return oci.Image{Ref: df.BuildTag, Config: st.cfg, Layers: []oci.Layer{st.start, top}}, nil
}

// from starts a stage's root filesystem in dir.
func from(ctx context.Context, opts Options, df *dockerfile.File, s *dockerfile.Stage, stages map[string]*stage, dir string) (*stage, error) {
	st := &stage{root: dir}
	var start oci.Layer
	switch {
	case strings.HasPrefix(s.From, "golang:"):
		st.hostGo, st.modules = true, map[string]string{}
		return st, os.MkdirAll(dir, 0o755)
	case s.From == "scratch":
		// An empty root filesystem and configuration.
	case stages[s.From] != nil:
		prev := stages[s.From]
		if prev.hostGo {
			return nil, errors.New("a Go toolchain stage is no root filesystem to start from")
		}
		layer, err := readTree(prev.root)
		if err != nil {
			return nil, err
		}
		start, st.cfg = layer, prev.cfg
		st.cfg.Env = append([]string(nil), prev.cfg.Env...)
	case Bases[s.From].Build != nil:
		layer, cfg, err := Bases[s.From].Build(opts.Debs)
		if err != nil {
			return nil, err
		}
		start, st.cfg = layer, cfg
	case debianRoots[s.From] != nil:
		tarball, err := debianRoot(ctx, opts, s.From)
		if err != nil {
			return nil, err
		}
		layer, err := readTarFile(tarball)
		if err != nil {
			return nil, err
		}
		start = layer
		st.cfg = oci.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Cmd: []string{"bash"}}
	default:
		img, err := equivalent(ctx, opts, s.From)
		if err != nil {
			return nil, err
		}
		start, st.cfg = img.Layer(), img.Config
	}
	if err := WriteTree(dir, start); err != nil {
		return nil, err
	}
	before, err := snapshot(dir)
	if err != nil {
		return nil, err
	}
	st.start, st.before = start, before
	return st, nil
}

func apply(ctx context.Context, opts Options, st *stage, stages map[string]*stage, in dockerfile.Instruction) error {
	switch in.Cmd {
	case "RUN":
		if st.hostGo {
			return runGo(ctx, opts, st, in)
		}
		return runInContainer(ctx, opts, st, stages, in)
	case "COPY":
		files, sources, err := copyFiles(opts.Context, stages, st.cfg.WorkingDir, in)
		if err != nil {
			return err
		}
		if st.hostGo {
			// The build context is read in place; only where its modules went matters.
			for i, f := range files {
				if path.Base(f.Path) == "go.mod" && f.Mode.IsRegular() && in.Flags["from"] == "" {
					st.modules[path.Dir(f.Path)] = filepath.Dir(sources[i])
				}
			}
			return nil
		}
		return WriteTree(st.root, files)
	case "WORKDIR":
		st.cfg.WorkingDir = path.Join("/", st.cfg.WorkingDir, in.Args[0])
		if st.hostGo {
			return nil
		}
		return os.MkdirAll(filepath.Join(st.root, st.cfg.WorkingDir), 0o755)
	case "ENV":
		st.cfg.Env = setEnv(st.cfg.Env, in.Args)
	case "USER":
		st.cfg.User = in.Args[0]
	case "ENTRYPOINT":
		st.cfg.Entrypoint, st.cfg.Cmd = in.Args, nil // Docker resets CMD when ENTRYPOINT is set
	case "CMD":
		st.cfg.Cmd = in.Args
	case "EXPOSE":
		if st.cfg.ExposedPorts == nil {
			st.cfg.ExposedPorts = map[string]struct{}{}
		}
		for _, p := range in.Args {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			st.cfg.ExposedPorts[p] = struct{}{}
		}
	case "LABEL":
		for _, kv := range in.Args {
			k, v, _ := strings.Cut(kv, "=")
			st.cfg.Labels = withLabel(st.cfg.Labels, k, v)
		}
	default:
		return errors.New("not reproduced here")
	}
	return nil
}

func withLabel(labels map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for lk, lv := range labels {
		out[lk] = lv
	}
	out[k] = v
	return out
}

// runGo runs a Go toolchain stage's RUN when it is `go mod download` (nothing to do: the module cache is
// here) or `[VAR=value ...] go build ARGS`, with -o (absolute, or from the WORKDIR) moved under the stage's
// directory. As in Docker, the
// stage's WORKDIR must hold a go.mod the recipe copied there: go build runs in the build context's directory
// it came from (the repository root for `COPY go.mod go.sum ./`, e2e/userschedulerbuild for
// `COPY e2e/userschedulerbuild/go.mod ... ./`), with that module's requirements.
func runGo(ctx context.Context, opts Options, st *stage, in dockerfile.Instruction) error {
	w, err := shellWords(in.Args[0])
	if err != nil {
		return err
	}
	env := append([]string{}, in.Env...)
	for len(w) > 0 && strings.Contains(w[0], "=") && !strings.HasPrefix(w[0], "-") {
		env = append(env, w[0])
		w = w[1:]
	}
	switch {
	case len(w) >= 3 && w[0] == "go" && w[1] == "mod" && w[2] == "download":
	case len(w) >= 2 && w[0] == "go" && w[1] == "build":
	default:
		return fmt.Errorf("%q: only `go build` and `go mod download` run in a Go toolchain stage here", in.Args[0])
	}
	dir, ok := st.modules[path.Join("/", st.cfg.WorkingDir)]
	if !ok {
		return fmt.Errorf("WORKDIR %s holds no go.mod copied from the build context: go would find no module", path.Join("/", st.cfg.WorkingDir))
	}
	if w[1] == "mod" {
		return nil
	}
	args := append([]string{}, w[1:]...)
	for i := range args {
		if args[i] == "-o" && i+1 < len(args) {
			// Into the stage's root: a relative path is the WORKDIR's, as in the container Docker runs it in.
			out := args[i+1]
			if !path.IsAbs(out) {
				out = path.Join("/", st.cfg.WorkingDir, out)
			}
			args[i+1] = filepath.Join(st.root, filepath.FromSlash(out))
			if err := os.MkdirAll(filepath.Dir(args[i+1]), 0o755); err != nil {
				return err
			}
		}
	}
	cmd := exec.CommandContext(ctx, opts.Go, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+opts.Arch)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	opts.Logger.Info("go build", "dir", dir, "env", strings.Join(env, " "), "args", strings.Join(w[2:], " "))
	return cmd.Run()
}

// copyFiles applies COPY: from a stage (--from) or from the build context. It returns the files and, for
// each, the path it was read from (empty for a directory COPY made).
func copyFiles(context string, stages map[string]*stage, workDir string, in dockerfile.Instruction) (oci.Layer, []string, error) {
	srcRoot := context
	if from := in.Flags["from"]; from != "" {
		st, ok := stages[from]
		if !ok {
			return nil, nil, fmt.Errorf("--from=%s: no such stage", from)
		}
		srcRoot = st.root
	}
	uid, gid := -1, -1
	if own := in.Flags["chown"]; own != "" {
		if _, err := fmt.Sscanf(strings.Replace(own, ":", " ", 1), "%d %d", &uid, &gid); err != nil {
			return nil, nil, fmt.Errorf("--chown=%s: only numeric UID:GID is reproduced here", own)
		}
	}
	srcs, dest := in.Args[:len(in.Args)-1], in.Args[len(in.Args)-1]
	// A destination ending in / (or the WORKDIR itself, .) is a directory, even for one file.
	destDir := strings.HasSuffix(dest, "/") || dest == "." || strings.HasSuffix(dest, "/.")
	if !path.IsAbs(dest) {
		dest = path.Join("/", workDir, dest)
	}
	var out oci.Layer
	var from []string
	for _, src := range srcs {
		matches, err := filepath.Glob(filepath.Join(srcRoot, filepath.FromSlash(src)))
		if err != nil {
			return nil, nil, err
		}
		if len(matches) == 0 {
			return nil, nil, fmt.Errorf("%s: no such file", src)
		}
		toDir := destDir || len(matches) > 1 || len(srcs) > 1
		if toDir && uid >= 0 {
			// A directory COPY creates belongs to --chown's owner too, as in BuildKit.
			out = append(out, oci.File{Path: path.Clean(dest), Mode: fs.ModeDir | 0o755, UID: uid, GID: max(gid, 0)})
			from = append(from, "")
		}
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
				// Docker's COPY makes files root's unless --chown says otherwise.
				f := oci.File{Path: target, UID: max(uid, 0), GID: max(gid, 0), Mode: info.Mode().Perm()}
				switch {
				case info.IsDir():
					f.Mode |= fs.ModeDir
				case info.Mode().IsRegular():
					if f.Data, err = os.ReadFile(p); err != nil {
						return err
					}
				default:
					return fmt.Errorf("%s is neither a file nor a directory", p)
				}
				out = append(out, f)
				from = append(from, p)
				return nil
			})
			if err != nil {
				return nil, nil, err
			}
		}
	}
	return out, from, nil
}

func setEnv(env, kvs []string) []string {
	env = append([]string(nil), env...)
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
